"""Input that lies or cannot be read, given to ingest and to the command line: each case ends
in one sentence that names the file, field, option or variable, never in a traceback and
never in a silent wrong store, with the same verdict on SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from records_factory import FakeRun, write_training_sweep
from sqlalchemy import Engine, insert, select

from cli import main as cli
from results_db.ingest import ingest_location
from results_db.models import Run, StepTiming, Sweep
from scalebench.errors import describe
from workers.records import MAX_LINE_BYTES, bounded_lines

DATA = Path(__file__).parent / "data"


def edit_manifest(sweep: Path, change: Callable[[dict], None]) -> None:
    data = json.loads((sweep / "sweep.json").read_text())
    change(data)
    (sweep / "sweep.json").write_text(json.dumps(data))


def stored(engine: Engine) -> tuple[set[str], set[str]]:
    """The sweep ids and run ids the database holds."""
    with engine.connect() as conn:
        return set(conn.execute(select(Sweep.id)).scalars()), set(
            conn.execute(select(Run.id)).scalars()
        )


def _group(index: int, **values: object) -> Callable[[dict], None]:
    return lambda data: data["groups"][index].update(values)


LYING_MANIFESTS: dict[str, tuple[Callable[[dict], None], str]] = {
    "a group of 0 workers": (_group(0, world_size=0), "'world_size' must be a whole number"),
    "a group size in words": (_group(0, world_size="2"), "'world_size' must be a whole number"),
    "a negative repeat": (_group(0, repeat=-1), "'repeat' must be a whole number from 0"),
    "an unknown group status": (_group(0, status="great"), "'status' must be one of planned"),
    "negative seconds": (_group(0, seconds=-5), "'seconds' must be a duration"),
    "a group listed twice": (
        lambda data: data["groups"].append(dict(data["groups"][0])),
        "groups[2]: run 'm-w1-r1' is listed twice",
    ),
    "an unknown task": (
        lambda data: data["request"].update(task="task9-nothing"),
        "its request names task 'task9-nothing', which this scalebench does not know",
    ),
    "a task that is not text": (
        lambda data: data["request"].update(task=7),
        "'request' names no task",
    ),
    "a sweep id that climbs out": (
        lambda data: data.update(sweep_id="../../elsewhere"),
        "a sweep id is one directory name",
    ),
    "an empty sweep id": (lambda data: data.update(sweep_id=""), "a sweep id is one directory"),
    "a trigger that is not text": (lambda data: data.update(trigger=[1]), "'trigger' is not text"),
    "an unknown trigger": (
        lambda data: data.update(trigger="whenever"),
        "its trigger must be one of manual, scheduled, cli, not 'whenever'",
    ),
    "a group's seconds beyond any time limit": (_group(0, seconds=1e308), "'seconds' must be"),
    "a run of another sweep": (
        lambda data: data.update(sweep_id="other"),
        "run 'm-w1-r1' is not one of this sweep's (they are named other-…)",
    ),
}


def _request(**values: object) -> Callable[[dict], None]:
    return lambda data: data["request"].update(values)


# A stored request is read by each field's own declaration, as ``run`` reads it.
for _name, _change, _words in (
    ("an unknown backend", _request(backend="carrier-pigeon"), "backend: must be one of"),
    ("a backend that is a number", _request(backend=3), "backend: must be one of"),
    ("worker counts in words", _request(world_sizes=["one"]), "workers: must be a whole"),
    ("a negative worker count", _request(world_sizes=[-1]), "workers: worker counts must"),
    ("a negative repeat count", _request(repeats=-2), "repeats: must be at least 1"),
    ("a seed in words", _request(seed="zero"), "seed: must be a whole number"),
    ("light in words", _request(light="yes"), "light: must be true or false"),
    ("a negative collective limit", _request(collective_timeout_s=-5), "collective_timeout_s"),
    ("a group limit of 1e308 s", _request(group_timeout_s=1e308), "group_timeout_s: must be at"),
    ("an unknown variant", _request(variant="chaotic"), "variant: must be one of sync"),
    ("a field no request has", _request(bogus=1), "bogus: no request has this field"),
):
    LYING_MANIFESTS[f"a request with {_name}"] = (_change, f"what no request can: {_words}")


@pytest.mark.parametrize("lie", list(LYING_MANIFESTS), ids=list(LYING_MANIFESTS))
def test_a_manifest_that_lies_is_refused_by_name_and_the_next_sweep_still_loads(
    engine: Engine, tmp_path: Path, lie: str
) -> None:
    change, says = LYING_MANIFESTS[lie]
    sweep = write_training_sweep(tmp_path, "m", [FakeRun(1), FakeRun(2)])
    edit_manifest(sweep, change)
    write_training_sweep(tmp_path, "z-good", [FakeRun(1)])
    lines: list[str] = []
    report = ingest_location(engine, str(tmp_path), lines.append)
    assert len(report.refused) == 1 and says in report.refused[0], report.refused
    assert report.refused[0].startswith("sweep ")
    assert "Traceback" not in "\n".join(lines) and "Error(" not in report.refused[0]
    assert stored(engine) == ({"z-good"}, {"z-good-w1-r1"})  # nothing of the lying sweep


def test_a_null_reason_reads_as_none_and_a_verdict_without_one_keeps_the_plans(
    engine: Engine, tmp_path: Path
) -> None:
    sweep = write_training_sweep(tmp_path, "n", [FakeRun(1), FakeRun(2, launcher_status="failed")])
    edit_manifest(sweep, _group(0, reason=None))
    edit_manifest(sweep, _group(1, reason="rank 1 was killed"))
    (sweep / "verdicts.jsonl").write_text(json.dumps({"run_id": "n-w2-r1", "status": "failed"}))
    report = ingest_location(engine, str(tmp_path))
    assert not report.refused and report.runs == 2
    with engine.connect() as conn:
        reasons = dict(conn.execute(select(Run.id, Run.reason)).all())
    assert reasons["n-w1-r1"] == "" and "rank 1 was killed" in reasons["n-w2-r1"]


def test_a_verdict_line_that_is_no_verdict_refuses_its_sweep_by_line(
    engine: Engine, tmp_path: Path
) -> None:
    sweep = write_training_sweep(tmp_path, "v", [FakeRun(1)])
    good = {"run_id": "v-w1-r1", "status": "succeeded", "reason": "", "seconds": 3.0}
    (sweep / "verdicts.jsonl").write_text(
        json.dumps(good) + "\n[1, 2]\n" + '{"run_id": "v-w1-r1", "status": "gr'  # cut short
    )
    report = ingest_location(engine, str(tmp_path))
    assert len(report.refused) == 1
    assert "verdicts.jsonl line 2 is not a verdict" in report.refused[0]
    assert stored(engine) == (set(), set())
    # Without the bad line, the cut-short last line is a verdict never completed: skipped.
    (sweep / "verdicts.jsonl").write_text(json.dumps(good) + "\n" + '{"run_id": "v-w1-r1", "s')
    report = ingest_location(engine, str(tmp_path))
    assert not report.refused and report.runs == 1


def test_run_folders_and_rank_files_the_manifest_does_not_account_for_are_said(
    engine: Engine, tmp_path: Path
) -> None:
    sweep = write_training_sweep(tmp_path, "u", [FakeRun(1), FakeRun(2)])
    shutil.copytree(sweep / "u-w2-r1", sweep / "u-w4-r1")  # on disk, not in the plan
    (sweep / "notes").mkdir()  # a folder without rank files is nobody's run
    for odd in ("rank--1.jsonl", "rank-0 (1).jsonl"):
        shutil.copy(sweep / "u-w2-r1" / "rank-1.jsonl", sweep / "u-w2-r1" / odd)
    report = ingest_location(engine, str(tmp_path))
    assert report.refused == ["u-w4-r1: a run folder that sweep.json does not list; not read"]
    assert "rank--1.jsonl: not a rank file name (rank-<r>.jsonl); not read" in report.problems
    assert "rank-0 (1).jsonl: not a rank file name (rank-<r>.jsonl); not read" in report.problems
    assert stored(engine) == ({"u"}, {"u-w1-r1", "u-w2-r1"})
    with engine.connect() as conn:
        ranks = set(conn.execute(select(StepTiming.rank).distinct()).scalars())
    assert ranks == {0, 1}


def _rewrite(path: Path, change: Callable[[list[dict]], None]) -> None:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    change(records)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _steps_backwards(records: list[dict]) -> None:
    steps = [r for r in records if r["kind"] == "step"]
    steps[5]["t"] = steps[2]["t"] - 0.5  # the clock jumped back


def test_step_times_that_go_back_refuse_the_run_with_the_lines(
    engine: Engine, tmp_path: Path
) -> None:
    sweep = write_training_sweep(tmp_path, "c", [FakeRun(1), FakeRun(2)])
    _rewrite(sweep / "c-w2-r1" / "rank-1.jsonl", _steps_backwards)
    report = ingest_location(engine, str(tmp_path))
    (refused,) = report.refused
    assert refused.startswith("c-w2-r1: rank-1.jsonl: step times go back, from ")
    assert "at line 8 to " in refused and "the run's timings cannot be trusted" in refused
    assert stored(engine) == ({"c"}, {"c-w1-r1"})
    with engine.connect() as conn:
        assert conn.execute(select(Sweep.outcome)).scalar_one() == "partial"


def test_step_times_that_stand_still_refuse_the_run(engine: Engine, tmp_path: Path) -> None:
    sweep = write_training_sweep(tmp_path, "c", [FakeRun(1), FakeRun(2)])

    def stand_still(records: list[dict]) -> None:
        for record in records:
            if record["kind"] == "step":
                record["t"] = 1.0

    _rewrite(sweep / "c-w2-r1" / "rank-1.jsonl", stand_still)
    report = ingest_location(engine, str(tmp_path))
    (refused,) = report.refused
    assert refused.startswith("c-w2-r1: rank-1.jsonl: step times stand still, 1 s at lines ")
    assert stored(engine) == ({"c"}, {"c-w1-r1"})


def test_a_new_attempt_of_a_rank_starts_its_clock_again(engine: Engine, tmp_path: Path) -> None:
    """A rank restarted into the same folder writes from t = 0 again: not a clock going back."""
    sweep = write_training_sweep(tmp_path, "a", [FakeRun(1)])
    rank_file = sweep / "a-w1-r1" / "rank-0.jsonl"
    rank_file.write_text(rank_file.read_text() * 2)
    report = ingest_location(engine, str(tmp_path))
    assert not report.refused and report.runs == 1


@pytest.mark.parametrize("target", ["/dev/zero", "folder", "fifo"])
def test_a_rank_file_that_is_no_regular_file_refuses_its_run_without_reading_it(
    engine: Engine, tmp_path: Path, target: str
) -> None:
    sweep = write_training_sweep(tmp_path, "d", [FakeRun(1), FakeRun(2)])
    rank_file = sweep / "d-w2-r1" / "rank-1.jsonl"
    rank_file.unlink()
    if target == "folder":
        rank_file.mkdir()
    elif target == "fifo":
        os.mkfifo(rank_file)  # no writer: opening it would wait for ever
    else:
        rank_file.symlink_to(target)  # endless: read, it would fill the memory
    report = ingest_location(engine, str(tmp_path))
    assert report.refused == [
        "d-w2-r1: rank-1.jsonl is not a regular file (a folder, a device, a pipe or a link "
        "to one), so the run is not read"
    ]
    assert stored(engine) == ({"d"}, {"d-w1-r1"})


def test_a_line_longer_than_the_cap_is_quarantined_and_the_run_loads(
    engine: Engine, tmp_path: Path
) -> None:
    sweep = write_training_sweep(tmp_path, "l", [FakeRun(1)])
    rank_file = sweep / "l-w1-r1" / "rank-0.jsonl"
    lines = rank_file.read_bytes().splitlines(keepends=True)
    huge = b'{"v": 3, "pad": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n'
    rank_file.write_bytes(b"".join([*lines[:3], huge, *lines[3:]]))
    report = ingest_location(engine, str(tmp_path))
    assert not report.refused and report.runs == 1 and report.quarantined_lines == 1
    assert report.problems == [f"rank-0.jsonl:4: a line longer than {MAX_LINE_BYTES:,} bytes"]
    with engine.connect() as conn:
        run = conn.execute(select(Run)).one()
    assert run.status == "succeeded" and run.step_records == 12


class Endless:
    """A file that gives ``blocks`` blocks of bytes without a line end, then ends."""

    def __init__(self, blocks: int) -> None:
        self.blocks = blocks

    def read(self, size: int) -> bytes:
        if not self.blocks:
            return b""
        self.blocks -= 1
        return b"0" * size


def test_lines_are_read_in_bounded_pieces() -> None:
    lines = list(bounded_lines(Endless(40), limit=1000))  # 40 MiB in one line
    assert [len(line) for line in lines] == [1001]
    lines = list(bounded_lines(_Bytes(b"a\n\nbb\n" + b"c" * 50 + b"\nd"), limit=10))
    assert lines == [b"a", b"", b"bb", b"c" * 11, b"d"]


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, size: int) -> bytes:
        head, self.data = self.data[:3], self.data[3:]  # small pieces: lines span reads
        return head


def test_an_error_in_words_is_a_sentence_not_a_repr() -> None:
    try:
        open(DATA)  # noqa: SIM115 - a folder
    except OSError as exc:
        assert describe(exc) == "cannot read data: Is a directory"
    assert describe(TypeError("bad operand")) == "bad operand"
    assert describe(RuntimeError()) == "an unexpected RuntimeError with no message"


# -- the command line ------------------------------------------------------------------------


def refused(capsys: pytest.CaptureFixture[str], says: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("scalebench: error: "), err
    assert says in lines[0] and "Traceback" not in err, lines[0]
    return lines[0]


EMPTY_PLACES = {
    "run --results": (
        ["run", "task0-allreduce", "--light", "--workers", "2", "--results", ""],
        "results: --results is empty",
    ),
    "run --database": (
        ["run", "task0-allreduce", "--light", "--workers", "2", "--database", ""],
        "database: --database is empty",
    ),
    "report --database": (["report", "x", "--database", ""], "database: --database is empty"),
    "report of nothing": (["report", ""], "sweep: the sweep is empty"),
    "ingest of nothing": (["ingest", ""], "location: the location is empty"),
    "export --out": (["export", "x", "--out", ""], "out: --out is empty"),
    "prices load of nothing": (["prices", "load", ""], "file: the file is empty"),
    "data --data-dir": (["data", "digits", "--data-dir", " "], "data_dir: --data-dir is empty"),
}


@pytest.mark.parametrize("case", list(EMPTY_PLACES))
def test_an_empty_place_is_refused_by_name_and_nothing_is_written(
    case: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv, says = EMPTY_PLACES[case]
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert cli.main(argv) == 2
    refused(capsys, says)
    assert list(here.iterdir()) == []  # nothing in the current folder


def test_an_empty_results_setting_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", "")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "task0-allreduce", "--light", "--workers", "2", "--no-ingest"]
    assert cli.main(argv) == 2
    refused(capsys, "SCALEBENCH_RESULTS_URI is empty")
    assert list(tmp_path.iterdir()) == []


def test_report_reads_and_never_creates_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no" / "such" / "results.db"
    for argv in (["report", "some-sweep"], ["export", "some-sweep"], ["prices", "list"]):
        assert cli.main([*argv, "--database", f"sqlite:///{missing}"]) == 2
        refused(capsys, f"database: there is no results database at {missing}")
    assert not (tmp_path / "no").exists()


def test_a_sqlite_file_in_a_folder_that_does_not_exist_is_refused_not_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped path would otherwise get a new, empty database in new folders; only the
    default database's folder (var/) is made."""
    missing = tmp_path / "no" / "such" / "results.db"
    url = f"sqlite:///{missing}"
    for argv in (["ingest", str(DATA / "sweep-light")], ["db", "upgrade"]):
        assert cli.main([*argv, "--database", url]) == 2
        refused(capsys, f"the SQLite database {missing} is in a folder that does not exist")
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", url)
    price = ["--regular", "0.35", "--preemptible", "0.11", "--valid-from", "2026-01-01"]
    assert cli.main(["prices", "set", "gpu", "t4", *price]) == 2
    refused(capsys, "(--database or SCALEBENCH_DATABASE_URL)")
    assert not (tmp_path / "no").exists()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCALEBENCH_DATABASE_URL")
    assert cli.main(["db", "upgrade"]) == 0  # the default, var/scalebench.db: its folder made
    assert (tmp_path / "var" / "scalebench.db").is_file()


