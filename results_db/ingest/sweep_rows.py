"""A sweep's row: its columns from the manifest (:func:`sweep_values`), how a manifest
read again differs from what is stored (:func:`stored_sweep_differences`), its upsert, its
removal with its runs, and its outcome from its groups' verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from results_db.ingest.run_rows import delete_run
from results_db.ingest.times import parse_time, utc
from results_db.models import Run, Sweep
from scalebench.config_hash import configuration_hash
from scalebench.manifest import Manifest
from scalebench.statuses import CANCELLED, FAILED, PARTIAL, RUNNING, STOPPED, SUCCEEDED, UNFINISHED


def sweep_outcome(statuses: Sequence[str], finished: bool) -> str:
    """A sweep's outcome from the status of each of its groups (the stored run's, or the
    group's verdict where no run is stored; ``refused``: a run ingest could not store) and
    whether its record was closed (``finished``: its ``finished_at`` is set).

    ``running`` until the sweep is closed and while a group is planned or running, so that a
    sweep never reads as ended without a finishing time; then ``cancelled`` when a group was
    stopped or skipped, ``succeeded`` when every group did, ``partial`` when some did,
    ``failed`` when none did."""
    if not finished or any(s in UNFINISHED for s in statuses):
        return RUNNING
    if any(s in STOPPED for s in statuses):
        return CANCELLED
    if statuses and all(s == SUCCEEDED for s in statuses):
        return SUCCEEDED
    return PARTIAL if SUCCEEDED in statuses else FAILED


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
    now = sweep_values(manifest)
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
    if manifest.created_at and utc(row.created_at) != now["created_at"]:
        found.append(f"created_at {utc(row.created_at).isoformat()} → {manifest.created_at}")
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


def delete_sweep(conn: Connection, sweep_id: str) -> None:
    """Remove a sweep, its runs and every row they own."""
    for run_id in list(conn.execute(select(Run.id).where(Run.sweep_id == sweep_id)).scalars()):
        delete_run(conn, run_id)
    conn.execute(delete(Sweep).where(Sweep.id == sweep_id))


def upsert_sweep(conn: Connection, manifest: Manifest) -> None:
    """Insert the sweep's row, or update what may change of it (its finishing time): one
    statement, so an ingest of the same sweep at the same time cannot insert it in
    between. Its identity was checked against the stored row first
    (:func:`stored_sweep_differences`): an ingest never rewrites it as a side effect."""
    values = sweep_values(manifest)
    # A stored finishing time is kept when this reading has none (a group run again, or a
    # record read before it was closed): a sweep once closed is not reopened by a reading.
    changing = {"finished_at": values["finished_at"]} if values["finished_at"] else {}
    sweep_id = manifest.sweep_id
    # A new row's outcome until its runs are counted: running, unless its record is closed.
    first_outcome = None if values["finished_at"] else RUNNING
    dialect = {"postgresql": postgresql, "sqlite": sqlite}.get(conn.dialect.name)
    if dialect is not None:
        statement = dialect.insert(Sweep).values(id=sweep_id, outcome=first_outcome, **values)
        conn.execute(
            statement.on_conflict_do_update(index_elements=[Sweep.id], set_=changing)
            if changing
            else statement.on_conflict_do_nothing(index_elements=[Sweep.id])
        )
    elif conn.execute(select(Sweep.id).where(Sweep.id == sweep_id)).first():
        if changing:
            conn.execute(update(Sweep).where(Sweep.id == sweep_id).values(**changing))
    else:
        conn.execute(insert(Sweep).values(id=sweep_id, outcome=first_outcome, **values))


def sweep_values(manifest: Manifest) -> dict[str, Any]:
    """The sweep row's columns but its id, from the manifest (whose reader,
    :meth:`Manifest.from_json`, fills in what an older ``sweep.json`` lacks)."""
    request = manifest.request
    return {
        "task": request["task"],
        "trigger": manifest.trigger,
        "config": request,
        "config_hash": manifest.config_hash or configuration_hash(request),
        "code_version": manifest.code_version,
        "created_at": parse_time(manifest.created_at) or datetime.now(UTC),
        "finished_at": parse_time(manifest.finished_at),
        "night": parse_time(manifest.night),
    }
