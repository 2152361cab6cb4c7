"""Tracker overhead: the training engine instrumented against the same engine bare.

What it measures: wall-clock seconds of each training step of the light Task 1a
run (ResNet-20 with one input channel on scikit-learn's 8×8 digits, batch 128,
the Task 1a SGD settings) as ``workers.engine.train`` runs it, two ways in one
process and one one-rank gloo group:

- *instrumented*: the real ``Tracker``: ``PhaseClock.start``, a ``lap`` per
  phase, and a step record per step written to a ``RecordWriter`` in a
  temporary directory (plus the start, evaluation and finish records);
- *bare*: a stand-in tracker whose clock does nothing and which writes
  nothing.

Everything else — the engine's loop, adapter, augmentation, gradient
all-reduce, optimizer, the ``compile`` setting — is the same code. Both
variants read ``time.perf_counter`` once at the end of each step (the
benchmark's own clock, identical in both), so each trial yields per-step
seconds. Trials are interleaved in pairs after an untimed trial of each,
the order alternating. Each pair gives the ratio instrumented/bare of the
trials' median step times (robust to stalls from other processes); the
ratio of trial totals is reported as well.

Units: seconds per step (ms in the output) and a dimensionless ratio.
Goal: median over pairs of the median-step ratio ≤ 1.02 (instrumentation costs
at most 2 % of a step). ``--steps`` cuts an epoch to its first steps' images (and the
evaluation to one batch). The images are generated once, by the first trial, and every
trial trains on them. ``--smoke`` runs one pair of one-epoch trials of 2 steps, without the
untimed trials that come first otherwise, and judges no goal.

    .venv/bin/python benchmarks/tracker_overhead.py [--pairs 9] [--epochs 1] [--steps 0]
    .venv/bin/python benchmarks/tracker_overhead.py --smoke
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from machine_load import OtherCpuUse

from scalebench.tasks import get_task
from workers import engine
from workers.adapter import TrainingOptions
from workers.data.batches import ImageTensors
from workers.image_classification import ImageClassification
from workers.records import RecordWriter
from workers.tracker import Tracker

GOAL_RATIO = 1.02
SMOKE_PAIRS = 1
SMOKE_EPOCHS = 1
SMOKE_STEPS = 2  # steps an epoch: one step time a trial once the first is dropped
SPEC = get_task("task1a-resnet20-cifar10")


class TimedTracker(Tracker):
    """The real tracker, plus the benchmark's own clock reading after every step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_ends: list[float] = []

    def step(self, *args: Any) -> None:
        super().step(*args)
        self.step_ends.append(time.perf_counter())


class NullClock:
    def __init__(self) -> None:
        self.phases: dict[str, float] = {}

    def start(self) -> None:
        pass

    def lap(self, phase: str) -> None:
        pass

    def read(self) -> dict[str, float]:
        return self.phases


class BareTracker:
    """What the engine calls on a tracker, doing nothing but the benchmark's clock reading."""

    def __init__(self) -> None:
        self.clock = NullClock()
        self.step_ends: list[float] = []

    def start(self, **details: Any) -> None:
        dist.barrier()

    def now(self) -> float:
        return 0.0

    def hyperparameters(self, values: dict[str, Any]) -> None:
        pass

    def begin_epoch(self, epoch: int) -> None:
        pass

    def step(self, *args: Any) -> None:
        self.step_ends.append(time.perf_counter())

    def begin_evaluation(self, epoch: int) -> float:
        return 0.0

    def evaluation(self, *args: Any, **details: Any) -> bool:
        return False

    def event(self, name: str, **details: Any) -> None:
        pass

    def finish(self, status: str, **details: Any) -> None:
        pass


LOADED: list[ImageTensors] = []  # the light images, standardised: loaded by the first trial


class Loaded(ImageClassification):
    """The light Task 1a adapter on the images the first trial loaded (the engine reads them,
    never writes them): every trial trains on the same, generated once."""

    def load_data(self) -> ImageTensors:
        if not LOADED:
            LOADED.append(super().load_data())
        return LOADED[0]


def light_task(options: TrainingOptions, steps: int) -> ImageClassification:
    """The light Task 1a adapter; with ``steps`` > 0, on the first ``steps`` batches of its
    training images and one batch of its test images (an epoch of ``steps`` steps)."""
    if steps <= 0:
        return Loaded(SPEC, options, torch.device("cpu"))
    batch = SPEC.batch_per_worker

    class FirstBatches(Loaded):
        def load_data(self) -> ImageTensors:
            data = super().load_data()
            train, test = steps * batch, batch
            return ImageTensors(
                data.train_x[:train], data.train_y[:train], data.test_x[:test], data.test_y[:test]
            )

    return FirstBatches(SPEC, options, torch.device("cpu"))


