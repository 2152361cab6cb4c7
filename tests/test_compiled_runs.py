"""A worker run compiled for real (inductor, the C++ compiler of this machine), end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_compile_on_compiles_before_the_start_and_nothing_while_timed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "workers.run",
            "--task",
            "task2a-logreg-epsilon",
            "--light",
            "--results",
            str(run_dir),
            "--compile",
            "on",
            "--max-epochs",
            "2",
        ],
        cwd=REPO,
        env={**env, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (run_dir / "rank-0.jsonl").read_text().splitlines()]
    events = {r["event"]: r for r in records if r["kind"] == "event"}
    start, finished = events["start"], events["finished"]
    assert (start["compile"], start["compiled"]) == ("on", True)
    assert start["compile_s"] > 0 and "compile_fallback" not in start
    # 40,000 rows in batches of 128: the short last batch (64 rows) was warmed up too.
    assert finished["recompilations"] == 0
    steps = [r for r in records if r["kind"] == "step"]
    assert {s["samples"] for s in steps} == {128, 40_000 - 312 * 128}
    assert all(0 < s["loss"] < 10 for s in steps)
