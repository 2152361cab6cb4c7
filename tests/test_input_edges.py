"""Inputs at the edge of what can be read or stored, on every entry point: a clear refusal
naming the field, file or setting, never a traceback, a silent drop or a row one database
keeps and the other refuses.

- whole numbers typed with thousands of leading zeros (options, settings, the form);
- a dashboard callback request whose JSON is nested deeper than Python can decode;
- values only PostgreSQL bounds (an integer beyond its column, a text longer than its
  ``VARCHAR``): held to the same bounds on SQLite, checked before anything is written;
- a rank file's line cut at the line limit: quarantined with its line number, even when what
  is left of it is white space;
- epochs of steps or evaluations that count down while time goes on: the run is refused;
- a machine's or a rank's CPU count beyond any machine's: the environment record is
  quarantined;
- a sweep or run folder this process may not enter, beside readable ones: refused by name;
- a URL or path setting with a line end or other white space around it, or a control
  character in it: refused naming the setting, before anything is created.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from records_factory import FakeRun, write_training_sweep
from sqlalchemy import Engine, Integer, String, select, text
from sqlalchemy.exc import DBAPIError

from results_db import models, schema_limits
from results_db.ingest import ingest_location
from results_db.models import Run
from scalebench import config, manifest
from scalebench.quantities import MAX_CPUS
from scalebench.request import SweepRequest
from scalebench.request_fields import InvalidParameter, RequestField
from scalebench.whole_numbers import NotWholeNumber, parse_whole
from workers.records import (
    MAX_LINE_BYTES,
    BadRecord,
    InconsistentRun,
    bounded_lines,
    check_consistent,
    parse_rank_lines,
    validate_record,
)


def examples(count: int) -> settings:
    """``count`` examples, the same ones on every run, no deadline (2 cores shared with
    other tests), nothing written into the checkout."""
    return settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


# --- whole numbers with thousands of leading zeros ----------------------------------------

WHOLE_FIELDS = [
    f.metadata["request_field"]
    for f in dataclasses.fields(SweepRequest)
    if "request_field" in f.metadata and f.metadata["request_field"].kind in ("int", "counts")
]


@examples(200)
@given(
    field=st.sampled_from(WHOLE_FIELDS),
    sign=st.sampled_from(["", "+", "-"]),
    zeros=st.integers(0, 9000),
    digits=st.text("0123456789", max_size=45),
    space=st.sampled_from(["", " ", "\t", " \n"]),
)
def test_a_whole_number_padded_with_any_number_of_zeros_is_read_as_its_digits(
    field: RequestField, sign: str, zeros: int, digits: str, space: str
) -> None:
    text = f"{space}{sign}{'0' * zeros}{digits}{space}"
    significant = digits.lstrip("0")
    try:
        value = field.read(text)
    except InvalidParameter as exc:
        assert exc.field == field.name and len(str(exc)) < 200, str(exc)[:300]
        if len(significant) > 40:
            assert "at most 40 digits" in exc.reason
        return
    assert len(significant) <= 40 and (zeros or digits)
    number = int(sign + (significant or "0"))
    assert value == (tuple([number]) if field.kind == "counts" else number)


@pytest.mark.parametrize(
    "option, maximum",
    [
        ("--repeats", 100),
        ("--seed", 2**63 - 1),
        ("--gpus-per-worker", 16),
        ("--threads-per-worker", 256),
        ("--max-epochs", 10000),
        ("--workers", 4096),
    ],
)
def test_the_command_line_reads_thousands_of_leading_zeros_as_the_number_they_pad(
    option: str, maximum: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    field = option.removeprefix("--").replace("-", "_")
    database = f"sqlite:///{tmp_path / 'r.db'}"
    given = "0" * 5000 + str(maximum + 1)  # its number just beyond the field's range
    argv = ["run", "task2a-logreg-epsilon", "--light", option, given]
    assert cli.main([*argv, "--results", str(tmp_path / "r"), "--database", database]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {field}: " in err, err[:400]
    assert f"at most {maximum}" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_settings_and_the_dashboards_port_read_leading_zeros_alike(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    monkeypatch.setenv("SCALEBENCH_MAX_WORKERS", "0" * 5000 + "8")
    assert config.max_workers() == 8
    monkeypatch.setenv("SCALEBENCH_MAX_WORKERS", "0" * 5000 + "9" * 50)
    with pytest.raises(
        config.BadSetting,
        match="SCALEBENCH_MAX_WORKERS must be a whole number of at most 40 digits",
    ):
        config.max_workers()
    assert cli.main(["dashboard", "--port", "0" * 5000 + "70000", "--database", "sqlite://"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "port: must be from 1 to 65535, got 70000" in err, err[:300]
    args = cli.build_parser().parse_args(["regressions", "s", "--window", "0" * 5000 + "5"])
    assert args.window == 5
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["regressions", "s", "--window", "9" * 5000])
    err = capsys.readouterr().err
    assert "--window: must be a whole number of at most 40 digits, got one of 5,000" in err
    assert len(err) < 1000, err[:300]
    assert parse_whole(" -0007 ") == -7 and parse_whole("0" * 10000) == 0
    for bad in ("", "+", "-", "1e3", "0x10", "٣", "1 2", "+-1"):
        with pytest.raises(NotWholeNumber, match="must be a whole number, got"):
            parse_whole(bad)


# --- the dashboard: bodies no decoder can read ------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b'{"output": "x.children", "inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"output": "x.children", "inputs": [{"id": "x", "property": "value", "value": '
        + b"[" * 50_000
        + b"]" * 50_000
        + b"}]}",
    ],
    ids=["lists", "objects", "inputs", "a value"],
)
def test_a_callback_body_nested_beyond_the_recursion_limit_gets_a_400_and_one_log_line(
    body: bytes, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from dash_app.app import create_app

    server = create_app(f"sqlite:///{tmp_path / 'r.db'}", stylesheets=[]).server
    caplog.set_level(logging.WARNING)
    caplog.clear()
    answer = server.test_client().post(
        "/_dash-update-component", data=body, content_type="application/json"
    )
    assert answer.status_code == 400
    assert "Traceback" not in answer.get_data(as_text=True)
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and not lines[0].exc_info, [r.getMessage()[:200] for r in lines]
    assert "callback request refused (RecursionError" in lines[0].getMessage()


# --- bounds only PostgreSQL enforces --------------------------------------------------------


def rewrite(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Rewrite the records of a rank file after ``change`` (a function of their list)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    change(records)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def stored_runs(engine: Engine) -> dict[str, tuple]:
    """Every stored run: its status, recompilations and network."""
    with engine.connect() as conn:
        rows = conn.execute(select(Run.id, Run.status, Run.recompilations, Run.network))
        return {r.id: (r.status, r.recompilations, r.network) for r in rows}


def finished(records: list[dict]) -> dict:
    return next(r for r in records if r.get("event") == "finished")


def start(records: list[dict]) -> dict:
    return next(r for r in records if r.get("event") == "start")


def test_an_integer_or_a_text_beyond_its_column_is_held_alike_on_both_databases(
    engine: Engine, tmp_path: Path
) -> None:
    """recompilations = 2**40 (an INTEGER column) and a network of 100 characters (a
    VARCHAR(40)): PostgreSQL refused both, SQLite stored both. Now both quarantine the record
    line, or refuse the run naming the column, and keep what was stored."""
    records = tmp_path / "records"
    write_training_sweep(records, "ok", [FakeRun(1)])
    many = write_training_sweep(records, "many", [FakeRun(1)])
    rewrite(
        many / "many-w1-r1" / "rank-0.jsonl", lambda rs: finished(rs).update(recompilations=2**40)
    )
    named = write_training_sweep(records, "named", [FakeRun(1)])
    rewrite(named / "named-w1-r1" / "rank-0.jsonl", lambda rs: start(rs).update(network="n" * 100))
    long = write_training_sweep(records, "long", [FakeRun(1)])
    data = json.loads((long / manifest.MANIFEST).read_text())
    data["groups"][0]["network"] = "x" * 100
    (long / manifest.MANIFEST).write_text(json.dumps(data))

    report = ingest_location(engine, str(records))
    assert report.refused == [
        "long-w1-r1: the run cannot be stored: run.network is 100 characters long; the "
        "database keeps at most 40"
    ], report.refused
    assert sorted(report.problems) == [
        "rank-0.jsonl:19: field 'recompilations' is 1099511627776, outside the database's "
        "range -2147483648..2147483647",
        "rank-0.jsonl:2: field 'network' is 100 characters long; the database keeps at most 40",
    ], report.problems
    runs = stored_runs(engine)
    assert "long-w1-r1" not in runs and runs["ok-w1-r1"] == ("succeeded", None, "host")
    assert runs["many-w1-r1"][1] is None and runs["named-w1-r1"][2] == "host"


def test_a_stored_run_stays_when_its_reading_again_cannot_be_stored(
    engine: Engine, tmp_path: Path
) -> None:
    sweep_dir = write_training_sweep(tmp_path, "sid", [FakeRun(1)])
    assert ingest_location(engine, str(tmp_path)).refused == []
    before = stored_runs(engine)
    data = json.loads((sweep_dir / manifest.MANIFEST).read_text())
    data["groups"][0]["network"] = "y" * 41
    (sweep_dir / manifest.MANIFEST).write_text(json.dumps(data))
    report = ingest_location(engine, str(tmp_path), replace=True)
    assert any("run.network is 41 characters long" in r for r in report.refused), report
    assert stored_runs(engine) == before


def bounded_columns() -> list[tuple[str, str]]:
    """Every column of the schema that PostgreSQL bounds: integers and VARCHAR(n)."""
    return [
        (table.name, column.name)
        for table in models.Base.metadata.sorted_tables
        for column in table.columns
        if isinstance(column.type, Integer)
        or (isinstance(column.type, String) and column.type.length is not None)
    ]


def test_every_bounded_column_is_checked_to_the_bound_postgresql_enforces(
    postgres_admin,
) -> None:
    """For each integer and VARCHAR(n) column of the schema, a value at its bound and one
    beyond: the check lets the first through and refuses the second, exactly as PostgreSQL
    does (each tried in a temporary column of the same type)."""
    from sqlalchemy.dialects import postgresql

    columns = bounded_columns()
    assert ("run", "recompilations") in columns and ("run", "network") in columns
    with postgres_admin.connect() as conn:
        for table_name, name in columns:
            table = models.Base.metadata.tables[table_name]
            kind = table.c[name].type
            spelled = kind.compile(dialect=postgresql.dialect())
            conn.execute(text(f"CREATE TEMP TABLE bound_probe (v {spelled})"))
            try:
                if isinstance(kind, String):
                    fits, beyond = ["a" * kind.length], ["a" * (kind.length + 1)]
                else:
                    low, high = schema_limits.integer_range(kind)  # type: ignore[misc]
                    fits, beyond = [low, high], [low - 1, high + 1]
                for value in fits:
                    assert schema_limits.value_problem(table, name, value) is None
                    conn.execute(text("INSERT INTO bound_probe VALUES (:v)"), {"v": value})
                for value in beyond:
                    problem = schema_limits.value_problem(table, name, value)
                    assert problem and problem.startswith(name), (table_name, name, value)
                    with pytest.raises(DBAPIError, match=r"out of range|too long"):
                        conn.execute(text("INSERT INTO bound_probe VALUES (:v)"), {"v": value})
            finally:
                conn.execute(text("DROP TABLE bound_probe"))


@pytest.mark.parametrize(("table_name", "name"), bounded_columns())
def test_bulk_rows_beyond_any_bounded_column_are_refused_naming_it(
    table_name: str, name: str
) -> None:
    table = models.Base.metadata.tables[table_name]
    kind = table.c[name].type
    if isinstance(kind, String):
        beyond = "a" * (kind.length + 1)
        fine = ["a", None, "b" * kind.length]
    else:
        beyond = schema_limits.integer_range(kind)[1] + 1  # type: ignore[index]
        fine = [0, None, 1]
    assert schema_limits.column_problems(table, {name: fine}) == []
    problems = schema_limits.column_problems(table, {name: [*fine, beyond, *fine]})
    assert len(problems) == 1 and problems[0].startswith(f"{table_name}.{name} is "), problems
    nul = (
        schema_limits.column_problems(table, {name: ["a\x00b"]}) if isinstance(kind, String) else []
    )
    assert not isinstance(kind, String) or "NUL character" in nul[0]


# --- a rank file's lines cut at the line limit ---------------------------------------------


def step_line(step: int, epoch: int = 0, t: float | None = None) -> bytes:
    """One valid step record of rank 0 of 1 (at ``t`` seconds, default 1 + ``step``), as a
    line without its end."""
    phases = dict.fromkeys(
        ("data", "forward", "loss", "backward", "gradient_packing", "communication", "optimizer"),
        0.01,
    )
    record = {
        "v": 3, "run_id": "r", "rank": 0, "world_size": 1, "kind": "step",
        "t": 1.0 + step if t is None else t, "epoch": epoch, "step": step,
        "samples": 8, "loss": 1.0, "lr": 0.1, "phases": phases,
    }  # fmt: skip
    return json.dumps(record).encode()


@examples(25)
@given(
    padding=st.one_of(
        st.integers(0, 64),
        st.integers(MAX_LINE_BYTES - 400, MAX_LINE_BYTES + 400),
        st.integers(MAX_LINE_BYTES + 400, 2 * MAX_LINE_BYTES),
    ),
    blank=st.sampled_from([b" ", b"\t", b"\r"]),
    before=st.booleans(),
)
def test_a_line_cut_at_the_limit_is_quarantined_by_number_whatever_it_is_padded_with(
    padding: int, blank: bytes, before: bool
) -> None:
    """White space around a step record: read while the line fits the limit, else the line
    is cut, and then quarantined with its number, never skipped as blank nor lost."""
    middle = blank * padding + step_line(1) if before else step_line(1) + blank * padding
    text = b"\n".join([step_line(0), middle, step_line(2)]) + b"\n"
    rank = parse_rank_lines(PurePath("rank-0.jsonl"), bounded_lines(io.BytesIO(text)))
    assert len(rank.records) + rank.bad_lines == 3, (len(rank.records), rank.bad_lines)
    if len(middle) > MAX_LINE_BYTES:
        assert rank.bad_lines == 1
        assert rank.problems == ["rank-0.jsonl:2: a line longer than 4,194,304 bytes"]
    else:
        assert rank.bad_lines == 0 and [r["step"] for r in rank.records] == [0, 1, 2]


def test_megabytes_of_spaces_before_a_step_quarantine_its_line_on_ingest(
    engine: Engine, tmp_path: Path
) -> None:
    sweep_dir = write_training_sweep(tmp_path, "sid", [FakeRun(1)])
    rank_file = sweep_dir / "sid-w1-r1" / "rank-0.jsonl"
    lines = rank_file.read_bytes().split(b"\n")
    assert b'"step"' in lines[3]
    lines[3] = b" " * (MAX_LINE_BYTES + 10) + lines[3]
    rank_file.write_bytes(b"\n".join(lines))
    report = ingest_location(engine, str(tmp_path))
    assert report.refused == [] and report.quarantined_lines == 1, report
    assert report.problems == ["rank-0.jsonl:4: a line longer than 4,194,304 bytes"]
    with engine.connect() as conn:
        assert conn.execute(select(Run.quarantined_lines)).scalar() == 1


# --- epochs that count down while time goes on ---------------------------------------------


def eval_line(epoch: int, t: float) -> bytes:
    """One valid evaluation record of rank 0 of 1 after ``epoch``, at ``t`` seconds."""
    record = {
        "v": 3, "run_id": "r", "rank": 0, "world_size": 1, "kind": "eval", "t": t,
        "epoch": epoch, "metrics": {"top1_accuracy": 50.0, "loss": 1.0},
        "eval_s": 0.1, "train_s": t / 2, "wall_s": t,
    }  # fmt: skip
    return json.dumps(record).encode()


@examples(150)
@given(
    epochs=st.lists(st.integers(0, 6), min_size=1, max_size=7),
    steps_per_epoch=st.integers(1, 3),
    evaluated=st.booleans(),
)
def test_epochs_that_count_down_while_time_goes_on_refuse_the_run(
    epochs: list[int], steps_per_epoch: int, evaluated: bool
) -> None:
    """A rank's epochs in record order, each trained for some steps and maybe evaluated,
    time always going on: read as one run exactly when no epoch comes after a later one
    (an evaluation of an epoch twice is a repeat, quarantined as ever)."""
    lines, t, step = [], 0.0, 0
    for epoch in epochs:
        for _ in range(steps_per_epoch):
            t += 1.0
            lines.append(step_line(step, epoch, t))
            step += 1
        if evaluated:
            t += 1.0
            lines.append(eval_line(epoch, t))
    rank = parse_rank_lines(PurePath("rank-0.jsonl"), bounded_lines(io.BytesIO(b"\n".join(lines))))
    counting_down = any(later < earlier for earlier, later in itertools.pairwise(epochs))
    if not counting_down:
        check_consistent([rank])
        return
    with pytest.raises(InconsistentRun, match=r"epochs count down, from epoch [0-9]+ at line"):
        check_consistent([rank])


@pytest.mark.parametrize("kind", ["step", "eval"])
def test_a_run_whose_epochs_count_down_is_refused_and_a_stored_one_kept(
    kind: str, engine: Engine, tmp_path: Path
) -> None:
    sweep_dir = write_training_sweep(tmp_path, "sid", [FakeRun(1), FakeRun(2)])
    assert ingest_location(engine, str(tmp_path)).refused == []
    before = stored_runs(engine)

    def count_down(records: list[dict]) -> None:
        for record in records:
            if record["kind"] == kind:
                record["epoch"] = 2 - record["epoch"]  # epochs 2, 1, 0 as time goes on

    rewrite(sweep_dir / "sid-w1-r1" / "rank-0.jsonl", count_down)
    report = ingest_location(engine, str(tmp_path))
    what = "step" if kind == "step" else "evaluation"
    assert report.refused == [] and len(report.conflicts) == 1, report
    assert f"rank-0.jsonl: {what} epochs count down, from epoch 2 at line" in report.conflicts[0]
    assert stored_runs(engine) == before  # the stored run stands

    fresh = tmp_path / "fresh"
    write_training_sweep(fresh, "new", [FakeRun(1)])
    rewrite(fresh / "new" / "new-w1-r1" / "rank-0.jsonl", count_down)
    report = ingest_location(engine, str(fresh))
    assert len(report.refused) == 1 and "the run's epochs cannot be trusted" in report.refused[0]
    assert "new-w1-r1" not in stored_runs(engine)


# --- CPU counts no machine has ---------------------------------------------------------------


def env_record(**fields: object) -> dict:
    """An environment record of rank 0 of 1 with ``fields``."""
    record = {"v": 3, "run_id": "r", "rank": 0, "world_size": 1, "kind": "env", "t": 0.0}
    return {**record, "host": "node-0", "cpu": "some CPU", **fields}


@examples(120)
@given(
    name=st.sampled_from(["cpu_count", "cpus_allowed", "torch_threads"]),
    count=st.integers(-(2**63), 2**63),
)
def test_a_cpu_or_thread_count_is_read_only_within_what_a_machine_can_have(
    name: str, count: int
) -> None:
    try:
        validate_record(env_record(**{name: count}))
    except BadRecord as exc:
        assert not 1 <= count <= MAX_CPUS, (name, count)
        assert str(exc).startswith(f"{name} is ") and f"from 1 to {MAX_CPUS}" in str(exc)
    else:
        assert 1 <= count <= MAX_CPUS, (name, count)


def test_an_environment_record_of_2_to_the_40_cpus_is_quarantined_not_stored(
    engine: Engine, tmp_path: Path
) -> None:
    sweep_dir = write_training_sweep(tmp_path, "sid", [FakeRun(1)])
    rewrite(sweep_dir / "sid-w1-r1" / "rank-0.jsonl", lambda rs: rs[0].update(cpu_count=2**40))
    report = ingest_location(engine, str(tmp_path))
    assert report.refused == [] and report.quarantined_lines == 1, report
    assert report.problems == [
        f"rank-0.jsonl:1: cpu_count is 1099511627776: a machine's CPU count lies from 1 to "
        f"{MAX_CPUS} CPUs"
    ]
    with engine.connect() as conn:
        details = conn.execute(select(models.RunEnvironment.details)).scalars().all()
        hardware = conn.execute(select(Run.hardware)).scalar()
    assert details == [] and hardware is None


# --- folders this process may not enter ------------------------------------------------------

# A process of this user without the capabilities that let root pass any permission: what a
# user other than root meets (the tests run as root, whose reads nothing refuses).
WITHOUT_OVERRIDE = [
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-dac_override,-dac_read_search",
]


def as_a_user(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (a Python module's command line) as a user whom permissions bind."""
    prefix = WITHOUT_OVERRIDE if os.geteuid() == 0 else []
    if prefix and shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to read as a user that is not root")
    return subprocess.run(
        [*prefix, sys.executable, *argv], capture_output=True, text=True, timeout=120
    )


