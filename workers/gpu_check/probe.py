"""One training run of one rank, watched: ``python -m workers.gpu_check.probe --task ... --out F``.

The run is the engine's own (:func:`workers.engine.train`, the task's adapter, the tracker and
its rank file), in a group of one rank. The probe adds instruments from the outside only:

- a :class:`~workers.gpu_check.measure.WatchedClock` in place of the tracker's clock, which
  notes each step's wall time beside its phase sum and the host waits counted in the step;
- a :class:`~workers.gpu_check.measure.SyncCounter` around the whole run;
- on fp16 runs, a note of the dynamic loss scale at every update.

It writes what it saw as one JSON object to ``--out`` (:class:`ProbeResult`), read by the
GPU check. Runs on a CPU too (the tests run it there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from workers.gpu_check.measure import WatchedClock

# Steps left out of throughput and phase figures: the first ones carry cuDNN's algorithm
# search, the allocator's growth and lazy initialisation.
WARMUP_STEPS = 10


@dataclass
class ProbeResult:
    """What one watched run measured. Seconds unless named otherwise."""

    task: str
    device: str
    precision: str
    compile: str
    status: str  # goal_reached, max_epochs, diverged, failed: <reason>
    steps: int = 0
    epochs: int = 0
    time_to_accuracy_s: float | None = None
    time_to_accuracy_without_eval_s: float | None = None
    compile_s: float = 0.0  # compilation and warm-up before the start (not in the TTA)
    goal: str = ""
    final_metrics: dict[str, float] = field(default_factory=dict)
    samples_per_s: float | None = None  # after the warm-up steps, from the steps' wall time
    step_wall_s: list[float] = field(default_factory=list)
    step_phases_s: list[float] = field(default_factory=list)
    step_syncs: list[int] = field(default_factory=list)
    phases_total_s: dict[str, float] = field(default_factory=dict)  # after the warm-up steps
    loss_scales: list[float] = field(default_factory=list)  # fp16: the scale at each update
    overflows: list[int] = field(default_factory=list)  # fp16: the updates skipped (indices)
    recompilations: int | None = None
    peak_memory_bytes: int | None = None  # on a GPU: the most the run held at once
    wall_s: float = 0.0  # the whole probe, model building and evaluation included

    @property
    def median_syncs(self) -> float | None:
        return statistics.median(self.step_syncs) if self.step_syncs else None


def run_probe(
    task_id: str,
    results: Path,
    *,
    precision: str = "fp32",
    compile_mode: str = "off",
    max_epochs: int | None = None,
    seed: int = 0,
    backend: str | None = None,
) -> ProbeResult:
    """Train ``task_id`` (light) in a group of one rank on the GPU (or the CPU without one),
    watched; the rank's records go to ``results``."""
    import torch
    import torch.distributed as dist

    from scalebench.tasks import get_task
    from workers import engine
    from workers.adapter import TrainingOptions, adapter_for
    from workers.gpu_check.measure import SyncCounter, WatchedClock
    from workers.mixed_precision import DynamicLossScale
    from workers.records import RecordWriter, rank_file_name, read_rank_file
    from workers.tracker import Tracker

    began = time.perf_counter()
    spec = get_task(task_id)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    result = ProbeResult(task_id, str(device), precision, compile_mode, status="failed")

    noted: list[tuple[torch.Tensor, torch.Tensor]] = []
    update = note_loss_scales(noted)
    writer = RecordWriter(results, results.name, 0, 1)
    tracker = Tracker(
        writer, device, goal=spec.goal, light=True, max_epochs=max_epochs or spec.epochs(True)
    )
    syncs = SyncCounter("cuda" if device.type == "cuda" else "cpu")
    clock = WatchedClock(device, syncs)
    tracker.clock = clock
    options = TrainingOptions(
        light=True,
        data_dir=Path("."),
        seed=seed,
        max_epochs=max_epochs,
        precision=precision,
        compile=compile_mode,
    )
    try:
        adapter = adapter_for(spec, options, device)
        with syncs:
            result.status = engine.train(adapter, tracker)
    except engine.Diverged as exc:
        result.status = f"diverged: {exc}"
    except Exception as exc:  # the check reports any failure as this run's verdict
        result.status = f"failed: {type(exc).__name__}: {exc}"
    finally:
        DynamicLossScale.update_on_device = update  # type: ignore[method-assign]
        tracker.close()
        dist.destroy_process_group()

    records = read_rank_file(results / rank_file_name(0))
    fill_from_records(result, records.of_kind("event"), records.of_kind("step"))
    evaluations = records.of_kind("eval")
    if evaluations:
        result.final_metrics = dict(evaluations[-1]["metrics"])
    result.goal = spec.goal.describe(True)
    fill_from_watch(result, clock, records.of_kind("step"), noted)
    if device.type == "cuda":
        result.peak_memory_bytes = torch.cuda.max_memory_allocated(device)
    result.wall_s = time.perf_counter() - began
    return result


