"""What the results store must never do, on SQLite and PostgreSQL alike: read or write
through a link that leaves a sweep's folder, take a location for a pattern, write anything
from a command that only reads, or let one sweep's ingest change another's stored rows or
rewrite its own stored identity without being asked."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from records_factory import FakeRun, write_training_sweep
from sqlalchemy import Engine, select

from results_db import pg_watch, service
from results_db.ingest import ingest_location
from results_db.models import Run, Sweep
from scalebench import manifest


def snapshot(root: Path) -> dict[str, tuple[bytes | str, int]]:
    """Every entry under ``root`` (links not followed): its bytes or link target, and mtime."""
    found = {}
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        body = (
            os.readlink(path)
            if path.is_symlink()
            else (path.read_bytes() if path.is_file() else "")
        )
        found[str(path.relative_to(root))] = (body, stat.st_mtime_ns)
    return found


def stored(engine: Engine) -> dict[str, tuple]:
    """Every stored run: its sweep, status and time to accuracy; and every sweep's row."""
    with engine.connect() as conn:
        runs = {
            r.id: (r.sweep_id, r.status, r.time_to_accuracy_s)
            for r in conn.execute(select(Run.id, Run.sweep_id, Run.status, Run.time_to_accuracy_s))
        }
        sweeps = {
            s.id: (s.task, s.config_hash, s.created_at, s.outcome)
            for s in conn.execute(
                select(Sweep.id, Sweep.task, Sweep.config_hash, Sweep.created_at, Sweep.outcome)
            )
        }
    return {**runs, **{f"sweep {k}": v for k, v in sweeps.items()}}


def vanish(sweep_dir: Path) -> None:
    """Make ``sweep_dir`` a sweep left unfinished by a command line that has since ended."""
    data = json.loads((sweep_dir / manifest.MANIFEST).read_text())
    data["finished_at"] = None
    data["runner"] = {"host": socket.gethostname(), "pid": 2**22 + 7, "started": 1}
    for group in data["groups"]:
        group["status"] = "planned"
    (sweep_dir / manifest.MANIFEST).write_text(json.dumps(data))


# --- links and patterns --------------------------------------------------------------------


