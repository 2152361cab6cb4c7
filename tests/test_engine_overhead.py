"""``benchmarks/engine_overhead.py`` runs at its smoke size: the same code path as a measurement,
so a change that breaks the benchmark fails here, not the next time someone measures. Task 2a's
smoke runs here, with its JSON checked; tests/test_benchmark_smokes.py runs the other tasks'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "engine_overhead.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_smoke_size_measures_both_loops_and_judges_nothing(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    done = run("--task", "task2a-logreg-epsilon", "--device", "cpu", "--smoke", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = json.loads(out.read_text(encoding="utf-8"))
    assert result["task"] == "task2a-logreg-epsilon" and result["device"] == "cpu"
    assert result["verdict"] == "smoke" and result["goal"] == 0.95
    assert result["engine_samples_per_s"] > 0 and result["plain_samples_per_s"] > 0
    assert result["ratio"] == result["engine_samples_per_s"] / result["plain_samples_per_s"]
    assert "ratio" in done.stdout and "plain" in done.stdout
    assert "smoke" in done.stdout and "Traceback" not in done.stdout + done.stderr


def test_an_unknown_task_is_refused_naming_the_option() -> None:
    done = run("--task", "task9-nothing", "--smoke")
    assert done.returncode == 2
    assert "--task: 'task9-nothing' is not one of all, task1a-resnet20-cifar10" in done.stderr
    assert "Traceback" not in done.stderr
