"""Tracker overhead: the instrumented training loop against the same loop bare.

What it measures: wall-clock seconds of each of N training steps of the light image
task (ResNet-20 with one input channel on scikit-learn's 8×8 digits, batch
128, the Task 1a SGD settings), run two ways in one process:

- *bare*: data → forward → loss → backward → gradient all-reduce → optimizer,
  with no clock readings and no records;
- *instrumented*: the same steps with the real per-step instrumentation of
  ``workers.image_classification.train``: ``PhaseClock.start`` plus one
  ``lap`` per phase (six phases) and ``Tracker.step`` writing a step record
  to a ``RecordWriter`` in a temporary directory.

Both variants use ``GradientAllReduce`` in a one-process gloo group, the same
model, optimizer, batches and crops, so only the instrumentation differs.
Trials are interleaved in pairs after untimed warm-up steps, the order
alternating (bare then instrumented, instrumented then bare, …). Both
variants read ``time.perf_counter`` once per step (the benchmark's own clock,
identical in both), so each trial yields per-step seconds. Each pair gives the
ratio instrumented/bare of the trials' median step times (robust to stalls
from other processes on the machine); the ratio of trial totals is reported
as well. As a cross-check that does not depend on the noise of whole
training steps, the instrumentation alone (six laps and one step record, no
training) is also timed and shown as a share of a bare step.

Units: seconds per step (ms in the output) and a dimensionless ratio.
Goal: median over pairs of the median-step ratio ≤ 1.02 (instrumentation costs
at most 2 % of a step).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from machine_load import OtherCpuUse
from torch.nn import functional as F

from workers.data.batches import augment, epoch_partition, normalise
from workers.data.sources import load_digits
from workers.distributed import free_port
from workers.engine import sgd as build_optimizer
from workers.models.resnet import resnet20
from workers.records import PHASES, RecordWriter
from workers.schedules import LearningRate
from workers.sync_sgd import GradientAllReduce
from workers.tasks.registry import DIGITS, TASK1A_RESNET20_CIFAR10
from workers.tracker import Tracker

GOAL_RATIO = 1.02
BATCH = TASK1A_RESNET20_CIFAR10.batch_per_worker


def quantile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0–1) of ``values``, linearly interpolated."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def batch_indices(n_train: int, steps: int, seed: int) -> list[torch.Tensor]:
    """``steps`` full batches of sample indices, walking through shuffled epochs."""
    per_epoch = n_train // BATCH  # full batches only, so every step does the same work
    batches = []
    for step in range(steps):
        epoch, within = divmod(step, per_epoch)
        order = epoch_partition(n_train, 0, 1, epoch, seed)
        batches.append(order[within * BATCH : (within + 1) * BATCH])
    return batches


class Loop:
    """The light Task 1a training step, runnable bare or instrumented."""

    def __init__(self, tracker: Tracker, seed: int) -> None:
        data = normalise(load_digits())
        self.train_x, self.train_y = data.train_x, data.train_y
        self.seed = seed
        torch.manual_seed(seed)
        self.model = resnet20(in_channels=DIGITS.channels, classes=DIGITS.classes)
        self.model.train()
        self.reducer = GradientAllReduce(self.model.parameters())
        opt = TASK1A_RESNET20_CIFAR10.optimizer
        self.optimizer = build_optimizer(opt, self.model.parameters())
        self.schedule = LearningRate(TASK1A_RESNET20_CIFAR10.schedule, opt.lr, world_size=1)
        self.tracker = tracker

    def bare(self, batches: list[torch.Tensor]) -> list[float]:
        """Seconds of each step (one per batch), with no instrumentation."""
        generator = torch.Generator().manual_seed(self.seed)
        steps = len(batches)
        ends = [time.perf_counter()]
        for step, index in enumerate(batches):
            images = augment(
                self.train_x[index], DIGITS.crop_padding, DIGITS.horizontal_flip, generator
            )
            labels = self.train_y[index]
            logits = self.model(images)
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            self.reducer(loss)
            lr = self.schedule.at(step / steps)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=False)
            ends.append(time.perf_counter())
        return [b - a for a, b in itertools.pairwise(ends)]

    def instrumented(self, batches: list[torch.Tensor]) -> list[float]:
        """Seconds of each step (one per batch), with phase laps and a step record each."""
        generator = torch.Generator().manual_seed(self.seed)
        clock = self.tracker.clock
        steps = len(batches)
        ends = [time.perf_counter()]
        for step, index in enumerate(batches):
            clock.start()
            images = augment(
                self.train_x[index], DIGITS.crop_padding, DIGITS.horizontal_flip, generator
            )
            labels = self.train_y[index]
            clock.lap("data")
            logits = self.model(images)
            clock.lap("forward")
            loss = F.cross_entropy(logits, labels)
            clock.lap("loss")
            loss.backward()
            clock.lap("backward")
            global_loss = self.reducer(loss)
            clock.lap("communication")
            lr = self.schedule.at(step / steps)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=False)
            clock.lap("optimizer")
            self.tracker.step(0, step, steps, len(index), global_loss, lr)
            ends.append(time.perf_counter())
        return [b - a for a, b in itertools.pairwise(ends)]


def instrumentation_alone(tracker: Tracker, repetitions: int = 2000) -> float:
    """Seconds per step of the instrumentation by itself: start, six laps, one record."""
    clock = tracker.clock
    start = time.perf_counter()
    for step in range(repetitions):
        clock.start()
        for phase in PHASES:
            clock.lap(phase)
        tracker.step(0, step, repetitions, BATCH, 2.3, 0.02)
    return (time.perf_counter() - start) / repetitions


def measure(
    loop: Loop, batches: list[torch.Tensor], warmup: list[torch.Tensor], pairs: int
) -> list[tuple[list[float], list[float]]]:
    """(bare, instrumented) per-step seconds for ``pairs`` interleaved trials over ``batches``.

    Each variant first runs once over ``warmup``, untimed.
    """
    loop.bare(warmup)
    loop.instrumented(warmup)
    results = []
    for pair in range(pairs):
        # Alternate which variant goes first (B I, I B, B I, …) so a slow drift
        # in machine speed does not always favour the same one.
        if pair % 2 == 0:
            bare = loop.bare(batches)
            instrumented = loop.instrumented(batches)
        else:
            instrumented = loop.instrumented(batches)
            bare = loop.bare(batches)
        results.append((bare, instrumented))
        print(
            f"pair {pair + 1}/{pairs}: median step bare {1e3 * statistics.median(bare):.2f} ms, "
            f"instrumented {1e3 * statistics.median(instrumented):.2f} ms, "
            f"ratio {statistics.median(instrumented) / statistics.median(bare):.4f}; "
            f"total ratio {sum(instrumented) / sum(bare):.4f}",
            flush=True,
        )
    return results


def spread(values: list[float]) -> str:
    """Median, p10/p90 and min/max of ``values``, for a ratio."""
    return (
        f"{statistics.median(values):.4f}x (p10 {quantile(values, 0.1):.4f}, "
        f"p90 {quantile(values, 0.9):.4f}, min {min(values):.4f}, max {max(values):.4f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=9, help="interleaved trial pairs")
    parser.add_argument("--steps", type=int, default=60, help="training steps per trial")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps per variant")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)

    began = time.perf_counter()
    dist.init_process_group(
        backend="gloo",
        init_method=f"tcp://127.0.0.1:{free_port()}",
        rank=0,
        world_size=1,
        timeout=timedelta(seconds=60),
    )
    try:
        with tempfile.TemporaryDirectory(prefix="tracker-overhead-") as tmp:
            writer = RecordWriter(Path(tmp), run_id="tracker-overhead", rank=0, world_size=1)
            tracker = Tracker(writer, torch.device("cpu"), light=True)
            tracker.start(task="tracker-overhead")
            loop = Loop(tracker, args.seed)
            batches = batch_indices(len(loop.train_y), max(args.steps, args.warmup), args.seed)
            print(
                f"ResNet-20 on digits, batch {BATCH}, {torch.get_num_threads()} torch threads; "
                f"{args.pairs} pairs of {args.steps} steps after {args.warmup} warm-up steps",
                flush=True,
            )
            others = OtherCpuUse()
            results = measure(loop, batches[: args.steps], batches[: args.warmup], args.pairs)
            print(f"during the trials, {others.describe()}", flush=True)
            records = sum(1 for _ in writer.path.open(encoding="utf-8"))
            alone_s = instrumentation_alone(tracker)
            tracker.close()
    finally:
        dist.destroy_process_group()

    median_ratios = [statistics.median(i) / statistics.median(b) for b, i in results]
    total_ratios = [sum(i) / sum(b) for b, i in results]
    bare_ms = 1e3 * statistics.median(statistics.median(b) for b, _ in results)
    instrumented_ms = 1e3 * statistics.median(statistics.median(i) for _, i in results)
    print(
        f"median step: bare {bare_ms:.2f} ms, instrumented {instrumented_ms:.2f} ms "
        f"({records} records written); ran {time.perf_counter() - began:.0f} s"
    )
    print(f"ratio of trial totals (stalls included): {spread(total_ratios)}")
    print(
        f"instrumentation alone: {alone_s * 1e6:.1f} us/step = "
        f"{100 * alone_s * 1e3 / bare_ms:.3f} % of a median bare step"
    )
    median = statistics.median(median_ratios)
    verdict = "PASS" if median <= GOAL_RATIO else "MISS"
    print(
        f"tracker overhead: instrumented/bare median-step ratio {spread(median_ratios)} "
        f"over {len(results)} pairs; goal <= {GOAL_RATIO:.2f}x: {verdict}"
    )


if __name__ == "__main__":
    main()
