"""What every GPU check is given, and how a check runs its child processes.

:class:`Context` is where a check writes, the Python it runs and the time left;
:func:`run_child` runs one child process to its end or its time limit
(:class:`ChildRun`). Runs that need a process group or a clean process are
children, each under its own limit, one at a time, so no two share the GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workers.gpu_check.report import FAIL, Check


@dataclass
class Context:
    """What every check needs: where to write, the Python to run, the time left."""

    work_dir: Path
    python: str
    deadline: float  # time.monotonic() by which the whole check must end
    peaks_tflops: dict[str, float]  # measured matmul rates, by dtype
    log: Callable[[str], None] = print

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()


@dataclass
class ChildRun:
    returncode: int | None  # None: killed at its time limit
    output: str
    seconds: float


def run_child(
    argv: list[str], timeout_s: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> ChildRun:
    """Run a child process to its end or ``timeout_s``; its output (stdout and stderr)."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=max(timeout_s, 1.0),
            env={**os.environ, **(env or {})},
            cwd=cwd,
            check=False,
        )
        return ChildRun(done.returncode, done.stdout + done.stderr, time.monotonic() - started)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        text = out.decode(errors="replace") if isinstance(out, bytes) else str(out)
        return ChildRun(None, text, time.monotonic() - started)


def tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def timed(check: Callable[[], Check]) -> Check:
    """Run one check, timing it; an unexpected error is the check's failure, not the run's."""
    started = time.monotonic()
    try:
        result = check()
    except Exception as exc:  # a broken check must not hide the others
        result = Check(
            getattr(check, "__name__", "check"),
            getattr(check, "__name__", "check"),
            FAIL,
            f"{type(exc).__name__}: {exc}",
            "an error inside the check itself: rerun with --debug for its traceback",
        )
    if not result.seconds:
        result.seconds = time.monotonic() - started
    return result


def python_executable() -> str:
    return sys.executable
