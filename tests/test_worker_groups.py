"""Real multi-process gloo groups started by the local launcher."""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from pathlib import Path

import pytest

from operators.local_launcher import LocalGroup, launch_group
from results_db.run_summary import RunSummary, summarise
from scalebench.tasks import get_task
from workers.allreduce import message_sizes, seconds_to_go
from workers.records import read_rank_file, read_run

pytestmark = pytest.mark.slow

TASK1A = "task1a-resnet20-cifar10"


def summarise_run(run_dir: Path, world_size: int, launcher_status: str) -> RunSummary:
    """What ingest makes of a run directory's rank files."""
    return summarise(read_run(run_dir), run_dir.name, world_size, launcher_status)


def quiet(lines: list[str]):
    return lines.append


def test_two_workers_train_an_epoch_of_the_light_image_task(
    tmp_path: Path, light_env: dict[str, str]
) -> None:
    """One epoch of light Task 1a on two ranks: every step is timed in its phases, both
    ranks saw the same losses and evaluation, the MLPerf log is complete and ingest makes
    a finished run of it. (The light target itself is measured by
    benchmarks/light_targets.py; a run to its goal is checked on Task 2a.)"""
    run_dir = tmp_path / "k2"
    lines: list[str] = []
    result = launch_group(
        [
            *("--task", TASK1A, "--light", "--results", str(run_dir), "--timeout", "30"),
            *("--max-epochs", "1"),
        ],
        2,
        timeout_s=300,
        env=light_env,
        sink=quiet(lines),
    )
    assert result.status == "succeeded", "\n".join(lines[-20:])
    assert result.exit_codes == [0, 0]
    ranks = read_run(run_dir)
    assert len(ranks) == 2
    for rank in ranks:
        assert rank.bad_lines == 0
        assert rank.events() == ["start", "finished"]
        steps = list(rank.of_kind("step"))
        evals = list(rank.of_kind("eval"))
        assert len(evals) == 1 and 0 < evals[0]["metrics"]["top1_accuracy"] < 100
        assert len(steps) == 23  # 5748 // 2 images a rank, 128 a step
        assert all(s["phases"]["communication"] > 0 for s in steps)
        assert all(s["phases"]["gradient_packing"] > 0 for s in steps)
        assert {s["samples"] for s in steps} == {128, 2874 - 22 * 128}
    # both ranks saw the same global values
    evals0, evals1 = (list(r.of_kind("eval")) for r in ranks)
    assert [e["metrics"] for e in evals0] == [e["metrics"] for e in evals1]
    losses0 = [s["loss"] for s in ranks[0].of_kind("step")]
    assert losses0 == [s["loss"] for s in ranks[1].of_kind("step")]
    check_mlperf_log(run_dir / "mllog-rank-0.log", world_size=2, epochs=1)
    summary = summarise_run(run_dir, 2, result.status)
    assert summary.status == "succeeded" and not summary.goal_reached
    assert summary.epochs == 1 and summary.time_to_accuracy_s is None
    assert 0 < summary.communication_ratio < 1
    # each rank timed the machine's reference workload, outside its timed steps
    references = [rank.of_kind("event")[-1]["machine_reference_s"] for rank in ranks]
    assert all(0 < seconds < 0.1 for seconds in references)
    assert summary.metrics["machine_reference_s"] == pytest.approx(statistics.median(references))
    # each rank's peak resident set (a process holding torch and the model: above 100 MiB),
    # the run keeping the largest
    peaks = [rank.of_kind("event")[-1]["peak_memory_bytes"] for rank in ranks]
    assert all(2**20 * 100 < peak < 2**40 for peak in peaks)
    assert summary.metrics["peak_memory_bytes"] == max(peaks)


def test_all_reduce_light_writes_complete_records_on_every_rank(
    tmp_path: Path, light_env: dict[str, str]
) -> None:
    run_dir = tmp_path / "t0"
    lines: list[str] = []
    result = launch_group(
        ["--task", "task0-allreduce", "--light", "--results", str(run_dir)],
        2,
        timeout_s=120,
        env=light_env,
        sink=quiet(lines),
    )
    assert result.status == "succeeded", "\n".join(lines[-20:])
    spec = get_task("task0-allreduce")
    sizes = message_sizes(spec, light=True)
    assert sizes[0] == 1 and sizes[-1] == 1_000_000
    for rank in read_run(run_dir):
        assert rank.bad_lines == 0
        records = list(rank.of_kind("allreduce"))
        finished = next(r for r in rank.of_kind("event") if r["event"] == "finished")
        measured = finished["dtypes"]
        assert "float32" in measured
        assert {(r["dtype"], r["elements"]) for r in records} == {
            (d, s) for d in measured for s in sizes
        }
        for r in records:
            assert len(r["seconds"]) == spec.light_repetitions
            assert all(s > 0 for s in r["seconds"])
            assert r["bytes"] == r["elements"] * (4 if r["dtype"] == "float32" else 2)
            assert r["backend"] == "gloo"