def note_loss_scales(noted: list[tuple[torch.Tensor, torch.Tensor]]) -> Callable[..., None]:
    """Make every dynamic loss scale's update note its scale and overflow flag in ``noted``
    first, as device tensors (read at the end: noting them must not add a wait to the
    watched steps); returns the update it wraps, to be put back after the run."""
    from workers.mixed_precision import DynamicLossScale

    update = DynamicLossScale.update_on_device

    def noted_update(self: DynamicLossScale, found_inf: torch.Tensor) -> None:
        noted.append((self.scale_tensor.detach().clone(), found_inf.detach().clone()))
        update(self, found_inf)

    DynamicLossScale.update_on_device = noted_update  # type: ignore[method-assign]
    return update


def fill_from_watch(
    result: ProbeResult,
    clock: WatchedClock,
    steps: list[Any],
    noted: list[tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """What the instruments saw: each step's wall time, phase sum (seconds) and host waits
    from the watched clock, samples/s over the steps after the warm-up (with the step
    records' sample counts), and on fp16 runs each update's loss scale and the updates an
    overflow skipped (``noted``: the scale and the overflow flag, as device tensors)."""
    result.step_wall_s = [s.wall_s for s in clock.steps]
    result.step_phases_s = [s.phases_s for s in clock.steps]
    result.step_syncs = [s.syncs for s in clock.steps]
    timed = clock.steps[WARMUP_STEPS:]
    samples = [int(s["samples"]) for s in steps][WARMUP_STEPS:]
    if timed and len(samples) == len(timed):
        result.samples_per_s = sum(samples) / sum(s.wall_s for s in timed)
    result.loss_scales = [float(scale) for scale, _ in noted]
    result.overflows = [i for i, (_, found_inf) in enumerate(noted) if float(found_inf)]


def fill_from_records(result: ProbeResult, events: list[dict[str, Any]], steps: list[Any]) -> None:
    """The run's time to accuracy, compile time, recompilations and phase totals, from its
    rank file's events and step records (the figures a stored run would show)."""
    for event in events:
        name = event.get("event")
        if name == "start":
            result.compile_s = float(event.get("compile_s") or 0.0)
        elif name == "goal_reached":
            result.time_to_accuracy_s = event["time_to_accuracy_s"]
            result.time_to_accuracy_without_eval_s = event["time_to_accuracy_without_eval_s"]
        elif name == "finished":
            result.epochs = int(event.get("epochs") or 0)
            result.recompilations = event.get("recompilations")
    result.steps = len(steps)
    totals: dict[str, float] = {}
    for step in steps[WARMUP_STEPS:]:
        for phase, seconds in step["phases"].items():
            totals[phase] = totals.get(phase, 0.0) + float(seconds)
    result.phases_total_s = totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.gpu_check.probe", description=__doc__)
    parser.add_argument("--task", required=True)
    parser.add_argument("--results", type=Path, required=True, help="the run's rank-file folder")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON result goes")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--compile", default="off", choices=("off", "on", "auto"))
    parser.add_argument("--max-epochs", type=int, default=None)
    args = parser.parse_args(argv)
    result = run_probe(
        args.task,
        args.results,
        precision=args.precision,
        compile_mode=args.compile,
        max_epochs=args.max_epochs,
    )
    args.out.write_text(json.dumps(asdict(result)), encoding="utf-8")
    return 0 if not result.status.startswith(("failed", "diverged")) else 1


if __name__ == "__main__":
    sys.exit(main())
