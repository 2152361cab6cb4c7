"""The GPU check's checks, in the order they run. Each returns :class:`Check` objects and never
raises: a failure is a verdict with the advice that goes with it.

Runs that need a process group or a clean process run as child processes (the real rank
entry point, ``workers.run``, for Task 0; the watched trainer, ``workers.gpu_check.probe``,
for training), each under its own time limit, one at a time, so no two share the GPU.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
TASK0 = "task0-allreduce"
TASK1A = "task1a-resnet20-cifar10"
TASK4A = "task4a-gnmt-wmt16"
TASK4B = "task4b-transformer-wmt17"


@dataclass
class Context:
    """What every check needs: where to write, the Python to run, the time left."""

    work_dir: Path
    python: str
    deadline: float  # time.monotonic() by which the whole check must end
    peaks_tflops: dict[str, float]  # measured matmul rates, by dtype
    log: Callable[[str], None] = print

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()


@dataclass
class ChildRun:
    returncode: int | None  # None: killed at its time limit
    output: str
    seconds: float


def run_child(
    argv: list[str], timeout_s: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> ChildRun:
    """Run a child process to its end or ``timeout_s``; its output (stdout and stderr)."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=max(timeout_s, 1.0),
            env={**os.environ, **(env or {})},
            cwd=cwd,
            check=False,
        )
        return ChildRun(done.returncode, done.stdout + done.stderr, time.monotonic() - started)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        text = out.decode(errors="replace") if isinstance(out, bytes) else str(out)
        return ChildRun(None, text, time.monotonic() - started)


def tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