def test_a_killed_rank_fails_the_group_within_the_timeout(
    tmp_path: Path, light_env: dict[str, str]
) -> None:
    run_dir = tmp_path / "killed"
    lines: list[str] = []
    timeout_s = 20
    group = LocalGroup(
        [
            "--task",
            TASK1A,
            "--light",
            "--results",
            str(run_dir),
            "--timeout",
            str(timeout_s),
            "--max-epochs",
            "200",
        ],
        2,
        env={**light_env},
        sink=quiet(lines),
    )
    group.start()
    rank1_file = run_dir / "rank-1.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if rank1_file.exists() and rank1_file.read_text().count('"kind":"step"') >= 2:
            break
        time.sleep(0.1)
    else:
        group.stop()
        pytest.fail("rank 1 never started training:\n" + "\n".join(lines[-20:]))
    os.kill(group.pids[1], signal.SIGKILL)
    killed_at = time.monotonic()
    result = group.wait(timeout_s=300)
    assert time.monotonic() - killed_at < timeout_s + 10
    assert result.status == "failed"
    assert "rank 1 exited with signal SIGKILL" in result.reason
    # no orphan: every rank's process is gone
    for pid in group.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    survivor = read_rank_file(run_dir / "rank-0.jsonl")
    assert survivor.bad_lines == 0
    assert survivor.events()[0] == "start" and survivor.events()[-1] == "failed"
    failure = next(r for r in survivor.of_kind("event") if r["event"] == "failed")
    assert failure["reason"]  # the error the collective raised
    assert len(list(survivor.of_kind("step"))) >= 2
    summary = summarise_run(run_dir, 2, result.status)
    assert summary.status == "failed"
    assert "rank 1 left no final record" in summary.reason


def test_a_stopped_rank_is_named_not_the_peer_whose_collective_timed_out(
    tmp_path: Path, light_env: dict[str, str]
) -> None:
    """Rank 1 stops answering (SIGSTOP): rank 0's collective times out and it exits
    first, but the verdict names rank 1."""
    run_dir = tmp_path / "hung"
    lines: list[str] = []
    group = LocalGroup(
        [
            "--task",
            TASK1A,
            "--light",
            "--results",
            str(run_dir),
            "--timeout",
            "5",
            "--max-epochs",
            "200",
        ],
        2,
        env={**light_env},
        sink=quiet(lines),
        run_dir=run_dir,
    )
    group.start()
    rank1_file = run_dir / "rank-1.jsonl"
    deadline = time.monotonic() + 120
    while not (rank1_file.exists() and rank1_file.read_text().count('"kind":"step"') >= 2):
        if time.monotonic() > deadline:
            group.stop()
            pytest.fail("rank 1 never started training:\n" + "\n".join(lines[-20:]))
        time.sleep(0.1)
    os.kill(group.pids[1], signal.SIGSTOP)
    result = group.wait(timeout_s=120)
    assert result.status == "failed" and result.first_failed_rank == 1
    assert result.reason.startswith("rank 1 stopped answering: its process was stopped")
    assert "rank 0 exited with status 1" in result.reason  # what followed from it
    for pid in group.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_silent_peer_is_blamed_when_the_others_timed_out_waiting() -> None:
    from operators.local_launcher import _classify

    silent = {1: "rank 1 stopped answering (still running, silent for 61 s ...)"}
    assert _classify([1, None], [0], silent) == (
        "failed",
        f"{silent[1]}; rank 0 exited with status 1",
        1,
    )
    assert _classify([1, None], [0]) == ("failed", "rank 0 exited with status 1", 0)


def test_the_group_is_stopped_at_its_time_limit(tmp_path: Path, light_env: dict[str, str]) -> None:
    run_dir = tmp_path / "slow"
    result = launch_group(
        [
            "--task",
            "task0-allreduce",
            "--light",
            "--results",
            str(run_dir),
            "--repetitions",
            "100000",  # the most a request takes: far more than the test waits for
        ],
        2,
        timeout_s=12,
        grace_s=5,
        env=light_env,
        sink=quiet([]),
    )
    assert result.status == "timed_out"
    assert result.exit_codes == [143, 143]  # SIGTERM reached the workers, who recorded it
    for rank in read_run(run_dir):
        failure = next(r for r in rank.of_kind("event") if r["event"] == "failed")
        assert "SIGTERM" in failure["reason"]
    assert summarise_run(run_dir, 2, result.status).status == "timed_out"


