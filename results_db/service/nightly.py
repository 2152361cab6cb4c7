"""The paired nightly judged: its findings, their triage, and each series' history.

(The reference pin and the stacks and rounds of a night: :mod:`results_db.service.reference`.)

- :func:`check_paired`: a paired night judged, every series over its whole history, the
  changes stored as findings (one per change) and the new ones returned for the messages;
- :func:`findings`, :func:`triage`: ``scalebench regressions`` without a sweep, and
  ``--finding ID --state STATE``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from results_db.models import NightlyFinding, Sweep
from results_db.queries.paired_nights import (
    FindingRow,
    is_paired,
    night_identity,
    nightly_findings,
    paired_nights,
    stacks_of,
)
from results_db.regressions.paired_findings import (
    PLATFORM,
    STACK,
    SeriesJudgement,
    changes,
    comparable_nights,
    identity_diff,
    is_aa_night,
    judge_series,
    paired_series,
)
from results_db.regressions.shifts import PAIRED_RULE, PairedRule, pull_in
from results_db.regressions.triage import (
    FALSE_ALARM,
    STATES,
    UnknownFinding,
    set_state,
    store_changes,
)
from results_db.service.engines import CommandError, engine_for, reader_for
from scalebench.stacks import REFERENCE, TONIGHT

# The note of a stack finding on an A/A night, stored as a false alarm without anyone's word.
AA_NOTE = "A/A night: tonight's stack was the reference stack itself, so nothing changed"


@dataclass(frozen=True)
class PairedCheck:
    """A paired night judged: every series' verdict, the findings it opened (new) and
    those it moved again (updated), each as stored."""

    sweep_id: str
    judgements: list[SeriesJudgement]
    new: list[FindingRow]
    updated: list[FindingRow]
    nights: int


def is_paired_sweep(url: str | None, sweep_id: str) -> bool:
    """Whether ``sweep_id`` ran tonight's stack beside the reference."""
    engine = reader_for(url)
    try:
        with engine.connect() as conn:
            config = conn.execute(select(Sweep.config).where(Sweep.id == sweep_id)).scalar()
    finally:
        engine.dispose()
    return is_paired(config or {})


def check_paired(url: str | None, sweep_id: str, rule: PairedRule = PAIRED_RULE) -> PairedCheck:
    """Judge paired night ``sweep_id``: every series of its task over the nights with the
    same reference stack, the changes found stored as findings (:func:`store_changes`)."""
    engine = engine_for(url)
    try:
        with engine.begin() as conn:
            task, config_hash = conn.execute(
                select(Sweep.task, Sweep.config_hash).where(Sweep.id == sweep_id)
            ).one()
            nights = comparable_nights(paired_nights(conn, task, config_hash, until=sweep_id))
            judged = judge_series(paired_series(task, nights, TONIGHT, REFERENCE), rule)
            found = changes(judged)
            order = [n.sweep_id for n in nights]
            diffs = {}
            for change in found:
                at = order.index(change.first_sweep_id)
                part = "platform" if change.attribution == PLATFORM else "stack"
                before = night_identity(conn, order[at - 1])[part] if at > 0 else {}
                after = night_identity(conn, change.first_sweep_id)[part]
                diffs[change.first_sweep_id] = {
                    "part": part,
                    "before_sweep": order[at - 1] if at > 0 else None,
                    "after_sweep": change.first_sweep_id,
                    "changed": identity_diff(before, after),
                }
            new_ids, updated_ids = store_changes(conn, found, diffs, order)
            config = conn.execute(select(Sweep.config).where(Sweep.id == sweep_id)).scalar()
            if is_aa_night(stacks_of(config or {}), TONIGHT, REFERENCE):
                # Tonight's stack is the reference itself: a ratio that moved is noise. (Not
                # so the reference arm's own seconds: a change both arms share is real.)
                noise = [c.first_sweep_id for c in found if c.attribution == STACK]
                for finding_id in new_ids:
                    first = conn.execute(
                        select(NightlyFinding.first_sweep_id).where(NightlyFinding.id == finding_id)
                    ).scalar_one()
                    if first in noise:
                        set_state(conn, finding_id, FALSE_ALARM, AA_NOTE)
            stored = nightly_findings(conn)
    finally:
        engine.dispose()
    new = [f for f in stored if f.id in new_ids and f.state != FALSE_ALARM]
    updated = [f for f in stored if f.id in updated_ids]
    return PairedCheck(sweep_id, judged, new, updated, len(nights))


def describe_judgement(judged: SeriesJudgement, rule: PairedRule = PAIRED_RULE) -> str:
    """One line per series: its ratio tonight / reference on the newest night with its
    interval, the reference arm's move, and the verdict."""
    nights = sum(1 for n in judged.nights if n.log_ratios)
    if judged.ratio.shift is None:
        return (
            f"not judged {judged.key.describe()}: {nights} paired night(s), "
            f"{rule.nights_needed()} needed (the newest and {rule.min_baseline_nights} before it)"
        )
    verdict = "REGRESSION" if judged.flagged else "ok"
    ratio, reference = judged.ratio.shift, judged.reference.shift
    moved = f", reference arm ×{reference.size:.3f}" if reference is not None else ""
    return (
        f"{verdict:10s} {judged.key.describe()}: tonight/reference ×{ratio.size:.3f} "
        f"[{ratio.low:.3f}, {ratio.high:.3f}] against {ratio.baseline} night(s) "
        f"(p={ratio.p_value:.2g}){moved}"
    )


