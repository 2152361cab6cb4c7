"""Loading what the workers recorded into the results database.

A results location (a local path or any fsspec URI) holds sweep directories,
each with a ``sweep.json`` manifest and one directory per run:

    <location>/<sweep>/sweep.json (and verdicts.jsonl while it runs: scalebench.manifest)
    <location>/<sweep>/<run>/rank-<r>.jsonl

Each run is loaded in one transaction that first deletes the run's earlier
rows, so ingesting the same run again leaves the same rows, and a crash in
the middle leaves nothing of that run half-written. A stored run is never
replaced by a reading of its files that holds fewer records or a worse
verdict (files damaged or removed after a good ingest): the stored run stays
and the conflict is reported, unless ``replace`` says otherwise. Lines that
cannot be read, repeat an earlier record, hold impossible values (a negative
duration) or values no column can hold are counted into the run's
``quarantined_lines`` and reported with their line numbers; rank files that
disagree about their run are refused, with the reason, and nothing of that run
is written; a rank file outside the group's world size is left out. Failed,
diverged and timed-out runs are loaded with that status and whatever they
measured. A database that drops the connection or restarts meanwhile is
waited for (:data:`RETRY_DELAYS_S`), and the transaction it broke is tried
again. On PostgreSQL the large tables (step timings, all-reduce samples) are
loaded with binary COPY.

Ingests of the same sweep at once (two ``scalebench ingest``, or an Airflow retry beside
a manual one) end as one would: on PostgreSQL each holds an advisory lock keyed on the
sweep id (:func:`sweep_lock`) while it loads the sweep, so they take turns; on SQLite the
database's own write lock and a busy timeout make them take turns run by run, and the
sweep row is written with one upsert statement.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import Any, TypeVar

import fsspec
from sqlalchemy import Connection, Engine, delete, func, insert, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError

from results_db.fits import refit_sweep
from results_db.models import (
    AllReduceCurve,
    AllReduceSample,
    EpochEval,
    Run,
    RunEnvironment,
    RunEvent,
    StepTiming,
    Sweep,
)
from results_db.rows import (
    BulkLoader,
    allreduce_columns,
    allreduce_curves,
    env_row,
    eval_row,
    event_details,
    step_columns,
)
from results_db.run_summary import RunSummary, summarise
from results_db.schema_limits import check_record, row_problems, value_problem
from scalebench import config, folders, quantities
from scalebench import manifest as sweep_manifest
from scalebench.diskspace import NO_SPACE
from scalebench.errors import describe
from scalebench.manifest import (
    MANIFEST,
    TRIGGERS,
    GroupEntry,
    Manifest,
    configuration_hash,
)
from scalebench.rank import DEFAULT_PRECISION
from scalebench.request import InvalidParameter, check_stored
from scalebench.statuses import NOT_STARTED
from scalebench.tasks import TASKS, AllReduceSpec, Goal, TrainingSpec
from workers.records import (
    PHASES,
    InconsistentRun,
    RankRecords,
    UnreadableRankFile,
    check_consistent,
    gc_paused,
    iter_rank_files,
    rank_of,
)

T = TypeVar("T")


# A run id names a directory inside its sweep's: one path component, nothing that climbs out.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class RunExtent:
    """How much of a run a reading holds: its verdict and how many records of each kind."""

    status: str
    step_records: int
    evaluations: int
    events: int
    allreduce_samples: int

    def shortfall(self, stored: RunExtent) -> str | None:
        """Why this reading must not replace ``stored`` (``None`` when it may)."""
        if stored.status == "succeeded" and self.status != "succeeded":
            return f"it is stored as succeeded, and the files now read as {self.status}"
        for name in ("step_records", "evaluations", "events", "allreduce_samples"):
            now, before = getattr(self, name), getattr(stored, name)
            if now < before:
                label = name.replace("_", " ")
                return f"the files now hold {now:,} {label}, the stored run {before:,}"
        return None


# Waits between tries when the database drops the connection or restarts: about half a
# minute in all, then the error stands (the Airflow task retries on a longer scale).
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is the database going away (a dropped connection, a restart, a
    server not answering yet), which the same work may survive if tried again. A statement
    that outlived the statement timeout (cancelled by the server, or unanswered and hung up
    on) is not: it would take as long again."""
    import psycopg2  # a declared dependency; imported here, where PostgreSQL is in use
    import psycopg2.errors

    from results_db.pg_watch import NoAnswer

    if isinstance(getattr(exc, "orig", None) or exc, NoAnswer | psycopg2.errors.QueryCanceled):
        return False
    if isinstance(exc, OperationalError) or getattr(exc, "connection_invalidated", False):
        return True
    # a COPY talks to psycopg2 directly: its errors come unwrapped
    return isinstance(exc, psycopg2.OperationalError | psycopg2.InterfaceError)


