"""Two stacks in paired rounds on this machine: is a slowed stack seen, and an unchanged one not?

What it measures: light Task 2a at one worker (one thread, eager, CPU tensors), ``--epochs``
epochs a run, as sweeps of two stacks of this interpreter in ``--pairs`` rounds
(``scalebench run … --stack base=PYTHON --stack other=PYTHON --pairs N``):

- **A/A**: the same interpreter twice, nothing changed;
- **slowed**: the second stack has ``benchmarks/slowdown`` on its ``PYTHONPATH`` and
  ``SCALEBENCH_BENCH_SLOWDOWN`` set (``--slowdown``, 0.10: each step spins a tenth of the step
  before it), so that the product itself is unmodified.

Each sweep runs two ways, one after the other, as the request's ``pairing`` asks:
**interleaved** (one arm, then the other, each with both cores), and **duet** (both arms of a
round at once, each pinned to its own core, meeting before their timed runs; needs two
cores). Each sweep is loaded into a private SQLite database and
compared as ``scalebench compare`` does. It prints, per way and comparison, the steady-step
ratio other / base with its 95 % interval, the spread (sample standard deviation) of the
per-pair log-ratios, and the wall-clock seconds; then whether the claim holds: the slowed
stack's interval lies above 1, the A/A interval contains 1 (exit status 1 where not). Which way
is less noisy is read from the spreads: a smaller spread needs fewer pairs for the same
interval, and duet runs a round in about half the time.

    .venv/bin/python benchmarks/stack_pairs.py [--pairs 10] [--epochs 2] [--slowdown 0.10]
    .venv/bin/python benchmarks/stack_pairs.py --smoke   # A/A: 1 pair of 1 epoch, interleaved
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.group import LauncherFailed, record_verdict, run_together  # noqa: E402
from operators.launcher import launcher_for  # noqa: E402
from results_db import service  # noqa: E402
from results_db.database import make_engine  # noqa: E402
from results_db.queries.stacks import arm_runs  # noqa: E402
from scalebench import manifest  # noqa: E402
from scalebench.host import cpu_model  # noqa: E402
from scalebench.sweep import SweepRequest, launches, start_sweep, validate_request  # noqa: E402

TASK = "task2a-logreg-epsilon"
SLOWDOWN = ROOT / "benchmarks" / "slowdown"
METRIC = "steady_step_s"


@dataclass(frozen=True)
class Measured:
    """One sweep of two stacks: the steady step's ratio other / base and its interval."""

    way: str
    comparison: str
    pairs: int
    ratio: float
    low: float
    high: float
    log_sd: float
    wall_s: float
    failed: int

    @property
    def holds(self) -> bool:
        """The slowed stack's interval above 1; the unchanged one's containing 1."""
        if self.comparison == "A/A":
            return self.low <= 1 <= self.high
        return self.low > 1


def request_for(
    slowdown: float | None, pairs: int, epochs: int, data_dir: Path, way: str
) -> SweepRequest:
    """The sweep of two stacks of this interpreter, its rounds run ``way`` (the request's
    ``pairing``); the second stack slowed by ``slowdown``."""
    other: dict = {"python": sys.executable}
    if slowdown is not None:
        other["env"] = {"PYTHONPATH": str(SLOWDOWN), "SCALEBENCH_BENCH_SLOWDOWN": f"{slowdown:g}"}
    return validate_request(
        task=TASK,
        light=True,
        workers="1",
        stacks={"base": {"python": sys.executable}, "other": other},
        pairs=pairs,
        pairing=way,
        max_epochs=epochs,
        threads_per_worker=1,
        device="cpu",
        compile="off",
        data_dir=str(data_dir),
    )


def run_sweep(request: SweepRequest, root: Path, progress: str) -> tuple[str, Path, int, float]:
    """Every round of the sweep as the product runs it (a duet's arms at once, each on its
    own core: :func:`~scalebench.sweep.launches`); its id, folder, failures, seconds."""
    plan = start_sweep(request, root, trigger="manual")
    started = time.monotonic()
    statuses: list[str] = []
    for launch in launches(plan.groups):
        ended = run_together(launch, lambda group: launcher_for(group, sink=lambda line: None))
        for group, result in zip(launch, ended, strict=True):
            failed = isinstance(result, LauncherFailed)
            statuses.append("failed" if failed else record_verdict(group, result)[0])
        done = len(statuses) / 2
        elapsed = time.monotonic() - started
        left = elapsed / done * (request.repeats - done)
        if len(statuses) % 2 == 0:
            print(
                f"   {progress}: round {done:.0f}/{request.repeats} "
                f"({elapsed:.0f} s, about {left:.0f} s to go)",
                flush=True,
            )
    manifest.finish(plan.sweep_dir)
    failed = sum(status != "succeeded" for status in statuses)
    return plan.sweep_id, plan.sweep_dir, failed, time.monotonic() - started


