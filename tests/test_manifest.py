"""The sweep manifest: verdicts folded in, and a sweep closed however it ended."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from scalebench import manifest
from scalebench.manifest import GroupEntry, Manifest

REASONS = {"started_reason": "stopped", "unstarted_reason": "never started"}


def planned_sweep(root: Path, groups: int = 3) -> Path:
    sweep_dir = root / "s"
    entries = tuple(GroupEntry(f"s-w1-r{i + 1}", 1, i) for i in range(groups))
    manifest.create(
        sweep_dir,
        Manifest(
            sweep_id="s",
            trigger="manual",
            created_at="",
            code_version="",
            config_hash="",
            request={"task": "t"},
            groups=entries,
        ),
    )
    return sweep_dir


def statuses(sweep_dir: Path) -> dict[str, tuple[str, str]]:
    return {g.run_id: (g.status, g.reason) for g in manifest.load(sweep_dir).groups}


def test_closing_settles_every_group_without_a_verdict_and_finishes(tmp_path: Path) -> None:
    sweep_dir = planned_sweep(tmp_path)
    manifest.record_verdict(sweep_dir, "s-w1-r1", "succeeded", seconds=3.0)
    (sweep_dir / "s-w1-r2").mkdir()  # it started, and its launcher never said how it ended
    closed = manifest.close(sweep_dir, grace_s=0, **REASONS)
    assert statuses(sweep_dir) == {
        "s-w1-r1": ("succeeded", ""),
        "s-w1-r2": ("cancelled", "stopped"),
        "s-w1-r3": ("skipped", "never started"),
    }
    assert closed.finished_at and not (sweep_dir / manifest.VERDICTS).exists()
    on_disk = json.loads((sweep_dir / "sweep.json").read_text())
    assert on_disk["finished_at"] == closed.finished_at


def test_closing_waits_for_the_verdict_of_a_group_still_stopping(tmp_path: Path) -> None:
    """Airflow may start the teardown while a killed task is still stopping its ranks:
    the verdict that task records wins over "cancelled"."""
    sweep_dir = planned_sweep(tmp_path, groups=1)
    (sweep_dir / "s-w1-r1").mkdir()

    def launcher_stops_its_ranks() -> None:
        time.sleep(1.0)
        manifest.record_verdict(sweep_dir, "s-w1-r1", "cancelled", "the Airflow task was stopped")

    stopping = threading.Thread(target=launcher_stops_its_ranks)
    stopping.start()
    manifest.close(sweep_dir, grace_s=30, **REASONS)
    stopping.join()
    assert statuses(sweep_dir) == {"s-w1-r1": ("cancelled", "the Airflow task was stopped")}


def test_a_group_whose_ranks_died_silently_is_settled_at_once(tmp_path: Path) -> None:
    import os

    sweep_dir = planned_sweep(tmp_path, groups=1)
    run_dir = sweep_dir / "s-w1-r1"
    run_dir.mkdir()
    (run_dir / "rank-0.jsonl").write_text("{}\n")
    long_ago = time.time() - 60
    for path in (run_dir, run_dir / "rank-0.jsonl"):
        os.utime(path, (long_ago, long_ago))
    began = time.monotonic()
    manifest.close(sweep_dir, grace_s=30, **REASONS)
    assert time.monotonic() - began < 2
    assert statuses(sweep_dir) == {"s-w1-r1": ("cancelled", "stopped")}


def test_closing_a_sweep_twice_changes_nothing_but_the_finishing_time(tmp_path: Path) -> None:
    sweep_dir = planned_sweep(tmp_path)
    manifest.close(sweep_dir, grace_s=0, **REASONS)
    first = statuses(sweep_dir)
    manifest.close(sweep_dir, grace_s=0, started_reason="other", unstarted_reason="other")
    assert statuses(sweep_dir) == first


def test_a_group_run_again_starts_from_an_empty_run_directory(tmp_path: Path) -> None:
    from operators.training_group import set_aside_earlier_attempt

    run_dir = tmp_path / "s-w2-r1"
    assert set_aside_earlier_attempt(run_dir) is None
    for attempt in (1, 2):
        run_dir.mkdir()
        (run_dir / "rank-0.jsonl").write_text(f"attempt {attempt}\n")
        aside = set_aside_earlier_attempt(run_dir)
        assert aside == tmp_path / f"s-w2-r1.attempt-{attempt}"
        assert (aside / "rank-0.jsonl").read_text() == f"attempt {attempt}\n"
        assert not run_dir.exists()


def test_a_sweep_is_closed_only_when_the_process_that_ran_it_is_gone(tmp_path: Path) -> None:
    import subprocess
    import sys

    here = manifest.this_process()
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    gone = {**here, "pid": int(ended.stdout)}
    assert not manifest.launcher_gone(here)
    assert manifest.launcher_gone(gone)
    assert manifest.launcher_gone({**here, "started": here["started"] - 1})  # the id reused
    assert not manifest.launcher_gone({**gone, "host": "another-host"})  # not judged from here

    alive, dead = planned_sweep(tmp_path / "a"), planned_sweep(tmp_path / "d")
    for sweep_dir, runner in ((alive, here), (dead, gone)):
        data = json.loads((sweep_dir / "sweep.json").read_text())
        (sweep_dir / "sweep.json").write_text(json.dumps({**data, "runner": runner}))
    (dead / "s-w1-r1").mkdir()  # the group that was running
    assert manifest.close_vanished(tmp_path / "a") == []
    (closed,) = manifest.close_vanished(tmp_path / "d")
    assert closed.finished_at is not None
    vanished = manifest.LAUNCHER_VANISHED
    assert statuses(dead) == {
        "s-w1-r1": ("cancelled", vanished),
        "s-w1-r2": ("skipped", vanished),
        "s-w1-r3": ("skipped", vanished),
    }
    assert manifest.load(alive).finished_at is None


def test_live_results_publish_while_the_group_runs_and_stop_with_it() -> None:
    from operators.training_group import LiveResults

    calls: list[float] = []
    with LiveResults(lambda: calls.append(time.monotonic()), 0.05):
        time.sleep(0.5)
    count = len(calls)
    assert 4 <= count <= 11
    time.sleep(0.2)
    assert len(calls) == count  # nothing after the group ended
    with LiveResults(lambda: calls.append(0.0), 0):  # 0: only the final load
        time.sleep(0.1)
    assert len(calls) == count


def test_a_verdict_is_one_appended_line_and_sweep_json_is_written_twice(tmp_path: Path) -> None:
    """Recording a verdict costs the same in a sweep of 500 groups as in one of 1: the plan
    (``sweep.json``) is written when the sweep starts and when it finishes, never between."""
    sweep_dir = planned_sweep(tmp_path, groups=500)
    plan = (sweep_dir / "sweep.json").stat()
    for i in range(500):
        manifest.record_verdict(sweep_dir, f"s-w1-r{i + 1}", "succeeded", seconds=1.0)
    after = (sweep_dir / "sweep.json").stat()
    assert (after.st_mtime_ns, after.st_ino) == (plan.st_mtime_ns, plan.st_ino)
    lines = (sweep_dir / manifest.VERDICTS).read_text().splitlines()
    assert len(lines) == 500 and max(len(line) for line in lines) < 120
    done = manifest.finish(sweep_dir)
    assert all(g.status == "succeeded" for g in done.groups)
    # The finished plan replaced the old file whole; no temporary file is left beside it,
    # and it may be read as a plain write allows (not only by its writer).
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["sweep.json"]
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE((sweep_dir / "sweep.json").stat().st_mode) == 0o666 & ~mask
    assert json.loads((sweep_dir / "sweep.json").read_text())["finished_at"] == done.finished_at


def test_a_verdict_belongs_to_its_attempt_and_a_superseded_try_decides_nothing(
    tmp_path: Path,
) -> None:
    """A scheduler that restarted resets an orphaned task and starts try 2 while try 1 is
    still stopping: try 1's "cancelled" arrives while try 2 trains and must not overwrite
    it. Until try 2's own verdict the group is running again (``planned``), whatever try 1
    had decided; a sweep closed or cancelled (unsigned verdicts) still counts."""
    sweep_dir = planned_sweep(tmp_path, groups=2)
    manifest.start_attempt(sweep_dir, "s-w1-r1", "try 1")
    manifest.record_verdict(sweep_dir, "s-w1-r1", "failed", "rank 0 crashed", attempt="try 1")
    assert statuses(sweep_dir)["s-w1-r1"] == ("failed", "rank 0 crashed")
    manifest.start_attempt(sweep_dir, "s-w1-r1", "try 2")  # a retry: running again
    (entry, _) = manifest.load(sweep_dir).groups
    assert (entry.status, entry.owner["attempt"]) == ("planned", "try 2")
    assert entry.owner["pid"] == os.getpid()
    manifest.record_verdict(sweep_dir, "s-w1-r1", "cancelled", "stopped", attempt="try 1")
    assert statuses(sweep_dir)["s-w1-r1"] == ("planned", "")  # try 1 is late: ignored
    manifest.record_verdict(sweep_dir, "s-w1-r1", "succeeded", seconds=4.0, attempt="try 2")
    manifest.record_verdict(sweep_dir, "s-w1-r1", "cancelled", "stopped", attempt="try 1")
    assert statuses(sweep_dir)["s-w1-r1"] == ("succeeded", "")
    manifest.cancel(sweep_dir, None, "the sweep was stopped")
    finished = manifest.finish(sweep_dir)  # folded into sweep.json: read back the same
    assert [(g.status, g.owner and g.owner["attempt"]) for g in finished.groups] == [
        ("succeeded", "try 2"),
        ("skipped", None),
    ]
    assert manifest.load(sweep_dir) == finished


def test_a_verdict_keeps_the_image_its_pods_ran_through_finishing(tmp_path: Path) -> None:
    """A Kubernetes group's verdict says which image its pods ran, as the kubelet resolved
    it, beside their QoS class; a local group's says nothing of either."""
    sweep_dir = planned_sweep(tmp_path, groups=2)
    digest = "registry.example/worker@sha256:" + "ab" * 32
    manifest.record_verdict(
        sweep_dir, "s-w1-r1", "succeeded", "", 4.0, qos_class="Guaranteed", image_digest=digest
    )
    manifest.record_verdict(sweep_dir, "s-w1-r2", "succeeded", seconds=4.0)
    lines = [json.loads(line) for line in (sweep_dir / manifest.VERDICTS).read_text().splitlines()]
    assert lines[0]["image_digest"] == digest and "image_digest" not in lines[1]
    assert [g.image_digest for g in manifest.load(sweep_dir).groups] == [digest, ""]
    finished = manifest.finish(sweep_dir)  # folded into sweep.json: read back the same
    assert [(g.qos_class, g.image_digest) for g in finished.groups] == [
        ("Guaranteed", digest),
        ("", ""),
    ]
    assert manifest.load(sweep_dir) == finished
    line = {"run_id": "s-w1-r1", "status": "succeeded", "image_digest": ["not", "text"]}
    (sweep_dir / manifest.VERDICTS).write_text(json.dumps(line) + "\n")
    with pytest.raises(manifest.BadManifest, match="'image_digest' is not text"):
        manifest.load(sweep_dir)