def test_db_upgrade_of_a_database_in_memory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for url in ("sqlite://", "sqlite:///:memory:"):
        assert cli.main(["db", "upgrade", "--database", url]) == 2
        refused(capsys, "is an in-memory SQLite database, gone when this command ends")


@pytest.mark.parametrize("url", ["mysql://u@h/d", "http://example.org/db"])
def test_a_database_scalebench_cannot_use_leaves_nothing_in_the_working_folder(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["db", "upgrade", "--database", url]) == 2
    refused(capsys, "(--database or SCALEBENCH_DATABASE_URL)")
    assert list(tmp_path.iterdir()) == []  # no lock file beside a database that is no file


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_data_folder_setting_is_refused_naming_it(
    value: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCALEBENCH_DATA_DIR", value)
    assert cli.main(["data", "digits"]) == 2
    refused(capsys, f"SCALEBENCH_DATA_DIR={value!r} names no folder")


@pytest.mark.parametrize(
    ("host", "port", "says"),
    [
        ("999.1.1.1", "8050", "host: '999.1.1.1' is no address to listen on"),
        ("192.0.2.1", "8050", "host: cannot listen on 192.0.2.1:8050"),  # not this machine's
    ],
)
def test_a_dashboard_address_that_cannot_be_listened_on_is_refused_naming_it(
    host: str, port: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["dashboard", "--host", host, "--port", port]) == 2
    refused(capsys, says)


def test_a_dashboard_port_in_use_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["dashboard", "--host", "127.0.0.1", "--port", str(port)]) == 2
    refused(capsys, f"port: cannot listen on 127.0.0.1:{port}: Address already in use")


