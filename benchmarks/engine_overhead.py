"""The engine's cost on one task: its steady throughput against a plain loop, in one process.

    python benchmarks/engine_overhead.py --task task1a-resnet20-cifar10 --device cuda
    python benchmarks/engine_overhead.py --task all --device cpu --rounds 5
    python benchmarks/engine_overhead.py --task all --smoke          # seconds; no goal judged
    python benchmarks/engine_overhead.py --task task2a-logreg-epsilon,task3a-awdlstm-wikitext2

Two ways of training the task's light variant in a group of one rank, alternating in rounds
(which goes first alternates too, so a drift of the machine favours neither):

- **engine**: ``workers.engine.train`` with the task's own adapter, tracker and rank file,
  exactly as a run trains (the data phase, the phase laps, the gradient packing, the step
  record, the learning-rate rule, the clock's read that waits for the GPU once a step);
- **plain**: the same model, batch, precision and optimizer, written here as a user would
  write it, with the data already on the device: the loop, the loss, backward, the update.
  Task 1a's plain loop crops and flips on the device with the device's own generator; the
  text tasks' batches are built before timing. It never waits for the GPU inside the timed
  steps. On a GPU a third row, **plain + a wait a step**, is the plain loop reading its loss
  every step: the part of the gap that the engine's one wait a step explains.

Each round trains ``--steps`` steps of the first epoch from a fresh model; the first
``--warmup`` steps are not timed (cuDNN's algorithm search, the allocator's growth). A rate is
samples of the timed steps over the seconds from the end of the last untimed step to the end
of the last step, each end read after the device finished (so GPU work is counted, not only
its launch). Samples are the task's: images, rows, tokens.

Printed: each round's samples/s and steps/s of each, then the median ``ratio`` of engine to
plain samples/s with its spread, and one JSON line per task. Goals: a ratio of at least 0.95
on a CPU for every task; on a GPU at least 0.9 for Tasks 1a and 2a and 0.8 for the text tasks.
``--smoke`` trains one round of 3 steps (the first untimed) of each, without the untimed
round that comes first otherwise. The exit status is 1 when a goal is missed (never with
``--smoke``). ``--sync-sites`` (GPU) prints where the engine's steps wait for the GPU, by
source line. ``--host-profile`` prints where the host's time goes in one more round of each
(Python's profiler, by function's own time; the profiler slows every call, so read shares, not
rates). ``--compile on`` compiles the engine's step; on a GPU, a task whose spec asks for CUDA
graphs (Task 1a) then replays them; ``--cuda-graphs on`` or ``off`` asks for them, or not, for
every task, to measure where they pay. The first, untimed round's seconds include compiling.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from machine_load import OtherCpuUse
from torch.nn import functional as F

TASKS = (
    "task1a-resnet20-cifar10",
    "task2a-logreg-epsilon",
    "task3a-awdlstm-wikitext2",
    "task4a-gnmt-wmt16",
    "task4b-transformer-wmt17",
)
IMAGE_AND_TABULAR = TASKS[:2]
CPU_GOAL = 0.95
GPU_GOAL = {"task1a-resnet20-cifar10": 0.9, "task2a-logreg-epsilon": 0.9}
GPU_TEXT_GOAL = 0.8


def goal_for(task_id: str, device: torch.device) -> float:
    if device.type == "cpu":
        return CPU_GOAL
    return GPU_GOAL.get(task_id, GPU_TEXT_GOAL)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Rate:
    """Throughput of the timed steps of one round."""

    samples_per_s: float
    steps_per_s: float

    @classmethod
    def of(cls, ends: list[float], samples: list[float], warmup: int) -> Rate:
        seconds = ends[-1] - ends[warmup - 1]
        timed = len(ends) - warmup
        return cls(sum(samples[warmup:]) / seconds, timed / seconds)


# -- the engine, as a run trains ------------------------------------------------------------


class Enough(Exception):
    """The round's steps are done."""


