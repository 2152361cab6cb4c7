"""Airflow: the nightly regression run (``scalebench_nightly``, 02:00 UTC by default).

Built by ``operators.nightly_dag`` from the ``SCALEBENCH_NIGHTLY_*`` settings
(see ``scalebench.nightly``). Parsing it imports no torch.
"""

from operators.nightly_dag import build_nightly_dag
from scalebench.nightly import NightlySettings

scalebench_nightly = build_nightly_dag(NightlySettings.from_env())