def test_a_sweep_id_too_long_for_a_file_name_is_looked_up_not_refused_as_a_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert cli.main(["ingest", str(DATA / "sweep-light"), "--database", url]) == 0
    capsys.readouterr()
    assert cli.main(["report", "s" * 300, "--database", url]) == 2
    refused(capsys, f"sweep: sweep '{'s' * 300}' is not in the results database")


def test_report_of_a_folder_whose_sweep_is_refused_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_training_sweep(tmp_path, "r", [FakeRun(1)])
    edit_manifest(sweep, lambda data: data["request"].update(task="task9-nothing"))
    assert cli.main(["report", str(sweep)]) == 2
    refused(capsys, "sweep: r: its request names task 'task9-nothing'")


def _sweep_in(database_url: str, tmp_path: Path, sweep_id: str) -> None:
    """A database holding a sweep with a run under ``sweep_id``, written past ingest's
    checks (as an older scalebench could have stored it)."""
    from results_db.database import make_engine, upgrade

    write_training_sweep(tmp_path / "records", "e", [FakeRun(1)])
    upgrade(database_url)
    engine = make_engine(database_url)
    ingest_location(engine, str(tmp_path / "records"))
    with engine.begin() as conn:
        row = conn.execute(select(Sweep.__table__)).one()._asdict()
        conn.execute(insert(Sweep).values({**row, "id": sweep_id}))
        run = conn.execute(select(Run.__table__)).one()._asdict()
        conn.execute(insert(Run).values({**run, "id": f"{sweep_id}-run", "sweep_id": sweep_id}))
    engine.dispose()


