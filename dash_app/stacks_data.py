"""The Compare page's read of a sweep's stacks: each against the first, with intervals.

:func:`stack_report` reads, on one of the dashboard's read-only connections, what
:func:`results_db.service.stacks.compare_sweep` reads for ``scalebench compare SWEEP``: the
sweep's stacks in the request's order, what each ran, and every stack after the first
against the first, per worker count and link
(:func:`results_db.regressions.paired.compare_stacks`). A sweep of fewer than two stacks is
no error here: its report names its stacks (none, or one) and compares nothing.
"""

from __future__ import annotations

from sqlalchemy import Connection

from results_db.queries.stacks import ARM_METRICS, arm_runs, stack_identities, sweep_stacks
from results_db.regressions.paired import compare_stacks
from results_db.service.stacks import StackReport


def stack_report(conn: Connection, sweep_id: str) -> StackReport:
    """The stacks of sweep ``sweep_id`` compared with its first; with fewer than two stacks,
    a report of its stacks alone (no identities, no comparisons). LookupError for a sweep
    not stored."""
    stacks = sweep_stacks(conn, sweep_id)
    if len(stacks) < 2:
        return StackReport(sweep_id, stacks, {}, [])
    arms = arm_runs(conn, sweep_id)
    identities = stack_identities(conn, sweep_id)
    return StackReport(sweep_id, stacks, identities, compare_stacks(arms, stacks, ARM_METRICS))