def test_a_folder_that_may_not_be_entered_is_refused_by_name_not_skipped(
    tmp_path: Path,
) -> None:
    """Mode 000 folders beside readable ones, read by a user: a sweep's folder (its manifest
    cannot even be looked for), a run folder of a readable sweep, and a folder its manifest
    does not list. Each is named; the readable sweep is stored."""
    from results_db.database import make_engine, upgrade

    results = tmp_path / "results"
    write_training_sweep(results, "readable", [FakeRun(1), FakeRun(2)])
    write_training_sweep(results, "locked", [FakeRun(1)])
    (results / "readable" / "stray").mkdir()
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    locked = [
        results / "locked",
        results / "readable" / "readable-w2-r1",
        results / "readable" / "stray",
    ]
    for folder in locked:
        folder.chmod(0)
    try:
        probe = as_a_user(["-c", f"import os; os.lstat({str(locked[0] / 'sweep.json')!r})"])
        if "PermissionError" not in probe.stderr:
            pytest.skip(f"permissions do not bind here: {probe.stderr[-200:]}")
        done = as_a_user(["-m", "cli.main", "ingest", str(results), "--database", url])
    finally:
        for folder in locked:
            folder.chmod(0o755)
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in out, out[-2000:]
    assert f"refused: sweep {results}/locked/sweep.json: cannot be read (Permission denied)" in out
    assert "refused: readable-w2-r1: " in out and "Permission denied" in out, out
    assert "refused: stray: a run folder that sweep.json does not list; not read" in out, out
    engine = make_engine(url)
    try:
        assert stored_runs(engine) == {"readable-w1-r1": ("succeeded", None, "host")}
    finally:
        engine.dispose()