# -- 1. environment ---------------------------------------------------------------------
def machine_facts() -> dict[str, Any]:
    """GPU model and memory, driver, CUDA and NCCL versions, torch, and the host's CPU."""
    import platform

    import torch

    from scalebench.host import cpu_model

    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": f"{torch.version.cuda} (the version torch was built for)",
        "cpu": f"{cpu_model()}, {os.cpu_count()} cores",
        "host": platform.node(),
    }
    if not torch.cuda.is_available():
        return facts
    props = torch.cuda.get_device_properties(0)
    facts["gpu"] = f"{props.name} ×{torch.cuda.device_count()}"
    facts["gpu memory"] = f"{props.total_memory / 2**30:.1f} GiB"
    facts["multiprocessors"] = props.multi_processor_count
    facts["compute capability"] = f"{props.major}.{props.minor}"
    facts["driver"] = driver_version()
    try:
        facts["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
    except (AttributeError, RuntimeError):
        facts["nccl"] = None
    return facts


def driver_version() -> str:
    """The NVIDIA driver's version, from ``nvidia-smi`` (``unknown`` without it)."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if done.returncode != 0 or not done.stdout.strip():
        return "unknown"
    return done.stdout.strip().splitlines()[0]


def peak_rates(n: int = 8192) -> tuple[Check, dict[str, float]]:
    """Matmul rates on the spot: fp32 (TF32 off), TF32, bf16 and fp16, TFLOP/s."""
    import torch

    device = torch.device("cuda", 0)
    started = time.monotonic()
    rates: dict[str, float] = {}
    details: dict[str, Any] = {}
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dtype, tf32 in (
            ("fp32", torch.float32, False),
            ("tf32", torch.float32, True),
            ("bf16", torch.bfloat16, False),
            ("fp16", torch.float16, False),
        ):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            rate = matmul_rate_that_fits(dtype, device, n)
            rates[name] = rate.tflops
            details[name] = {
                "tflops": rate.tflops,
                "spread_tflops": rate.spread_tflops,
                "n": rate.n,
            }
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
        torch.cuda.empty_cache()
    figure = ", ".join(f"{name} {tflops:.1f}" for name, tflops in rates.items()) + " TFLOP/s"
    check = Check(
        "peak",
        f"matmul peak ({n}³)",
        PASS,
        figure,
        seconds=time.monotonic() - started,
        details=details,
    )
    return check, rates


def matmul_rate_that_fits(dtype: Any, device: Any, n: int) -> Any:
    """:func:`~workers.gpu_check.measure.matmul_rate` at ``n``, or at half the size again and
    again (down to 1024) while the GPU is too small for three ``n``×``n`` matrices."""
    import torch

    from workers.gpu_check.measure import matmul_rate

    while True:
        try:
            return matmul_rate(dtype, device, n=n)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            if n <= 1024:
                raise
            n //= 2


# -- 2. Task 0 on CUDA tensors ----------------------------------------------------------
def allreduce_group(
    ctx: Context, backend: str, world_size: int, timeout_s: float, name: str, device: str = "cuda"
) -> tuple[ChildRun, Path]:
    """A light Task 0 group of ``world_size`` ranks on ``device`` tensors, via ``workers.run``."""
    from workers.distributed import free_port

    run_dir = ctx.work_dir / name
    port = str(free_port())
    children = []
    started = time.monotonic()
    for rank in range(world_size):
        env = {
            "NCCL_DEBUG": "WARN",  # nccl's own reason, should it refuse the group
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        argv = [ctx.python, "-m", "workers.run", "--task", TASK0, "--results", str(run_dir)]
        argv += ["--light", "--backend", backend, "--device", device, "--timeout", "60"]
        children.append(
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    outputs, codes = [], []
    for child in children:
        try:
            out, _ = child.communicate(timeout=max(1.0, timeout_s - (time.monotonic() - started)))
            codes.append(child.returncode)
        except subprocess.TimeoutExpired:
            child.kill()
            out, _ = child.communicate()
            codes.append(None)
        outputs.append(out.decode(errors="replace"))
    code = None if None in codes else max(codes, key=abs)
    return ChildRun(code, "\n".join(outputs), time.monotonic() - started), run_dir


def allreduce_curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Rank 0's (bytes, median seconds) per dtype, ascending in bytes."""
    from workers.records import rank_file_name, read_rank_file

    curves: dict[str, list[tuple[int, float]]] = {}
    path = run_dir / rank_file_name(0)
    if not path.exists():
        return curves
    for record in read_rank_file(path).of_kind("allreduce"):
        curves.setdefault(record["dtype"], []).append(
            (int(record["bytes"]), statistics.median(record["seconds"]))
        )
    return {dtype: sorted(points) for dtype, points in curves.items()}


def bus_bandwidth_gb_s(size_bytes: int, seconds: float, world_size: int) -> float:
    """NCCL's bus bandwidth of an all-reduce: algorithm bandwidth × 2(k−1)/k, in GB/s (10⁹ B/s).
    A group of one moves nothing between GPUs: its algorithm bandwidth is given instead."""
    algorithm = size_bytes / seconds / 1e9
    return algorithm if world_size == 1 else algorithm * 2 * (world_size - 1) / world_size


def task0_check(ctx: Context, backend: str, world_size: int, shared_gpu: bool) -> Check:
    """Task 0 (light sizes, fp32 and fp16) on CUDA tensors over ``backend``."""
    import torch

    gpus = torch.cuda.device_count()
    name = f"task0-{backend}-{world_size}"
    title = f"Task 0, {backend}, {world_size} rank{'s' if world_size > 1 else ''}"
    if shared_gpu:
        title += f" on {gpus} GPU"
    if backend == "nccl" and not torch.distributed.is_nccl_available():
        return skipped(name, title, "skipped: this torch has no nccl backend")
    limit_s = 60.0 if shared_gpu else 150.0
    run, run_dir = allreduce_group(ctx, backend, world_size, min(limit_s, ctx.seconds_left()), name)
    if run.returncode != 0:
        refused = ("Duplicate GPU", "ncclInvalidUsage")
        if shared_gpu and backend == "nccl" and any(word in run.output for word in refused):
            return skipped(
                name,
                title,
                f"skipped: nccl refuses two ranks on one GPU ({gpus} GPU here), as documented",
            )
        why = "timed out" if run.returncode is None else f"exit status {run.returncode}"
        return failed(
            name,
            title,
            f"{why} after {run.seconds:.0f} s",
            f"the ranks' output ends: {tail(run.output)}; try NCCL_DEBUG=INFO",
        )
    curves = allreduce_curves(run_dir)
    details: dict[str, Any] = {"curves": curves, "world_size": world_size, "backend": backend}
    parts = []
    for dtype, points in curves.items():
        small_bytes, small_s = points[0]
        large_bytes, large_s = points[-1]
        bandwidth = bus_bandwidth_gb_s(large_bytes, large_s, world_size)
        kind = "algorithm" if world_size == 1 else "bus"
        parts.append(
            f"{dtype}: {small_s * 1e6:.0f} µs at {small_bytes} B, "
            f"{kind} bandwidth {bandwidth:.1f} GB/s at {large_bytes / 1e6:.1f} MB"
        )
        details[dtype] = {"latency_s": small_s, "bandwidth_gb_s": bandwidth}
    if not curves:
        return failed(name, title, "no all-reduce records", "read the ranks' output", **details)
    if world_size == 1:
        details["note"] = "one GPU: nothing crosses a link, so no link expectation applies"
    check = Check(name, title, PASS, "; ".join(parts), seconds=run.seconds, details=details)
    if len(curves) < 2:
        check.verdict = FAIL
        check.advice = f"only {', '.join(curves)} was measured: fp16 or fp32 was refused"
    return check


# -- 3, 4 and 5: watched training runs ---------------------------------------------------
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
    run = run_child(argv, min(timeout_s, ctx.seconds_left()), cwd=script.parents[1])
    if not out.exists():
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


def timed(check: Callable[[], Check]) -> Check:
    """Run one check, timing it; an unexpected error is the check's failure, not the run's."""
    started = time.monotonic()
    try:
        result = check()
    except Exception as exc:  # a broken check must not hide the others
        result = Check(
            getattr(check, "__name__", "check"),
            getattr(check, "__name__", "check"),
            FAIL,
            f"{type(exc).__name__}: {exc}",
            "an error inside the check itself: rerun with --debug for its traceback",
        )
    if not result.seconds:
        result.seconds = time.monotonic() - started
    return result


def python_executable() -> str:
    return sys.executable


__all__ = ["FAIL", "PASS", "SKIPPED"]
