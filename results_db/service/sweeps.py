"""How a sweep went: its regressions against earlier nightly sweeps, its outcome, and its
summary and report."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from results_db import regressions as detector
from results_db.queries import sweeps as sweeps_queries
from results_db.queries.communication import allreduce_summary
from results_db.queries.sweeps import scaling_by_network, succeeded_runs, sweep_info
from results_db.regressions import RULE, Rule
from results_db.report import sweep_report
from results_db.service.engines import CommandError, engine_for
from scalebench.tasks import TASKS, AllReduceSpec


def check_regressions(url: str | None, sweep_id: str, rule: Rule = RULE) -> list[Any]:
    """Detect, store and print the regressions of a nightly sweep; return every finding."""
    engine = engine_for(url)
    with engine.begin() as conn:
        if sweep_info(conn, sweep_id) is None:
            engine.dispose()
            raise CommandError(f"sweep: no sweep {sweep_id!r} in the results database")
        detection = detector.judge(conn, sweep_id, rule)
        findings = detection.findings
        detector.record(conn, sweep_id, findings)
    engine.dispose()
    for finding in findings:
        print(describe_finding(finding))
    for skipped in detection.not_judged:  # what is missing, and why
        print(skipped.describe())
    if not findings and not detection.not_judged:
        print(f"{sweep_id}: nothing to judge: the sweep stored no run")
    return findings


def describe_finding(f: Any) -> str:
    """One line per finding, e.g. ``REGRESSION   2 worker(s) time_to_accuracy_s: 12 vs ...``."""
    verdict = "REGRESSION" if f.flagged else "ok"
    left_out = f"; {f.left_out}" if getattr(f, "left_out", "") else ""
    if f.latest_mean is None:
        return f"{verdict:10s} {f.world_size:3d} worker(s) {f.metric}: {f.reason}{left_out}"
    return (
        f"{verdict:10s} {f.world_size:3d} worker(s) {f.metric}: {f.latest_mean:.4g} vs "
        f"baseline {f.baseline_mean:.4g} ({f.change:+.1%} worse, p={f.p_value:.3g}, "
        f"{f.latest_runs} vs {f.baseline_runs} runs{left_out})"
    )


# The longest baseline a comparison may ask for: far more scheduled sweeps than years hold.
MAX_WINDOW = 10_000


def regression_rule(window: int, alpha: float, min_change: float) -> Rule:
    """The detector's rule from the command line's options, each refused by name when no
    comparison can use it: ``window`` 1 to :data:`MAX_WINDOW` earlier sweeps, ``alpha`` a
    significance level between 0 and 1, ``min_change`` a finite relative change ≥ 0."""
    if not 1 <= window <= MAX_WINDOW:
        raise CommandError(f"window: must be from 1 to {MAX_WINDOW} earlier sweeps, got {window}")
    if not 0 < alpha < 1:  # NaN fails this too
        raise CommandError(f"alpha: must be a significance level between 0 and 1, got {alpha}")
    if not 0 <= min_change < math.inf:
        raise CommandError(
            f"min_change: must be a relative change of 0 or more (0.05 = 5 %), got {min_change}"
        )
    return Rule(window=window, alpha=alpha, min_change=min_change)


def regressions(url: str | None, sweep_id: str, rule: Rule) -> int:
    """Detect and store regressions of a nightly sweep; exit status 1 when any is flagged."""
    findings = check_regressions(url, sweep_id, rule)
    return 1 if any(f.flagged for f in findings) else 0


class NoResult(RuntimeError):
    """A sweep in which no configuration produced a result."""


def sweep_outcome(sweep_id: str, url: str | None = None) -> str:
    """A loaded sweep's outcome: succeeded, partial, failed, cancelled or running."""
    engine = engine_for(url)
    with engine.connect() as conn:
        outcome = sweeps_queries.sweep_outcome(conn, sweep_id)
    engine.dispose()
    return str(outcome)


def summarize_sweep(sweep_id: str, url: str | None = None) -> list[dict[str, Any]]:
    """The sweep's figures as plain rows, printed as a table: per network profile and worker
    count for a training sweep, per message size for an all-reduce sweep.

    Raises :class:`NoResult` when no run of the sweep succeeded, so that a
    scheduler marks the sweep failed.
    """
    engine = engine_for(url)
    with engine.connect() as conn:
        succeeded = succeeded_runs(conn, sweep_id)
        report = sweep_report(conn, sweep_id)  # LookupError: no such sweep
        info = sweep_info(conn, sweep_id)
        if info is not None and isinstance(TASKS.get(info.task), AllReduceSpec):
            rows = [asdict(r) for r in allreduce_summary(conn, sweep_id)]
        else:
            rows = [
                {"network": network, **asdict(row)}
                for network, row in scaling_by_network(conn, sweep_id)
            ]
        print(report)
    engine.dispose()
    if not succeeded:
        raise NoResult(f"sweep {sweep_id}: no configuration produced a result")
    return rows
