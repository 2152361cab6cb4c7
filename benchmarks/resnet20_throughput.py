"""ResNet-20 training throughput on this CPU, single process.

What it measures: samples per second of full training steps of the CIFAR-size
ResNet-20 (3 input channels, 10 classes, 32×32 inputs) at batch 128: forward,
cross-entropy, backward and an SGD step (momentum 0.9, Nesterov, weight decay
1e-4, the Task 1a settings). Inputs are random tensors, which cost the same
arithmetic as CIFAR-10 images. After untimed warm-up steps, several windows
of consecutive steps are timed; each window gives one samples/s figure.

Units: samples/s (and seconds per step).
Goal: a throughput figure with its spread, to estimate Task 1a runtimes on
this machine. There is no fixed throughput target, so by default it PASSes
when the slowest window is within 10 % of the median (the figure is stable
enough to plan with); ``--goal N`` also requires a median of at least N
samples/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from machine_load import OtherCpuUse
from torch.nn import functional as F

from workers.engine import sgd as build_optimizer
from workers.models.resnet import resnet20
from workers.tasks.registry import CIFAR10, TASK1A_RESNET20_CIFAR10

BATCH = TASK1A_RESNET20_CIFAR10.batch_per_worker
MAX_SPREAD = 0.10  # the slowest window may be at most this far below the median


def train_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    labels: torch.Tensor,
    steps: int,
) -> float:
    """Seconds for ``steps`` training steps on one fixed batch."""
    start = time.perf_counter()
    for _ in range(steps):
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps")
    parser.add_argument("--windows", type=int, default=9, help="timed windows")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed window")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--goal", type=float, default=0.0, help="minimum median samples/s")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    began = time.perf_counter()
    torch.manual_seed(args.seed)
    model = resnet20(in_channels=CIFAR10.channels, classes=CIFAR10.classes)
    model.train()
    opt = TASK1A_RESNET20_CIFAR10.optimizer
    optimizer = build_optimizer(opt, model.parameters())
    size = CIFAR10.image_size
    images = torch.randn(BATCH, CIFAR10.channels, size, size)
    labels = torch.randint(0, CIFAR10.classes, (BATCH,))
    print(
        f"ResNet-20 ({sum(p.numel() for p in model.parameters()):,} parameters), "
        f"batch {BATCH} of {CIFAR10.channels}×{size}×{size}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads on {os.cpu_count()} cores",
        flush=True,
    )

    train_steps(model, optimizer, images, labels, args.warmup)
    others = OtherCpuUse()
    rates = []
    for window in range(args.windows):
        seconds = train_steps(model, optimizer, images, labels, args.steps)
        rates.append(BATCH * args.steps / seconds)
        print(
            f"window {window + 1}/{args.windows}: {rates[-1]:.1f} samples/s, "
            f"{seconds / args.steps:.3f} s/step",
            flush=True,
        )

    median = statistics.median(rates)
    ordered = sorted(rates)
    spread = 1.0 - ordered[0] / median
    print(
        f"ran {time.perf_counter() - began:.0f} s; during the windows, {others.describe()}; "
        f"at this rate one CIFAR-10 epoch (50,000 images) takes ~{50000 / median:.0f} s of steps"
    )
    passed = spread <= MAX_SPREAD and median >= args.goal
    verdict = "PASS" if passed else "MISS"
    goal = f"median >= {args.goal:g} samples/s and " if args.goal > 0 else ""
    print(
        f"ResNet-20 training throughput: median {median:.1f} samples/s "
        f"({BATCH / median:.3f} s/step; min {ordered[0]:.1f}, max {ordered[-1]:.1f} samples/s "
        f"over {len(rates)} windows of {args.steps} steps; {torch.get_num_threads()} threads); "
        f"slowest window {100 * spread:.1f} % below median; "
        f"goal {goal}slowest window <= {100 * MAX_SPREAD:.0f} % below median: {verdict}"
    )


if __name__ == "__main__":
    main()