def test_export_writes_nothing_outside_its_folder(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sweep_in(database_url, tmp_path, "../escaped")
    out = tmp_path / "exports" / "here"
    argv = ["export", "../escaped", "--out", str(out), "--database", database_url]
    assert cli.main(argv) == 2
    refused(capsys, "would be written outside --out")
    assert not (tmp_path / "exports").exists()
    # A folder that does not exist yet is made, parents and all.
    assert cli.main(["export", "e", "--out", str(out), "--database", database_url]) == 0
    written = capsys.readouterr().out.split()
    assert written and all(Path(path).parent == out for path in written)


def test_export_into_a_link_to_nothing_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    _sweep_in(url, tmp_path, "other")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert cli.main(["export", "e", "--out", str(dangling), "--database", url]) == 2
    refused(capsys, f"cannot use {dangling}: File exists")
    assert not (tmp_path / "nowhere").exists()


def test_report_and_export_read_a_database_of_each_kind(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sweep_in(database_url, tmp_path, "other")
    assert cli.main(["report", "e", "--database", database_url]) == 0
    assert "succeeded" in capsys.readouterr().out
    assert cli.main(["regressions", "nothing-here", "--database", database_url]) == 2
    refused(capsys, "sweep: no sweep 'nothing-here' in the results database")


@pytest.mark.parametrize("revision", ["nope", "0009@-20", "0009@+3"])
def test_a_revision_that_cannot_be_reached_is_refused_on_both_databases(
    database_url: str, revision: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["db", "upgrade", "--revision", revision, "--database", database_url]) == 2
    refused(capsys, "revision: ")


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--alpha", "nan", "alpha: must be a significance level between 0 and 1, got nan"),
        ("--alpha", "1.5", "alpha: must be a significance level"),
        ("--window", "0", "window: must be from 1 to"),
        ("--window", "-3", "window: must be from 1 to"),
        ("--min-change", "inf", "min_change: must be a relative change of 0 or more"),
        ("--min-change", "-0.1", "min_change: must be a relative change of 0 or more"),
    ],
)
def test_a_regression_rule_no_comparison_can_use_is_refused_by_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, says: str
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert cli.main(["ingest", str(DATA / "sweep-light"), "--database", url]) == 0
    capsys.readouterr()
    sweep_id = json.loads((DATA / "sweep-light" / "sweep.json").read_text())["sweep_id"]
    assert cli.main(["regressions", sweep_id, f"{option}={value}", "--database", url]) == 2
    refused(capsys, says)


