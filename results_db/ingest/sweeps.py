"""Loading the sweeps at a results location (:func:`ingest_location`), one sweep at a time
(:func:`ingest_sweep`): its manifest checked against what is stored, its row upserted, its
runs loaded one transaction each, and its outcome recorded."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import fsspec
from sqlalchemy import Engine, select, update

from results_db.fits import refit_sweep
from results_db.ingest.discovery import find_sweeps, run_id_problem, sweep_problems, unlisted_runs
from results_db.ingest.locking import sweep_lock
from results_db.ingest.retries import with_retries
from results_db.ingest.run_rows import delete_run
from results_db.ingest.runs import KeptStoredRun, load_run
from results_db.ingest.sweep_rows import (
    delete_sweep,
    stored_sweep_differences,
    sweep_outcome,
    upsert_sweep,
)
from results_db.models import Run, Sweep
from scalebench import config
from scalebench import manifest as sweep_manifest
from scalebench.errors import describe
from scalebench.manifest import MANIFEST, GroupEntry, Manifest
from scalebench.tasks import TASKS, AllReduceSpec
from workers.records import InconsistentRun, gc_paused

# What :func:`_load_group` returns for a run it could not store (nothing of it was written).
REFUSED = "refused"


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
    """Load one sweep, read from its folder ``sweep_path`` on ``fs``, into ``report``: its
    manifest checked against what is stored, its row upserted, its runs (``only`` these,
    when given) loaded one transaction each, and its outcome recorded."""
    sweep_id = manifest.sweep_id
    if not _admit_sweep(engine, manifest, report, say, replace):
        return

    def upsert() -> None:
        with engine.begin() as conn:
            upsert_sweep(conn, manifest)

    with_retries(upsert, say, f"sweep {sweep_id}")
    report.sweeps += 1
    groups = manifest.groups
    read: dict[str, str] = {}  # what this ingest made of each run it read
    for index, group in enumerate(groups, start=1):
        if only is None or group.run_id in only:
            place = f"[{index}/{len(groups)}]"
            read[group.run_id] = _load_group(
                engine, fs, sweep_path, manifest, group, place, report, say, replace
            )

    if only is None:
        for name in unlisted_runs(fs, sweep_path, groups):
            report.refused.append(f"{name}: a run folder that {MANIFEST} does not list; not read")
            say(f"refused {name}: a run folder that {MANIFEST} does not list; not read")

    def record_outcome() -> None:
        with engine.begin() as conn:
            # The outcome counts each group as it is stored now: a run refused or kept back
            # by this reading as it was stored before, so that nothing refused changes it; a
            # group with no run stored by its verdict in the record (or REFUSED).
            query = select(Run.id, Run.status).where(Run.sweep_id == sweep_id)
            stored = {run_id: status for run_id, status in conn.execute(query)}
            statuses = [stored.get(g.run_id, read.get(g.run_id, g.status)) for g in groups]
            finished_at = conn.execute(
                select(Sweep.finished_at).where(Sweep.id == sweep_id)
            ).scalar()
            conn.execute(
                update(Sweep)
                .where(Sweep.id == sweep_id)
                .values(
                    outcome=sweep_outcome(
                        statuses, finished=finished_at is not None or manifest.closed
                    )
                )
            )
            if isinstance(TASKS.get(manifest.request["task"]), AllReduceSpec):
                refit_sweep(conn, sweep_id)  # the ring model of every configuration

    with_retries(record_outcome, say, f"sweep {sweep_id}")


def _admit_sweep(
    engine: Engine,
    manifest: Manifest,
    report: IngestReport,
    say: Callable[[str], None],
    replace: bool,
) -> bool:
    """Whether the manifest's sweep may be loaded: one that cannot be stored, or that
    differs from what is stored of it, is refused into ``report``; with ``replace``, a
    differing stored sweep is removed whole instead."""
    sweep_id = manifest.sweep_id
    unreadable = sweep_problems(manifest)
    if unreadable:
        report.refused.append(f"sweep {sweep_id[:60]}: {'; '.join(unreadable)}")
        say(f"refused sweep {sweep_id[:60]}: {'; '.join(unreadable)}")
        return False

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
            return False

        def drop() -> None:
            with engine.begin() as conn:
                delete_sweep(conn, sweep_id)

        with_retries(drop, say, f"sweep {sweep_id}")
        say(f"replaced the stored sweep {sweep_id} whole: {what}")
    return True


def _load_group(
    engine: Engine,
    fs: Any,
    sweep_path: str,
    manifest: Manifest,
    group: GroupEntry,
    place: str,
    report: IngestReport,
    say: Callable[[str], None],
    replace: bool,
) -> str:
    """Load the run of one of the sweep's groups (``place``: which of how many, for the
    progress lines) into ``report``; the run's status, :data:`REFUSED` when it was not
    loaded, or the stored run's when that was kept."""
    run_id = group.run_id
    run_path = f"{sweep_path}/{run_id}"
    bad_id = run_id_problem(run_id)
    if bad_id:
        report.refused.append(f"{run_id[:80]!r}: {bad_id}")
        say(f"refused {run_id[:80]!r}: {bad_id}")
        return REFUSED
    say(f"{place} loading {run_id} ...")
    tick = time.perf_counter()

    def load() -> Any:
        with engine.begin() as conn:
            return load_run(conn, fs, run_path, manifest.sweep_id, manifest.request, group, replace)

    try:
        rows, summary, ranks = with_retries(load, say, run_id)
    except KeptStoredRun as kept:
        report.conflicts.append(f"{run_id}: {kept}")
        say(f"kept the stored {run_id}: {kept} (--replace loads the files)")
        return kept.status
    except Exception as exc:  # one unreadable run must not stop the others
        reason = exc.args[0] if isinstance(exc, InconsistentRun) else describe(exc)
        report.refused.append(f"{run_id}: {reason}")
        say(f"refused {run_id}: {reason}")
        if replace and isinstance(exc, InconsistentRun):
            with engine.begin() as conn:  # asked to follow the files, which hold no run
                delete_run(conn, run_id)
        return REFUSED
    report.runs += 1
    report.rows += rows
    report.quarantined_lines += summary.bad_lines
    for rank in ranks:
        report.problems += rank.problems
    rate = rows / max(time.perf_counter() - tick, 1e-9)
    say(
        f"{place} {run_id}: {summary.status}, "
        f"{rows:,} rows ({rate:,.0f} rows/s)"
        + (f", {summary.bad_lines} unreadable line(s) quarantined" if summary.bad_lines else "")
    )
    return summary.status