def engine_round(
    adapter: Any,
    steps: int,
    warmup: int,
    device: torch.device,
    sites: Sites | None = None,
    profiler: cProfile.Profile | None = None,
) -> Rate:
    """``steps`` steps of ``workers.engine.train`` on ``adapter`` from a fresh model; with
    ``sites``, the waits from the end of the first step on are counted there; with
    ``profiler``, the timed steps run under it."""
    from workers import engine
    from workers.records import RecordWriter
    from workers.tracker import Tracker

    ends: list[float] = []
    samples: list[float] = []

    class Counted(Tracker):
        def step(self, *args: Any, **kwargs: Any) -> None:
            super().step(*args, **kwargs)
            ends.append(time.perf_counter())  # after the clock's read: the step is done
            samples.append(float(args[3] if len(args) > 3 else kwargs["samples"]))
            if sites is not None:
                sites.counting, sites.steps = True, len(ends) - 1
            if len(ends) >= steps:
                if profiler is not None:
                    profiler.disable()
                raise Enough
            if profiler is not None and len(ends) == warmup:
                profiler.enable()

    with tempfile.TemporaryDirectory(prefix="engine-overhead-") as tmp:
        writer = RecordWriter(Path(tmp), "engine-overhead", rank=0, world_size=1)
        tracker = Counted(writer, device, max_epochs=1, progress_every_s=math.inf)
        try:
            engine.train(adapter, tracker)
        except Enough:
            pass
        finally:
            tracker.close()
    return Rate.of(ends, samples, warmup)


# -- the plain loops: the same model, batch, precision and optimizer, written out ------------


def timed_steps(
    step: Callable[[int], float], steps: int, warmup: int, device: torch.device, wait: bool
) -> Rate:
    """Run ``step(i)`` (returns its samples) ``steps`` times; the device is waited for only
    at the two ends of the timed steps, or after every step with ``wait``."""
    ends: list[float] = []
    samples: list[float] = []
    for i in range(steps):
        samples.append(step(i))
        if wait or i == warmup - 1 or i == steps - 1:
            synchronize(device)
        ends.append(time.perf_counter())
    return Rate.of(ends, samples, warmup)


