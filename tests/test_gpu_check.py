"""The GPU check's pieces, on the CPU: FLOP counting, the matmul rate, the synchronisation
counter, the watched clock, the watched training run, Task 0's curves, the verdicts and the
report. The checks themselves run on a GPU (``scripts/gpu-check.sh``); here the command must
say in one line that there is none, and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from workers.gpu_check import checks
from workers.gpu_check.context import ChildRun, Context
from workers.gpu_check.measure import (
    SyncCounter,
    WatchedClock,
    matmul_rate,
    training_flops_per_sample,
)
from workers.gpu_check.probe import run_probe
from workers.gpu_check.report import FAIL, PASS, SKIPPED, Check, Report
from workers.gpu_check.task0 import allreduce_curves, allreduce_group, bus_bandwidth_gb_s
from workers.models.resnet import resnet20

REPO = Path(__file__).resolve().parents[1]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer without a GPU")


@no_gpu
def test_the_command_says_there_is_no_gpu_in_one_line_and_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(REPO / "scripts" / "gpu-check.sh"), "--out", str(tmp_path / "report.json")],
        capture_output=True,
        text=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: no CUDA GPU is visible")
    assert not (tmp_path / "report.json").exists()


def test_resnet20_training_costs_the_published_flops_per_sample() -> None:
    """0.244 GFLOP per 32×32 image for forward and backward: three times the forward's."""
    from torch.utils.flop_counter import FlopCounterMode

    model = resnet20(in_channels=3, classes=10)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    per_sample = training_flops_per_sample(model, x, lambda out: F.cross_entropy(out, y))
    with FlopCounterMode(display=False) as forward_only, torch.no_grad():
        model(x)
    assert 0.240e9 < per_sample < 0.248e9
    assert per_sample == pytest.approx(3 * forward_only.get_total_flops() / 4, rel=0.01)
    assert all(p.grad is None for p in model.parameters())  # the count leaves no gradients


def test_matmul_rate_counts_two_flops_per_multiply_add() -> None:
    rate = matmul_rate(torch.float32, torch.device("cpu"), n=256, repeats=3, warmup=1)
    slowest, fastest = rate.spread_tflops
    assert 0 < slowest <= rate.tflops <= fastest
    assert rate.dtype == "float32" and rate.n == 256


class _Device:
    """An object with a ``synchronize`` method, to be wrapped like ``torch.cuda``'s."""

    calls = 0

    def synchronize(self) -> None:
        type(self).calls += 1

    def wait_twice(self) -> None:
        self.synchronize()
        self.synchronize()


def test_sync_counter_counts_each_wait_once_and_puts_everything_back() -> None:
    device = _Device()
    originals = (torch.Tensor.item, _Device.synchronize, _Device.wait_twice)
    with SyncCounter("cpu", targets=[(_Device, "synchronize"), (_Device, "wait_twice")]) as syncs:
        device.synchronize()
        device.wait_twice()  # two waits inside one counted call: one wait
        torch.tensor(3.0).item()  # a tensor on the counted device
    assert syncs.count == 3
    assert _Device.calls == 3  # the wrapped calls still ran
    assert (torch.Tensor.item, _Device.synchronize, _Device.wait_twice) == originals

    with SyncCounter("cuda", targets=[]) as other:
        torch.tensor(1.0).item()  # a CPU tensor does not make the host wait for a GPU
    assert other.count == 0


def test_watched_clock_notes_each_step_wall_phases_and_waits() -> None:
    syncs = SyncCounter("cpu", targets=[])
    clock = WatchedClock(torch.device("cpu"), syncs)
    with syncs:
        for waits in (0, 2):
            clock.start()
            time.sleep(0.01)
            clock.lap("forward")
            for _ in range(waits):
                torch.tensor(1.0).item()
            clock.lap("optimizer")
            clock.read()
            clock.read()  # a second read in the same step adds nothing
    assert [s.syncs for s in clock.steps] == [0, 2]
    for step in clock.steps:
        assert step.phases_s >= 0.01
        assert step.wall_s == pytest.approx(step.phases_s, abs=0.005)


@pytest.mark.slow
def test_watched_run_measures_a_real_training_run(tmp_path: Path) -> None:
    """Light Task 2a in a group of one rank: the probe's figures agree with its rank file."""
    result = run_probe("task2a-logreg-epsilon", tmp_path / "run", max_epochs=2)
    assert result.status == "max_epochs" and result.epochs == 2
    assert result.steps == len(result.step_wall_s) == len(result.step_syncs) > 20
    assert result.samples_per_s and result.samples_per_s > 0
    assert result.final_metrics["accuracy"] > 50
    assert result.phases_total_s["communication"] == 0.0  # one rank: no collective
    assert not result.loss_scales  # fp32 on the CPU: no loss scale
    wall, phases = sum(result.step_wall_s), sum(result.step_phases_s)
    assert abs(wall - phases) / wall < checks.PHASE_TOLERANCE

    from dataclasses import asdict

    found = {c.name: c for c in checks.engine_checks(None, asdict(result), None)}  # type: ignore[arg-type]
    assert found["phases"].verdict == PASS
    # On a CPU nothing waits for a device: 0 waits per step is not the GPU's 1.
    assert found["syncs"].verdict == FAIL and "set_sync_debug_mode" in found["syncs"].advice