def with_retries(action: Callable[[], T], say: Callable[[str], None], what: str) -> T:
    """``action()``, tried again after each of :data:`RETRY_DELAYS_S` while the database
    is away; each action is one transaction, so a try that failed left nothing behind."""
    for delay in (*RETRY_DELAYS_S, None):
        try:
            return action()
        except Exception as exc:
            if delay is None or not transient(exc):
                raise
            first_line = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [""])[0]
            say(f"{what}: the database did not answer ({first_line}); trying again in {delay:g} s")
            time.sleep(delay)
    raise AssertionError("unreachable")


class RunOfAnotherSweep(ValueError):
    """A manifest lists a run that another sweep stored: refused, with or without
    ``replace``; the stored run stays its first sweep's."""


class KeptStoredRun(Exception):
    """A reading that would lose what is stored of a run; the stored run stays."""

    def __init__(self, reason: str, status: str) -> None:
        super().__init__(reason)
        self.status = status  # the stored run's, which still stands


@dataclass
class IngestReport:
    """What one ingest did; ``refused`` and ``problems`` say what it could not read."""

    sweeps: int = 0
    runs: int = 0
    rows: int = 0
    quarantined_lines: int = 0
    refused: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # stored runs kept over their files
    seconds: float = 0.0


# The first of the two 32-bit keys of the sweeps' advisory locks (the second: a hash of the
# sweep id); PostgreSQL keeps two-key locks apart from the one-key migration lock.
SWEEP_LOCK_SPACE = 0x5CA1E