def test_a_verdicts_file_linked_elsewhere_is_never_written_through(
    engine: Engine, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    sweep_dir = write_training_sweep(results, "s-linked", [FakeRun(1)])
    vanish(sweep_dir)
    elsewhere = tmp_path / "someone-elses.txt"
    elsewhere.write_text("keep me\n")
    (sweep_dir / manifest.VERDICTS).symlink_to(elsewhere)
    lines: list[str] = []
    status = service.ingest(str(engine.url.render_as_string(False)), str(results), say=lines.append)
    assert elsewhere.read_text() == "keep me\n"
    assert status == 1
    assert any("s-linked" in line and "link" in line for line in lines), lines


@pytest.mark.parametrize("what", ["sweep.json", "run folder", "rank file"])
def test_nothing_is_read_through_a_link_that_leaves_the_sweep(
    engine: Engine, tmp_path: Path, what: str
) -> None:
    results = tmp_path / "results"
    outside = write_training_sweep(tmp_path / "outside", "s-out", [FakeRun(1)])
    sweep_dir = write_training_sweep(results, "s-in", [FakeRun(1)])
    run_dir = sweep_dir / "s-in-w1-r1"
    if what == "sweep.json":
        target = tmp_path / "planted.json"
        target.write_text((sweep_dir / manifest.MANIFEST).read_text())
        (sweep_dir / manifest.MANIFEST).unlink()
        (sweep_dir / manifest.MANIFEST).symlink_to(target)
    elif what == "run folder":
        planted = tmp_path / "planted-run"
        run_dir.rename(planted)
        run_dir.symlink_to(planted)
    else:
        (run_dir / "rank-0.jsonl").unlink()
        (run_dir / "rank-0.jsonl").symlink_to(outside / "s-out-w1-r1" / "rank-0.jsonl")
    report = ingest_location(engine, str(results))
    assert any("link" in line and "leaves" in line for line in report.refused), report.refused
    with engine.connect() as conn:
        statuses = dict(conn.execute(select(Run.id, Run.status)).all())
    assert statuses.get("s-in-w1-r1") != "succeeded"


def test_a_link_that_stays_inside_the_sweep_is_read(engine: Engine, tmp_path: Path) -> None:
    sweep_dir = write_training_sweep(tmp_path / "results", "s-inner", [FakeRun(1)])
    run_dir = sweep_dir / "s-inner-w1-r1"
    (sweep_dir / "kept").mkdir()
    (run_dir / "rank-0.jsonl").rename(sweep_dir / "kept" / "r0.jsonl")
    (run_dir / "rank-0.jsonl").symlink_to(Path("..") / "kept" / "r0.jsonl")
    report = ingest_location(engine, str(tmp_path / "results"))
    assert report.refused == [] and report.runs == 1


def test_a_location_is_a_path_never_a_pattern(engine: Engine, tmp_path: Path) -> None:
    write_training_sweep(tmp_path, "exp1", [FakeRun(1)])
    with pytest.raises(FileNotFoundError):
        ingest_location(engine, str(tmp_path / "exp[1]"))
    with pytest.raises(FileNotFoundError):
        ingest_location(engine, str(tmp_path / "exp?"))
    bracketed = tmp_path / "runs[2]"
    write_training_sweep(bracketed, "s-bracket", [FakeRun(1), FakeRun(2)])
    report = ingest_location(engine, str(bracketed))
    assert report.runs == 2 and report.refused == []
    assert {v[1] for k, v in stored(engine).items() if not k.startswith("sweep ")} == {"succeeded"}


def test_report_of_a_sweep_folder_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    sweep_dir = write_training_sweep(tmp_path / "results", "s-readonly", [FakeRun(1), FakeRun(2)])
    vanish(sweep_dir)
    before = snapshot(tmp_path)
    assert cli.main(["report", str(sweep_dir)]) == 0
    assert snapshot(tmp_path) == before
    out = capsys.readouterr().out
    assert "s-readonly" in out and "cancelled" in out


# --- one sweep's rows are its own ----------------------------------------------------------


def test_a_sweep_cannot_take_a_run_another_sweep_stored(engine: Engine, tmp_path: Path) -> None:
    write_training_sweep(tmp_path / "a", "sid", [FakeRun(1)])
    ingest_location(engine, str(tmp_path / "a"))
    before = stored(engine)
    # A sweep named after the first one's group, listing that group's run id as its own.
    squatter = write_training_sweep(tmp_path / "b", "sid-w1", [FakeRun(1)])
    data = json.loads((squatter / manifest.MANIFEST).read_text())
    data["groups"][0]["run_id"] = "sid-w1-r1"
    (squatter / manifest.MANIFEST).write_text(json.dumps(data))
    (squatter / "sid-w1-w1-r1").rename(squatter / "sid-w1-r1")
    for replace in (False, True):
        report = ingest_location(engine, str(tmp_path / "b"), replace=replace)
        assert any("sid-w1-r1" in r and "sweep sid" in r for r in report.refused), report.refused
        after = stored(engine)
        assert after["sid-w1-r1"] == before["sid-w1-r1"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: d.update(created_at="2020-01-01T00:00:00+00:00"), "created_at"),
        (lambda d: d.update(config_hash="0" * 16), "config_hash"),
        (lambda d: d["request"].update(task="task2a-logreg-epsilon"), "task"),
        (lambda d: d["request"].update(seed=99), "request"),
        (lambda d: d.update(trigger="scheduled"), "trigger"),
        (lambda d: d.update(groups=d["groups"][:1]), "sid-w2-r1"),
    ],
)
def test_a_changed_sweep_json_is_refused_unless_replace_then_replaced_whole(
    engine: Engine, tmp_path: Path, change, named: str
) -> None:
    sweep_dir = write_training_sweep(tmp_path, "sid", [FakeRun(1), FakeRun(2)])
    ingest_location(engine, str(tmp_path))
    before = stored(engine)
    data = json.loads((sweep_dir / manifest.MANIFEST).read_text())
    change(data)
    (sweep_dir / manifest.MANIFEST).write_text(json.dumps(data))
    lines: list[str] = []
    report = ingest_location(engine, str(tmp_path), lines.append)
    assert any("differs from what is stored" in r and named in r for r in report.refused), (
        report.refused
    )
    assert stored(engine) == before  # nothing rewritten as a side effect
    lines.clear()
    report = ingest_location(engine, str(tmp_path), lines.append, replace=True)
    assert any("replaced the stored sweep sid whole" in line for line in lines), lines
    after = stored(engine)
    if named == "sid-w2-r1":
        assert "sid-w2-r1" not in after  # the stored run the manifest no longer lists
    again = ingest_location(engine, str(tmp_path)).refused  # now it agrees
    assert not any("differs" in r for r in again), again


