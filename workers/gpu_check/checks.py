"""The GPU check's checks on watched training runs (steps 3 to 5), in the order they run. Each
returns :class:`Check` objects and never raises: a failure is a verdict with the advice that goes
with it.

A training run is a child process, the watched trainer (``workers.gpu_check.probe``), under its
own time limit (see :mod:`workers.gpu_check.context`); the machine's own figures are in
:mod:`workers.gpu_check.machine`, Task 0's in :mod:`workers.gpu_check.task0`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from workers.gpu_check.context import ChildRun, Context, run_child, tail
from workers.gpu_check.report import FAIL, PASS, SKIPPED, Check, failed, skipped

# A step's phases (CUDA events) must add up to within this share of its wall time.
PHASE_TOLERANCE = 0.05
# Host waits per training step the engine is built for (the clock's read).
SYNCS_PER_STEP = 1
# fp16 steps (Tasks 4a, 4b) may wait at most this often: the clock's read, and one the model needs.
FP16_SYNCS_PER_STEP = 2
# fp16 runs: at most this share of updates after the first FP16_SETTLE_STEPS may be skipped.
OVERFLOW_SHARE = 0.01
FP16_SETTLE_STEPS = 50
TASK1A = "task1a-resnet20-cifar10"
TASK4A = "task4a-gnmt-wmt16"
TASK4B = "task4b-transformer-wmt17"


def probe(
    ctx: Context, task: str, name: str, timeout_s: float, **options: str
) -> tuple[dict[str, Any] | None, ChildRun]:
    """A watched light run of ``task`` (see :mod:`workers.gpu_check.probe`)."""
    out = ctx.work_dir / f"{name}.json"
    argv = [ctx.python, "-m", "workers.gpu_check.probe", "--task", task]
    argv += ["--results", str(ctx.work_dir / name), "--out", str(out)]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", value]
    run = run_child(argv, min(timeout_s, ctx.seconds_left()))
    if not out.exists():
        return None, run
    return json.loads(out.read_text(encoding="utf-8")), run


# What torch says when a GPU is too small for a run (torch.OutOfMemoryError's message).
OUT_OF_MEMORY = "out of memory"


def probe_failure(name: str, title: str, result: dict[str, Any] | None, run: ChildRun) -> Check:
    """A watched run that did not finish: failed, or skipped when the GPU was too small."""
    said = (result or {}).get("status", "") + "\n" + run.output
    if OUT_OF_MEMORY in said.lower():
        line = next(x for x in said.splitlines() if OUT_OF_MEMORY in x.lower())
        return skipped(name, title, f"skipped: the GPU is too small for this run ({line[:160]})")
    if result is None:
        why = "timed out" if run.returncode is None else f"exit status {run.returncode}"
        return failed(name, title, f"{why} after {run.seconds:.0f} s", tail(run.output))
    return failed(name, title, result["status"], tail(run.output), probe=result)


def engine_checks(
    ctx: Context, eager: dict[str, Any], flops_per_sample: float | None
) -> list[Check]:
    """From the eager light Task 1a run: host waits per step, and CUDA-event phases against
    the wall."""
    steps = eager["step_syncs"][10:] or eager["step_syncs"]
    median = statistics.median(steps) if steps else float("nan")
    others = sum(1 for s in steps if s != SYNCS_PER_STEP)
    sync_check = Check(
        "syncs",
        "host waits per step (Task 1a)",
        PASS if median == SYNCS_PER_STEP else FAIL,
        f"median {median:g} per step over {len(steps)} steps ({others} steps differ)",
        details={"step_syncs": eager["step_syncs"]},
    )
    if sync_check.verdict == FAIL:
        sync_check.advice = (
            "a .item(), float(t), .tolist() or torch.cuda.synchronize() runs inside the step: "
            "rerun the probe with torch.cuda.set_sync_debug_mode('error') to find it"
        )
    wall = sum(eager["step_wall_s"][10:])
    phases = sum(eager["step_phases_s"][10:])
    gap = abs(wall - phases) / wall if wall else float("nan")
    phase_check = Check(
        "phases",
        "CUDA-event phases vs wall (Task 1a)",
        PASS if gap <= PHASE_TOLERANCE else FAIL,
        f"phases {phases:.3f} s, wall {wall:.3f} s: {gap:.1%} apart (limit {PHASE_TOLERANCE:.0%})",
        details={"phases_total_s": eager["phases_total_s"]},
    )
    if phase_check.verdict == FAIL:
        phase_check.advice = (
            "work outside the clock's laps: host time between steps (record writing) or a "
            "phase whose events are recorded on another stream"
        )
    return [sync_check, phase_check]


def throughput_check(
    eager: dict[str, Any] | None,
    compiled: dict[str, Any] | None,
    layouts: dict[str, float],
    flops_per_sample: float | None,
    peaks: dict[str, float],
) -> Check:
    """ResNet-20 samples/s, eager and compiled (from the runs), contiguous against
    channels-last (a direct measurement), and as a share of the matmul peaks."""
    details: dict[str, Any] = {"flops_per_sample": flops_per_sample, "layouts": layouts}
    parts = []
    for label, result in (("eager", eager), ("compiled", compiled)):
        rate = result and result.get("samples_per_s")
        if rate:
            details[f"{label}_samples_per_s"] = rate
            text = f"{label} {rate:,.0f}/s"
            if flops_per_sample:
                achieved = rate * flops_per_sample / 1e12
                shares = {k: achieved / v for k, v in peaks.items() if k in ("fp32", "bf16") and v}
                details[f"{label}_tflops"] = achieved
                details[f"{label}_share_of_peak"] = shares
                text += (
                    f" ({achieved:.1f} TFLOP/s, "
                    + ", ".join(f"{share:.1%} of {k}" for k, share in shares.items())
                    + ")"
                )
            parts.append(text)
    for layout, rate in layouts.items():
        parts.append(f"{layout} {rate:,.0f}/s")
    if flops_per_sample:
        parts.append(f"{flops_per_sample / 1e9:.3f} GFLOP per sample")
    verdict = PASS if eager and eager.get("samples_per_s") else FAIL
    return Check(
        "throughput",
        "ResNet-20 samples/s (Task 1a)",
        verdict,
        "; ".join(parts),
        "" if verdict == PASS else "the eager run did not finish: see its own check",
        details=details,
    )


def tta_check(name: str, title: str, result: dict[str, Any] | None, run: ChildRun) -> Check:
    """A light run trained to its goal: time to accuracy, with compilation apart."""
    if result is None or result["status"] != "goal_reached":
        check = probe_failure(name, title, result, run)
        if result is not None and result["status"] == "max_epochs":
            check.advice = f"the goal ({result['goal']}) was not reached: {result['final_metrics']}"
        return check
    figure = (
        f"{result['goal']} reached in {result['time_to_accuracy_s']:.1f} s "
        f"({result['epochs']} epochs, {result['time_to_accuracy_without_eval_s']:.1f} s "
        "without evaluation)"
    )
    if result.get("peak_memory_bytes"):
        figure += f"; at most {result['peak_memory_bytes'] / 2**20:,.0f} MiB of GPU memory"
    if result["compile"] != "off":
        figure += (
            f"; compilation {result['compile_s']:.1f} s before the start, "
            f"{result['recompilations']} recompilations after it"
        )
    return Check(name, title, PASS, figure, seconds=run.seconds, details={"probe": result})


def fp16_check(name: str, title: str, result: dict[str, Any] | None, run: ChildRun) -> Check:
    """A light translation run in fp16 with fp32 masters: the goal, and no overflow storm."""
    if result is None or result["status"] not in ("goal_reached", "max_epochs"):
        return probe_failure(name, title, result, run)
    scales, overflows = result["loss_scales"], result["overflows"]
    late = [i for i in overflows if i >= FP16_SETTLE_STEPS]
    later_steps = max(len(scales) - FP16_SETTLE_STEPS, 0)
    share = len(late) / later_steps if later_steps else 0.0
    trajectory = (
        f"loss scale {scales[0]:g} → {scales[-1]:g} (min {min(scales):g}), "
        f"{len(overflows)} of {len(scales)} updates skipped, {share:.1%} after the first "
        f"{FP16_SETTLE_STEPS}"
        if scales
        else "no loss scale: the run was not in fp16"
    )
    metrics = ", ".join(f"{k} {v:.2f}" for k, v in result["final_metrics"].items())
    figure = f"{trajectory}; {metrics}"
    problems = []
    if result.get("step_syncs"):
        waits = statistics.median(result["step_syncs"])
        figure += f"; host waits per step: median {waits:g}"
        if waits > FP16_SYNCS_PER_STEP:
            problems.append(
                f"{waits:g} host waits per step, more than {FP16_SYNCS_PER_STEP}: run "
                "benchmarks/engine_overhead.py --sync-sites to see where"
            )
    if not scales:
        problems.append("fp16 master weights were not used (is the device a GPU?)")
    if share >= OVERFLOW_SHARE:
        problems.append(
            f"{share:.1%} of updates skipped after the first {FP16_SETTLE_STEPS}: an overflow "
            "storm; look at the loss scale's window and the gradient clip"
        )
    if result["status"] != "goal_reached":
        problems.append(f"the goal ({result['goal']}) was not reached in {result['epochs']} epochs")
    else:
        figure += f"; goal reached in {result['time_to_accuracy_s']:.1f} s"
    return Check(
        name,
        title,
        FAIL if problems else PASS,
        figure,
        "; ".join(problems),
        seconds=run.seconds,
        details={"probe": result},
    )


def overhead_check(ctx: Context, timeout_s: float) -> Check:
    """The engine's steady samples/s against a plain loop of the same model, batch, precision
    and optimizer, per task (``benchmarks/engine_overhead.py``, 3 alternating rounds)."""
    name, title = "overhead", "engine vs plain loop"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_overhead.py"
    if not script.exists():
        return skipped(name, title, f"skipped: {script} is not here (a worker image?)")
    out = ctx.work_dir / "engine-overhead.json"
    argv = [ctx.python, str(script), "--device", "cuda", "--rounds", "3", "--sync-sites"]
    argv += ["--json", str(out)]
    limit_s = min(timeout_s, ctx.seconds_left())
    run = run_child(argv, limit_s, cwd=script.parents[1])
    if not out.exists():
        if run.returncode is None and limit_s < timeout_s:  # the check's budget, not its own
            return skipped(
                name,
                title,
                f"skipped: the time budget ran out after {run.seconds:.0f} s of its "
                f"{timeout_s:.0f} (raise --budget-s)",
            )
        why = "timed out" if run.returncode is None else f"exit status {run.returncode}"
        return failed(name, title, f"{why} after {run.seconds:.0f} s", tail(run.output))
    results = json.loads(out.read_text(encoding="utf-8"))
    figure = "; ".join(
        f"{r['task'].split('-')[0]} {r['ratio']:.2f} (goal {r['goal']:g}, "
        f"{r['engine_samples_per_s']:,.0f} vs {r['plain_samples_per_s']:,.0f}/s)"
        for r in results
    )
    missed = [r["task"] for r in results if r["verdict"] == "MISS"]
    return Check(
        name,
        title,
        FAIL if missed else PASS,
        figure,
        f"below the goal: {', '.join(missed)}; the benchmark's --sync-sites shows where the "
        "engine waits"
        if missed
        else "",
        seconds=run.seconds,
        details={"results": results},
    )


def resnet_flops_and_layouts(batch: int = 128, steps: int = 50) -> tuple[float, dict[str, float]]:
    """ResNet-20's training FLOPs per 32×32 sample, and training steps per second as samples/s
    with its activations contiguous and channels-last (eager, SGD, CUDA events after warm-up)."""
    import torch
    from torch.nn import functional as F

    from workers.gpu_check.measure import cuda_timer, training_flops_per_sample
    from workers.models.resnet import resnet20

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)
    x = torch.randn(batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    flops = training_flops_per_sample(
        resnet20(in_channels=3, classes=10).to(device), x, lambda out: F.cross_entropy(out, y)
    )
    rates = {}
    layouts = (("contiguous", torch.contiguous_format), ("channels-last", torch.channels_last))
    for label, layout in layouts:
        model = resnet20(in_channels=3, classes=10).to(device).to(memory_format=layout)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        inputs = x.contiguous(memory_format=layout)
        sgd_steps(model, optimizer, inputs, y, 10)  # warm-up: cuDNN's search, the allocator
        with cuda_timer(device) as seconds:
            sgd_steps(model, optimizer, inputs, y, steps)
        rates[label] = batch * steps / seconds[0]
    return flops, rates


def sgd_steps(model: Any, optimizer: Any, inputs: Any, targets: Any, steps: int) -> None:
    """``steps`` plain training steps (cross-entropy, backward, SGD) on one batch."""
    from torch.nn import functional as F

    for _ in range(steps):
        F.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


__all__ = ["FAIL", "PASS", "SKIPPED"]
