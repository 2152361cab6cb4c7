"""How well the scaling projection predicts real runs over an emulated link: leave-one-out.

    sudo .venv/bin/python benchmarks/projection_accuracy.py            # 6-7 minutes, needs root
    sudo .venv/bin/python benchmarks/projection_accuracy.py --nodes    # both node shapes: 14-27 min
    .venv/bin/python benchmarks/projection_accuracy.py --smoke         # seconds: recorded sweeps

Real sweeps, run group after group as ``scalebench run`` runs them: light Task 0 at 2
workers and light Task 1a at 1 and 2 workers, each on host and on an emulated 10mbit link
(the request's ``network``). Every (workers, link) point of Task 1a is predicted from the
other three and the Task 0 fits. Goal: step seconds within 20 % of the measurement, and
communication seconds too where they are at least a tenth of the step
(``results_db.report.leave_one_out_misses``). Prints the leave-one-out table of each
measurement and exits 1 when the goal is missed.

Two rules for a shared machine, each reading only what other processes and the 1-worker
control runs did, never the errors being judged:

- when a point misses while runs were contended (other processes took their cores), the
  training sweep is measured once more, and each point is judged on its less contended
  measurement (the way alternating runs are compared on these machines);
- when it misses on a machine whose speed changed within the sweep (its two 1-worker step
  times more than 10 % apart: these virtual machines have changed by a third within 25
  minutes with nothing else running), it is measured once more too, and the steadier sweep
  is judged.

``--nodes``: the same check on a sweep with both shapes of node, two ranks to a node
(``--ranks-per-node 2``): light Task 0 at 2 and 4 workers and light Task 1a at 1, 2 and
4 workers (``1×1``; ``1×2``, inside one node; ``2×2``, across two), each on host and
10mbit. Every point has its shape on the other link, so a point across the node link
(``2×2`` on 10mbit) takes its compute from ``2×2`` on host and its all-reduce from the
Task 0 fit across nodes. Task 1a rather than Task 2a: 2a's steps last a few milliseconds,
its 8 kB all-reduce is the ring's latency, which a busy 2-core machine's scheduler decides
(a first try missed by 35-90 %), while 1a's 1.1 MB is what the fit describes. 14 minutes,
27 when it measures twice.

``--smoke`` runs the same projection, leave-one-out and judgement on the sweeps recorded in
``tests/data/projection-pair`` (the quick start's pair and a 10mbit pair, real runs on an AMD
EPYC), ingested into a temporary database: no training, no root, no goal judged.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from operators.group import LauncherFailed, record_verdict, run_group
from operators.launcher import launcher_for
from results_db import service
from results_db.database import make_engine, upgrade
from results_db.ingest import ingest_location
from results_db.projection import MeasuredPoint, TrainingSweep, leave_one_out
from results_db.queries.projection import allreduce_fits, training_sweeps
from results_db.report import leave_one_out_misses, leave_one_out_table
from scalebench import manifest
from scalebench.host import shaping_problems
from scalebench.network import parse_profile
from scalebench.sweep import start_sweep, validate_request

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "data" / "projection-pair"
# Beyond this share between the two 1-worker step times, the machine's speed changed within
# the sweep (see the module's docstring).
STEADY = 0.10


def unsteadiness(sweep: TrainingSweep) -> float:
    """How far apart the sweep's two 1-worker step times are (0: the same; 0.0 without both)."""
    one = [p.step_s for p in sweep.points if p.world_size == 1]
    return max(one) / min(one) - 1 if len(one) == 2 else 0.0


def least_contended(sweeps: list[TrainingSweep]) -> TrainingSweep:
    """Per (link, worker count), the point whose runs other processes disturbed least."""
    best: dict[tuple[str, int], MeasuredPoint] = {}
    for sweep in sweeps:
        for p in sweep.points:
            key = (p.network, p.world_size)
            if key not in best or (p.contention_share or 0.0) < (best[key].contention_share or 0.0):
                best[key] = p
    return replace(sweeps[-1], points=tuple(best[key] for key in sorted(best)))


def run_sweep(task: str, fields: dict[str, Any], results: Path, url: str) -> str:
    """Run a sweep of ``task`` with the request ``fields`` as ``scalebench run`` does (its
    groups one after the other, each verdict in the manifest), then load it into the results
    database at ``url``; the id of the sweep it made. A group that did not succeed ends the
    benchmark."""
    request = validate_request(task=task, **fields)
    service.upgrade(url)
    plan = start_sweep(request, results, trigger="cli", runner=manifest.this_process())
    failed: list[str] = []
    try:
        for group in plan.groups:
            try:
                result = run_group(group, lambda group=group: launcher_for(group))
                (status, reason), seconds = record_verdict(group, result), result.seconds
            except LauncherFailed as exc:  # recorded failed by run_group
                status, reason, seconds = "failed", str(exc), 0.0
            print(f"   {group.run_id}: {status} in {seconds:.1f} s", flush=True)
            if status != "succeeded":
                failed.append(f"{group.run_id} {status}: {reason}")
    finally:
        manifest.finish(plan.sweep_dir)
    service.ingest(url, str(plan.sweep_dir), say=None)
    if failed:
        raise SystemExit(f"sweep {plan.sweep_id} of {task} failed: {'; '.join(failed)}")
    return plan.sweep_id


