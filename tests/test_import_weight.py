"""What cheap processes import: specs, records and validation stay torch-free (DAGs and the CLI
parse them cheaply), and reading the results database needs no Alembic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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


def test_reading_the_results_database_imports_no_alembic(tmp_path: Path) -> None:
    """Only migrating needs Alembic, a fifth of a read-only command's processor time: a report
    from the command line and the dashboard's app read the database without it."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    code = (
        "import sys\n"
        "from results_db.database import upgrade\n"
        f"upgrade({url!r})\n"
        "print('alembic' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "True"  # migrating imports it
    code = (
        "import sys\n"
        "from cli.main import main\n"
        f"status = main(['report', 'no-such-sweep', '--database', {url!r}])\n"
        "from dash_app.app import create_app\n"
        f"create_app({url!r}, stylesheets=[])\n"
        "print(status, 'alembic' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    status, alembic_loaded = proc.stdout.split()[-2:]
    assert status != "0"  # the report read the database and found no such sweep
    assert alembic_loaded == "False"
