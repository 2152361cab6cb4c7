"""The detector's sentences: what a comparison left out, why a worker count or a night was not
judged, and the reason stored with a flag. Words only: no SQL."""

from __future__ import annotations

from results_db.regressions.findings import Finding
from results_db.regressions.rules import MIN_BASELINE_RUNS


def left_out_text(latest_contended: int, baseline_contended: int, other_hardware: int) -> str:
    """What a comparison left out, in words ("" when nothing)."""
    parts = []
    if latest_contended:
        parts.append(f"{latest_contended} contended latest run(s)")
    if baseline_contended:
        parts.append(f"{baseline_contended} contended baseline run(s)")
    if other_hardware:
        parts.append(f"{other_hardware} baseline run(s) on other hardware")
    return f"left out: {', '.join(parts)}" if parts else ""


def too_few_nights_text(nights: int, needed: int) -> str:
    """Why a sweep was not judged at all: ``nights`` earlier scheduled nights of its
    configuration, fewer than the ``needed`` of the rule."""
    return (
        f"{nights} earlier scheduled night(s) of this configuration; the comparison needs {needed}"
    )


def too_few_text(
    baseline_runs: int,
    latest_runs: int,
    latest_contended: int,
    baseline_contended: int,
    other_hardware: int,
    nights: int,
) -> str:
    """Why a worker count was not judged: its usable baseline runs over ``nights`` earlier
    nights are fewer than :data:`~results_db.regressions.rules.MIN_BASELINE_RUNS`, and what
    was left out of them."""
    considered = baseline_runs + baseline_contended + other_hardware
    why = [
        f"{baseline_contended} contended" if baseline_contended else "",
        f"{other_hardware} on other hardware" if other_hardware else "",
    ]
    left = f" ({', '.join(w for w in why if w)} left out)" if any(why) else ""
    latest = f"; this night: {latest_runs} usable run(s)"
    if latest_contended:
        latest += f", {latest_contended} contended left out"
    return (
        f"{baseline_runs} of {considered} successful baseline run(s) of {nights} earlier "
        f"night(s) usable{left}, the comparison needs {MIN_BASELINE_RUNS}{latest}"
    )


def no_comparable_run_text(contended: int) -> str:
    """Why a worker count the baseline has runs of has none to compare: the latest night's
    successful runs were all ``contended``, or none succeeded."""
    if contended:
        return "no comparable run: the successful ones were contended"
    return "no successful run; the baseline had some"


def with_network(finding: Finding) -> str:
    """A finding's reason, naming its network profile where it is not the host's."""
    where = f"on the {finding.network} network" if finding.network != "host" else ""
    return "; ".join(part for part in (finding.reason, where, finding.left_out) if part)
