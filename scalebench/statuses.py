"""Every status a group, a run and a sweep can have, declared once.

A **group's** status is the launcher's verdict on it, written to ``sweep.json``
(:mod:`scalebench.manifest`). A **run's** is what ingest makes of that verdict and of what the
ranks wrote, stored in the results database (``run.status``). A **sweep's** outcome sums up its
groups (``sweep.outcome``). The manifest's checks, the database model, ingest, the analytics and
the dashboard's badges and filters all read the tuples below; none lists statuses of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

# Bootstrap's contextual colour names, which the dashboard's badges take.
COLOURS = ("success", "info", "warning", "danger", "secondary")


@dataclass(frozen=True)
class Status:
    """One status: what it means; what can have it (a group's verdict, a stored run, a
    sweep's outcome); the colour the dashboard shows it in; and whether the sweep has not
    started the group (yet), so that nothing of it was measured."""

    name: str
    meaning: str
    of: tuple[str, ...]  # "group", "run", "sweep": what can have it
    colour: str
    unstarted: bool = False


STATUSES = (
    Status("planned", "not started yet", of=("group", "run"), colour="secondary", unstarted=True),
    Status(
        "skipped",
        "never started: the sweep was stopped first",
        of=("group", "run"),
        colour="secondary",
        unstarted=True,
    ),
    Status(
        "running",
        "its ranks still write (loaded while it runs)",
        of=("run", "sweep"),
        colour="info",
    ),
    Status("succeeded", "every rank finished", of=("group", "run", "sweep"), colour="success"),
    Status(
        "partial",
        "some of the sweep's runs succeeded, others did not",
        of=("sweep",),
        colour="warning",
    ),
    Status(
        "failed",
        "a rank failed, or left no final record",
        of=("group", "run", "sweep"),
        colour="danger",
    ),
    Status("diverged", "the loss stopped being a number", of=("group", "run"), colour="danger"),
    Status("cancelled", "stopped on request", of=("group", "run", "sweep"), colour="secondary"),
    Status("timed_out", "stopped by the group's time limit", of=("group", "run"), colour="danger"),
    Status(
        "preempted",
        "Kubernetes: a pod was preempted, evicted or drained",
        of=("group", "run"),
        colour="warning",
    ),
    Status(
        "not_admitted",
        "Kubernetes: the Kueue queue never admitted the group",
        of=("group", "run"),
        colour="secondary",
    ),
)

BY_NAME = {status.name: status for status in STATUSES}
GROUP_STATUSES = tuple(s.name for s in STATUSES if "group" in s.of)
RUN_STATUSES = tuple(s.name for s in STATUSES if "run" in s.of)
SWEEP_OUTCOMES = tuple(s.name for s in STATUSES if "sweep" in s.of)
# A group the sweep has not run (yet): nothing measured. A group the cluster never admitted
# is not one of them: its start was tried.
NOT_STARTED = tuple(s.name for s in STATUSES if s.unstarted)


def colour(name: str) -> str:
    """The dashboard's badge colour of a status or outcome (``secondary`` for other text)."""
    status = BY_NAME.get(name)
    return status.colour if status else "secondary"
