"""Phase timing, goal decisions, MLPerf lines."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import pytest
import torch

from scalebench.tasks import Goal
from workers.machine_reference import SAMPLES, MachineReference
from workers.records import RecordWriter, read_rank_file
from workers.tracker import MLPerfLog, PhaseClock, Tracker

GOAL = Goal(metric="top1_accuracy", direction="max", threshold=80.0, light_threshold=70.0)


def make_tracker(tmp_path: Path, light: bool = False) -> Tracker:
    writer = RecordWriter(tmp_path, "run", 0, 1)
    mlperf = MLPerfLog(tmp_path / "mllog-rank-0.log")
    return Tracker(
        writer, torch.device("cpu"), goal=GOAL, light=light, max_epochs=5, mlperf_log=mlperf
    )


def test_phase_clock_charges_each_phase_its_own_time() -> None:
    clock = PhaseClock(torch.device("cpu"))
    clock.start()
    time.sleep(0.02)
    clock.lap("forward")
    time.sleep(0.04)
    clock.lap("communication")
    clock.lap("optimizer")
    assert 0.015 < clock.phases["forward"] < 0.035
    assert 0.035 < clock.phases["communication"] < 0.06
    assert clock.phases["optimizer"] < 0.005
    assert clock.phases["data"] == 0.0
    assert clock.step_seconds == pytest.approx(sum(clock.phases.values()))
    clock.start()
    assert clock.step_seconds == 0.0


def test_goal_is_reached_at_the_first_evaluation_that_meets_it(tmp_path: Path) -> None:
    tracker = make_tracker(tmp_path)
    tracker.start()
    started = tracker.now()
    assert not tracker.evaluation(0, {"top1_accuracy": 79.9, "loss": 1.0}, started)
    started = tracker.now()
    time.sleep(0.01)
    assert tracker.evaluation(1, {"top1_accuracy": 80.0, "loss": 0.9}, started)
    tracker.finish("goal_reached")
    tracker.close()
    rank = read_rank_file(tmp_path / "rank-0.jsonl")
    assert rank.events() == ["start", "goal_reached", "finished"]
    goal = next(r for r in rank.of_kind("event") if r["event"] == "goal_reached")
    evals = list(rank.of_kind("eval"))
    assert goal["epoch"] == 1 and goal["target"] == 80.0
    assert goal["time_to_accuracy_s"] == evals[1]["wall_s"]
    total_eval = sum(e["eval_s"] for e in evals)
    assert total_eval >= 0.01
    assert goal["time_to_accuracy_without_eval_s"] == pytest.approx(
        goal["time_to_accuracy_s"] - total_eval
    )
    lines = (tmp_path / "mllog-rank-0.log").read_text().splitlines()
    keys = [json.loads(line.removeprefix(":::MLLOG "))["key"] for line in lines]
    # a tracker started without init_start still closes initialisation before the run
    assert keys[:2] == ["init_stop", "run_start"] and keys[-1] == "run_stop"
    assert keys.count("eval_accuracy") == 2
    stop = json.loads(lines[-1].removeprefix(":::MLLOG "))
    assert stop["metadata"]["status"] == "success"


def test_light_goal_uses_the_light_threshold(tmp_path: Path) -> None:
    tracker = make_tracker(tmp_path, light=True)
    tracker.start()
    assert tracker.evaluation(0, {"top1_accuracy": 70.0, "loss": 1.0}, tracker.now())
    tracker.close()


def test_record_times_count_from_the_common_start(tmp_path: Path) -> None:
    tracker = make_tracker(tmp_path)
    assert tracker.now() == 0.0  # before the start
    tracker.start()
    time.sleep(0.02)
    assert tracker.now() >= 0.02
    tracker.close()


class StandInEvent:
    """``torch.cuda.Event``'s three methods on the CPU, reading a clock the test moves."""

    now_ms = 0.0
    synchronised = 0

    def __init__(self) -> None:
        self.at_ms: float | None = None

    def record(self, stream: object = None) -> None:
        self.at_ms = StandInEvent.now_ms
        self.stream = stream

    def synchronize(self) -> None:
        StandInEvent.synchronised += 1

    def elapsed_time(self, end: StandInEvent) -> float:
        assert self.at_ms is not None and end.at_ms is not None
        return end.at_ms - self.at_ms


def test_a_steps_events_go_on_the_stream_looked_up_once_at_its_start() -> None:
    """Looking the stream up costs more on a GPU than recording an event: once a step."""
    lookups: list[str] = []

    def current_stream() -> str:
        lookups.append(f"stream {len(lookups)}")
        return lookups[-1]

    clock = PhaseClock(torch.device("cpu"), StandInEvent, current_stream=current_stream)
    for _ in range(2):
        clock.start()
        for phase in ("data", "forward", "loss", "backward", "optimizer"):
            clock.lap(phase)
        clock.read()
    assert lookups == ["stream 0", "stream 1"]
    assert all(event.stream == "stream 1" for event in clock._events)


