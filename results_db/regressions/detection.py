"""The detector: judge the latest scheduled sweep against its earlier nights.

For each network profile and worker count of the sweep, and each metric its task measures
(:func:`~results_db.regressions.rules.judged_metrics`), the compared runs' values
(:mod:`results_db.regressions.values`, runs chosen by
:mod:`results_db.regressions.comparable`) are judged by
:func:`~results_db.regressions.statistics.compare`; what cannot be judged is said, with why
(:mod:`results_db.regressions.wording`).
"""

from __future__ import annotations

import statistics

from sqlalchemy import Connection, select

from results_db.models import Run, Sweep
from results_db.regressions.comparable import (
    Comparable,
    baseline_sweeps,
    sweep_hardware,
    sweep_transports,
)
from results_db.regressions.findings import Detection, Finding, NotJudged
from results_db.regressions.rules import (
    MIN_BASELINE_RUNS,
    PER_REFERENCE,
    RULE,
    Rule,
    judged_metrics,
)
from results_db.regressions.statistics import compare, judged_in_seconds
from results_db.regressions.values import metric_values
from results_db.regressions.wording import (
    left_out_text,
    no_comparable_run_text,
    too_few_nights_text,
    too_few_text,
)

# (latest, baseline) values of one metric, per worker count
_Values = tuple[dict[int, list[float]], dict[int, list[float]]]


def detect(
    conn: Connection,
    sweep_id: str,
    rule: Rule = RULE,
) -> list[Finding]:
    """Compare sweep ``sweep_id`` with up to ``rule.window`` earlier scheduled sweeps."""
    return judge(conn, sweep_id, rule).findings


def judge(conn: Connection, sweep_id: str, rule: Rule = RULE) -> Detection:
    """Compare sweep ``sweep_id`` with up to ``rule.window`` earlier scheduled sweeps, and
    say what could not be compared and why (too few earlier nights, or too few usable runs
    at a worker count: how many were contended or on other hardware)."""
    task = conn.execute(select(Sweep.task).where(Sweep.id == sweep_id)).scalar_one()
    baseline_ids = baseline_sweeps(conn, sweep_id, rule.window)
    networks = sorted(
        conn.execute(select(Run.network).where(Run.sweep_id == sweep_id).distinct()).scalars()
    )
    if len(baseline_ids) < rule.min_baseline_sweeps:
        reason = too_few_nights_text(len(baseline_ids), rule.min_baseline_sweeps)
        return Detection([], [NotJudged(None, n, reason) for n in networks or ["host"]])
    findings: list[Finding] = []
    not_judged: list[NotJudged] = []
    metrics = judged_metrics(task)
    for network in networks:  # each profile is its own configuration
        found, skipped = _network_findings(conn, sweep_id, baseline_ids, network, rule, metrics)
        findings += found
        not_judged += skipped
    return Detection(findings, not_judged)


def _network_findings(
    conn: Connection,
    sweep_id: str,
    baseline_ids: list[str],
    network: str,
    rule: Rule,
    metrics: dict[str, bool],
) -> tuple[list[Finding], list[NotJudged]]:
    attempted = set(
        conn.execute(
            select(Run.world_size).where(Run.sweep_id == sweep_id, Run.network == network)
        ).scalars()
    )
    latest_taken = Comparable(network)
    baseline_taken = Comparable(
        network,
        sweep_hardware(conn, sweep_id, network),
        sweep_transports(conn, sweep_id, network) or None,
    )

    def left_out(world_size: int) -> tuple[int, str]:
        """The latest night's contended runs at ``world_size``, and all that was left out."""
        contended, _ = latest_taken.left_out(conn, [sweep_id], world_size)
        others = baseline_taken.left_out(conn, baseline_ids, world_size)
        return contended, left_out_text(contended, *others)

    def values(metric: str) -> _Values:
        """(latest, baseline) values of ``metric`` per worker count."""
        return (
            metric_values(conn, [sweep_id], metric, latest_taken),
            metric_values(conn, baseline_ids, metric, baseline_taken),
        )

    findings = []
    not_judged: list[NotJudged] = []
    for judged, higher_is_better in metrics.items():
        judged_values = values(judged)
        in_seconds = values(PER_REFERENCE[judged]) if judged in PER_REFERENCE else None
        for world_size in sorted(attempted):
            metric, (latest_values, baseline_values) = _compared_metric(
                judged, judged_values, in_seconds, world_size
            )
            base = baseline_values.get(world_size, [])
            now = latest_values.get(world_size, [])
            if len(base) < MIN_BASELINE_RUNS:
                unjudged = NotJudged(
                    world_size,
                    network,
                    too_few_text(
                        len(base),
                        len(now),
                        latest_taken.left_out(conn, [sweep_id], world_size)[0],
                        *baseline_taken.left_out(conn, baseline_ids, world_size),
                        len(baseline_ids),
                    ),
                )
                if unjudged not in not_judged:  # the same counts for every metric
                    not_judged.append(unjudged)
                continue
            if not now:
                # The nightly ran this size but no run produced the metric (failed,
                # diverged, goal missed) while the baseline did; runs that were all
                # contended say nothing either way.
                findings.append(
                    _no_comparable_run(world_size, metric, base, network, *left_out(world_size))
                )
                continue
            change, p_value, flagged = compare(base, now, higher_is_better, rule)
            findings.append(
                Finding(
                    world_size=world_size,
                    metric=metric,
                    baseline_mean=statistics.fmean(base),
                    latest_mean=statistics.fmean(now),
                    change=change,
                    p_value=p_value,
                    baseline_runs=len(base),
                    latest_runs=len(now),
                    flagged=flagged,
                    network=network,
                    left_out=left_out(world_size)[1],
                )
            )
    return findings, not_judged


def _compared_metric(
    judged: str, judged_values: _Values, in_seconds: _Values | None, world_size: int
) -> tuple[str, _Values]:
    """The metric compared at ``world_size``, and its values: ``judged``, or its time in
    seconds (``in_seconds``, :data:`~results_db.regressions.rules.PER_REFERENCE`) where
    :func:`~results_db.regressions.statistics.judged_in_seconds` says."""
    latest_values, baseline_values = judged_values
    if in_seconds is not None and judged_in_seconds(
        len(baseline_values.get(world_size, [])),
        len(latest_values.get(world_size, [])),
        len(in_seconds[0].get(world_size, [])),
    ):
        return PER_REFERENCE[judged], in_seconds
    return judged, judged_values


def _no_comparable_run(
    world_size: int, metric: str, base: list[float], network: str, contended: int, left: str
) -> Finding:
    """The finding where the baseline has runs of ``metric`` at ``world_size`` and the latest
    night none: flagged unless its ``contended`` runs were left out (``left`` says what was)."""
    return Finding(
        world_size,
        metric,
        statistics.fmean(base),
        None,
        None,
        None,
        len(base),
        0,
        contended == 0,
        no_comparable_run_text(contended),
        network,
        left,
    )
