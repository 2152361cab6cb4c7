"""Task 1a training throughput: the engine's step against a plain PyTorch loop, paired.

What it measures: samples per second of ResNet-20 training steps at batch 128
on CIFAR-sized inputs (3×32×32, 10 classes; random images, which cost the
same arithmetic as CIFAR-10's), two ways, alternating in rounds with the same
torch threads:

- **engine**: ``workers.engine.train`` running the Task 1a adapter exactly as a
  run does — a one-rank gloo group, the gradient all-reduce, the phase laps,
  a step record per step, augmentation, the learning-rate rule — with the
  ``compile`` setting a run would use (``auto`` by default). Its rate comes
  from the step records: samples of steps 2…N over the time between the
  first and the last record (so everything between steps counts);
- **plain**: the same math written the way a user would write it, with torch
  alone (no scalebench import): the model, random crop and flip, cross-entropy,
  SGD (momentum 0.9, Nesterov, weight decay 1e-4), the rate set every step;
  eager. Timed the same way, from the end of step 1 to the end of step N.

Compilation happens before the engine's clock starts (it is initialisation,
by MLPerf's rules); its seconds are printed apart.

Units: samples/s. Goal: the engine at least 1.3× the plain loop's median
samples/s, at each thread count given (default 1 and 2). Prints both rates,
their ratio per round, and the median ratio with its spread.

``--smoke`` runs one round of 2 steps each way at 1 thread, eager unless ``--compile`` is
given (compiling the step takes about a minute with a cold cache), and judges no goal.

    .venv/bin/python benchmarks/resnet20_throughput.py [--threads 1,2] [--rounds 5] [--steps 30]
    .venv/bin/python benchmarks/resnet20_throughput.py --smoke
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from machine_load import OtherCpuUse
from torch import nn
from torch.nn import functional as F

GOAL_RATIO = 1.3
BATCH = 128
# Smoke size: one thread count, one round, and the two steps a rate needs (the first step's
# end starts the clock); eager unless --compile is given.
SMOKE_THREADS = "1"
SMOKE_ROUNDS = 1
SMOKE_STEPS = 2
SMOKE_COMPILE = "off"


# -- the plain loop: torch only, as a user would write it -----------------------------------


class Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        layers, c_in = [], 16
        for c_out, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(3):
                layers.append(Block(c_in, c_out, stride if i == 0 else 1))
                c_in = c_out
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def random_crop_flip(images: torch.Tensor, padding: int = 4) -> torch.Tensor:
    n, _, h, w = images.shape
    padded = F.pad(images, (padding,) * 4)
    dy = torch.randint(0, 2 * padding + 1, (n,))
    dx = torch.randint(0, 2 * padding + 1, (n,))
    rows = (dy[:, None] + torch.arange(h))[:, None, :, None]
    cols = (dx[:, None] + torch.arange(w))[:, None, None, :]
    out = padded[
        torch.arange(n)[:, None, None, None], torch.arange(3)[None, :, None, None], rows, cols
    ]
    flip = torch.rand(n) < 0.5
    return torch.where(flip[:, None, None, None], out.flip(3), out)


def plain_round(images: torch.Tensor, labels: torch.Tensor, steps: int) -> float:
    """Samples/s of steps 2…``steps`` of a fresh model, eager."""
    torch.manual_seed(0)
    model = ResNet20()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=0.02, momentum=0.9, nesterov=True, weight_decay=1e-4
    )
    model.train()
    ends = []
    for step in range(steps):
        index = torch.randint(0, len(labels), (BATCH,))
        x, y = random_crop_flip(images[index]), labels[index]
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for group in optimizer.param_groups:
            group["lr"] = 0.02 * (1 + step / steps)
        optimizer.step()
        ends.append(time.perf_counter())
    return BATCH * (steps - 1) / (ends[-1] - ends[0])


# -- the engine, as a Task 1a run executes it -----------------------------------------------


def engine_round(
    images: torch.Tensor, labels: torch.Tensor, steps: int, compile_setting: str
) -> tuple[float, float, int, bool]:
    """(samples/s of steps 2…``steps``, compile seconds, recompilations, compiled)."""
    from scalebench.tasks import get_task
    from workers import engine
    from workers.adapter import TrainingOptions
    from workers.data.batches import ImageTensors
    from workers.image_classification import ImageClassification
    from workers.records import RecordWriter, read_rank_file
    from workers.tracker import Tracker

    class SyntheticCifar(ImageClassification):
        def load_data(self) -> ImageTensors:
            return ImageTensors(
                images[: steps * BATCH], labels[: steps * BATCH], images[:BATCH], labels[:BATCH]
            )

    spec = get_task("task1a-resnet20-cifar10")
    options = TrainingOptions(
        light=False, data_dir=Path("."), max_epochs=1, compile=compile_setting
    )
    with tempfile.TemporaryDirectory(prefix="throughput-") as tmp:
        writer = RecordWriter(Path(tmp), "throughput", rank=0, world_size=1)
        tracker = Tracker(writer, torch.device("cpu"), max_epochs=1, progress_every_s=math.inf)
        engine.train(SyntheticCifar(spec, options, torch.device("cpu")), tracker)
        tracker.close()
        rank = read_rank_file(writer.path)
    step_records = rank.of_kind("step")
    events = {e["event"]: e for e in rank.of_kind("event")}
    seconds = step_records[-1]["t"] - step_records[0]["t"]
    rate = sum(s["samples"] for s in step_records[1:]) / seconds
    start, finished = events["start"], events["finished"]
    return rate, start["compile_s"], finished["recompilations"], start["compiled"]


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    return (
        f"{statistics.median(values):.3f}x (min {ordered[0]:.3f}, max {ordered[-1]:.3f}, "
        f"{len(values)} rounds)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="torch thread counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per count")
    parser.add_argument("--steps", type=int, default=30, help="training steps per round")
    parser.add_argument(
        "--compile",
        default=None,
        choices=("auto", "on", "off"),
        help="the engine's compile setting (default: auto, what a run uses; off with --smoke)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_ROUNDS} round of {SMOKE_STEPS} steps at {SMOKE_THREADS} thread, "
        f"--compile {SMOKE_COMPILE} unless given: the code path in seconds, no goal judged",
    )
    args = parser.parse_args()
    if args.smoke:
        args.threads, args.rounds, args.steps = SMOKE_THREADS, SMOKE_ROUNDS, SMOKE_STEPS
        if args.compile is None:
            args.compile = SMOKE_COMPILE
    if args.compile is None:
        args.compile = "auto"

    began = time.perf_counter()
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(args.steps * BATCH, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (args.steps * BATCH,), generator=generator)
    store = tempfile.mkdtemp(prefix="throughput-store-")
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}/rendezvous",
        rank=0,
        world_size=1,
        timeout=timedelta(seconds=60),
    )
    verdicts = []
    try:
        for threads in [int(t) for t in args.threads.split(",")]:
            torch.set_num_threads(threads)
            print(
                f"-- {threads} torch thread(s), torch {torch.__version__}, batch {BATCH}, "
                f"{args.steps} steps a round",
                flush=True,
            )
            engine_round(images, labels, 3, args.compile)  # untimed: compiles, fills caches
            plain_round(images, labels, 3)
            others = OtherCpuUse()
            ratios, engine_rates, plain_rates = [], [], []
            for round_ in range(args.rounds):
                # Alternate which goes first, so a drift of the machine favours neither.
                if round_ % 2 == 0:
                    plain = plain_round(images, labels, args.steps)
                    rate, compile_s, recompiled, compiled = engine_round(
                        images, labels, args.steps, args.compile
                    )
                else:
                    rate, compile_s, recompiled, compiled = engine_round(
                        images, labels, args.steps, args.compile
                    )
                    plain = plain_round(images, labels, args.steps)
                engine_rates.append(rate)
                plain_rates.append(plain)
                ratios.append(rate / plain)
                print(
                    f"round {round_ + 1}/{args.rounds}: engine {rate:.1f} samples/s "
                    f"({'compiled' if compiled else 'eager'}, {compile_s:.1f} s compiling "
                    f"before the start, {recompiled} recompilations), plain {plain:.1f} "
                    f"samples/s, ratio {rate / plain:.3f}",
                    flush=True,
                )
            median = statistics.median(ratios)
            verdict = "smoke" if args.smoke else ("PASS" if median >= GOAL_RATIO else "MISS")
            verdicts.append(verdict)
            print(
                json.dumps(
                    {
                        "threads": threads,
                        "engine_samples_per_s": statistics.median(engine_rates),
                        "plain_samples_per_s": statistics.median(plain_rates),
                    }
                )
            )
            print(
                f"{threads} thread(s): engine/plain median samples/s ratio {spread(ratios)}; "
                f"goal >= {GOAL_RATIO}x: {verdict}; {others.describe()}",
                flush=True,
            )
    finally:
        dist.destroy_process_group()
        shutil.rmtree(store, ignore_errors=True)
    if args.smoke:
        print(f"ran {time.perf_counter() - began:.0f} s; smoke run: no goal judged")
        return
    print(
        f"ran {time.perf_counter() - began:.0f} s; "
        f"{'PASS' if all(v == 'PASS' for v in verdicts) else 'MISS'} overall"
    )


if __name__ == "__main__":
    main()
