"""All-reduce harness against a bare torch.distributed loop, paired, at large sizes.

What it measures: per-repetition latency of a float32 sum all-reduce in a
two-process gloo group on this machine, for message sizes of 1 MB and more,
taken two ways at each size in alternating order, several rounds:

- *harness*: ``workers.allreduce.time_allreduce`` as Task 0 runs it (untimed
  warm-up, then a barrier before every timed repetition); a round's value is
  the median repetition;
- *bare*: the same warm-up, one barrier, then N back-to-back
  ``dist.all_reduce`` calls timed with ``time.perf_counter``; their total
  divided by N (no barrier per repetition) is a round's value.

Each number is the slowest rank's (for the harness, the maximum over both
ranks of each repetition, as Task 0 defines a repetition's time; for the bare
loop, the maximum over ranks of the mean); rank 0 prints. A round gives the
ratio harness median repetition / bare mean (the judged ratio) and, like for
like, harness mean / bare mean and harness median / bare median repetition
(the bare loop reads the clock between calls, so its repetitions are timed
one by one too; their sum is the loop's total). Each size reports the median
over rounds, with the judged ratio's min and max.

Units: milliseconds per all-reduce and a dimensionless ratio.
Goal: every size ≥ 1 MB has a median ratio within 0.95–1.05 (the harness's
barriers neither inflate nor deflate large-message latency by more than 5 %).
``--smoke`` measures one 1 MB size in two rounds (one of each order) of two repetitions
and judges no goal.

    .venv/bin/python benchmarks/allreduce_harness.py [--points 5] [--rounds 15]
    .venv/bin/python benchmarks/allreduce_harness.py --smoke
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from dataclasses import astuple, dataclass
from datetime import timedelta
from multiprocessing.queues import SimpleQueue

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from machine_load import OtherCpuUse

from workers.allreduce import time_allreduce
from workers.distributed import free_port

WORLD_SIZE = 2
GOAL_LOW, GOAL_HIGH = 0.95, 1.05
MIN_BYTES = 1_000_000
# Smoke size: the smallest judged size (--min-elements), a round of each order, and enough
# repetitions for a median and a mean.
SMOKE_POINTS = 1
SMOKE_ROUNDS = 2
SMOKE_REPETITIONS = 2
SMOKE_WARMUP = 1


def slowest(values: list[float]) -> list[float]:
    """Element-wise maximum of ``values`` over all ranks."""
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def bare_loop(tensor: torch.Tensor, repetitions: int, warmup: int) -> list[float]:
    """Seconds of each of ``repetitions`` back-to-back all-reduces (no barrier between).

    The clock is read between calls only, so the sum is the loop's total time.
    """
    for _ in range(warmup):
        dist.all_reduce(tensor)
    dist.barrier()
    ends = [time.perf_counter()]
    for _ in range(repetitions):
        dist.all_reduce(tensor)
        ends.append(time.perf_counter())
    return [b - a for a, b in itertools.pairwise(ends)]


@dataclass(frozen=True)
class Round:
    """One paired round at one size, in seconds per all-reduce, the slowest rank's."""

    harness_median: float
    harness_mean: float
    bare: float  # total / N, the slowest rank's
    bare_median: float  # median repetition (slowest rank per repetition)


@dataclass(frozen=True)
class SizeResult:
    elements: int
    rounds: list[Round]

    @property
    def ratios(self) -> list[float]:
        """Harness median repetition / bare mean, per round (the judged ratio)."""
        return [r.harness_median / r.bare for r in self.rounds]

    @property
    def mean_ratios(self) -> list[float]:
        """Harness mean repetition / bare mean, per round (like for like: mean and mean)."""
        return [r.harness_mean / r.bare for r in self.rounds]

    @property
    def median_ratios(self) -> list[float]:
        """Harness median repetition / bare median repetition, per round."""
        return [r.harness_median / r.bare_median for r in self.rounds]


def one_round(elements: int, repetitions: int, warmup: int, harness_first: bool) -> Round:
    """Both ways at one size, in the given order, each the slowest rank's."""
    tensor = torch.full((elements,), 1.0 / WORLD_SIZE, dtype=torch.float32)
    per_rep: list[float] = []
    bare_total = bare_median = 0.0
    for which in ("harness", "bare") if harness_first else ("bare", "harness"):
        tensor.fill_(1.0 / WORLD_SIZE)  # keep values finite however many sums ran
        if which == "harness":
            per_rep = slowest(time_allreduce(tensor, repetitions, warmup, None))
        else:
            bare_reps = bare_loop(tensor, repetitions, warmup)
            bare_total = slowest([sum(bare_reps)])[0]
            bare_median = statistics.median(slowest(bare_reps))
    return Round(
        statistics.median(per_rep), statistics.fmean(per_rep), bare_total / repetitions, bare_median
    )