def test_an_unchanged_sweep_is_ingested_again_without_a_word(
    engine: Engine, tmp_path: Path
) -> None:
    write_training_sweep(tmp_path, "sid", [FakeRun(1), FakeRun(2)])
    ingest_location(engine, str(tmp_path))
    before = stored(engine)
    report = ingest_location(engine, str(tmp_path))
    assert report.refused == [] and report.conflicts == []
    assert stored(engine) == before


# --- records that cannot be one real run ---------------------------------------------------


def rewrite(path: Path, change) -> None:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    change(records)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def goal_event(records: list[dict]) -> dict:
    return next(r for r in records if r.get("event") == "goal_reached")


def evals(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kind"] == "eval"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            lambda rs: goal_event(rs).update(time_to_accuracy_s=86_000.0),
            "time to accuracy (86000 s) is longer than the run",
        ),
        (
            lambda rs: [e["metrics"].update(top1_accuracy=10.0) for e in evals(rs)],
            "recorded reached, yet no evaluation reached it",
        ),
        (lambda rs: evals(rs)[-1].update(t=0.5), "evaluation times go back"),
        (
            lambda rs: [r.update(run_id="sid-w1-r9") for r in rs],
            "holds records of run sid-w1-r9 with 1 rank(s); the manifest's group is sid-w1-r1",
        ),
    ],
)
def test_records_that_cannot_be_one_real_run_are_refused_and_the_rest_stored(
    engine: Engine, tmp_path: Path, change, says: str
) -> None:
    sweep_dir = write_training_sweep(tmp_path, "sid", [FakeRun(1), FakeRun(2)])
    rewrite(sweep_dir / "sid-w1-r1" / "rank-0.jsonl", change)
    report = ingest_location(engine, str(tmp_path))
    assert any(r.startswith("sid-w1-r1: ") and says in r for r in report.refused), report.refused
    after = stored(engine)
    assert "sid-w1-r1" not in after and after["sid-w2-r1"][1] == "succeeded"
    assert after["sweep sid"][3] == "partial"  # the sweep says a run is missing


def test_a_sweep_finished_before_it_was_created_or_of_an_impossible_size_is_refused(
    engine: Engine, tmp_path: Path
) -> None:
    for sweep_id, change in (
        (
            "early",
            lambda d: d.update(finished_at="2026-10-01T00:00:00+00:00"),
        ),
        (
            "huge",
            lambda d: d["groups"][0].update(world_size=2**21),
        ),
    ):
        sweep_dir = write_training_sweep(
            tmp_path, sweep_id, [FakeRun(1)], created_at="2026-11-01T02:00:00+00:00"
        )
        data = json.loads((sweep_dir / manifest.MANIFEST).read_text())
        change(data)
        (sweep_dir / manifest.MANIFEST).write_text(json.dumps(data))
    report = ingest_location(engine, str(tmp_path))
    assert len(report.refused) == 2, report.refused
    for line in report.refused:
        assert len(line) < 400, line[:400]
    assert any("early" in r and "before it was created" in r for r in report.refused)
    assert any("huge" in r and "a group's size lies from 1 to 4096" in r for r in report.refused)
    assert stored(engine) == {}


# --- values at the edge of their type ------------------------------------------------------