def sweep_lock_key(sweep_id: str) -> int:
    """The second key of sweep ``sweep_id``'s advisory lock: a signed 32-bit hash of its id
    (two sweeps that share one merely take turns)."""
    digest = hashlib.blake2b(sweep_id.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextmanager
def sweep_lock(engine: Engine, sweep_id: str, say: Callable[[str], None]) -> Iterator[None]:
    """On PostgreSQL, hold sweep ``sweep_id``'s advisory lock (a session lock on a connection
    of its own) while the body runs, telling ``say`` when another ingest of it is waited for;
    elsewhere nothing. A connection that drops takes its lock with it."""
    if engine.dialect.name != "postgresql":
        yield
        return
    keys = {"space": SWEEP_LOCK_SPACE, "key": sweep_lock_key(sweep_id)}

    def acquire() -> Connection:
        conn = engine.connect()
        try:
            got = conn.execute(text("SELECT pg_try_advisory_lock(:space, :key)"), keys).scalar()
            if not got:
                say(f"sweep {sweep_id}: waiting for another ingest of it to end")
                conn.execute(text("SELECT pg_advisory_lock(:space, :key)"), keys)
            conn.commit()
        except BaseException:
            conn.invalidate()  # closing the session releases whatever it holds
            conn.close()
            raise
        return conn

    conn = with_retries(acquire, say, f"sweep {sweep_id}")
    try:
        yield
    finally:
        try:
            conn.execute(text("SELECT pg_advisory_unlock(:space, :key)"), keys)
            conn.commit()
        except Exception:
            conn.invalidate()  # the session (and with it the lock) is gone or going
        conn.close()


def find_sweeps(fs: Any, root: str) -> list[str]:
    """Sweep directories at ``root``: ``root`` itself, or its sub-directories with a manifest.
    ``root`` is a path, never a pattern: ``exp[1]`` is the folder of that name."""
    root = root.rstrip("/") or "/"
    if folders.lexists(fs, f"{root}/{MANIFEST}"):
        return [root]
    return [
        f"{root}/{name}"
        for name in folders.names(fs, root)
        if folders.lexists(fs, f"{root}/{name}/{MANIFEST}")
    ]


def ingest_location(
    engine: Engine,
    location: str,
    progress: Callable[[str], None] | None = None,
    only: Collection[str] | None = None,
    replace: bool = False,
    settle: Callable[[Manifest, str], Manifest] | None = None,
) -> IngestReport:
    """Ingest every sweep under ``location`` (a path or an fsspec URI).

    ``only``: load just these runs (and the sweep's row), e.g. the group that just
    ended while its sweep goes on; the sweep's outcome still counts every group.
    ``replace``: let the files replace a stored run even when they now hold less, and a
    changed ``sweep.json`` replace its stored sweep whole. ``settle``: what to make of each
    manifest read (with its sweep's path) before it is loaded, e.g. a sweep whose runner
    vanished seen as closed without writing to it.
    """
    say = progress or (lambda line: None)
    config.contention_threshold()  # a bad setting is refused before anything is written
    report = IngestReport()
    started = time.perf_counter()
    fs, root = fsspec.core.url_to_fs(location)
    sweeps = find_sweeps(fs, root)
    if not sweeps:
        raise FileNotFoundError(f"no sweep ({MANIFEST}) found at {location}")
    for sweep_path in sweeps:
        try:
            manifest = sweep_manifest.read(fs, sweep_path)  # verdicts folded in
        except sweep_manifest.BadManifest as exc:  # refused by name; the others still load
            report.refused.append(f"sweep {exc}")
            say(f"refused sweep {exc}")
            continue
        if settle is not None:
            manifest = settle(manifest, sweep_path)
        with gc_paused(), sweep_lock(engine, manifest.sweep_id, say):
            ingest_sweep(engine, fs, sweep_path, manifest, report, say, only, replace)
    report.seconds = time.perf_counter() - started
    return report


def ingest_sweep(
    engine: Engine,
    fs: Any,
    sweep_path: str,
    manifest: Manifest,
    report: IngestReport,
    say: Callable[[str], None],
    only: Collection[str] | None = None,
    replace: bool = False,
) -> None:
    sweep_id = manifest.sweep_id
    request = manifest.request
    unreadable = _sweep_problems(manifest)
    if unreadable:
        report.refused.append(f"sweep {sweep_id[:60]}: {'; '.join(unreadable)}")
        say(f"refused sweep {sweep_id[:60]}: {'; '.join(unreadable)}")
        return

    def compare() -> list[str]:
        with engine.connect() as conn:
            return stored_sweep_differences(conn, manifest)

    differences = with_retries(compare, say, f"sweep {sweep_id}")
    if differences:
        what = f"its {MANIFEST} differs from what is stored ({'; '.join(differences)})"
        if not replace:
            refusal = (
                f"sweep {sweep_id[:60]}: {what}; `scalebench ingest --replace` replaces the "
                "stored sweep whole"
            )
            report.refused.append(refusal)
            say(f"refused {refusal}")
            return

        def drop() -> None:
            with engine.begin() as conn:
                delete_sweep(conn, sweep_id)

        with_retries(drop, say, f"sweep {sweep_id}")
        say(f"replaced the stored sweep {sweep_id} whole: {what}")

    def upsert() -> None:
        with engine.begin() as conn:
            _upsert_sweep(conn, manifest)

    with_retries(upsert, say, f"sweep {sweep_id}")
    report.sweeps += 1
    groups = manifest.groups
    statuses = []
    stored: dict[str, str] = {}  # what earlier ingests stored of the runs not loaded now
    if only is not None:

        def stored_statuses() -> dict[str, str]:
            with engine.connect() as conn:
                query = select(Run.id, Run.status).where(Run.sweep_id == sweep_id)
                return {run_id: status for run_id, status in conn.execute(query)}

        stored = with_retries(stored_statuses, say, f"sweep {sweep_id}")
    for index, group in enumerate(groups, start=1):
        run_id = group.run_id
        run_path = f"{sweep_path}/{run_id}"
        if only is not None and run_id not in only:
            if run_id in stored:
                statuses.append(stored[run_id])
            continue
        bad_id = _run_id_problem(run_id)
        if bad_id:
            report.refused.append(f"{run_id[:80]!r}: {bad_id}")
            say(f"refused {run_id[:80]!r}: {bad_id}")
            statuses.append("refused")
            continue
        say(f"[{index}/{len(groups)}] loading {run_id} ...")
        tick = time.perf_counter()

        def load(run_path: str = run_path, group: GroupEntry = group) -> Any:
            with engine.begin() as conn:
                return load_run(conn, fs, run_path, sweep_id, request, group, replace)

        try:
            rows, summary, ranks = with_retries(load, say, run_id)
        except KeptStoredRun as kept:
            report.conflicts.append(f"{run_id}: {kept}")
            say(f"kept the stored {run_id}: {kept} (--replace loads the files)")
            statuses.append(kept.status)
            continue
        except Exception as exc:  # one unreadable run must not stop the others
            reason = exc.args[0] if isinstance(exc, InconsistentRun) else describe(exc)
            report.refused.append(f"{run_id}: {reason}")
            say(f"refused {run_id}: {reason}")
            if replace and isinstance(exc, InconsistentRun):
                with engine.begin() as conn:  # asked to follow the files, which hold no run
                    delete_run(conn, run_id)
            statuses.append("refused")
            continue
        statuses.append(summary.status)
        report.runs += 1
        report.rows += rows
        report.quarantined_lines += summary.bad_lines
        for rank in ranks:
            report.problems += rank.problems
        rate = rows / max(time.perf_counter() - tick, 1e-9)
        say(
            f"[{index}/{len(groups)}] {run_id}: {summary.status}, "
            f"{rows:,} rows ({rate:,.0f} rows/s)"
            + (f", {summary.bad_lines} unreadable line(s) quarantined" if summary.bad_lines else "")
        )

    if only is None:
        for name in unlisted_runs(fs, sweep_path, groups):
            report.refused.append(f"{name}: a run folder that {MANIFEST} does not list; not read")
            say(f"refused {name}: a run folder that {MANIFEST} does not list; not read")

    def record_outcome() -> None:
        with engine.begin() as conn:
            conn.execute(
                update(Sweep)
                .where(Sweep.id == sweep_id)
                .values(outcome=_sweep_outcome(statuses, groups))
            )
            if isinstance(TASKS.get(request["task"]), AllReduceSpec):
                refit_sweep(conn, sweep_id)  # the ring model of every configuration

    with_retries(record_outcome, say, f"sweep {sweep_id}")


def unlisted_runs(fs: Any, sweep_path: str, groups: Sequence[GroupEntry]) -> list[str]:
    """Folders of the sweep that hold rank files but are no group of its manifest (a
    manifest that lies, or records copied into the wrong sweep): never read, but said."""
    listed = {group.run_id for group in groups}
    return [
        name
        for name in folders.names(fs, sweep_path)
        if name not in listed
        and fs.isdir(f"{sweep_path}/{name}")
        and any(
            f.startswith("rank-") and f.endswith(".jsonl")
            for f in folders.names(fs, f"{sweep_path}/{name}")
        )
    ]


def _sweep_outcome(statuses: Sequence[str], groups: Sequence[GroupEntry]) -> str:
    """``running`` while groups are planned, else succeeded / partial / failed / cancelled."""
    if any(g.status == "planned" for g in groups):
        return "running"
    if any(g.status in ("cancelled", "skipped") for g in groups):
        return "cancelled"
    if statuses and all(s == "succeeded" for s in statuses):
        return "succeeded"
    return "partial" if "succeeded" in statuses else "failed"


def _parse_time(value: str | None) -> datetime | None:
    """An ISO 8601 time as an aware UTC instant (one without an offset is taken as UTC),
    so that SQLite, which keeps wall times, and PostgreSQL store the same moment."""
    return _utc(datetime.fromisoformat(value)) if value else None


def _run_id_problem(run_id: Any) -> str | None:
    """Why ``run_id`` from a manifest cannot name a run of its sweep (``None``: it can)."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        return (
            "a run id is one directory name inside the sweep's (letters, digits, '.', "
            "'_', '-'), so this manifest entry is not read"
        )
    return value_problem(Run.__table__, "id", run_id)


def _sweep_problems(manifest: Manifest) -> list[str]:
    """Why a manifest's sweep cannot be stored (empty: it can): its id must name one
    directory, as a run id does (an id that climbs out of a folder would later be written
    out of one by ``export``); its task must be one this scalebench knows, its trigger one
    of :data:`~scalebench.manifest.TRIGGERS`, its request's values ones a request can hold
    (:func:`~scalebench.request.check_stored`), every value must fit its column, and its runs
    must be named after it."""
    sweep_id = manifest.sweep_id
    if not RUN_ID.fullmatch(sweep_id):
        return [
            "a sweep id is one directory name (letters, digits, '.', '_', '-'), so this "
            "manifest is not read"
        ]
    task = manifest.request["task"]
    if task not in TASKS:
        return [f"its request names task {task[:60]!r}, which this scalebench does not know"]
    if manifest.trigger not in TRIGGERS:
        return [f"its trigger must be one of {', '.join(TRIGGERS)}, not {manifest.trigger[:60]!r}"]
    try:
        check_stored(manifest.request)
    except InvalidParameter as exc:
        return [f"its request holds what no request can: {exc}"]
    problems = row_problems(Sweep.__table__, {"id": sweep_id, **_sweep_values(manifest)})
    if problems:
        return problems
    for group in manifest.groups:
        problem = quantities.FIELDS[("any", "world_size")].problem(group.world_size)
        if problem:
            return [f"group {group.run_id[:60]!r}: {problem}"]
    created, finished = _parse_time(manifest.created_at), _parse_time(manifest.finished_at)
    if created is not None and finished is not None and finished < created:
        return [
            f"it finished ({manifest.finished_at}) before it was created ({manifest.created_at})"
        ]
    strangers = [  # a run id that names no folder is refused run by run, with its reason
        g.run_id
        for g in manifest.groups
        if RUN_ID.fullmatch(g.run_id) and not g.run_id.startswith(sweep_id + "-")
    ]
    if strangers:
        return [
            f"run {strangers[0][:60]!r} is not one of this sweep's (they are named {sweep_id}-…)"
        ]
    return []


# What identifies a stored sweep: a later reading of its sweep.json must agree on each
# (only its finishing time and, from its groups' verdicts, its outcome may change).
SWEEP_IDENTITY = ("task", "trigger", "config_hash", "code_version")


def stored_sweep_differences(conn: Connection, manifest: Manifest) -> list[str]:
    """How ``manifest`` disagrees with what is stored of its sweep, one phrase per field
    (empty: it agrees, or nothing is stored): its identity (:data:`SWEEP_IDENTITY`), its
    request field by field, its creation time, and the stored runs it no longer lists."""
    sweep_id = manifest.sweep_id
    row = conn.execute(
        select(Sweep.created_at, Sweep.config, *(getattr(Sweep, n) for n in SWEEP_IDENTITY)).where(
            Sweep.id == sweep_id
        )
    ).first()
    if row is None:
        return []
    now = _sweep_values(manifest)
    found = [
        f"{name} {_short(getattr(row, name))} → {_short(now[name])}"
        for name in SWEEP_IDENTITY
        if getattr(row, name) != now[name]
    ]
    before, after = row.config or {}, manifest.request
    found += [
        f"request.{key} {_short(before.get(key))} → {_short(after.get(key))}"
        for key in sorted(set(before) | set(after))
        if key != "task" and before.get(key) != after.get(key)
    ]
    if manifest.created_at and _utc(row.created_at) != now["created_at"]:
        found.append(f"created_at {_utc(row.created_at).isoformat()} → {manifest.created_at}")
    listed = {group.run_id for group in manifest.groups}
    gone = sorted(
        set(conn.execute(select(Run.id).where(Run.sweep_id == sweep_id)).scalars()) - listed
    )
    if gone:
        found.append(f"it no longer lists the stored run(s) {', '.join(gone[:5])}")
    return found


def _short(value: Any) -> str:
    """A stored or read value for a refusal: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC instant (SQLite hands back naive UTC wall times)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def delete_sweep(conn: Connection, sweep_id: str) -> None:
    """Remove a sweep, its runs and every row they own."""
    for run_id in list(conn.execute(select(Run.id).where(Run.sweep_id == sweep_id)).scalars()):
        delete_run(conn, run_id)
    conn.execute(delete(Sweep).where(Sweep.id == sweep_id))


def _upsert_sweep(conn: Connection, manifest: Manifest) -> None:
    """Insert the sweep's row, or update what may change of it (its finishing time): one
    statement, so an ingest of the same sweep at the same time cannot insert it in
    between. Its identity was checked against the stored row first
    (:func:`stored_sweep_differences`): an ingest never rewrites it as a side effect."""
    values = _sweep_values(manifest)
    changing = {"finished_at": values["finished_at"]}
    sweep_id = manifest.sweep_id
    dialect = {"postgresql": postgresql, "sqlite": sqlite}.get(conn.dialect.name)
    if dialect is not None:
        statement = dialect.insert(Sweep).values(id=sweep_id, **values)
        conn.execute(statement.on_conflict_do_update(index_elements=[Sweep.id], set_=changing))
    elif conn.execute(select(Sweep.id).where(Sweep.id == sweep_id)).first():
        conn.execute(update(Sweep).where(Sweep.id == sweep_id).values(**changing))
    else:
        conn.execute(insert(Sweep).values(id=sweep_id, **values))


def _sweep_values(manifest: Manifest) -> dict[str, Any]:
    """The sweep row's columns but its id, from the manifest (whose reader,
    :meth:`Manifest.from_json`, fills in what an older ``sweep.json`` lacks)."""
    request = manifest.request
    return {
        "task": request["task"],
        "trigger": manifest.trigger,
        "config": request,
        "config_hash": manifest.config_hash or configuration_hash(request),
        "code_version": manifest.code_version,
        "created_at": _parse_time(manifest.created_at) or datetime.now(UTC),
        "finished_at": _parse_time(manifest.finished_at),
    }


def load_run(
    conn: Connection,
    fs: Any,
    run_path: str,
    sweep_id: str,
    request: dict[str, Any],
    group: GroupEntry,
    replace: bool = False,
) -> tuple[int, RunSummary, list[RankRecords]]:
    """Replace one run's rows with what its rank files hold, within ``conn``'s transaction.

    Rank files are read one after another; on PostgreSQL each one's bulk rows
    are COPied on a second thread while the next file is read. Raises
    :class:`InconsistentRun` when the files disagree, and :class:`KeptStoredRun`
    when they hold less than the stored run (unless ``replace``); the
    transaction then rolls back and the stored rows stay. Returns the rows
    written, the run's summary and its records.
    """
    run_id = group.run_id
    owner = conn.execute(select(Run.sweep_id).where(Run.id == run_id)).scalar()
    if owner is not None and owner != sweep_id:
        raise RunOfAnotherSweep(
            f"it is stored as a run of sweep {owner}; a run belongs to the sweep that first "
            f"stored it, so sweep {sweep_id} cannot load it (nothing of it was changed)"
        )
    stored = stored_extent(conn, run_id)
    delete_run(conn, run_id)
    ranks: list[RankRecords] = []
    outside: list[RankRecords] = []  # files of ranks the group does not have
    left_out: list[str] = []  # files named like rank files that are not
    rows = 0
    loader = BulkLoader(conn)
    sweep_path = run_path.rsplit("/", 1)[0]
    try:
        try:
            folders.check_inside(sweep_path, run_path, fs)
        except folders.LinkLeaves as exc:
            raise UnreadableRankFile(str(exc)) from None
        if fs.exists(run_path) and not fs.isdir(run_path):
            raise UnreadableRankFile(
                f"the run's folder {group.run_id} is not a folder (a file, a pipe or a "
                "device), so the run is not read"
            )
        if fs.exists(run_path):
            for rank in iter_rank_files(run_path, fs, check_record, left_out, sweep_path):
                if rank_of(rank.path) >= group.world_size:
                    outside.append(rank)
                    continue
                ranks.append(rank)
                rows += loader.load(StepTiming.__table__, step_columns(run_id, [rank]))
                rows += loader.load(AllReduceSample.__table__, allreduce_columns(run_id, [rank]))
    except BaseException:
        loader.abandon()  # the error in hand is the one to report
        raise
    loader.finish()
    try:
        check_consistent(ranks)
    except InconsistentRun as exc:
        if stored is not None and not replace:
            raise KeptStoredRun(f"the rank files now disagree ({exc})", stored.status) from None
        raise
    summary = summarise(ranks, run_id, group.world_size, group.status)
    implausible = run_problem(ranks, group, summary, request)
    if implausible:
        raise InconsistentRun(implausible)
    if group.status in NOT_STARTED and not fs.exists(run_path):
        # Never started (not yet, or the sweep was stopped first): a row with its reason,
        # nothing measured.
        summary.status, summary.reason = group.status, group.reason
    shared = shared_nodes(ranks) if request.get("placement") == "spread" else {}
    if shared:
        # One rank per node: each rank is a node of its own; else the group's nodes are pods.
        unit = "rank" if request.get("ranks_per_node", 1) == 1 else "node"
        where = "; ".join(
            f"{unit}s {', '.join(map(str, n))} on {machine}" for machine, n in shared.items()
        )
        asked = "one rank per node" if unit == "rank" else "one pod per machine"
        summary.reason = "; ".join(
            filter(None, [summary.reason, f"placement: {asked} was asked, but {where}"])
        )
    for rank in outside:
        lines = len(rank.records) + rank.bad_lines
        summary.bad_lines += lines
        rank.problems = [
            f"{rank.path.name}: rank {rank_of(rank.path)} is outside the group of "
            f"{group.world_size}; its {lines} line(s) are left out"
        ]
    launcher_reason = group.reason
    if group.status == "failed" and launcher_reason.removeprefix("not started: ").startswith(
        NO_SPACE
    ):
        # A full disk: what the ranks could not write (no final record) is not news.
        summary.status, summary.reason = "failed", launcher_reason
    elif summary.status in ("cancelled", "timed_out", *CLUSTER_VERDICTS) and launcher_reason:
        summary.reason = launcher_reason  # who stopped it, and when, is the launcher's to say
    elif group.status == "failed" and summary.status == "succeeded":
        summary.status, summary.reason = "failed", launcher_reason
    elif summary.status == "failed" and launcher_reason and launcher_reason not in summary.reason:
        # What the launcher saw (a pod that was never scheduled, a rank killed
        # by a signal) comes first; the ranks' own records add the detail.
        summary.reason = "; ".join(filter(None, [launcher_reason, summary.reason]))
    summary.reason = "; ".join(filter(None, [summary.reason, *cluster_marks(group)]))
    if stored is not None and not replace:
        shortfall = extent_of(summary, ranks).shortfall(stored)
        if shortfall:
            raise KeptStoredRun(shortfall, stored.status)
    unstorable = row_problems(Run.__table__, _run_strings(summary, request))
    if unstorable:
        raise ValueError(f"the run cannot be stored: {'; '.join(unstorable)}")
    rows += _write_run(conn, sweep_id, request, group, summary, ranks, bool(shared))
    if left_out:  # said with the run's problems; nothing of them is read
        outside.append(RankRecords(path=PurePosixPath(run_path), problems=left_out))
    return rows, summary, ranks + outside


def run_problem(
    ranks: Sequence[RankRecords],
    group: GroupEntry,
    summary: RunSummary,
    request: dict[str, Any],
) -> str | None:
    """Why a run's records, each readable, cannot be one real run of ``group`` together
    (``None``: they can): records of another run or group size than the manifest's,
    evaluations whose times go back, a time to accuracy longer than the run, or a goal
    recorded reached that no evaluation reached."""
    for rank in ranks:
        first = rank.records[0] if rank.records else None
        if first is not None and (
            first["run_id"] != group.run_id or first["world_size"] != group.world_size
        ):
            return (
                f"{rank.path.name} holds records of run {first['run_id'][:80]} with "
                f"{first['world_size']} rank(s); the manifest's group is {group.run_id} of "
                f"{group.world_size}"
            )
        times = [e["t"] for e in rank.of_kind("eval")]
        back = next((i for i in range(1, len(times)) if times[i] < times[i - 1]), None)
        if back is not None:
            return (
                f"{rank.path.name}: evaluation times go back, from {times[back - 1]:g} s "
                f"to {times[back]:g} s"
            )
    tta = summary.time_to_accuracy_s
    if tta is not None and tta > summary.duration_s * 1.01 + 1.0:
        return (
            f"its time to accuracy ({tta:g} s) is longer than the run ({summary.duration_s:g} s "
            "from the common start to its last record)"
        )
    spec = TASKS.get(request["task"])
    goal = spec.goal if isinstance(spec, TrainingSpec) else None
    target = goal_target(summary.start, ranks, goal, bool(request.get("light")))
    if summary.goal_reached and goal is not None and target is not None:
        values = [e["metrics"].get(goal.metric) for e in ranks[0].of_kind("eval")]
        if not any(
            isinstance(v, int | float) and (v >= target if goal.direction == "max" else v <= target)
            for v in values
        ):
            return (
                f"the goal ({goal.metric} {target:g}) is recorded reached, yet no evaluation "
                "reached it"
            )
    return None


# Verdicts only a cluster gives (scalebench.manifest): the launcher's reason is the run's.
CLUSTER_VERDICTS = ("preempted", "not_admitted")


def cluster_marks(group: GroupEntry) -> list[str]:
    """What the tables must show of how the cluster ran a group: pods outside the
    Guaranteed QoS class, and the earlier attempts of a group run again after a preemption."""
    marks = []
    if group.qos_class and group.qos_class != "Guaranteed":
        marks.append(f"QoS {group.qos_class}: the pods' limits were above their requests")
    for earlier in group.attempts:
        marks.append(
            f"attempt {earlier.get('attempt')} {earlier.get('status')}: {earlier.get('reason')}"
        )
    return marks


def shared_nodes(ranks: Sequence[RankRecords]) -> dict[str, list[int]]:
    """Machines that more than one of the group's nodes ran on (machine -> node indexes),
    from the environment records' ``node`` (a pod's machine; ``host`` in records from
    before it was written) and ``node_rank`` (where a record has none, one rank per node:
    the rank's own number)."""
    on: dict[str, set[int]] = {}
    for rank in ranks:
        for record in rank.of_kind("env")[:1]:
            machine = record.get("node") or record.get("host")
            index = record.get("node_rank")
            if not isinstance(index, int):
                index = rank_of(rank.path)
            if isinstance(machine, str) and machine:
                on.setdefault(machine, set()).add(index)
    return {machine: sorted(nodes) for machine, nodes in on.items() if len(nodes) > 1}


def stored_extent(conn: Connection, run_id: str) -> RunExtent | None:
    """How much of run ``run_id`` the database holds (``None``: nothing)."""
    row = conn.execute(
        select(Run.status, Run.step_records, Run.epochs).where(Run.id == run_id)
    ).first()
    if row is None:
        return None
    events = conn.execute(select(func.count()).where(RunEvent.run_id == run_id)).scalar_one()
    samples = conn.execute(
        select(func.count()).where(AllReduceSample.run_id == run_id)
    ).scalar_one()
    return RunExtent(row.status, row.step_records, row.epochs, events, samples)


def extent_of(summary: RunSummary, ranks: Sequence[RankRecords]) -> RunExtent:
    """How much of its run a reading of the rank files holds."""
    return RunExtent(
        status=summary.status,
        step_records=summary.step_records,
        evaluations=summary.epochs,
        events=sum(len(rank.of_kind("event")) for rank in ranks),
        allreduce_samples=sum(
            len(r["seconds"]) for rank in ranks for r in rank.of_kind("allreduce")
        ),
    )


def _run_strings(summary: RunSummary, request: dict[str, Any]) -> dict[str, Any]:
    """The run row's text columns that come from the request (the records' are checked
    line by line)."""
    return {
        "id": summary.run_id,
        "task": request.get("task"),
        "backend": request.get("backend", "gloo"),
        "variant": request.get("variant", "sync"),
    }


def delete_run(conn: Connection, run_id: str) -> None:
    """Remove a run and every row it owns."""
    for child in (StepTiming, EpochEval, AllReduceSample, AllReduceCurve, RunEvent, RunEnvironment):
        conn.execute(delete(child).where(child.run_id == run_id))  # type: ignore[attr-defined]
    conn.execute(delete(Run).where(Run.id == run_id))


def goal_target(
    start: dict[str, Any], ranks: Sequence[RankRecords], goal: Goal | None, light: bool
) -> float | None:
    """The target the run trained to: from its own records when they say (a light variant's
    target may change between versions), else the task's current one."""
    if goal is None:
        return None
    if isinstance(start.get("goal_target"), int | float):
        return float(start["goal_target"])
    for rank in ranks:
        for event in rank.of_kind("event"):
            if event["event"] == "goal_reached" and isinstance(event.get("target"), int | float):
                return float(event["target"])
    return goal.target(light)


def _ended_at(started_at: datetime | None, summary: RunSummary) -> datetime | None:
    """When the run ended: its start plus its duration (seconds); NULL while it is running
    (a live load of a group that has not ended) or when it never started."""
    if started_at is None or summary.status == "running":
        return None
    return started_at + timedelta(seconds=summary.duration_s)


def _write_run(
    conn: Connection,
    sweep_id: str,
    request: dict[str, Any],
    group: GroupEntry,
    summary: RunSummary,
    ranks: Sequence[RankRecords],
    shared_node: bool = False,
) -> int:
    """The run row and its small tables (evaluations, events, environments)."""
    run_id = group.run_id
    spec = TASKS.get(request["task"])
    goal = spec.goal if isinstance(spec, TrainingSpec) else None
    start = summary.start
    started_at = _parse_time(start.get("started_at"))
    # The plan's profile (a group that never started has no start event); runs loaded
    # before profiles existed ran on the host's network.
    network = str(group.network or start.get("network") or "host")
    conn.execute(
        insert(Run).values(
            id=run_id,
            sweep_id=sweep_id,
            task=request["task"],
            config_hash=configuration_hash(
                {**request, "precision": start.get("precision"), "network": network}
            ),
            world_size=group.world_size,
            repeat=group.repeat,
            backend=request.get("backend", "gloo"),
            device=str(start.get("device", "unknown")),
            precision=str(start.get("precision", DEFAULT_PRECISION)),
            compile=str(start.get("compile", "off")),
            compiled=bool(start.get("compiled", False)),
            compile_s=summary.compile_s,
            recompilations=summary.recompilations,
            variant=request.get("variant", "sync"),
            light=bool(request.get("light", False)),
            status=summary.status,
            reason=summary.reason,
            started_at=started_at,
            ended_at=_ended_at(started_at, summary),
            goal_reached=summary.goal_reached,
            goal_metric=goal.metric if goal else None,
            goal_target=goal_target(start, ranks, goal, bool(request.get("light"))),
            time_to_accuracy_s=summary.time_to_accuracy_s,
            time_to_accuracy_without_eval_s=summary.time_to_accuracy_without_eval_s,
            eval_s=summary.eval_s,
            compute_s=summary.compute_s,
            gradient_packing_s=summary.gradient_packing_s,
            communication_s=summary.communication_s,
            step_s=summary.step_s,
            communication_ratio=summary.communication_ratio,
            epochs=summary.epochs,
            steps=summary.steps,
            samples_per_s=summary.samples_per_s,
            step_records=summary.step_records,
            **{f"{phase}_total_s": summary.phase_totals_s.get(phase, 0.0) for phase in PHASES},
            quarantined_lines=summary.bad_lines,
            placement=str(request.get("placement", "pack")),
            shared_node=shared_node,
            # checked with the rest of the stored request; absent before it could be asked
            ranks_per_node=request.get("ranks_per_node", 1),
            network=network,
            records_version=summary.records_version,
            contention_share=summary.contention_share,
            contended=summary.contention_share is not None
            and summary.contention_share > config.contention_threshold(),
            hardware=summary.hardware,
            machine_reference_s=summary.machine_reference_s,
            ingested_at=datetime.now(UTC),
        )
    )
    rows = 1
    leader = ranks[0].of_kind("eval") if ranks else []
    evals = [eval_row(run_id, r, goal.metric if goal else None) for r in leader]
    events = [
        {
            "run_id": run_id,
            "rank": r["rank"],
            "t_s": r["t"],
            "event": r["event"],
            "details": event_details(r),
        }
        for rank in ranks
        for r in rank.of_kind("event")
    ]
    envs = [env_row(run_id, r) for rank in ranks for r in rank.of_kind("env")]
    for table, table_rows in (
        (EpochEval.__table__, evals),
        (RunEvent.__table__, events),
        (RunEnvironment.__table__, envs),
        (AllReduceCurve.__table__, allreduce_curves(run_id, ranks)),
    ):
        if table_rows:
            conn.execute(insert(table), table_rows)
            rows += len(table_rows)
    return rows