# --- URL and path settings with white space or control characters --------------------------

LOCATIONS = {
    "SCALEBENCH_DATABASE_URL": config.database_url,
    "SCALEBENCH_RESULTS_URI": config.results_uri,
    "SCALEBENCH_DATA_DIR": config.data_dir,
}
# What may come with a value: line ends, other white space, control and formatting
# characters (an environment cannot hold NUL); at the ends only, any white space.
CONTROL = ["\n", "\r\n", "\t", "\x1b", "\x7f", "\x85", "\u200b", "\ufeff"]
ODD = st.sampled_from(CONTROL)
AROUND = st.sampled_from([*CONTROL, " ", "\u00a0", "\u3000"])


@examples(150)
@given(
    name=st.sampled_from(sorted(LOCATIONS)),
    core=st.text("abcxyz/._-:0123456789", min_size=1, max_size=30).filter(lambda t: t.strip()),
    before=st.lists(AROUND, max_size=2),
    inside=st.lists(ODD, max_size=1),
    after=st.lists(AROUND, max_size=2),
)
def test_a_location_setting_with_odd_characters_is_refused_naming_it(
    name: str, core: str, before: list[str], inside: list[str], after: list[str]
) -> None:
    middle = len(core) // 2
    value = "".join(before) + core[:middle] + "".join(inside) + core[middle:] + "".join(after)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(name, value)
        try:
            read = LOCATIONS[name]()
        except config.BadSetting as exc:
            message = str(exc)
            assert message.startswith(f"{name}=") and "\n" not in message, message
            assert before or inside or after
            return
    assert value == core and str(read) == core  # nothing odd: taken as it is


