"""The suite's processor-time record (``SCALEBENCH_TEST_CPU=1``, tests/processor_time.py): a
test's own seconds and those of the processes it started are told apart, and the report
ranks tests and files by them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from processor_time import FOLDER, by_file, by_test, read_records, report

HERE = Path(__file__).resolve().parent
NO_AUTOLOAD = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

# about half a second of processor time, in the pytest process or in a child it waits for
BUSY = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"
SAMPLE = f"""
import subprocess, sys

def test_busy_here():
    exec({BUSY!r})

def test_busy_in_a_child():
    subprocess.run([sys.executable, "-c", {BUSY!r}], check=True)

def test_idle():
    pass
"""


def test_each_test_records_its_own_and_its_childrens_processor_seconds(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    records = tmp_path / "records"
    records.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "processor_time", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        # no plugin but this one (the installed ones need what the suite disables)
        env={**os.environ, FOLDER: str(records), "PYTHONPATH": str(HERE), **NO_AUTOLOAD},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = {r["test"].split("::")[1]: r for r in read_records(records)}
    assert set(found) == {"test_busy_here", "test_busy_in_a_child", "test_idle"}
    here, child, idle = (found[n] for n in ("test_busy_here", "test_busy_in_a_child", "test_idle"))
    assert here["own_cpu_s"] >= 0.45 and here["children_cpu_s"] < 0.05, here
    assert child["children_cpu_s"] >= 0.45 and child["own_cpu_s"] < 0.4, child
    assert idle["own_cpu_s"] + idle["children_cpu_s"] < 0.1, idle
    assert all(r["wall_s"] >= 0 for r in found.values())


def test_the_report_ranks_tests_and_files_by_processor_seconds() -> None:
    records = [
        {"test": "tests/test_a.py::test_x", "own_cpu_s": 1.0, "children_cpu_s": 9.0, "wall_s": 30},
        {"test": "tests/test_a.py::test_y", "own_cpu_s": 2.0, "children_cpu_s": 0.0, "wall_s": 2},
        {"test": "tests/test_b.py::test_z", "own_cpu_s": 5.0, "children_cpu_s": 0.0, "wall_s": 5},
    ]
    tests = by_test(records)
    assert [(c.name[-6:], c.cpu_s) for c in tests] == [
        ("test_x", 10.0),
        ("test_z", 5.0),
        ("test_y", 2.0),
    ]
    files = by_file(tests)
    assert [(c.name, c.cpu_s, c.own_cpu_s, c.tests) for c in files] == [
        ("tests/test_a.py", 12.0, 3.0, 2),
        ("tests/test_b.py", 5.0, 5.0, 1),
    ]
    text = report(records, machine_s=34.0, top=2)
    assert text.splitlines()[0].startswith("processor time of 3 tests: 17 s of the machine's 34 s")
    assert "(50%;" in text.splitlines()[0]
    assert "58.8%" in text and "tests/test_a.py (2 tests)" in text
    assert "test_y" not in text.split("costliest files")[0]  # only the top two tests
