"""Which sweeps a page offers, and which one it shows for a link's ``sweep=`` value."""

from __future__ import annotations

from dataclasses import dataclass

from dash_app.data import Source
from results_db.queries import SweepInfo
from workers.tasks import TASKS, AllReduceSpec

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


def pick_sweep(source: Source, requested: str | None, kind: str, name: str = "sweep") -> Pick:
    """Newest ``kind`` ("training" or "allreduce") sweeps, and the one a link asks for.

    A link to a sweep that does not exist, or of the other kind, shows the
    newest one instead and says so.
    """
    want_allreduce = kind == "allreduce"
    offered = [s for s in source.sweeps(limit=OFFERED) if is_allreduce(s.task) == want_allreduce]
    problems: list[str] = []
    chosen = offered[0] if offered else None
    if requested is not None:
        found = next((s for s in offered if s.id == requested), None) or source.sweep(requested)
        label = "an all-reduce" if want_allreduce else "a training"
        if found is None:
            problems.append(f"{name}: there is no sweep {requested!r} in the database.")
        elif is_allreduce(found.task) != want_allreduce:
            problems.append(f"{name}: {requested!r} is not {label} sweep.")
        else:
            chosen = found
            if found not in offered:
                offered = [found, *offered]
        if problems and chosen is not None:
            problems[-1] += " Showing the newest one instead."
    return Pick(offered, chosen, problems)