def test_closing_waits_while_the_process_running_a_group_is_alive(tmp_path: Path) -> None:
    """The teardown may start while the train task is still being stopped (its files
    untouched for seconds): it waits for that process, then settles the group; and a
    group run from this very process (``dags test``) is not waited for."""
    import subprocess
    import sys

    sweep_dir = planned_sweep(tmp_path, groups=1)
    run_dir = sweep_dir / "s-w1-r1"
    run_dir.mkdir()
    long_ago = time.time() - 60
    os.utime(run_dir, (long_ago, long_ago))
    task = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from scalebench import manifest; "
            "manifest.start_attempt(Path(sys.argv[1]), 's-w1-r1', 'try 1'); time.sleep(3)",
            str(sweep_dir),
        ]
    )
    deadline = time.monotonic() + 30
    while manifest.load(sweep_dir).groups[0].owner is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.utime(run_dir, (long_ago, long_ago))
    assert task.poll() is None  # still running (seconds more) when the teardown begins
    grace_s = 30
    began = time.monotonic()
    manifest.close(sweep_dir, grace_s=grace_s, quiet_s=1, **REASONS)
    # It waited for the process: it had ended (not yet collected by its parent, which counts
    # as ended) when close returned, before the grace ran out.
    assert task.poll() is not None and time.monotonic() - began < grace_s
    assert task.wait(timeout=30) == 0
    assert statuses(sweep_dir) == {"s-w1-r1": ("cancelled", "stopped")}

    here = planned_sweep(tmp_path / "here", groups=1)
    manifest.start_attempt(here, "s-w1-r1", "try 1")
    (here / "s-w1-r1").mkdir()
    os.utime(here / "s-w1-r1", (long_ago, long_ago))
    began = time.monotonic()
    manifest.close(here, grace_s=30, quiet_s=1, **REASONS)
    assert time.monotonic() - began < 2
