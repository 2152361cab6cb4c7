"""A sweep's stacks side by side: each against the first, per worker count, with intervals.

:func:`compare_sweep` reads a sweep of several stacks (``scalebench run --stack A=… --stack
B=… --pairs N``) from the results database and compares every stack after the first with
the first, round by round (:func:`results_db.regressions.paired.compare_stacks`);
:func:`comparison_json` and :func:`comparison_table` give the command line's two forms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from results_db.queries.stacks import ARM_METRICS, arm_runs, stack_identities, sweep_stacks
from results_db.regressions.paired import RatioInterval, StackComparison, compare_stacks
from results_db.service.engines import CommandError, reader_for


@dataclass(frozen=True)
class StackReport:
    """A sweep's stacks in the request's order, what each ran (interpreter, versions,
    variables), and every comparison with the first."""

    sweep_id: str
    stacks: list[str]
    identities: dict[str, dict[str, object]]
    comparisons: list[StackComparison]


def compare_sweep(url: str, sweep_id: str) -> StackReport:
    """The stacks of sweep ``sweep_id`` in the database at ``url`` compared with its first;
    :class:`CommandError` for a sweep not stored or one that names fewer than two stacks."""
    engine = reader_for(url)
    try:
        with engine.connect() as conn:
            try:
                stacks = sweep_stacks(conn, sweep_id)
            except LookupError as exc:
                raise CommandError(f"{exc.args[0]}; ingest it with `scalebench ingest`") from None
            if len(stacks) < 2:
                raise CommandError(
                    f"sweep {sweep_id} names {len(stacks)} stack(s): a comparison needs two or "
                    "more (scalebench run TASK --stack A=PYTHON --stack B=PYTHON --pairs 5)"
                )
            arms = arm_runs(conn, sweep_id)
            identities = stack_identities(conn, sweep_id)
    finally:
        engine.dispose()
    return StackReport(sweep_id, stacks, identities, compare_stacks(arms, stacks, ARM_METRICS))


def _interval(interval: RatioInterval) -> dict[str, Any]:
    """``{"ratio", "low", "high", "pairs"}``; an unbounded end (one pair) is ``null``."""

    def bounded(value: float) -> float | None:
        return value if math.isfinite(value) else None

    return {
        "ratio": bounded(interval.ratio),
        "low": bounded(interval.low) if interval.pairs > 1 else None,
        "high": bounded(interval.high),
        "pairs": interval.pairs,
    }


def comparison_json(report: StackReport) -> dict[str, Any]:
    """The report as JSON values: per worker count, link and stack, each metric's ratio
    against the first stack with its 95 % interval and the number of pairs."""
    return {
        "sweep": report.sweep_id,
        "stacks": report.stacks,
        "against": report.stacks[0],
        "confidence": 0.95,
        "identities": report.identities,
        "comparisons": [
            {
                "workers": c.world_size,
                "network": c.network,
                "stack": c.stack,
                "against": c.against,
                "pairing": c.pairing,
                "metrics": {name: _interval(i) for name, i in c.metrics.items()},
            }
            for c in report.comparisons
        ],
    }


def comparison_table(report: StackReport) -> str:
    """The report as a table a person reads: a row per (worker count, stack, metric), the
    ratio and its 95 % interval (above 1: slower than the first stack), and a verdict."""
    first = report.stacks[0]
    lines = [f"sweep {report.sweep_id}: each stack against {first} (ratio > 1: slower)"]
    for name in report.stacks:
        identity = report.identities.get(name, {})
        versions = ", ".join(
            f"{key} {identity[key]}"
            for key in ("python", "torch", "numpy")
            if identity.get(key) is not None
        )
        env = identity.get("env") or {}
        changed = f"; env {', '.join(f'{k}={v}' for k, v in env.items())}" if env else ""
        ran = identity.get("executable") or "no run measured"
        lines.append(f"  {name}: {ran}{' (' + versions + ')' if versions else ''}{changed}")
    if not report.comparisons:
        lines.append(f"no round in which {first} and another stack both succeeded")
        return "\n".join(lines)
    lines.append("")
    lines.append(
        f"{'workers':>7}  {'network':<8} {'pairing':<11} {'stack':<20} {'metric':<19} "
        f"{'ratio':>7}  {'95 % interval':<17} {'pairs':>5}  verdict"
    )
    for c in report.comparisons:
        for metric, i in c.metrics.items():
            high = f"{i.high:.3f}" if math.isfinite(i.high) else "∞"
            span = f"[{i.low:.3f}, {high}]" if i.pairs > 1 else "(one pair)"
            lines.append(
                f"{c.world_size:>7}  {c.network:<8} {c.pairing or '—':<11} {c.stack:<20} "
                f"{metric:<19} "
                f"{i.ratio:>7.3f}  {span:<17} {i.pairs:>5}  {_verdict(i)}"
            )
    return "\n".join(lines)


def _verdict(interval: RatioInterval) -> str:
    """Slower or faster where the whole interval says so, else no difference shown."""
    if interval.pairs < 2:
        return "one pair: no interval"
    if interval.low > 1:
        return f"slower by {100 * (interval.low - 1):.1f}–{100 * (interval.high - 1):.1f} %"
    if interval.high < 1:
        return f"faster by {100 * (1 - interval.high):.1f}–{100 * (1 - interval.low):.1f} %"
    return "no difference shown"