def measure(
    way: str, comparison: str, slowdown: float | None, pairs: int, epochs: int, tmp: Path
) -> Measured:
    """One sweep of two stacks, run ``way``, loaded and compared."""
    root = tmp / f"{way}-{comparison.replace('/', '')}"
    request = request_for(slowdown, pairs, epochs, tmp, way)
    sweep_id, sweep_dir, failed, wall_s = run_sweep(request, root, f"{way} {comparison}")
    url = f"sqlite:///{root / 'results.db'}"
    with contextlib.redirect_stdout(io.StringIO()):
        service.ingest(url, str(sweep_dir))
    report = service.compare_sweep(url, sweep_id)
    interval = report.comparisons[0].metrics[METRIC] if report.comparisons else None
    engine = make_engine(url)
    with engine.connect() as conn:
        arms = arm_runs(conn, sweep_id)
    engine.dispose()
    by_round: dict[int, dict[str, float]] = {}
    for arm in arms:
        if METRIC in arm.seconds:
            by_round.setdefault(arm.repeat, {})[arm.stack] = arm.seconds[METRIC]
    logs = [math.log(r["other"] / r["base"]) for r in by_round.values() if len(r) == 2]
    return Measured(
        way,
        comparison,
        len(logs),
        interval.ratio if interval else math.nan,
        interval.low if interval else math.nan,
        interval.high if interval else math.nan,
        statistics.stdev(logs) if len(logs) > 1 else math.nan,
        wall_s,
        failed,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10, help="rounds of each sweep")
    parser.add_argument("--epochs", type=int, default=2, help="epochs of each run")
    parser.add_argument("--slowdown", type=float, default=0.10, help="the slowed stack's share")
    parser.add_argument("--smoke", action="store_true", help="A/A: 1 pair of 1 epoch, interleaved")
    args = parser.parse_args(argv)
    pairs, epochs = (1, 1) if args.smoke else (args.pairs, args.epochs)
    ways = (
        ["interleaved"]
        if args.smoke or len(os.sched_getaffinity(0)) < 2
        else [
            "interleaved",
            "duet",
        ]
    )
    cores = len(os.sched_getaffinity(0))
    print(
        f"light {TASK} at 1 worker, {epochs} epoch(s) a run, {pairs} pairs a sweep; "
        f"{cpu_model()}, {cores} CPUs; ways: {', '.join(ways)}",
        flush=True,
    )
    comparisons: list[tuple[str, float | None]] = [("A/A", None)]
    if not args.smoke:
        comparisons.append((f"+{args.slowdown:.0%}", args.slowdown))
    measured = []
    with tempfile.TemporaryDirectory(prefix="stack-pairs-") as tmp:
        for way in ways:
            for comparison, slowdown in comparisons:
                measured.append(measure(way, comparison, slowdown, pairs, epochs, Path(tmp)))
    print(
        f"\n{'way':<12} {'other stack':<11} {'pairs':>5} {'ratio':>7}  {'95 % interval':<17} "
        f"{'sd(log)':>8} {'wall s':>7}  holds"
    )
    for m in measured:
        span = f"[{m.low:.3f}, {m.high:.3f}]"
        print(
            f"{m.way:<12} {m.comparison:<11} {m.pairs:>5} {m.ratio:>7.3f}  {span:<17} "
            f"{m.log_sd:>8.4f} {m.wall_s:>7.0f}  {'yes' if m.holds else 'NO'}"
            + (f" ({m.failed} run(s) failed)" if m.failed else "")
        )
    if args.smoke:
        print("smoke: the code path ran (no claim judged)")
        return 0 if all(m.failed == 0 and m.pairs == pairs for m in measured) else 1
    ok = all(m.holds and m.failed == 0 for m in measured)
    print("PASS" if ok else "FAIL: a slowed stack not seen above 1, or an unchanged one off 1")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