def test_a_database_url_ending_in_a_line_end_creates_no_file_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    folder = tmp_path / "db"
    folder.mkdir()
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", f"sqlite:///{folder / 'results.db'}\n")
    for argv in (["db", "upgrade"], ["report", "some-sweep"]):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "error: SCALEBENCH_DATABASE_URL='sqlite:///" in err
        assert "results.db\\n' holds the control character U+000A" in err, err
    assert list(folder.iterdir()) == []
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", "postgresql://me:secret@127.0.0.1/x ")
    assert cli.main(["report", "some-sweep"]) == 2
    err = capsys.readouterr().err
    assert "begins or ends with white space" in err and "secret" not in err, err


# --- places given on the command line, and the settings read by the operators -------------


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["report", "some-sweep", "--database", "sqlite:///{tmp}/r.db\n"], "--database"),
        (["ingest", "{tmp}/results", "--database", " sqlite:///{tmp}/r.db"], "--database"),
        (["run", "task2a-logreg-epsilon", "--light", "--results", "{tmp}/results\n"], "--results"),
        (["export", "some-sweep", "--out", "{tmp}/out\u200b"], "--out"),
    ],
    ids=["line end", "leading space", "results", "zero-width space"],
)
def test_a_place_option_with_odd_characters_is_refused_naming_it(
    argv: list[str], option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The settings' rule holds for the options that name the same places: a value that would
    name another file than the one meant is refused in one line, and nothing is created."""
    from cli import main as cli

    assert cli.main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{option} " in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_kubernetes_whole_number_setting_reads_leading_zeros_as_its_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from operators.kubernetes import KubernetesSettings

    monkeypatch.setenv("SCALEBENCH_K8S_PREEMPTION_RETRIES", "0" * 5000 + "3")
    assert KubernetesSettings.from_env().preemption_retries == 3
    monkeypatch.setenv("SCALEBENCH_K8S_PREEMPTION_RETRIES", "9" * 5000)
    with pytest.raises(ValueError, match="SCALEBENCH_K8S_PREEMPTION_RETRIES=") as refused:
        KubernetesSettings.from_env()
    assert len(str(refused.value)) < 300


def test_a_webhook_setting_with_a_line_end_is_said_and_not_posted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A notifier that cannot post says why and never hides the task's own failure."""
    from types import SimpleNamespace

    from operators.notify import notify_failure

    monkeypatch.setenv("SCALEBENCH_NOTIFY_WEBHOOK", "http://127.0.0.1:9/hook\n")
    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="r", log_url="http://x/log")
    with caplog.at_level("ERROR"):
        notify_failure({"ti": ti, "exception": RuntimeError("boom")})
    said = [r.getMessage() for r in caplog.records if "SCALEBENCH_NOTIFY_WEBHOOK" in r.getMessage()]
    assert said and "U+000A" in said[0] and "not posted" in said[0], said
