"""A results filesystem that fills up while a sweep runs, on a real small filesystem.

Each test mounts a tmpfs of its own (root only: skipped, with the reason,
where mounting is not permitted) and fills it to the free space it wants, then
runs light Task 0 with the real local launcher. Wanted: one line naming the
filesystem instead of tracebacks, the group recorded ``failed: no space left
on <mount point>``, and nothing half-written (every record line, verdict and
``sweep.json`` readable).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from results_db.database import make_engine
from results_db.models import Run, Sweep
from scalebench import manifest
from scalebench.diskspace import mount_point, no_space_reason
from scalebench.sweep import validate_request
from tests.small_disk import SIZE, fill, free_bytes  # noqa: F401  (small_disk: conftest)


def readable(sweep_dir: Path) -> None:
    """Every file of the sweep reads whole: ``sweep.json``, its verdicts, each record line."""
    done = manifest.load(sweep_dir)
    assert done.finished_at is not None
    assert not (sweep_dir / manifest.VERDICTS).exists()  # folded into sweep.json
    assert not (sweep_dir / manifest.RESERVE).exists()  # given back
    for rank_file in sweep_dir.glob("*/rank-*.jsonl"):
        text = rank_file.read_text()
        assert text == "" or text.endswith("\n"), rank_file
        for line in text.splitlines():
            json.loads(line)


def test_the_mount_point_is_what_the_reason_names(small_disk: Path) -> None:
    assert mount_point(small_disk / "results" / "not-yet" / "run") == small_disk
    assert no_space_reason(small_disk / "x") == f"no space left on {small_disk}"


def test_a_record_that_does_not_fit_is_not_half_written(small_disk: Path) -> None:
    """The records file ends with a whole record after a write the disk could not take."""
    from workers.records import RecordWriter, read_rank_file

    writer = RecordWriter(small_disk / "run", "r", rank=0, world_size=1)
    fill(small_disk, leave=6000)
    written = 0
    with pytest.raises(OSError, match="No space left"):
        for step in range(10_000):
            writer.write("event", float(step), event="start", note="x" * 2500)
            written += 1
    writer.close()
    assert written >= 1
    text = writer.path.read_text()
    assert text.endswith("\n") and len(text.splitlines()) == written
    assert len(read_rank_file(writer.path).records) == written


@pytest.mark.slow
def test_a_group_whose_disk_fills_is_recorded_failed_with_the_filesystem_named(
    small_disk: Path, tmp_path: Path
) -> None:
    """A few KB left: both ranks stop on their first large records. One line per rank and
    one for the group, no traceback; the run is stored failed for that reason and the
    sweep's files all read."""
    results = small_disk / "results"
    database = f"sqlite:///{tmp_path / 'results.db'}"  # elsewhere: the database has room
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "SCALEBENCH_RESULTS_URI": str(results),
        "SCALEBENCH_DATABASE_URL": database,
    }
    results.mkdir()
    fill(small_disk, leave=manifest.RESERVE_BYTES + 24 * 1024)

    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "run", "task0-allreduce", "--workers", "2", "--light"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output and "Logging error" not in output, output
    reason = f"no space left on {small_disk}"
    assert "failed in" in output and f": {reason}\n" in output, output
    assert f"the 2 other group(s) not started: {reason}" in output, output
    [sweep_dir] = results.iterdir()
    readable(sweep_dir)
    engine = make_engine(database)
    with engine.connect() as conn:
        runs = conn.execute(select(Run.id, Run.status, Run.reason).order_by(Run.id)).all()
        outcome = conn.execute(select(Sweep.outcome)).scalar_one()
    engine.dispose()
    assert [(status, why) for _, status, why in runs] == [
        ("failed", reason),
        ("failed", f"not started: {reason}"),
        ("failed", f"not started: {reason}"),
    ]
    assert outcome == "failed"


@pytest.mark.slow
def test_a_disk_that_fills_after_the_last_group_still_gets_its_sweep_json(
    small_disk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group succeeds and is loaded; then something else takes the disk's last bytes.
    Closing the sweep (its final ``sweep.json``) uses the space the sweep set aside."""
    from cli.run import load_group, run_sweep

    database = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    request = validate_request(task="task0-allreduce", workers=[2], light=True, repeats=1)
    load = load_group(database)

    def load_then_fill(group) -> None:  # type: ignore[no-untyped-def]
        load(group)
        fill(small_disk, leave=0)

    sweep_dir, status = run_sweep(request, small_disk / "results", publish=load_then_fill)

    assert status == 0
    assert free_bytes(small_disk) > 0  # the reserve, given back after sweep.json was written
    readable(sweep_dir)
    assert [g.status for g in manifest.load(sweep_dir).groups] == ["succeeded"]
    engine = make_engine(database)
    with engine.connect() as conn:
        assert conn.execute(select(Run.status)).scalars().all() == ["succeeded"]
    engine.dispose()


def test_an_export_to_a_full_disk_is_refused_naming_the_file_and_leaves_nothing_half_written(
    small_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from records_factory import FakeRun, write_training_sweep

    from cli import main as cli

    url = f"sqlite:///{tmp_path / 'r.db'}"
    write_training_sweep(tmp_path / "sweeps", "sid", [FakeRun(1), FakeRun(2)])
    assert cli.main(["ingest", str(tmp_path / "sweeps"), "--database", url]) == 0
    out = small_disk / "exports"
    out.mkdir()
    fill(small_disk, 2048)
    capsys.readouterr()
    assert cli.main(["export", "sid", "--out", str(out), "--database", url]) == 2
    err = capsys.readouterr().err
    assert "error: out: cannot write" in err and "No space left on device" in err, err
    assert "Traceback" not in err
    assert list(out.iterdir()) == []
