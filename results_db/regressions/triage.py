"""The paired nightly's findings, stored, and what people said of them (triage).

A finding (``nightly_finding``) is one change: found once, then updated on the nights that
follow (the same series moving again within :data:`SAME_CHANGE_NIGHTS` nights of its first
is the same change, not a new one), and given a state by people, from the dashboard or
``scalebench regressions --finding ID --state STATE``: :data:`STATES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from results_db.models import NightlyFinding, Sweep
from results_db.regressions.comparable import NIGHT
from results_db.regressions.paired_findings import Change

OPEN, ACKNOWLEDGED, EXPECTED, FALSE_ALARM, FIXED = (
    "open",
    "acknowledged",
    "expected",
    "false-alarm",
    "fixed",
)
# Every state a finding can be in, in the order a triage goes.
STATES = (OPEN, ACKNOWLEDGED, EXPECTED, FALSE_ALARM, FIXED)
# A series moving again this many nights from a finding's first night is that finding.
SAME_CHANGE_NIGHTS = 3
MAX_NOTE_CHARS = 2000


class UnknownFinding(LookupError):
    """No finding has that id."""


def _series_ids(series: Sequence[Mapping[str, Any]]) -> set[tuple[Any, ...]]:
    return {(s["task"], s["network"], s["world_size"], s["metric"], s["arm"]) for s in series}


def store_changes(
    conn: Connection,
    found: Sequence[Change],
    diffs: Mapping[str, dict[str, Any]],
    night_order: Sequence[str],
) -> tuple[list[int], list[int]]:
    """Store each change as a finding, or update the finding it already is; return the ids
    of the findings that are new (those a message goes out for) and of those updated.

    ``diffs``: per change's first sweep, what changed (the
    :func:`~results_db.regressions.paired_findings.identity_diff` of the identities before and
    after); ``night_order``: the sweeps of the series' nights, oldest
    first, to tell how many nights apart two changes are. A change is an existing finding
    where a finding not ``fixed`` has any of its series and a first night at most
    :data:`SAME_CHANGE_NIGHTS` nights away; else where a finding has the same first night
    (its series are added); else it is new.
    """
    position = {sweep_id: i for i, sweep_id in enumerate(night_order)}
    now = datetime.now(UTC)
    new_ids: list[int] = []
    updated_ids: list[int] = []
    for change in found:
        series = [m.to_json() for m in change.moved]
        existing = _same_finding(conn, change, series, position)
        values = {
            "attribution": change.attribution,
            "size": change.headline.size,
            "low": change.headline.low,
            "high": change.headline.high,
            "p_value": change.headline.p_value,
            "phases": change.phases,
            "diff": diffs.get(change.first_sweep_id, {}),
            "updated_at": now,
        }
        if existing is not None:
            finding_id, old_series = existing
            merged = {
                (s["task"], s["network"], s["world_size"], s["metric"], s["arm"]): s
                for s in [*old_series, *series]
            }
            conn.execute(
                update(NightlyFinding)
                .where(NightlyFinding.id == finding_id)
                .values(series=list(merged.values()), **values)
            )
            updated_ids.append(finding_id)
            continue
        night = conn.execute(select(NIGHT).where(Sweep.id == change.first_sweep_id)).scalar_one()
        new_ids.append(
            conn.execute(
                insert(NightlyFinding).values(
                    first_night=night,
                    first_sweep_id=change.first_sweep_id,
                    series=series,
                    state=OPEN,
                    note="",
                    created_at=now,
                    **values,
                )
            ).inserted_primary_key[0]
        )
    return new_ids, updated_ids


def _same_finding(
    conn: Connection,
    change: Change,
    series: list[dict[str, Any]],
    position: Mapping[str, int],
) -> tuple[int, list[dict[str, Any]]] | None:
    """The stored finding that ``change`` is (its id and series), or None."""
    mine = _series_ids(series)
    here = position.get(change.first_sweep_id)
    rows = conn.execute(
        select(NightlyFinding.id, NightlyFinding.first_sweep_id, NightlyFinding.series)
        .where(NightlyFinding.state != FIXED)
        .order_by(NightlyFinding.id)
    ).all()
    for finding_id, first_sweep_id, stored in rows:
        if first_sweep_id == change.first_sweep_id:
            return finding_id, list(stored)
        there = position.get(first_sweep_id)
        near = here is not None and there is not None and abs(here - there) <= SAME_CHANGE_NIGHTS
        if near and mine & _series_ids(stored):
            return finding_id, list(stored)
    return None


def set_state(conn: Connection, finding_id: int, state: str, note: str | None = None) -> None:
    """Give finding ``finding_id`` a triage ``state`` (one of :data:`STATES`), with an
    optional ``note`` (kept where None). ValueError for an unknown state or a note too
    long; :class:`UnknownFinding` for an id no finding has."""
    if state not in STATES:
        raise ValueError(f"state: must be one of {', '.join(STATES)}, got {state!r}")
    if note is not None and len(note) > MAX_NOTE_CHARS:
        raise ValueError(f"note: at most {MAX_NOTE_CHARS} characters, got {len(note)}")
    values: dict[str, Any] = {"state": state, "state_changed_at": datetime.now(UTC)}
    if note is not None:
        values["note"] = note
    done = conn.execute(
        update(NightlyFinding).where(NightlyFinding.id == finding_id).values(**values)
    )
    if done.rowcount == 0:
        raise UnknownFinding(f"finding: no finding {finding_id} in the results database")


def false_alarm_rate(false_alarms: int, judged_nights: int) -> float | None:
    """A series' false alarms per night judged (None before any night was judged).
    ``false_alarms``: the findings with the series that people marked false alarms, and
    the series' flags on A/A nights (tonight's stack the reference itself)."""
    return false_alarms / judged_nights if judged_nights > 0 else None