# -- the dashboard and the nightly -----------------------------------------------------------------


def test_a_database_of_an_older_schema_gets_the_503_page(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import html

    from dash_app import data
    from dash_app.app import create_app
    from results_db.database import upgrade

    monkeypatch.setattr(data, "HEALTH_TTL_S", 0.0)
    upgrade(database_url, "0008")  # before the contention and hardware columns
    server = create_app(database_url, stylesheets=[]).server.test_client()
    for path in ("/", "/runs", "/scaling?sweep=x"):
        answer = server.get(path)
        text = html.unescape(answer.get_data(as_text=True))
        assert answer.status_code == 503, (path, text[:500])
        assert "has an older scalebench schema than this dashboard reads" in text
        assert "scalebench db upgrade" in text and "no such column" not in text
    upgrade(database_url)
    assert server.get("/").status_code == 200


def test_the_nightly_refuses_conf_keys_as_the_task_dags_do() -> None:
    from cli.embedded import conf_refusal
    from operators.nightly_dag import NIGHTLY_DAG_ID

    assert conf_refusal(NIGHTLY_DAG_ID, {}) is None
    assert conf_refusal(NIGHTLY_DAG_ID, {"workers": [1], "bogus": 1}) == (
        "bogus: unknown fields 'bogus', 'workers'; the nightly run takes no fields (its "
        "settings are the SCALEBENCH_NIGHTLY_* variables)"
    )
    task_dag = conf_refusal("task0_allreduce", {"bogus": 1})
    assert task_dag is not None and task_dag.startswith("bogus: unknown field 'bogus'")


@pytest.mark.slow  # a whole DAG run: beside the other DAG runs, in an Airflow already loaded
def test_the_nightly_dag_fails_its_validate_on_a_conf_key(
    airflow_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operators.nightly_dag import build_nightly_dag
    from scalebench.nightly import NightlySettings

    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "results"))
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", f"sqlite:///{tmp_path / 'r.db'}")
    dag = build_nightly_dag(NightlySettings.from_env({}))
    run = dag.test(run_conf={"bogus": 1})
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    validates = {task: state for task, state in states.items() if task.endswith(".validate")}
    assert validates and set(validates.values()) == {"failed"}, states
    # Nothing ran but the wait for the night before (a run started by hand does not wait)
    assert states.pop("earlier_night_done") == "success"
    assert "success" not in set(states.values()), states
    assert not (tmp_path / "results").exists()  # nothing was planned or started