def sgd_like(adapter: Any, parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The task's own optimizer settings (``build_optimizer``), on ``parameters``."""
    return adapter.build_optimizer(parameters)


def plain_image(adapter: Any, device: torch.device) -> Callable[[int, int, bool], Rate]:
    """Task 1a: ResNet-20, channels-last; crop and flip on the device; SGD. The images are
    the adapter's, already standardised and on the device (read, never written)."""
    data = adapter.data
    padding, batch = adapter.images.crop_padding, adapter.batch

    def run(steps: int, warmup: int, wait: bool) -> Rate:
        torch.manual_seed(0)
        model = adapter.build_model().to(device)
        optimizer = sgd_like(adapter, list(model.parameters()))
        model.train()
        order = torch.randperm(len(data.train_y), device=device)
        h, w = data.train_x.shape[2:]

        def step(i: int) -> float:
            index = order[i * batch : (i + 1) * batch]
            n = len(index)  # the epoch's last batch is shorter
            dy = torch.randint(0, 2 * padding + 1, (n, 1, 1), device=device)
            dx = torch.randint(0, 2 * padding + 1, (n, 1, 1), device=device)
            padded = F.pad(data.train_x[index], (padding,) * 4).permute(0, 2, 3, 1)
            rows = dy + torch.arange(h, device=device)[None, :, None]
            cols = dx + torch.arange(w, device=device)[None, None, :]
            x = padded[torch.arange(n, device=device)[:, None, None], rows, cols]
            x = x.permute(0, 3, 1, 2)
            mirror = torch.rand(n, 1, 1, 1, device=device) < 0.5
            x = torch.where(mirror, x.flip(3), x).contiguous(memory_format=torch.channels_last)
            loss = F.cross_entropy(model(x), data.train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for group in optimizer.param_groups:
                group["lr"] = 0.1
            optimizer.step()
            return float(n)

        return timed_steps(step, steps, warmup, device, wait)

    return run


def plain_tabular(adapter: Any, device: torch.device) -> Callable[[int, int, bool], Rate]:
    """Task 2a: one linear layer, logistic loss plus L2, SGD; the rows on the device (the
    adapter's, read, never written)."""
    from workers.logistic_regression import regularised_loss

    x_all, y_all = adapter.train_x, adapter.train_y
    batch, l2 = adapter.batch, adapter.spec.l2

    def run(steps: int, warmup: int, wait: bool) -> Rate:
        torch.manual_seed(0)
        model = torch.nn.Linear(x_all.shape[1], 1).to(device)
        optimizer = sgd_like(adapter, list(model.parameters()))
        order = torch.randperm(len(y_all), device=device)

        def step(i: int) -> float:
            index = order[i * batch : (i + 1) * batch]
            logits = model(x_all[index]).squeeze(1)
            loss = regularised_loss(logits, y_all[index], model.weight, l2)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for group in optimizer.param_groups:
                group["lr"] = 0.1
            optimizer.step()
            return float(len(index))

        return timed_steps(step, steps, warmup, device, wait)

    return run


def plain_language_model(adapter: Any, device: torch.device) -> Callable[[int, int, bool], Rate]:
    """Task 3a: AWD-LSTM over the rank's columns, AR and TAR, clipping, SGD."""
    from workers.language_model import regularised_loss
    from workers.models.awd_lstm import detach

    data, spec, columns = adapter.train_data.to(device), adapter.spec, adapter.columns

    def run(steps: int, warmup: int, wait: bool) -> Rate:
        torch.manual_seed(0)
        model = adapter.build_model().to(device)
        optimizer = sgd_like(adapter, list(model.parameters()))
        plan = [s.passes[0] for s in adapter.steps(0)]  # (position, length), the task's rule
        hidden = model.initial_hidden(columns)
        model.train()

        def step(i: int) -> float:
            nonlocal hidden
            position, length = plan[i % len(plan)]
            words, targets = (
                data[position : position + length],
                data[position + 1 : position + 1 + length],
            )
            hidden = detach(hidden)
            logits, hidden, raw, dropped = model(words, hidden)
            loss = regularised_loss(logits, targets, raw, dropped, spec)[0]
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.clip_norm)
            for group in optimizer.param_groups:
                group["lr"] = spec.optimizer.lr * length / spec.bptt
            optimizer.step()
            return float(length * columns)

        return timed_steps(step, steps, warmup, device, wait)

    return run


def plain_translation(adapter: Any, device: torch.device) -> Callable[[int, int, bool], Rate]:
    """Tasks 4a and 4b: summed label-smoothed loss over the step's passes, divided by the
    global batch's units, clipped, Adam. On a GPU: fp16 weights, fp32 masters, a loss scale,
    an overflow skipped by the fused optimizer on the device."""
    plan = [[adapter.load(item) for item in step.passes] for step in adapter.steps(0)]
    opt, clip = adapter.spec.optimizer, adapter.spec.clip_norm
    half = device.type == "cuda"
    scale = float(adapter.spec.loss_scale.initial) if half else 1.0

    def run(steps: int, warmup: int, wait: bool) -> Rate:
        torch.manual_seed(0)
        model = adapter.build_model().to(device)
        weights = list(model.parameters())
        if half:
            model.half()
            masters = [p.detach().float().clone().requires_grad_(True) for p in weights]
        else:
            masters = weights
        optimizer = torch.optim.Adam(
            masters,
            lr=1e-4,
            betas=opt.betas,
            eps=opt.eps,
            weight_decay=opt.weight_decay,
            fused=half,
        )
        model.train()

        def step(i: int) -> float:
            passes = plan[i % len(plan)]
            units = sum(b.units for b in passes)
            for b in passes:
                (adapter.loss(model(*b.inputs), b) * scale).backward()
            if half:
                for w, m in zip(weights, masters, strict=True):
                    m.grad = w.grad.float() if w.grad is not None else torch.zeros_like(m)
                    w.grad = None
            grads = [m.grad for m in masters]
            torch._foreach_div_(grads, scale * units)
            norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
            if clip is not None:
                torch._foreach_mul_(grads, (clip / (norm + 1e-6)).clamp(max=1.0))
            if half:
                optimizer.found_inf = (~torch.isfinite(norm)).float()  # type: ignore[attr-defined]
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if half:
                with torch.no_grad():
                    torch._foreach_copy_(weights, masters)
            return float(sum(b.samples for b in passes))

        return timed_steps(step, steps, warmup, device, wait)

    return run


PLAIN = {
    "task1a-resnet20-cifar10": plain_image,
    "task2a-logreg-epsilon": plain_tabular,
    "task3a-awdlstm-wikitext2": plain_language_model,
    "task4a-gnmt-wmt16": plain_translation,
    "task4b-transformer-wmt17": plain_translation,
}


# -- where the engine waits ------------------------------------------------------------------


@dataclass
class Sites:
    """Waits for the GPU by source line, counted over ``steps`` whole steps."""

    counts: Counter[str]
    counting: bool = False
    steps: int = 0

    def per_step(self) -> dict[str, float]:
        return {k: v / max(self.steps, 1) for k, v in self.counts.most_common(8)}


@contextmanager
def sync_sites(device: torch.device) -> Iterator[Sites]:
    """Counts the implicit waits for the GPU (torch's sync debug mode) by the line of this
    repository's code that caused each, while ``counting``."""
    sites = Sites(Counter())
    if device.type != "cuda":
        yield sites
        return
    root = str(Path(__file__).resolve().parents[1])
    shown = warnings.showwarning

    def note(message: Any, category: Any, *rest: Any, **kwargs: Any) -> None:
        if "synchronizing CUDA operation" not in str(message):
            return shown(message, category, *rest, **kwargs)
        if not sites.counting:
            return None
        frames = [f for f in traceback.extract_stack() if f.filename.startswith(root)]
        frames = [f for f in frames if "benchmarks" not in f.filename]
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "torch"
        sites.counts[where] += 1
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = note
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield sites
        finally:
            torch.cuda.set_sync_debug_mode(0)
            warnings.showwarning = shown


# -- the comparison --------------------------------------------------------------------------


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{statistics.median(values):.3f} (min {ordered[0]:.3f}, max {ordered[-1]:.3f})"


def host_profile(name: str, profiler: cProfile.Profile, rows: int = 18) -> None:
    """What ``profiler`` saw: the functions with the most host time of their own."""
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(rows)
    print(f"-- host time of one {name} round, by function (own time):")
    print("\n".join(text.getvalue().splitlines()[4:]), flush=True)


def compare(task_id: str, device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """Alternating rounds of the engine and the plain loop on ``task_id``; their figures."""
    from scalebench.tasks import get_task
    from workers.adapter import TrainingOptions, adapter_for

    spec = get_task(task_id)
    if args.cuda_graphs != "spec":
        spec = replace(spec, cuda_graphs=args.cuda_graphs == "on")
    options = TrainingOptions(
        light=True, data_dir=args.data_dir, max_epochs=1, compile=args.compile
    )
    adapter = adapter_for(spec, options, device)
    adapter.build_model()  # an epoch's plan may need the model (Task 3a's hidden state)
    plain = PLAIN[task_id](adapter, device)
    steps_in_epoch = len(adapter.steps(0))
    steps = min(args.steps, steps_in_epoch)
    warmup = min(args.warmup, steps - 2)
    print(
        f"-- {task_id} on {device}: {steps} steps a round ({warmup} untimed), "
        f"{steps_in_epoch} in the light epoch, torch {torch.__version__}",
        flush=True,
    )
    if not args.smoke:  # the smoke's one round runs the same two loops
        began = time.perf_counter()
        engine_round(adapter, steps, warmup, device)  # untimed: caches, cuDNN's search
        print(
            f"untimed first engine round (compile {args.compile}): "
            f"{time.perf_counter() - began:.1f} s",
            flush=True,
        )
        plain(steps, warmup, False)
    others = OtherCpuUse()
    rows: dict[str, list[Rate]] = {"engine": [], "plain": [], "plain + a wait a step": []}
    for round_ in range(args.rounds):
        order = ["engine", "plain"] if round_ % 2 else ["plain", "engine"]
        for name in order:
            if name == "engine":
                rows[name].append(engine_round(adapter, steps, warmup, device))
            else:
                rows[name].append(plain(steps, warmup, False))
        if device.type == "cuda":
            rows["plain + a wait a step"].append(plain(steps, warmup, True))
        print(
            f"round {round_ + 1}/{args.rounds}: "
            + ", ".join(
                f"{name} {rates[-1].samples_per_s:,.0f} samples/s ({rates[-1].steps_per_s:.1f} "
                "steps/s)"
                for name, rates in rows.items()
                if rates
            ),
            flush=True,
        )
    ratios = [
        e.samples_per_s / p.samples_per_s
        for e, p in zip(rows["engine"], rows["plain"], strict=True)
    ]
    waits: dict[str, float] = {}
    if args.sync_sites and device.type == "cuda":
        with sync_sites(device) as sites:
            engine_round(adapter, steps, warmup, device, sites)
        waits = sites.per_step()
    if args.host_profile:  # the engine's timed steps; the plain loop's whole round
        profiler = cProfile.Profile()
        engine_round(adapter, steps, warmup, device, profiler=profiler)
        host_profile("engine", profiler)
        profiler = cProfile.Profile()
        profiler.runcall(plain, steps, warmup, False)
        host_profile("plain", profiler)
    goal = goal_for(task_id, device)
    verdict = "smoke" if args.smoke else ("PASS" if statistics.median(ratios) >= goal else "MISS")
    result = {
        "task": task_id,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "rounds": args.rounds,
        "steps": steps,
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "goal": goal,
        "verdict": verdict,
        **{
            f"{name.replace(' + a wait a step', '_waiting')}_samples_per_s": statistics.median(
                r.samples_per_s for r in rates
            )
            for name, rates in rows.items()
            if rates
        },
        "engine_steps_per_s": statistics.median(r.steps_per_s for r in rows["engine"]),
        "plain_steps_per_s": statistics.median(r.steps_per_s for r in rows["plain"]),
        "sync_sites_per_step": waits,
        "machine": others.describe(),
    }
    print(
        f"{task_id}: engine / plain samples/s ratio {spread(ratios)} over {args.rounds} "
        f"round(s); goal >= {goal}: {verdict}; {others.describe()}",
        flush=True,
    )
    if waits:
        print(
            "  implicit waits for the GPU in the engine's steps, per step (the clock's read is "
            "an event's, not counted here): "
            + ", ".join(f"{where} {count:.1f}" for where, count in waits.items())
        )
    print(json.dumps(result), flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--task", default="all", help="task ids (comma-separated), or all (Tasks 1a to 4b)"
    )
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument(
        "--steps", type=int, default=200, help="steps a round, at most a light epoch (200)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps a round")
    parser.add_argument("--compile", default="auto", choices=("auto", "on", "off"))
    parser.add_argument("--data-dir", type=Path, default=Path("."))
    parser.add_argument("--threads", type=int, default=None, help="torch threads on a CPU")
    parser.add_argument("--sync-sites", action="store_true", help="where the engine waits")
    parser.add_argument(
        "--host-profile", action="store_true", help="where the host's time goes, by function"
    )
    parser.add_argument(
        "--cuda-graphs",
        default="spec",
        choices=("spec", "on", "off"),
        help="compiled on a GPU: replay CUDA graphs where the task's spec asks (default), for "
        "every task, or for none (to measure where they pay)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="1 round of 3 steps (1 untimed), no untimed round before it: the code path, no goal",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.steps, args.warmup = 1, 3, 1
    tasks = list(TASKS) if args.task == "all" else args.task.split(",")
    unknown = [t for t in tasks if t not in PLAIN]
    if unknown:
        parser.error(f"--task: {unknown[0]!r} is not one of all, {', '.join(TASKS)}")
    wanted = args.device
    if wanted == "auto":
        wanted = "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    device = torch.device("cuda", 0) if wanted == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if args.threads:
        torch.set_num_threads(args.threads)
    began = time.perf_counter()
    store = tempfile.mkdtemp(prefix="engine-overhead-store-")
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=f"file://{store}/rendezvous",
        rank=0,
        world_size=1,
        timeout=timedelta(seconds=120),
    )
    try:
        results = [compare(task, device, args) for task in tasks]
    finally:
        dist.destroy_process_group()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"{'task':<26} {'engine/s':>11} {'plain/s':>11} {'ratio':>7} {'goal':>5}  verdict")
    for r in results:
        print(
            f"{r['task']:<26} {r['engine_samples_per_s']:>11,.0f} "
            f"{r['plain_samples_per_s']:>11,.0f} {r['ratio']:>7.3f} {r['goal']:>5}  {r['verdict']}"
        )
    print(f"ran {time.perf_counter() - began:.0f} s")
    return int(any(r["verdict"] == "MISS" for r in results))


if __name__ == "__main__":
    sys.exit(main())