def test_stop_from_another_thread_ends_every_rank(
    tmp_path: Path, light_env: dict[str, str]
) -> None:
    group = LocalGroup(
        [
            "--task",
            "task0-allreduce",
            "--light",
            "--results",
            str(tmp_path / "c"),
            "--repetitions",
            "100000",  # the most a request takes: far more than the test waits for
        ],
        2,
        env=light_env,
        sink=quiet([]),
    )
    group.start()

    def stop_once_both_measure() -> None:
        """Stop the group once both ranks recorded their start (a busy machine takes
        seconds to start a rank), or after 90 s."""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            files = list((tmp_path / "c").rglob("rank-*.jsonl"))
            if len(files) == 2 and all('"start"' in f.read_text() for f in files):
                break
            time.sleep(0.2)
        group.stop()

    threading.Thread(target=stop_once_both_measure, daemon=True).start()
    result = group.wait(timeout_s=120)
    assert result.status == "failed"
    assert result.seconds < 100
    # they were measuring when stopped, not refused at the start
    assert all("start" in rank.events() for rank in read_run(tmp_path / "c"))
    for pid in group.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_missing_peer_fails_the_rank_within_the_timeout(tmp_path: Path) -> None:
    import subprocess
    import sys

    from workers.distributed import free_port

    env = {
        **os.environ,
        "RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "workers.run",
            "--task",
            "task0-allreduce",
            "--light",
            "--results",
            str(tmp_path / "alone"),
            "--timeout",
            "5",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert time.monotonic() - started < 5 + 30  # the timeout plus torch's start-up
    rank = read_rank_file(tmp_path / "alone" / "rank-0.jsonl")
    assert rank.events() == ["failed"]


def test_the_ddp_variant_trains_and_records_its_phases(
    tmp_path: Path, light_env: dict[str, str]
) -> None:
    """One epoch of light Task 2a, the cheapest task that offers the variant, in DDP on two
    ranks: every step waits for the wrapper's all-reduce, and that wait is communication."""
    run_dir = tmp_path / "ddp"
    lines: list[str] = []
    result = launch_group(
        [
            *("--task", "task2a-logreg-epsilon", "--light", "--results", str(run_dir)),
            *("--variant", "ddp", "--max-epochs", "1"),
        ],
        2,
        timeout_s=300,
        env=light_env,
        sink=quiet(lines),
    )
    assert result.status == "succeeded", "\n".join(lines[-20:])
    for rank in read_run(run_dir):
        start = next(r for r in rank.of_kind("event") if r["event"] == "start")
        assert start["variant"] == "ddp"
        steps = list(rank.of_kind("step"))
        assert len(steps) == 157  # 40,000 training rows: 20,000 a rank, in batches of 128
        assert start["ddp_communication"] == "exposed_wait"
        # Backward runs to the last bucket's launch; the wait for the buckets' all-reduces
        # that follows (and the loss's) is communication: more than nothing on every step.
        assert all(s["phases"]["communication"] > 0 for s in steps)
        assert all(s["phases"]["backward"] > 0 for s in steps)
        assert rank.events()[-1] == "finished"
    ratio = summarise_run(run_dir, 2, result.status).communication_ratio
    assert ratio is not None and 0 < ratio < 1


def test_a_ddp_run_without_its_bucket_wait_timed_claims_no_ratio(tmp_path: Path) -> None:
    """Runs recorded before the wait for DDP's buckets was timed held only the loss's
    all-reduce in communication: no ratio is claimed for them."""
    from records_factory import FakeRun, write_rank

    def written(name: str, run: FakeRun) -> Path:
        for rank in range(run.world_size):
            write_rank(tmp_path / name, name, rank, run)
        return tmp_path / name

    run_dir = written("old-ddp", FakeRun(world_size=2, variant="ddp"))
    assert summarise_run(run_dir, 2, "succeeded").communication_ratio is None
    details = {"ddp_communication": "exposed_wait"}
    timed = written("ddp", FakeRun(world_size=2, variant="ddp", start_details=details))
    assert summarise_run(timed, 2, "succeeded").communication_ratio is not None


def test_the_all_reduce_estimate_waits_for_the_bandwidth_then_follows_it() -> None:
    """Time per size = 2 ms latency + bytes at 1 GB/s. Extrapolating elapsed time per byte
    from the small sizes (the old estimate) said days were left; the fit says nothing until
    bandwidth shows, then the truth within 5 %."""
    sizes = [round(10 ** (k / 4)) * 4 for k in range(33)]  # 4 B … 400 MB, float32
    took = [(b, 2e-3 + b / 1e9) for b in sizes]
    assert seconds_to_go(took[:5], sizes[5:]) is None  # latency only so far
    jitter = [*took[:5], (sizes[5], 0.02), *took[6:9]]  # one slow size is not bandwidth
    assert seconds_to_go(jitter, sizes[9:]) is None
    for measured in (28, 30, 32):
        truth = sum(t for _, t in took[measured:])
        assert seconds_to_go(took[:measured], sizes[measured:]) == pytest.approx(truth, rel=0.05)
    assert seconds_to_go(took, []) == 0.0


def check_mlperf_log(path: Path, world_size: int, epochs: int) -> None:
    """The MLPerf log parses with the ``mlperf-logging`` package's own parser and holds, in
    order, initialisation, the submission lines, the hyperparameters, the run, and each
    evaluation's start, stop and accuracy (a fraction). tests/test_mlperf_log.py runs the
    package's compliance checker on such logs."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    lines, errors = parse_file(str(path), ruleset="4.1.0")
    assert errors == [], errors
    keys = [line.key for line in lines]
    values = {line.key: line.value["value"] for line in lines}
    assert keys[:3] == ["cache_clear", "init_start", "submission_benchmark"]
    assert keys.index("submission_platform") < keys.index("global_batch_size")
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("run_stop")
    assert values["submission_platform"].startswith(f"{world_size}x")
    assert values["train_samples"] == 5748 and 0 < values["eval_accuracy"] < 1
    assert values["global_batch_size"] == 128 * world_size
    assert values["opt_base_learning_rate"] == 0.02 and values["opt_name"] == "sgd"
    assert values["opt_learning_rate_warmup_epochs"] == 1.0  # log2(2)
    assert (
        keys.count("eval_start") == keys.count("eval_stop") == keys.count("eval_accuracy") == epochs
    )


def test_the_failed_ranks_last_lines_reach_the_verdicts_reason(tmp_path: Path) -> None:
    """Every rank refuses its arguments: the verdict names the first to exit, and the
    reason recorded for the run ends with what that rank wrote last."""
    group = LocalGroup(
        [
            "--task",
            "task0-allreduce",
            "--light",
            "--results",
            str(tmp_path),
            "--max-elements",
            "many",
        ],
        2,
        run_dir=tmp_path,
        sink=lambda line: None,
    )
    group.start()
    result = group.wait(120)
    assert result.status == "failed" and result.first_failed_rank in (0, 1)
    rank = result.first_failed_rank
    assert result.log_tail and all(line.startswith(f"[rank {rank}] ") for line in result.log_tail)
    reason = result.reason_with_log()
    assert reason.startswith(result.reason + "; its last lines: ")
    assert "argument --max-elements: must be a whole number, got 'many'" in reason


def test_a_reason_carries_only_the_failed_ranks_last_nonempty_lines() -> None:
    from operators.group import GroupResult

    tail = [
        "[rank 0] fine",
        "[rank 1] step 9",
        "[rank 1] Traceback",
        "[rank 1]   ",
        "[rank 1] RuntimeError: " + "x" * 600,
    ]
    failed = GroupResult(
        world_size=2,
        status="failed",
        reason="rank 1 exited with status 1",
        exit_codes=[143, 1],
        seconds=3.0,
        first_failed_rank=1,
        log_tail=tail,
    )
    reason = failed.reason_with_log()
    assert reason.startswith("rank 1 exited with status 1; its last lines: …")
    assert len(reason) < 500 and reason.endswith("x" * 100)
    assert "fine" not in reason
    succeeded = GroupResult(
        world_size=2, status="succeeded", reason="", exit_codes=[0, 0], seconds=3.0, log_tail=tail
    )
    assert succeeded.reason_with_log() == ""


@pytest.mark.slow
def test_the_threads_asked_per_worker_are_the_threads_each_rank_runs(tmp_path: Path) -> None:
    """``threads_per_worker`` travels from the request to every rank's torch, over whatever
    the launcher's environment says, and the rank records it."""
    from scalebench.sweep import plan_groups, validate_request

    request = validate_request(
        task="task0-allreduce",
        workers=[2],
        light=True,
        repeats=1,
        threads_per_worker=2,
        max_workers=2,
    )
    (group,) = plan_groups(request, "threads", tmp_path)
    run_dir = tmp_path / "run"
    args = [*group.worker_argv(str(run_dir), str(tmp_path)), "--max-elements", "1000"]
    assert args[args.index("--threads-per-worker") + 1] == "2"
    lines: list[str] = []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = launch_group(args, 2, timeout_s=120, env=env, sink=quiet(lines))
    assert result.status == "succeeded", "\n".join(lines[-20:])
    for rank in read_run(run_dir):
        (record,) = rank.of_kind("env")
        assert record["torch_threads"] == 2
        assert record["cpu"] and record["cpu_capability"]  # the processor of every run
