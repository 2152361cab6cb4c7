"""Tracker overhead: the instrumented training loop against the same loop bare.

What it measures: wall-clock seconds for N training steps of the light image
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
Trials are interleaved in pairs (bare, instrumented, bare, instrumented, …)
after untimed warm-up steps; each pair gives the ratio instrumented/bare.

Units: seconds per step (ms in the output) and a dimensionless ratio.
Goal: median ratio ≤ 1.02 (instrumentation costs at most 2 % of a step).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn import functional as F

from workers.data.batches import augment, epoch_partition, normalise
from workers.data.sources import load_digits
from workers.distributed import free_port
from workers.models.resnet import resnet20
from workers.records import RecordWriter
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
        self.optimizer = torch.optim.SGD(
            self.model.parameters(),
            lr=opt.lr,
            momentum=opt.momentum,
            nesterov=opt.nesterov,
            weight_decay=opt.weight_decay,
            dampening=opt.dampening,
        )
        self.schedule = LearningRate(TASK1A_RESNET20_CIFAR10.schedule, opt.lr, world_size=1)
        self.tracker = tracker

    def bare(self, batches: list[torch.Tensor]) -> float:
        """Seconds for one step per batch, with no instrumentation."""
        generator = torch.Generator().manual_seed(self.seed)
        steps = len(batches)
        start = time.perf_counter()
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
        return time.perf_counter() - start

    def instrumented(self, batches: list[torch.Tensor]) -> float:
        """Seconds for one step per batch, with phase laps and a step record each."""
        generator = torch.Generator().manual_seed(self.seed)
        clock = self.tracker.clock
        steps = len(batches)
        start = time.perf_counter()
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
        return time.perf_counter() - start


def measure(
    loop: Loop, batches: list[torch.Tensor], pairs: int, warmup: int
) -> list[tuple[float, float]]:
    """(bare seconds, instrumented seconds) for each of ``pairs`` interleaved trials."""
    loop.bare(batches[:warmup])
    loop.instrumented(batches[:warmup])
    results = []
    for pair in range(pairs):
        # Alternate which variant goes first (B I, I B, B I, …) so a slow drift
        # in machine speed does not always favour the same one.
        if pair % 2 == 0:
            bare_s = loop.bare(batches)
            instrumented_s = loop.instrumented(batches)
        else:
            instrumented_s = loop.instrumented(batches)
            bare_s = loop.bare(batches)
        results.append((bare_s, instrumented_s))
        steps = len(batches)
        print(
            f"pair {pair + 1}/{pairs}: bare {1e3 * bare_s / steps:.2f} ms/step, "
            f"instrumented {1e3 * instrumented_s / steps:.2f} ms/step, "
            f"ratio {instrumented_s / bare_s:.4f}",
            flush=True,
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7, help="interleaved trial pairs")
    parser.add_argument("--steps", type=int, default=80, help="training steps per trial")
    parser.add_argument("--warmup", type=int, default=20, help="untimed steps per variant")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

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
            results = measure(loop, batches[: args.steps], args.pairs, args.warmup)
            records = sum(1 for _ in writer.path.open(encoding="utf-8"))
            tracker.close()
    finally:
        dist.destroy_process_group()

    ratios = [instrumented / bare for bare, instrumented in results]
    bare_ms = statistics.median(bare for bare, _ in results) * 1e3 / args.steps
    instrumented_ms = statistics.median(inst for _, inst in results) * 1e3 / args.steps
    median = statistics.median(ratios)
    print(
        f"median step: bare {bare_ms:.2f} ms, instrumented {instrumented_ms:.2f} ms "
        f"({records} records written); ran {time.perf_counter() - began:.0f} s"
    )
    verdict = "PASS" if median <= GOAL_RATIO else "MISS"
    print(
        f"tracker overhead: instrumented/bare median {median:.4f}x "
        f"(p10 {quantile(ratios, 0.1):.4f}, p90 {quantile(ratios, 0.9):.4f}, "
        f"min {min(ratios):.4f}, max {max(ratios):.4f}, {len(ratios)} pairs); "
        f"goal <= {GOAL_RATIO:.2f}x: {verdict}"
    )


if __name__ == "__main__":
    main()