def test_on_events_a_step_adds_up_its_laps_and_synchronises_once() -> None:
    clock = PhaseClock(torch.device("cpu"), event_type=StandInEvent)
    assert clock.on_events
    StandInEvent.now_ms, StandInEvent.synchronised = 1000.0, 0
    clock.start()
    for pass_ms in (10.0, 30.0):  # two accumulated passes: data, forward, loss, backward each
        for phase, ms in (("data", 1.0), ("forward", pass_ms), ("loss", 0.5), ("backward", 20.0)):
            StandInEvent.now_ms += ms
            clock.lap(phase)
    for phase, ms in (
        ("gradient_packing", 1.5),
        ("communication", 7.0),
        ("gradient_packing", 1.0),  # packed before the all-reduce, unpacked after it
        ("optimizer", 2.0),
    ):
        StandInEvent.now_ms += ms
        clock.lap(phase)
    assert StandInEvent.synchronised == 0  # laps only record events
    phases = clock.read()
    assert StandInEvent.synchronised == 1
    assert phases == pytest.approx(
        {
            "data": 0.002,
            "forward": 0.04,
            "loss": 0.001,
            "backward": 0.04,
            "gradient_packing": 0.0025,
            "communication": 0.007,
            "optimizer": 0.002,
        }
    )
    assert clock.read() == phases and StandInEvent.synchronised == 1  # read once per step
    assert clock.step_seconds == pytest.approx(0.0945)
    events = len(clock._events)
    clock.start()  # the next step reuses the events and starts from zero
    StandInEvent.now_ms += 5.0
    clock.lap("data")
    assert clock.read()["data"] == pytest.approx(0.005) and len(clock._events) == events


@pytest.mark.parametrize("ending", ["finished", "failed", "diverged"])
def test_the_final_event_carries_the_cpu_seconds_since_the_start(
    tmp_path: Path, ending: str
) -> None:
    early = make_tracker(tmp_path / "early")
    early.fail("failed", "before the start")  # nothing measured yet: no CPU seconds
    early.close()
    (failed,) = read_rank_file(tmp_path / "early" / "rank-0.jsonl").records
    assert failed["event"] == "failed" and "own_cpu_s" not in failed
    assert "machine_reference_s" not in failed
    assert failed["peak_memory_bytes"] > 0  # memory is held from the first moment
    tracker = make_tracker(tmp_path)
    tracker.start()
    deadline = time.process_time() + 0.1
    while time.process_time() < deadline:
        pass  # this rank's own work
    if ending == "finished":
        tracker.finish("completed")
    else:
        tracker.fail(ending, "stopped")
    tracker.close()
    final = read_rank_file(tmp_path / "rank-0.jsonl").records[-1]
    assert final["event"] == ending
    # both counts come in clock ticks (os.times and /proc/stat) that the kernel charges by
    # sampling, so on a busy machine a 0.1 s spin can read a few ticks short either way
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    assert final["own_cpu_s"] >= 0.1 - 5 * tick_s
    assert final["host_busy_cpu_s"] >= final["own_cpu_s"] - 5 * tick_s
    assert final["cpu_window_s"] >= 0.1
    # the reference workload, timed at the start and at the end: 2 × SAMPLES samples
    assert len(tracker.machine_reference.timings_s) == 2 * SAMPLES
    assert final["machine_reference_s"] == statistics.median(tracker.machine_reference.timings_s)
    # this process's peak resident set, in bytes: more than the interpreter and torch alone
    assert final["peak_memory_bytes"] >= failed["peak_memory_bytes"] > 50 * 2**20


def test_the_machine_reference_runs_on_one_blas_thread_whatever_the_rank_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from threadpoolctl import threadpool_info

    seen: list[int] = []
    reference = MachineReference(samples=2)

    def products() -> None:
        seen.extend(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")

    monkeypatch.setattr(reference, "_products", products)
    reference.measure()
    assert seen and set(seen) == {1}
    assert len(reference.timings_s) == 2 and reference.seconds is not None
    assert MachineReference().seconds is None  # nothing timed yet


def test_the_progress_line_says_what_is_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each epoch's line ends with the truth: the epochs and seconds the limit still allows
    while the target is not met, that training ends once it is, and that the last epoch
    ended it short of the target."""
    ends = []
    for accuracies in ((50.0, 60.0, 70.0, 75.0, 79.0), (50.0, 85.0)):
        tracker = make_tracker(tmp_path / str(len(accuracies)))  # 5 epochs at most, goal 80
        tracker.start()
        caplog.clear()
        with caplog.at_level("INFO", logger="scalebench.worker"):
            for epoch, accuracy in enumerate(accuracies):
                tracker.begin_epoch(epoch)
                started = tracker.begin_evaluation(epoch)
                tracker.evaluation(epoch, {"top1_accuracy": accuracy}, started)
        tracker.close()
        ends.append([r.getMessage().rsplit(" s, ", 1)[-1] for r in caplog.records])
    limited, reached = ends
    assert limited[0].startswith("at most 4 epochs to go (about ")
    assert limited[3].startswith("at most 1 epoch to go (about ")
    assert limited[4] == "target not reached: that was the last epoch"
    assert reached == [reached[0], "target reached: training ends here"]
    assert not any("0 s to go" in end for end in limited + reached)
