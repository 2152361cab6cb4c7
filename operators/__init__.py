"""Launching training groups and ingesting what they measured.

``local_launcher`` runs a group as local processes; the Airflow operators
(local and Kubernetes launchers, ingest) build on it.
"""
