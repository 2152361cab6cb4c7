"""The JSON-lines record format: writing, reading, refusing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from workers.records import (
    SCHEMA_VERSION,
    BadRecord,
    InconsistentRun,
    RecordWriter,
    parse_line,
    read_rank_file,
    read_run,
    validate_record,
)

PHASES = {
    "data": 0.01,
    "forward": 0.2,
    "loss": 0.001,
    "backward": 0.3,
    "gradient_packing": 0.004,
    "communication": 0.05,
    "optimizer": 0.02,
}


def write_some(run_dir: Path, rank: int = 0, world_size: int = 2, run_id: str = "r1") -> None:
    writer = RecordWriter(run_dir, run_id, rank, world_size)
    writer.write("env", 0.0, host="h", torch="2")
    writer.write("event", 0.0, event="start", task="t")
    writer.write("step", 0.5, epoch=0, step=0, samples=128, loss=2.3, lr=0.02, phases=PHASES)
    writer.write(
        "eval",
        1.0,
        epoch=0,
        metrics={"top1_accuracy": 41.5, "loss": 1.7},
        eval_s=0.2,
        train_s=0.8,
        wall_s=1.0,
    )
    writer.write(
        "allreduce",
        1.1,
        bytes=4,
        elements=1,
        dtype="float32",
        backend="gloo",
        seconds=[0.001, 0.002],
    )
    writer.write("event", 1.3, event="finished", status="goal_reached")
    writer.close()


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    write_some(tmp_path)
    rank = read_rank_file(tmp_path / "rank-0.jsonl")
    assert rank.bad_lines == 0
    assert [r["kind"] for r in rank.records] == [
        "env",
        "event",
        "step",
        "eval",
        "allreduce",
        "event",
    ]
    step = rank.records[2]
    assert step["v"] == SCHEMA_VERSION and step["run_id"] == "r1" and step["world_size"] == 2
    assert step["phases"] == PHASES and step["samples"] == 128 and step["t"] == 0.5
    assert rank.records[3]["metrics"]["top1_accuracy"] == 41.5
    assert rank.records[4]["seconds"] == [0.001, 0.002]
    assert rank.events() == ["start", "finished"]


def test_version_1_records_are_read_with_todays_names() -> None:
    """Version 1 named the evaluation times ``eval_seconds``, ``train_seconds`` and
    ``wall_seconds``; they are read as ``eval_s``, ``train_s``, ``wall_s`` (the columns)."""
    old = (
        '{"v": 1, "run_id": "r", "rank": 0, "world_size": 1, "kind": "eval", "t": 2.0, '
        '"epoch": 0, "metrics": {"loss": 1.5}, "eval_seconds": 0.5, "train_seconds": 1.5, '
        '"wall_seconds": 2.0}'
    )
    record = parse_line(old)
    assert (record["eval_s"], record["train_s"], record["wall_s"]) == (0.5, 1.5, 2.0)
    assert "eval_seconds" not in record
    step = json.dumps(
        {
            "v": 1,
            "run_id": "r",
            "rank": 0,
            "world_size": 1,
            "kind": "step",
            "t": 1.0,
            "epoch": 0,
            "step": 0,
            "samples": 8,
            "phases": PHASES,
        }
    )
    assert parse_line(step)["phases"] == PHASES
    with pytest.raises(BadRecord, match="without 'eval_s'"):  # version 2 has only the new names
        parse_line(old.replace('"v": 1', '"v": 2'))
    with pytest.raises(BadRecord, match="this reader knows 1, 2, 3"):
        parse_line('{"v": 4, "run_id": "r", "rank": 0, "world_size": 1, "kind": "env", "t": 0}')


def test_steps_recorded_before_packing_was_timed_apart_keep_their_communication() -> None:
    """Version 2 steps have no gradient_packing phase (their communication includes it): they
    are read with 0 packing seconds; version 3 steps must have it."""
    before = {name: value for name, value in PHASES.items() if name != "gradient_packing"}
    line = json.dumps(
        {
            "v": 2,
            "run_id": "r",
            "rank": 0,
            "world_size": 1,
            "kind": "step",
            "t": 1.0,
            "epoch": 0,
            "step": 0,
            "samples": 8,
            "phases": before,
        }
    )
    phases = parse_line(line)["phases"]
    assert phases["gradient_packing"] == 0.0
    assert phases["communication"] == before["communication"]
    assert validate_record(json.loads(line))["phases"]["gradient_packing"] == 0.0  # slow path
    with pytest.raises(BadRecord, match="without phase"):
        parse_line(line.replace('"v": 2', '"v": 3'))


def test_non_finite_numbers_are_written_as_null_so_files_stay_json(tmp_path: Path) -> None:
    writer = RecordWriter(tmp_path, "r", 0, 1)
    writer.write("step", 0.1, epoch=0, step=0, samples=1, loss=math.nan, lr=0.1, phases=PHASES)
    writer.close()
    line = (tmp_path / "rank-0.jsonl").read_text()
    assert "NaN" not in line and json.loads(line)["loss"] is None


def test_writer_refuses_a_malformed_record(tmp_path: Path) -> None:
    writer = RecordWriter(tmp_path, "r", 0, 1)
    with pytest.raises(BadRecord, match="samples"):
        writer.write("step", 0.1, epoch=0, step=0, samples="many", phases={})
    with pytest.raises(BadRecord, match="unknown kind"):
        writer.write("gossip", 0.1)
    writer.close()


def _step_line(**extra_phases: float) -> str:
    """A step record of this schema version with every phase, and ``extra_phases``."""
    phases = PHASES | extra_phases
    record = {"v": SCHEMA_VERSION, "run_id": "r", "rank": 0, "world_size": 1, "kind": "step"}
    record |= {"t": 1.0, "epoch": 0, "step": 1, "samples": 8, "loss": 1.0, "lr": 0.1}
    record["phases"] = phases
    return json.dumps(record)


def _allreduce_line(**changes: object) -> str:
    """An all-reduce record of 4 float32 elements (16 bytes) with ``changes``."""
    record = {"v": SCHEMA_VERSION, "run_id": "r", "rank": 0, "world_size": 1, "kind": "allreduce"}
    record |= {"t": 1.0, "bytes": 16, "elements": 4, "dtype": "float32", "backend": "gloo"}
    record |= {"seconds": [0.001, 0.002]}
    return json.dumps(record | changes)


def test_the_record_builders_below_make_valid_lines() -> None:
    assert type(parse_line(_step_line())).__name__ == "StepRecord"
    assert parse_line(_allreduce_line())["kind"] == "allreduce"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ('{"v": 1}', "missing field"),
        (
            '{"v": 99, "run_id": "r", "rank": 0, "world_size": 1, "kind": "env", "t": 0}',
            "schema version 99",
        ),
        (
            '{"v": 1, "run_id": "r", "rank": 0, "world_size": 1, "kind": "event", "t": 0, '
            '"event": "exploded"}',
            "unknown event",
        ),
        (
            '{"v": 1, "run_id": "r", "rank": "0", "world_size": 1, "kind": "env", "t": 0}',
            "'rank'",
        ),
        (
            '{"v": 1, "run_id": "r", "rank": 0, "world_size": 1, "kind": "env", "t": 0, '
            '"gpus": "all of them"}',
            "env record: field 'gpus'",
        ),
        (
            '{"v": 1, "run_id": "r", "rank": 0, "world_size": 1, "kind": "env", "t": 0, '
            '"gpus": [7]}',
            "a list of GPU names",
        ),
        (
            '{"v": 1, "run_id": "r", "rank": 0, "world_size": 1, "kind": "event", "t": 0, '
            '"event": "start", "started_at": "teatime"}',
            "'started_at' is no ISO 8601 time: 'teatime'",
        ),
        (_step_line(teleport=0.1), "unknown phase\\(s\\) teleport"),
        (_allreduce_line(dtype="float3"), "unknown dtype 'float3'"),
        (_allreduce_line(elements=0, bytes=0), "'bytes' is out of range: 0"),
        (_allreduce_line(bytes=5), "4 float32 elements is 16 bytes, not 5"),
        (_allreduce_line(seconds=[]), "without a timed repetition"),
        # a run metric (scalebench.run_metrics) outside its quantity's range
        (
            '{"v": 3, "run_id": "r", "rank": 0, "world_size": 1, "kind": "event", "t": 0, '
            '"event": "failed", "reason": "x", "machine_reference_s": -0.5}',
            "machine_reference_s is -0.5: the machine's reference workload's seconds",
        ),
        (
            '{"v": 3, "run_id": "r", "rank": 0, "world_size": 1, "kind": "event", "t": 0, '
            '"event": "finished", "status": "s", "peak_memory_bytes": -1}',
            "peak_memory_bytes is -1: a rank's peak memory lies from 0 to",
        ),
        (
            '{"v": 3, "run_id": "r", "rank": 0, "world_size": 1, "kind": "event", "t": 0, '
            '"event": "diverged", "reason": "nan", "peak_memory_bytes": 1.5}',
            "diverged event: field 'peak_memory_bytes' has 1.5",
        ),
    ],
)
def test_bad_lines_are_described(line: str, problem: str) -> None:
    with pytest.raises(BadRecord, match=problem):
        parse_line(line)


def test_unreadable_and_truncated_lines_are_counted_not_dropped(tmp_path: Path) -> None:
    write_some(tmp_path)
    path = tmp_path / "rank-0.jsonl"
    with path.open("a") as handle:
        handle.write("garbage\n")
        handle.write('{"v": 1, "run_id": "r1", "rank": 0, "wor')  # killed mid-write
    rank = read_rank_file(path)
    assert len(rank.records) == 6
    assert rank.bad_lines == 2
    assert len(rank.problems) == 2 and "rank-0.jsonl:7" in rank.problems[0]


def test_rank_files_of_different_runs_are_refused(tmp_path: Path) -> None:
    write_some(tmp_path, rank=0, run_id="r1")
    write_some(tmp_path, rank=1, run_id="r2")
    with pytest.raises(InconsistentRun, match="different runs"):
        read_run(tmp_path)


def test_rank_files_with_different_world_sizes_are_refused(tmp_path: Path) -> None:
    write_some(tmp_path, rank=0, world_size=2)
    write_some(tmp_path, rank=1, world_size=4)
    with pytest.raises(InconsistentRun, match="world sizes"):
        read_run(tmp_path)


def test_a_record_in_the_wrong_rank_file_is_refused(tmp_path: Path) -> None:
    write_some(tmp_path, rank=0)
    (tmp_path / "rank-0.jsonl").rename(tmp_path / "rank-1.jsonl")
    with pytest.raises(InconsistentRun, match="rank 0"):
        read_run(tmp_path)


def test_a_restarted_rank_keeps_only_its_last_attempt(tmp_path: Path) -> None:
    write_some(tmp_path)  # first attempt
    write_some(tmp_path)  # the rank ran again into the same directory
    rank = read_rank_file(tmp_path / "rank-0.jsonl")
    assert rank.earlier_attempts == 1
    assert len(rank.records) == 6 and len(rank.of_kind("step")) == 1
    assert "superseded" in rank.problems[-1]


@pytest.mark.parametrize("field", ["epoch", "step", "samples"])
def test_counters_beyond_32_bits_are_bad_lines(tmp_path: Path, field: str) -> None:
    line = (
        (
            '{"v":1,"run_id":"r","rank":0,"world_size":1,"kind":"step","t":0.1,"epoch":0,'
            '"step":0,"samples":1,"phases":{"data":0,"forward":0,"loss":0,"backward":0,'
            '"gradient_packing":0,"communication":0,"optimizer":0}}'
        )
        .replace(f'"{field}":0', f'"{field}":3000000000')
        .replace(f'"{field}":1', f'"{field}":3000000000')
    )
    with pytest.raises(BadRecord, match="out of range"):
        parse_line(line)


def test_files_that_are_not_rank_files_are_left_alone(tmp_path: Path) -> None:
    write_some(tmp_path, rank=0, world_size=1)
    (tmp_path / "rank-0 (1).jsonl").write_text("copy of a copy\n")
    (tmp_path / "rank-0-old.jsonl").write_text("older\n")
    (rank,) = read_run(tmp_path)
    assert rank.bad_lines == 0