def judge(
    url: str, measurements: list[list[str]], allreduce_ids: list[str]
) -> tuple[list, str, TrainingSweep]:
    """Leave-one-out of one configuration measured once or more (each measurement: the
    training sweeps that together cover its links; the least contended point of each) with
    the Task 0 sweeps' fits: (held-out points, their table, the last measurement)."""
    engine = make_engine(url)
    with engine.connect() as conn:
        measured = [training_sweeps(conn, ids) for ids in measurements]
        fits = [fit for sweep_id in allreduce_ids for fit in allreduce_fits(conn, sweep_id)]
    engine.dispose()
    sweep = least_contended(measured)
    if len(measured) == 2 and not any(p.contended for s in measured for p in s.points):
        sweep = min(measured, key=unsteadiness)  # measured again for an unsteady machine
    held = leave_one_out(sweep, fits, ",".join(allreduce_ids))
    return held, leave_one_out_table(held), measured[-1]


@dataclass(frozen=True)
class Plan:
    """The sweeps one check measures: Task 0's worker counts, Task 1a's, and how many ranks
    share a node (each light, one repeat, on host and 10mbit; Task 1a eager)."""

    allreduce_workers: str
    training_workers: str
    ranks_per_node: int = 1

    def describe(self) -> str:
        nodes = f" ({self.ranks_per_node} ranks a node)" if self.ranks_per_node > 1 else ""
        return f"Task 1a at {self.training_workers} workers{nodes}, host and 10mbit"


ONE_RANK_A_NODE = Plan("2", "1,2")
BOTH_SHAPES = Plan("2,4", "1,2,4", ranks_per_node=2)


def measure(work: Path, plan: Plan = ONE_RANK_A_NODE) -> list[str]:
    """The real runs and the judgement; the misses of the last judgement."""
    url = f"sqlite:///{work / 'results.db'}"
    results = work / "results"
    common: dict[str, Any] = {
        "light": True,
        "repeats": 1,
        "network": "host,10mbit",
        "device": "cpu",
        "ranks_per_node": plan.ranks_per_node,
    }
    print(f"Task 0 at {plan.allreduce_workers} workers, host and 10mbit", flush=True)
    allreduce = run_sweep(
        "task0-allreduce", {"workers": plan.allreduce_workers, **common}, results, url
    )
    training = {"workers": plan.training_workers, "compile": "off", **common}
    trained: list[str] = []
    missed: list[str] = []
    for attempt in (1, 2):
        print(f"{plan.describe()} (measurement {attempt})", flush=True)
        trained.append(run_sweep("task1a-resnet20-cifar10", training, results, url))
        held, table, sweep = judge(url, [[sweep_id] for sweep_id in trained], [allreduce])
        print(table, flush=True)
        missed = leave_one_out_misses(held)
        disturbed = any(p.contended for p in sweep.points) or unsteadiness(sweep) > STEADY
        if not missed or not disturbed:
            break
    return missed


def smoke(work: Path) -> None:
    """The projection, leave-one-out and judgement on the recorded sweeps."""
    shutil.copytree(RECORDED, work / "results")
    url = f"sqlite:///{work / 'results.db'}"
    upgrade(url)
    engine = make_engine(url)
    report = ingest_location(engine, str(work / "results"))
    engine.dispose()
    if report.runs != 6 or report.refused:
        raise SystemExit(f"the recorded sweeps did not load: {report}")
    ids = {
        folder: json.loads((RECORDED / folder / "sweep.json").read_text())["sweep_id"]
        for folder in ("host-task1a", "10mbit-task1a", "host-task0", "10mbit-task0")
    }
    held, table, _ = judge(
        url, [[ids["host-task1a"], ids["10mbit-task1a"]]], [ids["host-task0"], ids["10mbit-task0"]]
    )
    print(f"the recorded sweeps, host and 10mbit:\n{table}")
    print("beyond the bound: " + (", ".join(leave_one_out_misses(held)) or "none"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="recorded sweeps: seconds")
    parser.add_argument("--nodes", action="store_true", help="a sweep with both shapes of node")
    parser.add_argument(
        "--keep", type=Path, help="copy the sweeps' folders here (to record them as test data)"
    )
    args = parser.parse_args(argv)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="projection-accuracy-") as tmp:
        if args.smoke:
            smoke(Path(tmp))
            print(f"smoke: ran {time.perf_counter() - began:.0f} s, no goal judged")
            return 0
        problems = shaping_problems([parse_profile("10mbit")])
        if problems:
            print(f"cannot emulate a 10mbit link here: {'; '.join(problems)}", file=sys.stderr)
            return 2
        missed = measure(Path(tmp), BOTH_SHAPES if args.nodes else ONE_RANK_A_NODE)
        if args.keep:
            shutil.copytree(Path(tmp) / "results", args.keep)
            print(f"the sweeps' folders: {args.keep}")
    verdict = "MISS: " + "; ".join(missed) if missed else "PASS"
    print(f"leave-one-out within 20 %: {verdict}; ran {time.perf_counter() - began:.0f} s")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