# -- manifests that cannot be read to their end, JSON nested too deep ---------------------------


def _finishes(work: Callable[[], object], fifos: list[Path], seconds: float = 30.0) -> object:
    """``work()``'s result, run on a thread; fails if it has not finished in ``seconds`` (a
    read of a pipe without a writer waits for ever). The pipes are then opened for writing
    and closed, so that a reader still waiting gets its end and the thread ends."""
    import threading

    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(work()), daemon=True)
    thread.start()
    thread.join(seconds)
    for fifo in fifos:
        with contextlib.suppress(OSError):  # nobody reads it: nothing to release
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert done, f"still reading after {seconds:.0f} s"
    return done[0]


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("sweep.json", "fifo"),
        ("sweep.json", "folder"),
        ("sweep.json", "nowhere"),
        ("verdicts.jsonl", "fifo"),
    ],
)
def test_a_manifest_that_is_no_regular_file_refuses_its_sweep_without_reading_it(
    engine: Engine, tmp_path: Path, name: str, target: str
) -> None:
    sweep = write_training_sweep(tmp_path, "f", [FakeRun(1)])
    write_training_sweep(tmp_path, "z-good", [FakeRun(1)])
    path = sweep / name
    path.unlink(missing_ok=True)
    if target == "fifo":
        os.mkfifo(path)  # no writer: opening it would wait for ever
    elif target == "folder":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / target)  # a link to nothing
    fifos = [path] if target == "fifo" else []
    report = _finishes(lambda: ingest_location(engine, str(tmp_path)), fifos)
    assert report.refused == [
        f"sweep {sweep / 'sweep.json'}: {name} is not a regular file (a folder, a device, a "
        "pipe, or a link to one or to nothing), so the sweep is not read"
    ]
    assert stored(engine) == ({"z-good"}, {"z-good-w1-r1"})


