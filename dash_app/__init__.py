"""The dashboard: time-to-accuracy, speedup, communication ratio, cost, all-reduce curves.

It reads results through ``results_db`` query functions and never writes.
"""