def rank_main(
    rank: int,
    port: int,
    sizes: list[int],
    rounds: int,
    repetitions: int,
    warmup: int,
    queue: SimpleQueue,
) -> None:
    """One rank: join the group and measure every size; rank 0 prints progress and
    puts ``(elements, [round fields, …])`` per size on ``queue`` (plain data, not classes).
    """
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // WORLD_SIZE))
    dist.init_process_group(
        backend="gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=timedelta(seconds=300),
    )
    leader = rank == 0
    results: list[SizeResult] = []
    try:
        for elements in sizes:
            result = SizeResult(
                elements,
                [
                    one_round(elements, repetitions, warmup, harness_first=r % 2 == 0)
                    for r in range(rounds)
                ],
            )
            results.append(result)
            if leader:
                print(
                    f"  {elements * 4 / 1e6:8.1f} MB: harness median/bare per round "
                    + " ".join(f"{r:.3f}" for r in result.ratios),
                    flush=True,
                )
    finally:
        dist.destroy_process_group()
    if leader:
        queue.put([(r.elements, [astuple(one) for one in r.rounds]) for r in results])


def report(results: list[SizeResult], rounds: int, reps: int, judge: bool = True) -> None:
    """Print the per-size table (milliseconds) and the verdict line; ``judge``: false for a
    smoke run, which says so instead of judging the goal."""
    print(
        f"\nslowest rank's ms per all-reduce, median over {rounds} rounds "
        f"of {reps} repetitions each way"
    )
    print(
        f"{'elements':>11} {'MB':>7} {'harness p50':>12} {'bare':>8} "
        f"{'p50/bare':>9} {'min':>6} {'max':>6} {'mean/bare':>10} {'p50/bare p50':>13}"
    )
    judged = []
    for result in results:
        harness_p50 = statistics.median(r.harness_median for r in result.rounds)
        bare = statistics.median(r.bare for r in result.rounds)
        ratio = statistics.median(result.ratios)
        if result.elements * 4 >= MIN_BYTES:
            judged.append(ratio)
        print(
            f"{result.elements:>11} {result.elements * 4 / 1e6:>7.2f} {harness_p50 * 1e3:>12.3f} "
            f"{bare * 1e3:>8.3f} {ratio:>9.3f} "
            f"{min(result.ratios):>6.3f} {max(result.ratios):>6.3f} "
            f"{statistics.median(result.mean_ratios):>10.3f} "
            f"{statistics.median(result.median_ratios):>13.3f}"
        )
    if not judged:
        print(f"no size of {MIN_BYTES / 1e6:g} MB or more was measured: nothing to judge")
        return
    low, high = min(judged), max(judged)
    if not judge:
        print(
            f"all-reduce harness p50 / bare loop: {low:.3f}x to {high:.3f}x over "
            f"{len(judged)} size(s); smoke run: no goal judged"
        )
        return
    verdict = "PASS" if low >= GOAL_LOW and high <= GOAL_HIGH else "MISS"
    print(
        f"all-reduce harness p50 / bare loop (sizes >= {MIN_BYTES / 1e6:g} MB, median of "
        f"{rounds} rounds per size): {low:.3f}x to {high:.3f}x over {len(judged)} sizes; "
        f"goal {GOAL_LOW:.2f}-{GOAL_HIGH:.2f}x: {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-elements", type=float, default=2.5e5, help="float32 elements")
    parser.add_argument("--max-elements", type=float, default=2.5e7, help="float32 elements")
    parser.add_argument("--points", type=int, default=5, help="log-spaced sizes")
    parser.add_argument("--rounds", type=int, default=15, help="paired rounds per size")
    parser.add_argument("--repetitions", type=int, default=20, help="timed all-reduces per way")
    parser.add_argument("--warmup", type=int, default=3, help="untimed all-reduces per way")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_POINTS} size (--min-elements), {SMOKE_ROUNDS} rounds of "
        f"{SMOKE_REPETITIONS} repetitions: the code path in seconds, no goal judged",
    )
    args = parser.parse_args()
    if args.smoke:
        args.points, args.rounds = SMOKE_POINTS, SMOKE_ROUNDS
        args.repetitions, args.warmup = SMOKE_REPETITIONS, SMOKE_WARMUP

    sizes = sorted(
        {
            int(s)
            for s in np.rint(
                np.logspace(np.log10(args.min_elements), np.log10(args.max_elements), args.points)
            )
        }
    )
    began = time.perf_counter()
    print(
        f"gloo, {WORLD_SIZE} ranks on {os.cpu_count()} cores; sizes {sizes} float32 elements",
        flush=True,
    )
    others = OtherCpuUse()
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(
        rank_main,
        args=(free_port(), sizes, args.rounds, args.repetitions, args.warmup, queue),
        nprocs=WORLD_SIZE,
        join=True,
    )
    results = [
        SizeResult(elements, [Round(*fields) for fields in rounds])
        for elements, rounds in queue.get()
    ]
    print(f"ran {time.perf_counter() - began:.0f} s; {others.describe()}")
    report(results, args.rounds, args.repetitions, judge=not args.smoke)


if __name__ == "__main__":
    main()
