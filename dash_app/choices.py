"""Which sweeps a page offers, and which one it shows for a link's ``sweep=`` value."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dash_app.data import Source
from results_db.queries.sweeps import SweepInfo
from scalebench.tasks import TASKS, AllReduceSpec

OFFERED = 500  # newest sweeps listed in a picker; older ones open by link


def is_allreduce(task: str) -> bool:
    """True for all-reduce tasks (Task 0); every other task trains a model."""
    return isinstance(TASKS.get(task), AllReduceSpec)


@dataclass(frozen=True)
class Pick:
    """The sweeps a picker lists, the one shown (None: nothing to show) and what went wrong."""

    offered: list[SweepInfo]
    chosen: SweepInfo | None
    problems: list[str]


def _offered(source: Source, want_allreduce: bool) -> list[SweepInfo]:
    return [s for s in source.sweeps(limit=OFFERED) if is_allreduce(s.task) == want_allreduce]


def offered(source: Source, kind: str) -> list[SweepInfo]:
    """The newest ``kind`` ("training" or "allreduce") sweeps a picker lists."""
    return _offered(source, kind == "allreduce")


def _look_up(
    source: Source, offered: list[SweepInfo], requested: str, want_allreduce: bool, name: str
) -> tuple[SweepInfo | None, str | None]:
    """The sweep a link asks for, or what is wrong with the request."""
    found = next((s for s in offered if s.id == requested), None) or source.sweep(requested)
    if found is None:
        return None, f"{name}: there is no sweep {requested!r} in the database."
    if is_allreduce(found.task) != want_allreduce:
        label = "an all-reduce" if want_allreduce else "a training"
        return None, f"{name}: {requested!r} is not {label} sweep."
    return found, None


def pick_sweep(source: Source, requested: str | None, kind: str, name: str = "sweep") -> Pick:
    """Newest ``kind`` ("training" or "allreduce") sweeps, and the one a link asks for.

    A link to a sweep that does not exist, or of the other kind, shows the
    newest one instead and says so.
    """
    picks = pick_sweeps(source, (requested,) if requested else (), kind, name)
    return Pick(picks.offered, picks.chosen[0] if picks.chosen else None, picks.problems)


@dataclass(frozen=True)
class Picks:
    """The sweeps a multiple picker lists, those shown together, and what went wrong."""

    offered: list[SweepInfo]
    chosen: list[SweepInfo]
    problems: list[str]


def pick_sweeps(source: Source, requested: Sequence[str], kind: str, name: str = "sweep") -> Picks:
    """Newest ``kind`` sweeps, and those a link asks for (in its order).

    Requested sweeps that do not exist or are of the other kind are named in
    the problems and left out; when none is left, the newest one with results (a run that
    succeeded) is shown, and a note says so when newer ones have none.
    """
    want_allreduce = kind == "allreduce"
    offered = _offered(source, want_allreduce)
    chosen: list[SweepInfo] = []
    problems: list[str] = []
    for sweep_id in requested:
        found, problem = _look_up(source, offered, sweep_id, want_allreduce, name)
        if found is None:
            problems.append(str(problem))
            continue
        chosen.append(found)
        if found not in offered:
            offered = [found, *offered]
    if not chosen and offered:
        shown, note = _newest_with_results(source, offered)
        chosen = [shown]
        if problems:
            problems[-1] += " Showing the newest one with results instead."
        if note:
            problems.append(note)
    return Picks(offered, chosen, problems)


def _newest_with_results(source: Source, offered: list[SweepInfo]) -> tuple[SweepInfo, str]:
    """The newest of ``offered`` with a succeeded run (the newest of all when none has
    one), and a note naming the newer sweeps passed over ("" when none was)."""
    with_results = source.with_results([s.id for s in offered])
    index = next((i for i, s in enumerate(offered) if s.id in with_results), None)
    if not index:  # the newest has results, or no sweep has: the newest it is
        return offered[0], ""
    skipped = offered[:index]
    newest = skipped[0]
    others = f" and {len(skipped) - 1} newer one(s)" if len(skipped) > 1 else ""
    return offered[index], (
        f"Showing {offered[index].id}, the newest sweep with results: the newest, "
        f"{newest.id} ({newest.outcome or 'outcome not recorded'}){others}, has none to show."
    )
