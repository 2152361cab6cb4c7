"""The node boundary on emulated nodes: two ranks inside one node against two nodes of one rank.

What it measures: on the local launcher's emulated network
(``operators/shaped_network.py``), a group of 2 workers as ``1×2`` (one node of
two ranks: they talk over the node's loopback) and as ``2×1`` (two nodes: they
talk over the shaped link, default ``10mbit``):

- light Task 0, every light size: the median of the 4 MB (10**6 float32)
  all-reduce's repetitions, with their spread (min–max), in each shape;
- light Task 1a, one epoch: the communication ratio (communication / step
  time, ``results_db.run_summary``) and the median collective time per step.

Goals (judged unless ``--smoke``): the 4 MB all-reduce at least 5 times slower
across the node link than inside the node, and Task 1a's communication ratio
higher across than inside. Exits 1 when one is missed.

Needs root (network namespaces and ``tc``). A busy machine slows the inside
shape most (its all-reduce is a few milliseconds of processor time), so the
ratio it prints is then a lower bound.

    .venv/bin/python benchmarks/node_boundary.py [--profile 10mbit]

``--smoke``: Task 0 alone at 100mbit, sizes up to 1,000 elements, one repetition:
the same groups, namespaces and table in seconds, no goal judged.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.local_launcher import LocalGroup  # noqa: E402
from results_db.run_summary import summarise  # noqa: E402
from scalebench.host import shaping_problems  # noqa: E402
from scalebench.network import parse_profile  # noqa: E402
from scalebench.nodes import NodeShape  # noqa: E402
from workers.records import read_run  # noqa: E402

SHAPES = (NodeShape(2, 2), NodeShape(2, 1))  # inside one node, across two
LARGEST = 10**6  # elements of the all-reduce compared (4 MB of float32)
GOAL_RATIO = 5.0


def run_group(run_dir: Path, shape: NodeShape, profile: str, task_args: list[str]) -> list:
    """One group of ``shape`` on ``profile`` between nodes; its ranks' records."""
    args = ["--results", str(run_dir), "--run-id", run_dir.name, "--device", "cpu"]
    group = LocalGroup(
        [*task_args, *args, "--network", profile],
        shape.world_size,
        ranks_per_node=shape.ranks_per_node,
        run_dir=run_dir,
        network=parse_profile(profile),
        sink=lambda line: None,
    )
    group.start()
    result = group.wait(1800)
    if result.status != "succeeded":
        raise SystemExit(f"{shape.label} on {profile}: {result.status}: {result.reason}")
    return read_run(run_dir)


def task0(root: Path, shape: NodeShape, profile: str, smoke: bool) -> tuple[float, float, float]:
    """(median, min, max) seconds of the largest float32 all-reduce measured."""
    task = ["--task", "task0-allreduce", "--light"]
    if smoke:
        task += ["--max-elements", "1000", "--repetitions", "1"]
    ranks = run_group(root / f"task0-{shape.label}", shape, profile, task)
    float32 = [r for r in ranks[0].by_kind["allreduce"] if r["dtype"] == "float32"]
    largest = max(float32, key=lambda r: r["elements"])
    seconds = largest["seconds"]
    return statistics.median(seconds), min(seconds), max(seconds)


def task1a(root: Path, shape: NodeShape, profile: str) -> tuple[float, float]:
    """(communication ratio, median collective seconds per step) of one light epoch."""
    task = ["--task", "task1a-resnet20-cifar10", "--light", "--max-epochs", "1"]
    task += ["--compile", "off"]
    run_dir = root / f"task1a-{shape.label}"
    ranks = run_group(run_dir, shape, profile, task)
    summary = summarise(ranks, run_dir.name, shape.world_size, None)
    per_step: dict[tuple[int, int], list[float]] = {}
    for rank in ranks:
        for step in rank.by_kind["step"]:
            key = (step["epoch"], step["step"])
            per_step.setdefault(key, []).append(step["phases"]["communication"])
    collective = statistics.median(min(s) for s in per_step.values())
    return summary.communication_ratio or 0.0, collective


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="10mbit", help="the link between nodes")
    parser.add_argument("--smoke", action="store_true", help="seconds, no goal judged")
    args = parser.parse_args()
    profile = "100mbit" if args.smoke else args.profile
    problems = shaping_problems([parse_profile(profile)])
    if problems:
        raise SystemExit("cannot emulate networks here: " + "; ".join(problems))
    started = time.perf_counter()
    rows, medians, ratios = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="node-boundary-") as folder:
        root = Path(folder)
        for shape in SHAPES:
            print(f"[{time.perf_counter() - started:.0f} s] Task 0, {shape.label} ...", flush=True)
            median, low, high = task0(root, shape, profile, args.smoke)
            medians[shape.label] = median
            row = [shape.label, f"{median * 1e3:.1f}", f"{low * 1e3:.1f}–{high * 1e3:.1f}"]
            if not args.smoke:
                print(f"[{time.perf_counter() - started:.0f} s] Task 1a, {shape.label} ...")
                ratio, collective = task1a(root, shape, profile)
                ratios[shape.label] = ratio
                row += [f"{ratio:.2f}", f"{collective * 1e3:.1f}"]
            rows.append(row)
    from tabulate import tabulate

    headers = ["shape (nodes×ranks)", "all-reduce median ms", "min–max ms"]
    if not args.smoke:
        headers += ["Task 1a communication ratio", "Task 1a collective ms/step"]
    size = "1,000 elements" if args.smoke else "4 MB"
    print(f"\n{size} float32 all-reduce, 2 ranks, {profile} between nodes:\n")
    print(tabulate(rows, headers=headers))
    across_over_inside = medians["2×1"] / medians["1×2"]
    print(f"\nacross / inside: {across_over_inside:.1f}×; {time.perf_counter() - started:.0f} s")
    if args.smoke:
        print("smoke run: no goal judged")
        return 0
    missed = []
    if across_over_inside < GOAL_RATIO:
        missed.append(
            f"the all-reduce is {across_over_inside:.1f}× slower across, goal {GOAL_RATIO}×"
        )
    if not ratios["2×1"] > ratios["1×2"]:
        missed.append("Task 1a's communication ratio is not higher across the node link")
    for line in missed:
        print(f"MISS: {line}")
    print("PASS" if not missed else "")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