def trial(
    instrumented: bool, epochs: int, compile_setting: str, directory: Path, steps: int = 0
) -> list[float]:
    """Seconds of each step but the first of each epoch, for ``epochs`` light epochs of
    ``steps`` steps each (0: the whole light epoch, 45 steps)."""
    options = TrainingOptions(
        light=True, data_dir=Path("."), max_epochs=epochs, compile=compile_setting
    )
    task = light_task(options, steps)
    if instrumented:
        writer = RecordWriter(directory, f"trial-{time.monotonic_ns()}", rank=0, world_size=1)
        tracker: Any = TimedTracker(
            writer, torch.device("cpu"), max_epochs=epochs, progress_every_s=math.inf
        )
    else:
        tracker = BareTracker()
    engine.train(task, tracker)
    if instrumented:
        tracker.close()
    per_epoch = task.steps_per_epoch
    seconds = [b - a for a, b in itertools.pairwise(tracker.step_ends)]
    # Drop the gap across each evaluation: it is not a training step.
    return [s for i, s in enumerate(seconds, start=1) if i % per_epoch != 0]


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    return (
        f"{statistics.median(values):.4f}x (min {ordered[0]:.4f}, max {ordered[-1]:.4f}, "
        f"{len(values)} pairs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=9, help="interleaved trial pairs")
    parser.add_argument("--epochs", type=int, default=1, help="light epochs per trial (45 steps)")
    parser.add_argument(
        "--steps", type=int, default=0, help="steps per epoch, from its start (0: all 45)"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--compile", default="auto", choices=("auto", "on", "off"))
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_PAIRS} pair of {SMOKE_EPOCHS}-epoch trials of {SMOKE_STEPS} steps: the "
        "code path in seconds, no goal judged",
    )
    args = parser.parse_args()
    if args.smoke:
        args.pairs, args.epochs, args.steps = SMOKE_PAIRS, SMOKE_EPOCHS, SMOKE_STEPS

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tracker-overhead-") as tmp:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{tmp}/rendezvous",
            rank=0,
            world_size=1,
            timeout=timedelta(seconds=60),
        )
        try:
            print(
                f"light Task 1a through the engine, compile {args.compile}, "
                f"{torch.get_num_threads()} torch threads; {args.pairs} pairs of "
                f"{args.epochs}-epoch trials"
                + (f" of {args.steps} steps" if args.steps > 0 else ""),
                flush=True,
            )
            if not args.smoke:  # the smoke's one pair runs the same trials
                # untimed: compiles, fills caches
                trial(True, 1, args.compile, Path(tmp), args.steps)
                trial(False, 1, args.compile, Path(tmp), args.steps)
            others = OtherCpuUse()
            results = []
            for pair in range(args.pairs):
                order = (False, True) if pair % 2 == 0 else (True, False)
                timed = {
                    kind: trial(kind, args.epochs, args.compile, Path(tmp), args.steps)
                    for kind in order
                }
                bare, instrumented = timed[False], timed[True]
                results.append((bare, instrumented))
                print(
                    f"pair {pair + 1}/{args.pairs}: median step bare "
                    f"{1e3 * statistics.median(bare):.2f} ms, instrumented "
                    f"{1e3 * statistics.median(instrumented):.2f} ms, ratio "
                    f"{statistics.median(instrumented) / statistics.median(bare):.4f}",
                    flush=True,
                )
            print(f"during the trials, {others.describe()}")
        finally:
            dist.destroy_process_group()

    median_ratios = [statistics.median(i) / statistics.median(b) for b, i in results]
    total_ratios = [sum(i) / sum(b) for b, i in results]
    print(
        f"ratio of trial totals (stalls included): {spread(total_ratios)}; "
        f"ran {time.perf_counter() - began:.0f} s"
    )
    if args.smoke:
        print(
            f"tracker overhead: instrumented/bare median-step ratio {spread(median_ratios)}; "
            "smoke run: no goal judged"
        )
        return
    verdict = "PASS" if statistics.median(median_ratios) <= GOAL_RATIO else "MISS"
    print(
        f"tracker overhead: instrumented/bare median-step ratio {spread(median_ratios)}; "
        f"goal <= {GOAL_RATIO:.2f}x: {verdict}"
    )


if __name__ == "__main__":
    main()