@pytest.mark.slow
def test_task0_curves_and_bandwidth_from_a_real_group_on_two_emulated_nodes(
    tmp_path: Path,
) -> None:
    from workers.records import rank_file_name, read_rank_file

    ctx = Context(tmp_path, sys.executable, time.monotonic() + 120, {})
    run, run_dir = allreduce_group(ctx, "gloo", 2, 120, "task0", device="cpu", ranks_per_node=1)
    assert run.returncode == 0, run.output
    # each rank is local rank 0 of a node of its own, as the launcher's nodes of one rank
    for rank in (0, 1):
        (env,) = read_rank_file(run_dir / rank_file_name(rank)).of_kind("env")
        assert (env["node_rank"], env["local_rank"], env["local_world_size"]) == (rank, 0, 1)
    curves = allreduce_curves(run_dir)
    assert set(curves) == {"float32", "float16"}
    for points in curves.values():
        sizes = [size for size, _ in points]
        assert sizes == sorted(sizes) and len(sizes) > 5
        assert all(seconds > 0 for _, seconds in points)
    size, seconds = curves["float32"][-1]
    assert bus_bandwidth_gb_s(size, seconds, 2) == pytest.approx(size / seconds / 1e9)
    assert bus_bandwidth_gb_s(size, seconds, 4) == pytest.approx(1.5 * size / seconds / 1e9)


def _fp16_result(overflows: list[int], updates: int = 200, status: str = "goal_reached") -> dict:
    return {
        "status": status,
        "goal": "bleu ≥ 20",
        "epochs": 3,
        "loss_scales": [128.0] * updates,
        "overflows": overflows,
        "final_metrics": {"bleu": 24.0},
        "time_to_accuracy_s": 12.0,
        "step_syncs": [2] * updates,
    }


def test_fp16_verdict_fails_an_overflow_storm_after_the_settling_steps() -> None:
    run = ChildRun(0, "", 1.0)
    early = checks.fp16_check("f", "fp16", _fp16_result(list(range(40))), run)
    assert early.verdict == PASS  # overflows while the scale settles are expected
    storm = checks.fp16_check("f", "fp16", _fp16_result(list(range(60, 64))), run)
    assert storm.verdict == FAIL and "overflow storm" in storm.advice
    missed = checks.fp16_check("f", "fp16", _fp16_result([], status="max_epochs"), run)
    assert missed.verdict == FAIL and "not reached" in missed.advice
    crashed = checks.fp16_check("f", "fp16", None, ChildRun(None, "step 12 of 40", 9.0))
    assert crashed.verdict == FAIL and "timed out" in crashed.figure


def test_report_renders_verdicts_and_writes_json(tmp_path: Path) -> None:
    report = Report("2026-01-01T00:00:00+00:00", {"gpu": "Example GPU ×1"})
    report.checks += [
        Check("peak", "matmul peak", PASS, "bf16 700 TFLOP/s"),
        Check("t0", "Task 0, nccl, 2 ranks", SKIPPED, advice="skipped: one GPU"),
        Check("syncs", "host waits per step", FAIL, "median 3", "look at .item() calls"),
    ]
    text = report.render()
    assert "PASS     matmul peak" in text and "skipped: one GPU" in text
    assert "host waits per step: look at .item() calls" in text
    assert text.endswith("verdict: FAIL (1 passed, 1 failed, 1 skipped)")
    assert report.exit_code() == 1
    report.write(tmp_path / "out" / "report.json")
    stored = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [c["verdict"] for c in stored["checks"]] == [PASS, SKIPPED, FAIL]
    assert not list((tmp_path / "out").glob("*.partial"))


def test_a_gpu_too_small_for_a_run_skips_that_check_with_the_reason() -> None:
    oom = "failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    result = {**_fp16_result([]), "status": oom}
    for verdict in (
        checks.fp16_check("f", "fp16", result, ChildRun(1, "", 3.0)),
        checks.tta_check("t", "Task 1a", result, ChildRun(1, "", 3.0)),
        checks.tta_check("t", "Task 1a", None, ChildRun(1, f"...\n{oom[8:]}\n", 3.0)),
    ):
        assert verdict.verdict == SKIPPED
        assert verdict.advice.startswith("skipped: the GPU is too small for this run")
        assert "Tried to allocate 2.00 GiB" in verdict.advice
    other = {**result, "status": "failed: RuntimeError: NCCL error"}
    assert checks.tta_check("t", "Task 1a", other, ChildRun(1, "", 3.0)).verdict == FAIL


def test_the_engine_comparison_cut_by_the_budget_is_skipped_not_failed(tmp_path: Path) -> None:
    """A check stopped because the whole check's budget ran out says so and how to give it
    more; one that outruns its own limit fails."""
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    short = Context(tmp_path, str(slow), time.monotonic() + 1.5, {})
    check = checks.overhead_check(short, 300.0)
    assert check.verdict == SKIPPED and "--budget-s" in check.advice
    long = Context(tmp_path, str(slow), time.monotonic() + 300, {})
    check = checks.overhead_check(long, 1.5)
    assert check.verdict == FAIL and "timed out" in check.figure


def test_only_runs_the_named_steps_in_the_plans_order_and_refuses_an_unknown_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from workers.gpu_check.__main__ import STEPS, check_plan, parse_args

    ctx = Context(tmp_path, sys.executable, time.monotonic() + 60, {})
    assert len(check_plan(ctx, 64)) == len(STEPS)
    chosen = parse_args(["--only", "task0, peaks"]).only
    titles = [title for title, _ in check_plan(ctx, 64, chosen)]
    assert titles == ["matmul peaks", "Task 0 on CUDA tensors"]
    with pytest.raises(SystemExit):
        parse_args(["--only", "task0,nccl-tests"])
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--only: no step nccl-tests" in said and "task1a-eager" in said