@pytest.mark.parametrize(
    "option", ["--repeats", "--seed", "--workers", "--gpus-per-worker", "--threads-per-worker"]
)
def test_a_whole_number_of_thousands_of_digits_is_refused_naming_the_field(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    field = option.removeprefix("--").replace("-", "_")
    database = f"sqlite:///{tmp_path / 'r.db'}"
    argv = ["run", "task2a-logreg-epsilon", "--light", option, "9" * 5000]
    assert cli.main([*argv, "--results", str(tmp_path / "r"), "--database", database]) == 2
    err = capsys.readouterr().err
    assert f"error: {field}: must be a whole number of at most 40 digits, got one of 5,000" in err
    assert "Traceback" not in err and not (tmp_path / "r").exists()


def test_project_reads_worker_counts_as_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    url = f"sqlite:///{tmp_path / 'r.db'}"
    for given, says in (("٤", "must be a whole number"), ("5000", "at most 4096")):
        argv = ["project", "some-sweep", "--allreduce", "other", "--workers", given]
        code = cli.main([*argv, "--database", url])
        assert code == 2
        err = capsys.readouterr().err
        assert "error: workers: " in err and says in err, err


# --- faults ----------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_server(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A server on a free port of 127.0.0.1 that hands each connection to ``handle`` on a
    thread of its own (and keeps it open); yields the port."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn = server.accept()[0]
                held.append(conn)
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def test_a_postgresql_that_accepts_and_never_answers_is_given_up_on_naming_the_timeout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import time

    from cli import main as cli

    started = time.monotonic()
    with fake_server(lambda conn: None) as port:  # accepts, then holds the connection
        url = f"postgresql+psycopg2://nobody@127.0.0.1:{port}/results?connect_timeout=1"
        code = cli.main(["ingest", str(DATA_SWEEP), "--database", url])
    assert code == 2 and time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert "timeout expired (no answer within the connect timeout" in err, err
    assert "Traceback" not in err


def test_a_postgresql_that_logs_in_and_never_answers_a_statement_is_given_up_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that completes the handshake and login, then never answers a statement (a
    hung server, or a proxy holding the connection): the wait ends after the statement
    timeout, and the error names it."""
    import struct
    import time

    from cli import main as cli
    from results_db import pg_watch

    def message(kind: bytes, body: bytes) -> bytes:
        return kind + struct.pack("!i", len(body) + 4) + body

    def log_in_and_hold(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:  # SSL and GSS encryption requests are declined, then the startup
                (length, code) = struct.unpack("!ii", conn.recv(8, socket.MSG_WAITALL))
                if code in (80877103, 80877104):
                    conn.sendall(b"N")
                    continue
                conn.recv(length - 8, socket.MSG_WAITALL)
                break
            status = (  # what a real server reports: psycopg2 then sends nothing itself
                (b"server_version", b"15.0"),
                (b"client_encoding", b"UTF8"),
                (b"DateStyle", b"ISO, MDY"),
                (b"standard_conforming_strings", b"on"),
                (b"integer_datetimes", b"on"),
            )
            conn.sendall(
                message(b"R", struct.pack("!i", 0))  # authentication ok
                + b"".join(message(b"S", k + b"\0" + v + b"\0") for k, v in status)
                + message(b"K", struct.pack("!ii", 4242, 1))
                + message(b"Z", b"I")  # ready for query
            )
            while conn.recv(1 << 16):  # every statement is read, none answered
                pass

    monkeypatch.setenv("SCALEBENCH_STATEMENT_TIMEOUT_S", "1")
    monkeypatch.setattr(pg_watch, "GRACE_S", 0.5)
    started = time.monotonic()
    with fake_server(log_in_and_hold) as port:
        url = f"postgresql+psycopg2://nobody@127.0.0.1:{port}/results"
        code = cli.main(["ingest", str(DATA_SWEEP), "--database", url])
    waited = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2, err
    assert "no answer from the server within the statement timeout: 1 s" in err, err
    assert "SCALEBENCH_STATEMENT_TIMEOUT_S" in err and "Traceback" not in err
    assert waited < 30


# Seconds :func:`holding_proxy` holds a connection before it closes it.
PROXY_GIVES_UP_S = 30.0


@contextlib.contextmanager
def holding_proxy(
    hold: threading.Event,
    held: threading.Event,
    after_login: bool = False,
    at: bytes | None = None,
    target: str | None = None,
) -> Iterator[str]:
    """A proxy in front of the test PostgreSQL that passes everything on until ``hold`` is
    set (``after_login``: it sets it itself when the server is first ready for a query),
    then holds every connection: what the client sends is read and never passed on, so no
    statement is ever answered (a hung server, or a proxy holding the connection). ``held``
    is set when a statement is held. ``at``: ``hold`` is set by the first bytes from a client
    that hold this (a statement's text), which are held. A connection held
    :data:`PROXY_GIVES_UP_S` is closed, so that a client that would wait forever fails its
    test instead of hanging it. ``target``: the database (default the test PostgreSQL).
    Yields the proxy's URL."""
    from conftest import POSTGRES_URL
    from sqlalchemy.engine import make_url

    real = make_url(target or POSTGRES_URL)
    upstreams: list[socket.socket] = []

    def proxy(client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:  # SSL and GSS encryption requests are declined, as the fake server does
                (length, code) = struct.unpack("!ii", client.recv(8, socket.MSG_WAITALL))
                if code not in (80877103, 80877104):
                    break
                client.sendall(b"N")
            upstream = socket.create_connection((real.host or "127.0.0.1", real.port or 5432))
            upstreams.append(upstream)
            upstream.sendall(struct.pack("!ii", length, code))
            upstream.sendall(client.recv(length - 8, socket.MSG_WAITALL))
            threading.Thread(target=pass_on, args=(client, upstream), daemon=True).start()
            while True:  # the server's messages, one at a time
                head = upstream.recv(5, socket.MSG_WAITALL)
                if len(head) < 5:  # the server closed the connection
                    return
                body = upstream.recv(struct.unpack("!i", head[1:])[0] - 4, socket.MSG_WAITALL)
                if after_login and head[:1] == b"Z":  # ReadyForQuery: logged in
                    hold.set()
                client.sendall(head + body)

    def hang_up(client: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the client may have closed it already
            client.shutdown(socket.SHUT_RDWR)

    def pass_on(client: socket.socket, upstream: socket.socket) -> None:
        holding = False
        with contextlib.suppress(OSError):
            while data := client.recv(1 << 16):
                if at is not None and at in data:
                    hold.set()
                if not hold.is_set():
                    upstream.sendall(data)
                    continue
                held.set()
                if not holding:
                    holding = True
                    give_up = threading.Timer(PROXY_GIVES_UP_S, hang_up, [client])
                    give_up.daemon = True
                    give_up.start()

    with fake_server(proxy) as port:
        try:
            yield real.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        finally:
            for upstream in upstreams:
                upstream.close()


@contextlib.contextmanager
def answering_once(held: threading.Event) -> Iterator[str]:
    """:func:`holding_proxy`, holding from the first statement on: the login is a real
    server's, and then nothing is answered."""
    with holding_proxy(threading.Event(), held, after_login=True) as url:
        yield url


def ingest_through(url: str, timeout_s: str) -> subprocess.Popen[str]:
    """``scalebench ingest`` of the data sweep into ``url``, as a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "ingest", str(DATA_SWEEP), "--database", url],
        env={**os.environ, "SCALEBENCH_STATEMENT_TIMEOUT_S": timeout_s},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_command_line_gives_up_on_a_real_server_behind_a_proxy_that_holds_it() -> None:
    """A real PostgreSQL's login, then silence: the command ends after the statement timeout
    and its grace (2 + 5 s), exit status 2, in one line naming the setting."""
    held = threading.Event()
    with answering_once(held) as url:
        process = ingest_through(url, "2")
        try:
            assert held.wait(60), "the command never sent a statement"
            waited = time.monotonic()
            out, err = process.communicate(timeout=30)
            waited = time.monotonic() - waited
        finally:
            process.kill()
    lines = err.strip().splitlines()
    assert process.returncode == 2, (out, err)
    assert len(lines) == 1 and "Traceback" not in err + out, err
    assert "no answer from the server within the statement timeout: 2 s" in lines[0]
    assert "SCALEBENCH_STATEMENT_TIMEOUT_S" in lines[0]
    assert 2 <= waited < 2 + pg_watch.GRACE_S + 5, waited


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_ends_a_wait_for_a_server_that_does_not_answer(stop: signal.Signals) -> None:
    """Ctrl-C (or SIGTERM) while a statement waits on a server that never answers stops the
    command at once, as it would anywhere else (exit status 130, one line), instead of
    waiting out the statement timeout."""
    held = threading.Event()
    with answering_once(held) as url:
        process = ingest_through(url, "60")
        assert held.wait(60), "the command never sent a statement"
        stop_while_held(process, stop, after_s=0.5)  # well inside the wait


def test_a_stop_signal_ends_an_ingest_whose_copy_the_server_stopped_answering() -> None:
    """The server stops answering during a COPY, which runs on a thread of its own while the
    main thread reads on and then waits for it: Ctrl-C still stops the command at once."""
    from conftest import POSTGRES_URL

    from results_db.scratch import scratch_database

    held = threading.Event()
    with (
        scratch_database(POSTGRES_URL, "scalebench_copy_held") as url,
        holding_proxy(threading.Event(), held, at=b"COPY ", target=url) as proxied,
    ):
        process = ingest_through(proxied, "60")
        assert held.wait(60), "the command never began a COPY"
        # The main thread reads on, then waits for the COPY.
        stop_while_held(process, signal.SIGINT, after_s=1)


def stop_while_held(process: subprocess.Popen, stop: int, after_s: float) -> None:
    """Send ``stop`` to a command waiting on a held server ``after_s`` seconds in: it ends at
    once (within 5 s), with exit status 130 and one line."""
    try:
        time.sleep(after_s)
        process.send_signal(stop)
        stopped = time.monotonic()
        out, err = process.communicate(timeout=20)
        stopped = time.monotonic() - stopped
    finally:
        process.kill()
    assert process.returncode == 130, (out, err)
    assert err.strip().splitlines() == ["scalebench: interrupted; every group was stopped"], err
    assert stopped < 5, stopped


def test_a_server_side_cursor_whose_server_stops_answering_is_given_up_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A result read in batches (an export's steps: a server-side cursor) whose server stops
    answering between two batches: the fetch, which is no statement of its own in psycopg2,
    is given up on too, naming the timeout."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from results_db.database import readonly_engine

    monkeypatch.setenv("SCALEBENCH_STATEMENT_TIMEOUT_S", "1")
    monkeypatch.setattr(pg_watch, "GRACE_S", 0.5)
    hold, held = threading.Event(), threading.Event()
    with holding_proxy(hold, held) as url:
        engine = readonly_engine(url, once=True)
        try:
            with engine.connect() as conn:
                rows = conn.execution_options(yield_per=10).execute(
                    text("SELECT generate_series(1, 100)")
                )
                assert [next(rows)[0] for _ in range(10)] == list(range(1, 11))
                hold.set()
                started = time.monotonic()
                with pytest.raises(OperationalError, match="within the statement timeout: 1 s"):
                    list(rows)
                assert held.is_set() and time.monotonic() - started < 10
        finally:
            engine.dispose()


def test_a_slow_statement_is_ended_by_the_servers_own_statement_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each connection sets the server's statement_timeout, so a live server cancels a
    statement longer than the setting itself, before the client's watch would hang up."""
    from conftest import POSTGRES_URL
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from results_db.database import make_engine, readonly_engine

    monkeypatch.setenv("SCALEBENCH_STATEMENT_TIMEOUT_S", "1")
    for engine in (make_engine(POSTGRES_URL), readonly_engine(POSTGRES_URL)):
        try:
            with engine.connect() as connection:
                assert connection.execute(text("SHOW statement_timeout")).scalar() == "1s"
                with pytest.raises(OperationalError, match="statement timeout"):
                    connection.execute(text("SELECT pg_sleep(3)"))
        finally:
            engine.dispose()


def test_a_statement_that_outlived_its_timeout_is_not_tried_again() -> None:
    """A dropped connection is tried again; a statement the server cancelled at its timeout,
    or one hung up on unanswered, is not (it would take as long again, six times over)."""
    import psycopg2
    import psycopg2.errors
    from sqlalchemy.exc import OperationalError

    from results_db.ingest import transient
    from results_db.pg_watch import NoAnswer

    def wrapped(orig: Exception) -> OperationalError:
        return OperationalError("SELECT 1", {}, orig)

    assert transient(wrapped(psycopg2.OperationalError("server closed the connection")))
    assert transient(psycopg2.InterfaceError("connection already closed"))
    for timed_out in (NoAnswer("no answer"), psycopg2.errors.QueryCanceled("statement timeout")):
        assert not transient(wrapped(timed_out)) and not transient(timed_out)


DATA_SWEEP = Path(__file__).parent / "data" / "sweep-light"


# --- accepted where it should refuse -------------------------------------------------------


def test_what_cannot_be_what_it_asks_for_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import POSTGRES_URL

    from cli import main as cli

    monkeypatch.chdir(tmp_path)
    database = f"sqlite:///{tmp_path / 'r.db'}"
    cases = (
        (
            [
                "run",
                "task2a-logreg-epsilon",
                "--light",
                "--gpus-per-worker",
                "2",
                "--results",
                str(tmp_path / "r"),
                "--database",
                database,
            ],
            "gpus_per_worker: the local launcher gives each rank at most one",
        ),
        (
            ["db", "upgrade", "--database", "sqlite:///file::memory:?cache=shared"],
            "is named like a SQLite URI",
        ),
        (
            ["db", "grant-readonly", "postgres", "--database", POSTGRES_URL],
            "role: postgres is a superuser",
        ),
    )
    for argv, says in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no file named after a URI


@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_a_run_folder_that_is_no_folder_is_named_not_taken_for_a_silent_rank(
    engine: Engine, tmp_path: Path, kind: str
) -> None:
    import shutil

    sweep_dir = write_training_sweep(tmp_path, "sid", [FakeRun(1), FakeRun(2)])
    run_dir = sweep_dir / "sid-w1-r1"
    shutil.rmtree(run_dir)
    if kind == "file":
        run_dir.write_text("not a folder\n")
    else:
        os.mkfifo(run_dir)
    report = ingest_location(engine, str(tmp_path))
    assert any(
        r.startswith("sid-w1-r1: the run's folder sid-w1-r1 is not a folder")
        for r in report.refused
    ), report.refused
    assert stored(engine)["sid-w2-r1"][1] == "succeeded"


@pytest.mark.parametrize(
    ("profile", "says"),
    [
        ("9" * 400 + "mbit", "the rate must be between 100kbit and 400gbit"),
        ("1e400mbit", "is not a profile"),
        ("10mbit+" + "9" * 400 + "ms", "the delay must be at most 1000ms"),
    ],
)
def test_a_network_rate_or_delay_beyond_a_float_is_refused_naming_the_field(
    profile: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    database = f"sqlite:///{tmp_path / 'r.db'}"
    argv = ["run", "task2a-logreg-epsilon", "--light", "--network", profile]
    assert cli.main([*argv, "--results", str(tmp_path / "r"), "--database", database]) == 2
    err = capsys.readouterr().err
    assert "error: network: " in err and says in err and "Traceback" not in err, err
    assert len(err) < 400


def test_a_nul_character_in_a_record_is_quarantined_alike_on_both_databases(
    engine: Engine, tmp_path: Path
) -> None:
    sweep_dir = write_training_sweep(tmp_path, "sid", [FakeRun(1)])
    rank_file = sweep_dir / "sid-w1-r1" / "rank-0.jsonl"
    rewrite(rank_file, lambda rs: rs[0].update(host="node\u0000-0"))  # the env record
    report = ingest_location(engine, str(tmp_path))
    assert report.refused == [] and report.quarantined_lines == 1, report
    assert any(":1: it holds a NUL character" in p for p in report.problems), report.problems
    assert stored(engine)["sid-w1-r1"][1] == "succeeded"


def test_prices_are_stored_alike_on_both_databases_or_refused(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    url = engine.url.render_as_string(hide_password=False)
    base = ["prices", "set", "instance", "probe", "--preemptible", "0.01", "--database", url]
    for regular, valid_from, says in (
        ("0.00015", "2026-01-01", "regular_per_hour: at most 4 decimal places"),
        ("0.1", "0001-01-01T00:00:00+05:00", "valid_from: must be a date"),
        ("0.1", "9999-12-31T23:00:00-05:00", "valid_from: must be a date"),
    ):
        assert cli.main([*base, "--regular", regular, "--valid-from", valid_from]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err, err
    assert (
        cli.main([*base, "--regular", "0.0002", "--valid-from", "2026-01-01T01:00:00+02:00"]) == 0
    )
    capsys.readouterr()
    assert cli.main(["prices", "list", "--database", url]) == 0
    listed = [line.split() for line in capsys.readouterr().out.splitlines() if "probe" in line]
    assert listed == [
        ["instance", "probe", "0.0002", "0.01", "2025-12-31", "entered", "by", "hand"]
    ]


def test_a_lone_surrogate_in_a_sweep_json_refuses_it_by_name_on_both_databases(
    engine: Engine, tmp_path: Path
) -> None:
    sweep_dir = write_training_sweep(tmp_path, "sid", [FakeRun(1)])
    data = json.loads((sweep_dir / manifest.MANIFEST).read_text())
    data["groups"][0]["reason"] = "half \ud800 a pair"
    (sweep_dir / manifest.MANIFEST).write_text(json.dumps(data))
    report = ingest_location(engine, str(tmp_path))
    assert any("surrogate" in r for r in report.refused), report.refused
    assert stored(engine) == {}


def test_an_export_is_the_same_bytes_from_either_database(postgres_admin, tmp_path: Path) -> None:
    import csv

    from conftest import POSTGRES_URL

    from results_db.scratch import scratch_database
    from results_db.service import export, ingest

    write_training_sweep(tmp_path / "sweeps", "sid", [FakeRun(1), FakeRun(2)])
    files: dict[str, dict[str, list[dict[str, str]]]] = {}
    with scratch_database(POSTGRES_URL, "scalebench_test", migrate=False) as postgres:
        for name, url in (("sqlite", f"sqlite:///{tmp_path / 'r.db'}"), ("pg", postgres)):
            ingest(url, str(tmp_path / "sweeps"), say=None)
            written = export(url, "sid", "csv", tmp_path / name)
            files[name] = {
                path.name: list(csv.DictReader(path.open()))
                if path.suffix == ".csv"
                else [{"text": path.read_text()}]
                for path in written
            }
    assert files["sqlite"].keys() == files["pg"].keys()
    for file_name, rows in files["sqlite"].items():
        for mine, theirs in zip(rows, files["pg"][file_name], strict=True):
            mine.pop("ingested_at", None), theirs.pop("ingested_at", None)  # when each loaded
            assert mine == theirs, file_name
    run = files["sqlite"]["sid-runs.csv"][0]
    assert run["started_at"].endswith("+00:00")
    metrics = files["sqlite"]["sid-evaluations.csv"][0]["metrics"]
    assert json.loads(metrics) and metrics.startswith('{"loss"')  # JSON, keys sorted


def test_a_time_whose_offset_carries_it_past_year_1_or_9999_is_refused_by_name(
    engine: Engine, tmp_path: Path
) -> None:
    early, late = "0001-01-01T00:00:00+05:00", "9999-12-31T23:00:00-05:00"
    for sweep_id, change in (
        ("created", lambda d: d.update(created_at=early)),
        ("finished", lambda d: d.update(finished_at=late)),
    ):
        sweep_dir = write_training_sweep(tmp_path, sweep_id, [FakeRun(1)])
        data = json.loads((sweep_dir / manifest.MANIFEST).read_text())
        change(data)
        (sweep_dir / manifest.MANIFEST).write_text(json.dumps(data))
    sweep_dir = write_training_sweep(tmp_path, "started", [FakeRun(1)])
    rewrite(
        sweep_dir / "started-w1-r1" / "rank-0.jsonl",
        lambda rs: [r.update(started_at=early) for r in rs if r.get("event") == "start"],
    )
    report = ingest_location(engine, str(tmp_path))
    assert sum("outside years 1 to 9999 in UTC" in r for r in report.refused) == 2, report
    assert any("'started_at' is no ISO 8601 time" in p for p in report.problems), report