def describe_finding_row(finding: FindingRow, link: str | None = None) -> str:
    """A finding in a few lines, as a message sends it: what moved, by how much, on which
    night, which phases, attributed to what, what changed, and where to see it."""
    moved = ", ".join(
        f"{s['task']} {s['world_size']}w {s['metric']} ({s['arm']} ×{s['size']:.3f})"
        for s in finding.series[:6]
    )
    more = f" and {len(finding.series) - 6} more" if len(finding.series) > 6 else ""
    phases = f"; phases: {', '.join(finding.phases)}" if finding.phases else ""
    changed = (finding.diff or {}).get("changed") or {}
    what = "; ".join(f"{k}: {b} → {a}" for k, (b, a) in list(changed.items())[:5])
    lines = [
        f"finding {finding.id} ({finding.state}): {finding.attribution} change from the night "
        f"of {finding.first_night:%Y-%m-%d} (sweep {finding.first_sweep_id}): "
        f"×{finding.size:.3f} [{finding.low:.3f}, {finding.high:.3f}]{phases}",
        f"  moved: {moved}{more}",
        f"  changed: {what or 'nothing recorded differs'}",
    ]
    if link:
        lines.append(f"  {link}")
    return "\n".join(lines)


def finding_link(finding_id: int) -> str:
    """The dashboard's page of one finding (``SCALEBENCH_DASHBOARD_URL``)."""
    from scalebench.config import dashboard_url

    return f"{dashboard_url()}/nightly?finding={finding_id}"


def findings(url: str | None, states: tuple[str, ...] | None, task: str | None) -> list[FindingRow]:
    """Stored findings (``scalebench regressions`` without a sweep)."""
    engine = reader_for(url)
    try:
        with engine.connect() as conn:
            return nightly_findings(conn, states=states, task=task)
    finally:
        engine.dispose()


def triage(url: str | None, finding_id: int, state: str, note: str | None) -> str:
    """Give a finding a triage state (``scalebench regressions --finding ID --state S``)."""
    if state not in STATES:
        raise CommandError(f"state: must be one of {', '.join(STATES)}, got {state!r}")
    engine = engine_for(url)
    try:
        with engine.begin() as conn:
            set_state(conn, finding_id, state, note)
    except UnknownFinding as exc:
        raise CommandError(f"{exc}; list them with scalebench regressions") from None
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    finally:
        engine.dispose()
    return f"finding {finding_id}: {state}"


@dataclass(frozen=True)
class NightPoint:
    """One night of a paired series as the nightly judged it: its sweep and night, the ratio
    tonight / reference (geometric mean over the rounds, no unit) with its 95 % interval
    (``low``, ``high``; 0 and inf with one round), the rounds, the reference arm's
    geometric-mean seconds (both from the rounds as judged: each arm's far-off rounds pulled
    in to their bound first, :func:`results_db.regressions.shifts.pull_in`), and how many of
    the night's ratios were pulled in."""

    sweep_id: str
    night: datetime
    ratio: float
    low: float
    high: float
    rounds: int
    reference_s: float
    pulled_in: int = 0


@dataclass(frozen=True)
class SeriesHistory:
    """A paired series over its nights, oldest first, as the dashboard draws it: each
    night's point, and where each arm's level changed (indices into ``points``: the first
    night of each segment after the first)."""

    key: Any  # results_db.regressions.paired_findings.SeriesKey
    points: list[NightPoint]
    ratio_changes: list[int]
    reference_changes: list[int]
    flagged: bool


def nightly_history(url: str | None, task: str, limit: int = 120) -> list[SeriesHistory]:
    """Every paired series of ``task``'s newest paired configuration, over the nights with
    its newest reference stack (at most ``limit``): the nightly page's data."""
    engine = reader_for(url)
    try:
        with engine.connect() as conn:
            newest = conn.execute(
                select(Sweep.config_hash, Sweep.config)
                .where(Sweep.task == task, Sweep.trigger == "scheduled")
                .order_by(Sweep.created_at.desc())
            ).all()
            config_hash = next((h for h, config in newest if is_paired(config or {})), None)
            if config_hash is None:
                return []
            nights = comparable_nights(paired_nights(conn, task, config_hash, limit=limit))
    finally:
        engine.dispose()
    when = {n.sweep_id: n.night for n in nights}
    return [
        series_history(judged, when)
        for judged in judge_series(paired_series(task, nights, TONIGHT, REFERENCE))
    ]


def series_history(
    judged: SeriesJudgement, when: dict[str, datetime], rule: PairedRule = PAIRED_RULE
) -> SeriesHistory:
    """One judged series as the nightly page draws it: each night's point from the rounds
    the judgement tested, so each night's far-off rounds pulled in as ``rule`` pulls them
    (the ratio and the reference arm alike), and each arm's change points. ``when``: each
    sweep's night."""
    from statistics import fmean

    from results_db.regressions.paired import ratio_interval

    ratios = pull_in([n.log_ratios for n in judged.nights], rule.outlier_sd)
    references = pull_in([n.reference_logs for n in judged.nights], rule.outlier_sd)
    points = []
    for night, logs, reference_logs in zip(judged.nights, ratios, references, strict=True):
        if not logs:
            continue
        interval = ratio_interval(logs)
        moved = sum(a != b for a, b in zip(logs, night.log_ratios, strict=True))
        points.append(
            NightPoint(
                night.sweep_id,
                when[night.sweep_id],
                interval.ratio,
                interval.low,
                interval.high,
                interval.pairs,
                math.exp(fmean(reference_logs)),
                moved,
            )
        )
    index = {p.sweep_id: i for i, p in enumerate(points)}
    ids = [n.sweep_id for n in judged.nights]
    ratio_changes, reference_changes = (
        [index[ids[s]] for s in arm.segment_starts[1:] if ids[s] in index]
        for arm in (judged.ratio, judged.reference)
    )
    return SeriesHistory(judged.key, points, ratio_changes, reference_changes, bool(judged.flagged))
