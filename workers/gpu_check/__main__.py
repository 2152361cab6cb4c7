"""``python -m workers.gpu_check`` (``./scripts/gpu-check.sh``): verify every GPU path.

Runs, on light data only and within a time budget (default 570 s):

1. the machine: GPU, memory, driver, CUDA, NCCL, and matmul peaks measured on the spot;
2. Task 0 on CUDA tensors over nccl at every GPU count (one GPU: one rank, then two ranks
   sharing it, which nccl may refuse), and over gloo with two ranks;
3. light Task 1a, watched: host waits per step, CUDA-event phases against the wall, and
   ResNet-20 samples/s eager, compiled, contiguous and channels-last, as shares of the peaks;
4. light Task 1a to its goal, eager and compiled (compilation reported apart);
5. light Tasks 4b and 4a in fp16 with fp32 masters and a dynamic loss scale; Task 1a in bf16.

Prints one report (PASS, FAIL or SKIPPED per check, with its figure and what to look at) and
writes it as JSON (``--out``, default ``var/gpu-check/gpu-check-<UTC time>.json``). Exit
status: 0 all passed or skipped, 1 a check failed, 2 no CUDA GPU here.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from workers.gpu_check import checks
from workers.gpu_check.context import ChildRun, Context, python_executable
from workers.gpu_check.machine import machine_facts, peak_rates
from workers.gpu_check.report import Check, Report, skipped
from workers.gpu_check.task0 import task0_check

EXIT_NO_GPU = 2
# The plan's steps, in the order they run, by the names --only takes.
STEPS = (
    "peaks",
    "task1a-eager",
    "task0",
    "task1a-compiled",
    "throughput",
    "task4b-fp16",
    "task4a-fp16",
    "task1a-bf16",
    "overhead",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu-check.sh",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=None, help="the JSON report's path")
    parser.add_argument(
        "--budget-s", type=float, default=570.0, help="seconds for everything (default 570)"
    )
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="where the runs go (default: beside --out)"
    )
    parser.add_argument("--matmul-n", type=int, default=8192, help="size of the peak GEMM")
    parser.add_argument(
        "--only",
        default="",
        metavar="STEPS",
        help="run only these steps, comma-separated, of: " + ", ".join(STEPS),
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of broken checks")
    args = parser.parse_args(argv)
    args.only = [step.strip() for step in args.only.split(",") if step.strip()]
    unknown = [step for step in args.only if step not in STEPS]
    if unknown:
        parser.error(f"--only: no step {', '.join(unknown)}; the steps: {', '.join(STEPS)}")
    return args


def check_plan(
    ctx: Context, matmul_n: int, only: Sequence[str] = ()
) -> list[tuple[str, Callable[[], list[Check]]]]:
    """The checks in the order they run (those of :data:`STEPS` named in ``only``, or all),
    each a title and what runs it; the matmul peaks go into ``ctx`` and the Task 1a runs'
    results to the throughput check as they are found (without them, it measures the
    layouts only)."""
    import torch

    probes: dict[str, tuple[dict | None, ChildRun]] = {}

    def peak() -> list[Check]:
        check, ctx.peaks_tflops = peak_rates(matmul_n)
        return [check]

    def task0() -> list[Check]:
        gpus = torch.cuda.device_count()
        counts = sorted({1, gpus, *(2**i for i in range(1, 8) if 2**i <= gpus)})
        found = [task0_check(ctx, "nccl", k, shared_gpu=False) for k in counts]
        if gpus == 1:
            found.append(task0_check(ctx, "nccl", 2, shared_gpu=True))
            found.append(task0_check(ctx, "nccl", 2, shared_gpu=True, nodes=True))
        found.append(task0_check(ctx, "gloo", 2, shared_gpu=gpus < 2))
        return found

    def task1a(
        name: str, title: str, timeout_s: float, **options: str
    ) -> Callable[[], list[Check]]:
        def run() -> list[Check]:
            result, child = checks.probe(ctx, checks.TASK1A, name, timeout_s, **options)
            probes[name] = (result, child)
            found = [checks.tta_check(name, title, result, child)]
            if name == "task1a-eager" and result is not None and result["step_syncs"]:
                found += checks.engine_checks(ctx, result, None)
            return found

        return run

    def throughput() -> list[Check]:
        flops, layouts = checks.resnet_flops_and_layouts()
        eager = probes.get("task1a-eager", (None, None))[0]
        compiled = probes.get("task1a-compiled", (None, None))[0]
        return [checks.throughput_check(eager, compiled, layouts, flops, ctx.peaks_tflops)]

    def fp16(task: str, name: str, title: str) -> Callable[[], list[Check]]:
        def run() -> list[Check]:
            result, child = checks.probe(ctx, task, name, 170.0)
            return [checks.fp16_check(name, title, result, child)]

        return run

    def overhead() -> list[Check]:
        return [checks.overhead_check(ctx, 300.0)]

    steps = {
        "peaks": ("matmul peaks", peak),
        "task1a-eager": (
            "light Task 1a, eager, to its goal",
            task1a("task1a-eager", "Task 1a to goal, eager", 150),
        ),
        "task0": ("Task 0 on CUDA tensors", task0),
        "task1a-compiled": (
            "light Task 1a, compiled, to its goal",
            task1a("task1a-compiled", "Task 1a to goal, compiled", 200, compile="on"),
        ),
        "throughput": ("ResNet-20 throughput and layouts", throughput),
        "task4b-fp16": (
            "light Task 4b in fp16",
            fp16(checks.TASK4B, "task4b-fp16", "Task 4b fp16 + loss scale"),
        ),
        "task4a-fp16": (
            "light Task 4a in fp16",
            fp16(checks.TASK4A, "task4a-fp16", "Task 4a fp16 + loss scale"),
        ),
        "task1a-bf16": (
            "light Task 1a in bf16",
            task1a("task1a-bf16", "Task 1a to goal, bf16 autocast", 150, precision="bf16"),
        ),
        "overhead": ("the engine against a plain loop, Tasks 1a to 4b", overhead),
    }
    assert tuple(steps) == STEPS
    return [steps[key] for key in STEPS if not only or key in only]


def run_step(title: str, step: Callable[[], list[Check]], debug: bool) -> list[Check]:
    """Run one step of the plan and print its checks; an error inside it is its one failed
    check, not the run's end (its traceback printed with ``debug``)."""
    began = time.monotonic()
    try:
        found = step()
    except Exception as exc:  # a broken check must not hide the others
        if debug:
            traceback.print_exc()
        found = [
            Check(
                title,
                title,
                checks.FAIL,
                f"{type(exc).__name__}: {exc}",
                "an error in the check itself: rerun with --debug for its traceback",
            )
        ]
    for check in found:
        check.seconds = check.seconds or time.monotonic() - began
        shown = check.figure or check.advice
        print(f"    {check.verdict:<8} {check.title}: {shown}", flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            f"gpu-check: no CUDA GPU is visible to torch {torch.__version__} "
            f"(built for CUDA {torch.version.cuda or 'none: a CPU build'}): nothing to check"
        )
        return EXIT_NO_GPU
    started = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or Path("var") / "gpu-check" / f"gpu-check-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.work_dir:
        args.work_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix=f"runs-{stamp}-", dir=args.work_dir or out.parent))
    report = Report(datetime.now(UTC).isoformat(timespec="seconds"), machine_facts())
    print(report.render().split("\n\n")[0], flush=True)
    ctx = Context(work_dir, python_executable(), time.monotonic() + args.budget_s, {})
    plan = check_plan(ctx, args.matmul_n, args.only)
    for number, (title, step) in enumerate(plan, start=1):
        elapsed = time.monotonic() - started
        left = ctx.seconds_left()
        if left < 20:
            report.checks.append(
                skipped(title, title, f"skipped: the time budget ({args.budget_s:.0f} s) ran out")
            )
            continue
        print(
            f"[{number}/{len(plan)}] {title} ({elapsed:.0f} s elapsed, {left:.0f} s left)",
            flush=True,
        )
        report.checks += run_step(title, step, args.debug)
        report.wall_s = time.monotonic() - started
        report.write(out)  # after every check: a killed run leaves what it measured
    report.wall_s = time.monotonic() - started
    report.write(out)
    print()
    print(report.render())
    print(f"\nreport: {out}  (runs: {work_dir})")
    return report.exit_code()


if __name__ == "__main__":
    sys.exit(main())