def test_a_manifest_nested_too_deep_is_refused_as_not_json(engine: Engine, tmp_path: Path) -> None:
    sweep = write_training_sweep(tmp_path, "n", [FakeRun(1)])
    (sweep / "sweep.json").write_text("[" * 10_000 + "]" * 10_000)
    report = ingest_location(engine, str(tmp_path))
    assert report.refused == [
        f"sweep {sweep / 'sweep.json'}: not JSON (nested deeper than it can be read)"
    ]


def test_a_conf_nested_too_deep_is_refused_before_airflow_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cli.embedded import parse_args

    with pytest.raises(SystemExit) as exit_:
        parse_args(["task0_allreduce", '{"workers": ' + "[" * 5_000 + "]" * 5_000 + "}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "error: conf is not JSON: nested deeper than it can be read" in err
    assert "Traceback" not in err


def test_a_kubernetes_setting_nested_too_deep_is_refused_naming_it() -> None:
    from operators.kubernetes.settings import KubernetesSettings

    deep = "{" + '"a": {' * 5_000 + "}" * 5_000 + "}"
    with pytest.raises(ValueError, match=r"^SCALEBENCH_K8S_LABELS: must be a JSON object \(its"):
        KubernetesSettings.from_env({"SCALEBENCH_K8S_LABELS": deep})


@pytest.mark.parametrize(
    ("location", "says"),
    [
        ("http://[::1/sweeps", "Invalid IPv6 URL"),  # a URL the HTTP filesystem cannot parse
        ("data:text/plain,sweeps", "its filesystem cannot list a folder"),  # no // either
    ],
)
def test_a_remote_location_the_filesystem_cannot_read_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], location: str, says: str
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert cli.main(["ingest", location, "--database", url]) == 2
    refused(capsys, f"location: cannot read {location}: {says}")


def test_a_price_file_the_csv_reader_cannot_read_is_refused_by_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    prices = tmp_path / "prices.csv"
    header = "kind,name,regular_per_hour,preemptible_per_hour,valid_from,source\n"
    row = "instance,made-up-machine,0.19,0.04,2026-01-01,"
    prices.write_text(header + row + "a note\n" + row + "x" * 200_000 + "\n")  # over the limit
    assert cli.main(["db", "upgrade", "--database", url]) == 0
    capsys.readouterr()
    assert cli.main(["prices", "load", str(prices), "--database", url]) == 2
    refused(capsys, f"file: {prices}: not CSV the price table reads after line 2 (field larger")
    assert cli.main(["prices", "list", "--database", url]) == 0
    assert "made-up-machine" not in capsys.readouterr().out  # no row of the file was stored


@pytest.mark.parametrize(
    ("name", "source", "says"),
    [
        ("bad\nname", "by hand", "name: must be one line of printable text, got 'bad\\nname'"),
        ("tab\tname", "by hand", "name: must be one line of printable text, got 'tab\\tname'"),
        ("n1", "a\x00b", "source: must not hold a NUL character"),
    ],
)
def test_a_price_name_or_source_no_table_can_show_is_refused_on_both_databases(
    database_url: str, capsys: pytest.CaptureFixture[str], name: str, source: str, says: str
) -> None:
    from results_db.service import CommandError, price_values

    raw = {"kind": "instance", "name": name, "regular_per_hour": "0.19"}
    raw |= {"preemptible_per_hour": "0.04", "valid_from": "2026-01-01", "source": source}
    with pytest.raises(CommandError) as refusal:
        price_values(raw, "prices.csv line 2: ")
    assert str(refusal.value) == f"prices.csv line 2: {says}"
    if "\x00" in source:
        return  # no command-line argument can hold a NUL
    argv = ["prices", "set", "instance", name, "--regular=0.19", "--preemptible=0.04"]
    argv += ["--valid-from=2026-01-01", "--source", source, "--database", database_url]
    assert cli.main(["db", "upgrade", "--database", database_url]) == 0
    capsys.readouterr()
    assert cli.main(argv) == 2
    refused(capsys, says)
