"""Specs, records and validation stay torch-free: DAGs and the CLI parse them cheaply."""

from __future__ import annotations

import subprocess
import sys


def test_specs_records_and_validation_do_not_import_torch() -> None:
    code = (
        "import sys\n"
        "import scalebench.tasks, workers.records, workers.data.sources, workers.distributed\n"
        "import scalebench.sweep, scalebench.config, results_db.analytics\n"
        "heavy = sorted(m for m in ('torch', 'numpy', 'sklearn') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""
