"""Every entry point, run in a broken environment, exits with its documented
status and one clear line that names the setting, never a traceback. Each runs as a real
process, as a user starts it; the database matrix runs most of its cases through the same
``main`` in the test's process (see ``AS_PROCESS``).

Exit statuses (docs/command-line.md, "When something goes wrong"): 0 done, 1 ran but
something failed, 2 refused (bad input or an environment that cannot serve: database
URL, database down or without schema, a folder that cannot be read or written), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from workers.distributed import free_port

DATA = Path(__file__).parent / "data"
# Root reads and writes everything; without these capabilities, permission bits apply to it.
AS_USER = (
    ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
)


def modes_obeyed() -> None:
    """Fail unless :data:`AS_USER` makes file modes apply: root without setpriv reads and
    writes past them (setpriv is util-linux's, on every Debian)."""
    if AS_USER and shutil.which(AS_USER[0]) is None:
        pytest.fail("root reads past file modes, and setpriv (util-linux) is missing")


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AS_USER, *argv],
        env={**os.environ, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def scalebench(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", *args]


def assert_refused(done: subprocess.CompletedProcess[str], says: str, prefix: str) -> None:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr + done.stdout
    assert len(lines) == 1 and lines[0].startswith(prefix), done.stderr
    assert says in lines[0], lines[0]


@pytest.fixture(scope="module")
def unmigrated_postgres(postgres_admin):
    """A PostgreSQL database that exists but has no results schema."""
    from results_db.scratch import scratch_database

    admin_url = postgres_admin.url.render_as_string(hide_password=False)
    with scratch_database(admin_url, "scalebench_unmigrated", migrate=False) as url:
        yield url


NO_SCHEMA = "run `scalebench db upgrade`"
NOT_A_URL = "not a results database URL"
DATABASES: dict[str, tuple[Callable[[Path, str], str], str]] = {
    "garbage URL": (lambda tmp, pg: "garbage", NOT_A_URL),
    "unknown scheme": (lambda tmp, pg: "nosuch://x", NOT_A_URL),
    "driver not installed": (lambda tmp, pg: "mysql://x", "needs a driver scalebench does not"),
    "malformed IPv6 URL": (lambda tmp, pg: "postgresql+psycopg2://u@[::1/db", NOT_A_URL),
    "not a database file": (
        lambda tmp, pg: f"sqlite:///{tmp / 'garbage.db'}",
        "cannot read the results database: file is not a database",
    ),
    "nothing listening": (
        lambda tmp, pg: f"postgresql+psycopg2://postgres@127.0.0.1:{free_port()}/x",
        "Is the server running",
    ),
    "empty SQLite file": (lambda tmp, pg: f"sqlite:///{tmp / 'empty.db'}", NO_SCHEMA),
    "unmigrated PostgreSQL": (lambda tmp, pg: pg, NO_SCHEMA),
}
READERS = {
    "report": ["report", "some-sweep"],
    "export": ["export", "some-sweep", "--out", "exports"],
    "regressions": ["regressions", "some-sweep"],
    "prices list": ["prices", "list"],
}
WRITERS = {  # these create the schema themselves: only an unusable server refuses them
    "ingest": ["ingest", str(DATA / "sweep-light")],
    "db upgrade": ["db", "upgrade"],
    "dashboard": ["dashboard", "--port", "1"],  # refused before it would listen
}
# no engine can be made: refused before anything starts
URL_PROBLEMS = ["garbage URL", "unknown scheme", "driver not installed", "malformed IPv6 URL"]
CASES = (
    [(db, command) for db in DATABASES for command in READERS]
    + [
        (db, command)
        for db in [*URL_PROBLEMS, "nothing listening", "not a database file"]
        for command in ("ingest", "db upgrade")
    ]
    # a database that is down at start may come up: the dashboard serves 503 pages meanwhile
    + [(db, "dashboard") for db in URL_PROBLEMS]
)


# The last case of each command (one that reaches a database: an unmigrated PostgreSQL for the
# readers, a file that is no database for the writers), and every dashboard case (a dashboard
# that wrongly started would listen for ever), run as a real process: what a user sees, to the
# last line on stderr. The rest of the matrix calls the same ``main`` in this process, which
# answers with the same status and line without a process's start (a second of imports each).
AS_PROCESS = {*dict((command, database) for database, command in CASES).items()}


def run_in_process(
    argv: list[str], env: dict[str, str], cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> subprocess.CompletedProcess[str]:
    """``scalebench argv`` as :func:`run` would run it, but through ``cli.main.main`` here."""
    from cli import main as cli

    monkeypatch.delenv("SCALEBENCH_DEBUG", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    status = cli.main(argv)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, status, out, err)


@pytest.mark.parametrize(("database", "command"), CASES, ids=[f"{d}-{c}" for d, c in CASES])
def test_a_database_that_cannot_serve_is_named_with_what_to_do(
    database: str,
    command: str,
    tmp_path: Path,
    unmigrated_postgres: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_url, says = DATABASES[database]
    (tmp_path / "empty.db").touch()
    (tmp_path / "garbage.db").write_text("not a database, but a file of text\n" * 200)
    url = make_url(tmp_path, unmigrated_postgres)
    argv = {**READERS, **WRITERS}[command]
    env = {"SCALEBENCH_DATABASE_URL": url}
    if command == "dashboard":
        argv = ["dashboard", "--port", str(free_port())]
    if command == "dashboard" or (command, database) in AS_PROCESS:
        done = run(scalebench(*argv), env, tmp_path)
    else:
        done = run_in_process(argv, env, tmp_path, monkeypatch, capsys)
    assert_refused(done, says, "scalebench: error: ")


BAD_SETTINGS = {
    "SCALEBENCH_MAX_WORKERS=abc": ("SCALEBENCH_MAX_WORKERS", "abc", "a whole number"),
    "SCALEBENCH_MAX_WORKERS=0": ("SCALEBENCH_MAX_WORKERS", "0", "at least 1"),
    "SCALEBENCH_COMPILE=maybe": ("SCALEBENCH_COMPILE", "maybe", "must be one of"),
    "SCALEBENCH_RESULTS_URI=s3://": ("SCALEBENCH_RESULTS_URI", "s3://b/x", "local or mounted"),
    "SCALEBENCH_RESULTS_URI empty": ("SCALEBENCH_RESULTS_URI", "", "is empty"),
}


@pytest.mark.parametrize("case", list(BAD_SETTINGS))
def test_a_bad_setting_is_refused_in_a_line_naming_it_before_anything_starts(
    case: str, tmp_path: Path
) -> None:
    variable, value, says = BAD_SETTINGS[case]
    results = ["--results", str(tmp_path / "results")]
    if variable == "SCALEBENCH_RESULTS_URI":
        results = []  # the setting is what is read
    done = run(
        scalebench(
            "run",
            "task0-allreduce",
            "--light",
            "--workers",
            "2",
            *results,
            "--database",
            f"sqlite:///{tmp_path / 'r.db'}",
        ),
        {variable: value},
        tmp_path,
    )
    assert_refused(done, variable, "scalebench: error: ")
    assert says in done.stderr
    assert not (tmp_path / "results").exists(), "a sweep started with a bad setting"


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    done = run(
        scalebench("--debug", "prices", "list"), {"SCALEBENCH_DATABASE_URL": "garbage"}, tmp_path
    )
    assert done.returncode == 1 and "Traceback" in done.stderr and "ArgumentError" in done.stderr
    done = run(
        scalebench("prices", "list"),
        {"SCALEBENCH_DATABASE_URL": "garbage", "SCALEBENCH_DEBUG": "1"},
        tmp_path,
    )
    assert "Traceback" in done.stderr


@pytest.fixture
def folders(tmp_path: Path):
    """A results folder that cannot be read and one that cannot be written."""
    modes_obeyed()
    unreadable, read_only = tmp_path / "unreadable", tmp_path / "read-only"
    shutil.copytree(DATA / "sweep-light", unreadable)
    read_only.mkdir()
    unreadable.chmod(0)
    read_only.chmod(0o555)
    yield {"unreadable": unreadable, "read-only": read_only}
    unreadable.chmod(0o755)
    read_only.chmod(0o755)


FOLDER_CASES = {
    "run into a read-only folder": (
        lambda f: scalebench(
            "run",
            "task2a-logreg-epsilon",
            "--light",
            "--workers",
            "1",
            "--repeats",
            "1",
            "--results",
            str(f["read-only"]),
        ),
        "Permission denied",
        "scalebench: error: cannot use",
    ),
    "ingest an unreadable folder": (
        lambda f: scalebench("ingest", str(f["unreadable"])),
        "Permission denied",
        "scalebench: error: cannot use",
    ),
    "report an unreadable sweep folder": (
        lambda f: scalebench("report", str(f["unreadable"])),
        "Permission denied",
        "scalebench: error: cannot use",
    ),
    "export into a read-only folder": (
        lambda f: scalebench("export", "x", "--out", str(f["read-only"] / "out")),
        "Permission denied",
        "scalebench: error: cannot use",
    ),
    "a rank writing into a read-only folder": (
        lambda f: [
            sys.executable,
            "-m",
            "workers.run",
            "--task",
            "task0-allreduce",
            "--light",
            "--results",
            str(f["read-only"] / "run"),
        ],
        "Permission denied",
        "workers.run: refused: --results",
    ),
}


@pytest.mark.parametrize("case", list(FOLDER_CASES))
def test_a_folder_that_cannot_be_read_or_written_is_named(
    case: str, folders: dict[str, Path], tmp_path: Path
) -> None:
    argv, says, prefix = FOLDER_CASES[case]
    env = {"SCALEBENCH_DATABASE_URL": f"sqlite:///{tmp_path / 'results.db'}"}
    if case.startswith("export"):  # a database with the sweep, so only the folder is wrong
        subprocess.run(
            scalebench("ingest", str(DATA / "sweep-light")),
            env={**os.environ, **env},
            capture_output=True,
            check=True,
            timeout=120,
        )
        sweep_id = next((DATA / "sweep-light").glob("*/rank-0.jsonl")).parent.name
        argv_of = argv(folders)
        argv_of[argv_of.index("x")] = sweep_id.rsplit("-w", 1)[0]
        done = run(argv_of, env, tmp_path)
    else:
        done = run(argv(folders), env, tmp_path)
    assert_refused(done, says, prefix)


def test_a_run_folder_rank_file_or_sweep_json_that_cannot_be_read_is_named_and_the_rest_loads(
    tmp_path: Path,
) -> None:
    """Mode 000 (root without its capabilities reads it as any user would): a run whose
    folder or one of whose rank files cannot be read is refused naming it and why, never
    taken for a rank that wrote nothing; a sweep whose sweep.json cannot be read is refused
    by name; the runs and sweeps beside them are stored."""
    import sqlite3

    sys.path.insert(0, str(Path(__file__).parent))
    from records_factory import FakeRun, write_training_sweep

    modes_obeyed()
    results = tmp_path / "results"
    sweep_dir = write_training_sweep(results, "sid", [FakeRun(1), FakeRun(2), FakeRun(4)])
    other_dir = write_training_sweep(results, "other", [FakeRun(1)])
    unreadable = [
        (sweep_dir / "sid-w1-r1", 0o755),
        (sweep_dir / "sid-w4-r1" / "rank-3.jsonl", 0o644),
        (other_dir / "sweep.json", 0o644),
    ]
    url = f"sqlite:///{tmp_path / 'results.db'}"
    for path, _ in unreadable:
        path.chmod(0)
    try:
        done = run(scalebench("ingest", str(results), "--database", url), {}, tmp_path)
    finally:
        for path, mode in unreadable:
            path.chmod(mode)
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in out, out
    assert "refused sid-w1-r1: cannot read sid-w1-r1: Permission denied" in out, out
    assert "refused sid-w4-r1: cannot read rank-3.jsonl: Permission denied" in out, out
    assert "wrote no records" not in out
    assert f"refused sweep {other_dir / 'sweep.json'}: cannot be read (Permission denied)" in out
    assert "sid-w2-r1: succeeded" in out
    with contextlib.closing(sqlite3.connect(tmp_path / "results.db")) as db:
        stored = {row[0] for row in db.execute("SELECT id FROM run")}
    assert stored == {"sid-w2-r1"}, stored


def test_a_revision_alembic_cannot_reach_is_refused_naming_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    done = run(
        scalebench("db", "upgrade", "--revision", "nope"),
        {"SCALEBENCH_DATABASE_URL": url},
        tmp_path,
    )
    assert_refused(
        done, "revision: 'nope' is not a schema revision of this scalebench", "scalebench: error: "
    )


REMOTE_LOCATIONS = {
    "http://example.invalid/sweeps": "location: cannot read http://example.invalid/sweeps",
    "ftp://host.invalid/sweeps": "location: cannot read ftp://host.invalid/sweeps",
    "s3://bucket/sweeps": "location: s3:// needs a package that is not installed",
    "nosuch://sweeps": "location: unknown scheme nosuch://",
    "zip://sweeps": "location: cannot read zip://sweeps: Is a directory (",
}


@pytest.mark.parametrize("location", list(REMOTE_LOCATIONS))
def test_a_remote_location_that_cannot_be_read_is_named_with_why(
    location: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    done = run(scalebench("ingest", location), {"SCALEBENCH_DATABASE_URL": url}, tmp_path)
    assert_refused(done, REMOTE_LOCATIONS[location], "scalebench: error: ")
    assert "[Errno" not in done.stderr  # words, not an exception's repr


def test_a_read_only_sqlite_file_is_read_by_the_commands_that_only_read(tmp_path: Path) -> None:
    """A database copied where it cannot be written (the file and its folder read-only):
    report, export and prices list read it; nothing is written beside it."""
    folder = tmp_path / "archive"
    folder.mkdir()
    url = f"sqlite:///{folder / 'results.db'}"
    env = {"SCALEBENCH_DATABASE_URL": url}
    done = run(scalebench("ingest", str(DATA / "sweep-light")), env, tmp_path)
    assert done.returncode == 0, done.stderr
    for leftover in folder.glob("results.db-*"):  # the write-ahead log, folded in on close
        assert leftover.stat().st_size == 0 or leftover.name.endswith("-shm"), leftover
        leftover.unlink()
    sweep_id = json.loads((DATA / "sweep-light" / "sweep.json").read_text())["sweep_id"]
    written = sorted(p.name for p in folder.iterdir())  # the database (and ingest's lock file)
    (folder / "results.db").chmod(0o444)
    folder.chmod(0o555)
    try:
        for argv in (
            ["report", sweep_id],
            ["export", sweep_id, "--out", str(tmp_path / "exports")],
            ["prices", "list"],
        ):
            done = run(scalebench(*argv), env, tmp_path)
            assert done.returncode == 0, (argv, done.stderr)
            assert "Traceback" not in done.stderr
        assert sorted(p.name for p in folder.iterdir()) == written
    finally:
        folder.chmod(0o755)


def test_a_path_too_long_for_the_filesystem_is_named(tmp_path: Path) -> None:
    long = str(tmp_path / ("a" * 300))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    done = run(scalebench("ingest", long), {"SCALEBENCH_DATABASE_URL": url}, tmp_path)
    assert_refused(done, "File name too long", "scalebench: error: cannot use ")
