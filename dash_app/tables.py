"""Pure table builders: query rows in, plain rows (dicts of text and numbers) out.

Like the figure builders, nothing here touches the database or Dash.
Numbers stay numbers where a table sorts on them; text columns carry their
unit (``12.3 s``, ``$0.41``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from dash_app import reasons
from results_db import regressions
from results_db.analytics import ScalingRow
from results_db.queries.costs import PriceRow
from results_db.queries.runs import EnvironmentRow, EventRow, RunInfo
from scalebench import units
from scalebench.run_metrics import shown_on
from scalebench.statuses import RUNNING, SUCCEEDED
from workers.records import RECORDS_NOTE


def when(moment: datetime | None) -> str:
    """A timestamp as ``2026-11-22 02:18 UTC`` (naive ones are taken as UTC)."""
    if moment is None:
        return "—"
    return moment.strftime("%Y-%m-%d %H:%M") + " UTC"


def link(path: str, **params: str) -> str:
    """A dashboard link with its query string, e.g. ``/scaling?sweep=…``."""
    return f"{path}?{urlencode(params)}" if params else path


# -- Runs table ------------------------------------------------------------------------------

RUN_SORT_KEYS: dict[str, Any] = {
    "started": lambda r: r.started_at,
    "run": lambda r: r.id,
    "sweep": lambda r: r.sweep_id,
    "task": lambda r: r.task,
    "workers": lambda r: r.world_size,
    "repeat": lambda r: r.repeat,
    "status": lambda r: r.status,
    "time_to_accuracy_s": lambda r: r.time_to_accuracy_s,
    "samples_per_s": lambda r: r.samples_per_s,
    "communication_ratio": lambda r: r.communication_ratio,
    # the run metrics declared for the runs table (scalebench.run_metrics), by name
    **{m.name: lambda r, name=m.name: r.metrics.get(name) for m in shown_on("runs_table")},
    "reason": lambda r: r.reason or None,
}


def run_rows(
    runs: Sequence[RunInfo], sort: str, order: str, page: int, page_size: int
) -> tuple[list[dict[str, Any]], int]:
    """One page of the runs table, sorted; returns the rows and the number of pages.

    Runs without the sorted value (no time to accuracy, say) come last in both orders.
    """
    value = RUN_SORT_KEYS[sort]
    present = [r for r in runs if value(r) is not None]
    missing = [r for r in runs if value(r) is None]
    ordered = sorted(present, key=value, reverse=order == "desc") + missing
    pages = max(1, -(-len(ordered) // page_size))
    page = min(page, pages - 1)
    shown = ordered[page * page_size : (page + 1) * page_size]
    return [
        {
            "run": f"[{r.id}]({link('/run', id=r.id)})",
            "sweep": r.sweep_id,
            "task": r.task,
            "workers": r.world_size,
            "repeat": r.repeat + 1,
            "status": f"{r.status} ⚠ ranks shared a node" if r.shared_node else r.status,
            "time_to_accuracy_s": units.seconds(r.time_to_accuracy_s),
            "samples_per_s": units.number(r.samples_per_s),
            "communication_ratio": units.percent(r.communication_ratio),
            **{m.name: m.text(r.metrics.get(m.name)) for m in shown_on("runs_table")},
            "started": when(r.started_at),
            "reason": r.reason[:120],
        }
        for r in shown
    ], pages


# -- A run's page ----------------------------------------------------------------------------


def event_rows(events: Sequence[EventRow]) -> list[dict[str, Any]]:
    """Events, one line each; failures keep their reason."""
    rows = []
    for e in events:
        detail = e.details.get("reason") or e.details.get("status") or ""
        if e.event == "goal_reached" and "value" in e.details:
            detail = f"{e.details['value']:.4g} ≥ target {e.details.get('target', '?')}"
        rows.append(
            {
                "time": units.seconds(e.t_s),
                "rank": e.rank,
                "event": e.event.replace("_", " "),
                "details": str(detail)[:300],
            }
        )
    return rows


def environment_rows(envs: Sequence[EnvironmentRow]) -> list[dict[str, Any]]:
    """Versions, devices and host per rank."""
    return [
        {
            "rank": e.rank,
            "host": e.host or "—",
            "python": e.python or "—",
            "torch": e.torch or "—",
            "cuda": e.cuda or "—",
            "nccl": e.nccl or "—",
            "gpus": ", ".join(e.gpus) or "none",
            "cpu": e.cpu or "—",
            "torch threads": "—" if e.torch_threads is None else str(e.torch_threads),
        }
        for e in envs
    ]


def compilation(run: RunInfo) -> str:
    """How the training step ran: eager, or compiled at what cost and with how many recompiles."""
    if not run.compiled:
        return "eager" + ("" if run.compile == "off" else f" (compile {run.compile})")
    recompiled = "—" if run.recompilations is None else f"{run.recompilations}"
    return (
        f"compiled (compile {run.compile}), {units.seconds(run.compile_s)} before the start, "
        f"{recompiled} recompilations while timed"
    )


def progress_metric(metric: str | None, value: float | None) -> str:
    """The newest evaluation of a running group, e.g. ``top1 accuracy 71.2``."""
    if metric is None or value is None:
        return "—"
    return f"{metric.replace('_', ' ')} {units.number(value)}"


def transports_text(run: RunInfo) -> str:
    """What the run's traffic took, within its nodes and between them, e.g. ``within nodes
    P2P · between nodes NET/Socket``; ``—`` where nothing was recorded (one rank, mpi, or a
    run stored before transports were)."""
    parts = []
    if run.transport_within_node:
        parts.append(f"within nodes {run.transport_within_node}")
    if run.transport_between_nodes:
        parts.append(f"between nodes {run.transport_between_nodes}")
    return " · ".join(parts) or "—"


def stack_text(run: RunInfo) -> str:
    """The stack a paired run ran and how its round's arms ran, e.g. ``tonight, in a duet
    (its round's arms at once, each on cores of its own)``."""
    how = {
        "duet": "in a duet (its round's arms at once, each on cores of its own)",
        "interleaved": "interleaved (its round's arms one after the other)",
    }
    return f"{run.stack}, {how[run.pairing]}" if run.pairing in how else run.stack


def run_facts(run: RunInfo, last_metric: float | None = None) -> list[tuple[str, str]]:
    """The headline numbers of a run, label and text; ``last_metric``: the goal metric at its
    newest evaluation, which a running run's status gives."""
    goal = "—"
    if run.goal_metric:
        goal = f"{run.goal_metric.replace('_', ' ')} ≥ {run.goal_target:g}"
    status = run.status + (f": {run.reason}" if run.reason else "")
    if run.status == RUNNING:  # as its last load found it; the page refreshes
        elapsed = (  # a running run has no end yet: how far it was when last loaded
            (run.ingested_at - run.started_at).total_seconds()
            if (run.started_at and run.ingested_at)
            else None
        )
        newest = (
            f", newest {progress_metric(run.goal_metric, last_metric)}"
            if last_metric is not None
            else ""
        )
        status = (
            f"running: {run.epochs} epoch(s), {run.steps:,} steps done{newest}, "
            f"{units.seconds(elapsed)} since the start (as last loaded)"
        )
    return [
        ("status", status),
        (
            "workers",
            f"{run.world_size} ({run.backend}, {run.device}, {run.precision}, "
            f"{run.variant}{', light' if run.light else ''})",
        ),
        ("repeat", str(run.repeat + 1)),
        *([("stack", stack_text(run))] if run.stack else []),
        ("compilation", compilation(run)),
        ("goal", goal + (" — reached" if run.goal_reached else " — not reached")),
        ("time to accuracy", units.seconds(run.time_to_accuracy_s)),
        ("without evaluation", units.seconds(run.time_to_accuracy_without_eval_s)),
        ("evaluation time", units.seconds(run.eval_s)),
        (
            "compute / packing / communication",
            f"{units.seconds(run.compute_s)} / {units.seconds(run.gradient_packing_s)} / "
            f"{units.seconds(run.communication_s)}"
            + (f" ({RECORDS_NOTE})" if run.communication_includes_packing else ""),
        ),
        ("communication ratio", units.percent(run.communication_ratio)),
        ("transport", transports_text(run)),
        ("epochs / steps", f"{run.epochs} / {run.steps:,}"),
        ("throughput", f"{units.number(run.samples_per_s)} samples/s"),
        *((m.label, m.text(run.metrics.get(m.name))) for m in shown_on("run_page")),
        ("started", when(run.started_at)),
        ("unreadable lines", str(run.quarantined_lines)),
    ]


# -- Cost ------------------------------------------------------------------------------------


def price_rows(prices: Sequence[PriceRow]) -> list[dict[str, Any]]:
    """The price table in force, with the date each price is valid from."""
    return [
        {
            "kind": p.kind,
            "name": p.name,
            "regular": units.dollars(p.regular_per_hour) + "/h",
            "preemptible": units.dollars(p.preemptible_per_hour) + "/h",
            "valid from": p.valid_from.date().isoformat(),
            "source": p.source,
        }
        for p in sorted(prices, key=lambda p: (p.kind, p.name))
    ]


# -- Compare ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delta:
    """One worker count of sweep A against sweep B; ``change`` > 0 means A is worse."""

    world_size: int
    a_tta_s: float | None
    b_tta_s: float | None
    tta_change: float | None
    a_rate: float | None
    b_rate: float | None
    rate_change: float | None
    p_value: float | None
    verdict: str
    network: str = "host"  # the link profile both sides ran on
    contended: str = ""  # runs left out as contended, e.g. "A: 1, B: 0"


def _values(runs: Sequence[RunInfo], size: int, attribute: str) -> list[float]:
    """The ``attribute`` of the succeeded runs at ``size``, contended ones left out (their
    times say as much about the machine as about the code)."""
    return [
        getattr(r, attribute)
        for r in runs
        if r.world_size == size
        and r.status == SUCCEEDED
        and not r.contended
        and getattr(r, attribute) is not None
    ]


def _contended(a_runs: Sequence[RunInfo], b_runs: Sequence[RunInfo], size: int) -> str:
    counts = [sum(r.contended for r in runs if r.world_size == size) for runs in (a_runs, b_runs)]
    return f"A: {counts[0]}, B: {counts[1]}" if any(counts) else ""


def compare_rows(
    a_rows: Sequence[ScalingRow],
    b_rows: Sequence[ScalingRow],
    a_runs: Sequence[RunInfo],
    b_runs: Sequence[RunInfo],
    network: str = "host",
) -> list[Delta]:
    """Per worker count of either sweep: TTA and throughput of A and B, their relative
    changes and a verdict by the nightly detector's rule (``regressions.RULE``: one-sided
    Mann–Whitney U, p < 0.01, and at least 5 % worse) applied to A's runs against B's.
    Rows and runs are of one ``network`` profile; runs of others are left out, and so are
    contended runs from the throughputs and the test (:attr:`Delta.contended` counts them).
    Where a side has no time to test, the verdict says why (:func:`reasons.compare_gap`):
    no runs at that worker count, runs that failed or did not reach the goal, or contended
    runs left out.
    """
    a_runs = [r for r in a_runs if r.network == network]
    b_runs = [r for r in b_runs if r.network == network]
    a_by, b_by = {r.world_size: r for r in a_rows}, {r.world_size: r for r in b_rows}
    deltas = []
    for size in sorted(set(a_by) | set(b_by)):
        a, b = a_by.get(size), b_by.get(size)
        a_tta, b_tta = (a.time_to_accuracy_s if a else None), (b.time_to_accuracy_s if b else None)
        a_rate_values = _values(a_runs, size, "samples_per_s")
        b_rate_values = _values(b_runs, size, "samples_per_s")
        a_rate = statistics.fmean(a_rate_values) if a_rate_values else None
        b_rate = statistics.fmean(b_rate_values) if b_rate_values else None
        tta_change = (a_tta - b_tta) / b_tta if a_tta and b_tta else None
        rate_change = (b_rate - a_rate) / b_rate if a_rate and b_rate else None
        latest = _values(a_runs, size, "time_to_accuracy_s")
        baseline = _values(b_runs, size, "time_to_accuracy_s")
        p_value = None
        if not latest or not baseline:  # say why each side without a time has none
            verdict = "; ".join(
                reasons.compare_gap(side, runs, size)
                for side, runs, values in (("A", a_runs, latest), ("B", b_runs, baseline))
                if not values
            )
        else:
            rule = regressions.RULE
            change, p_value, flagged = regressions.compare(baseline, latest, False, rule)
            if flagged:
                verdict = "REGRESSION"
            elif change >= rule.min_change:
                verdict = f"slower, not significant ({len(latest)} vs {len(baseline)} runs)"
            elif change <= -rule.min_change:
                verdict = "faster"
            else:
                verdict = f"within {rule.min_change:.0%}"
        deltas.append(
            Delta(
                size,
                a_tta,
                b_tta,
                tta_change,
                a_rate,
                b_rate,
                rate_change,
                p_value,
                verdict,
                network,
                _contended(a_runs, b_runs, size),
            )
        )
    return deltas


def delta_rows(deltas: Sequence[Delta]) -> list[dict[str, Any]]:
    """Compare deltas as table rows with units (the network profile where there are several)."""
    several = len({d.network for d in deltas}) > 1
    any_contended = any(d.contended for d in deltas)
    return [
        {
            **({"network": d.network} if several else {}),
            "workers": d.world_size,
            "A: TTA": units.seconds(d.a_tta_s),
            "B: TTA": units.seconds(d.b_tta_s),
            "TTA change": units.signed_percent(d.tta_change),
            "A: samples/s": units.number(d.a_rate),
            "B: samples/s": units.number(d.b_rate),
            "throughput change": units.signed_percent(d.rate_change),
            "p (A slower)": "—" if d.p_value is None else f"{d.p_value:.3g}",
            "A against B alone": d.verdict,
            **({"contended runs left out": d.contended or "—"} if any_contended else {}),
        }
        for d in deltas
    ]
