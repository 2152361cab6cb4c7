"""Every status a group, a run and a sweep can have, declared once.

A **group's** status is the launcher's verdict on it, written to ``sweep.json``
(:mod:`scalebench.manifest`). A **run's** is what ingest makes of that verdict and of what the
ranks wrote, stored in the results database (``run.status``). A **sweep's** outcome sums up its
groups (``sweep.outcome``). The manifest's checks, the database model, ingest, the analytics and
the dashboard's badges and filters all read the tuples below; none lists statuses of its own.

The product names each status by its constant here (``FAILED``, never ``"failed"``), and a set
of statuses it tests more than once by its group here (``RANK_FAILURES``), so that a status
renamed or added is one change; ``tests/test_statuses.py`` finds any status spelled out
elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

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


# Each status by name; the values are what the manifest and the database store.
PLANNED: Final = "planned"
SKIPPED: Final = "skipped"
RUNNING: Final = "running"
SUCCEEDED: Final = "succeeded"
PARTIAL: Final = "partial"
FAILED: Final = "failed"
DIVERGED: Final = "diverged"
CANCELLED: Final = "cancelled"
TIMED_OUT: Final = "timed_out"
PREEMPTED: Final = "preempted"
NOT_ADMITTED: Final = "not_admitted"

STATUSES = (
    Status(PLANNED, "not started yet", of=("group", "run"), colour="secondary", unstarted=True),
    Status(
        SKIPPED,
        "never started: the sweep was stopped first",
        of=("group", "run"),
        colour="secondary",
        unstarted=True,
    ),
    Status(
        RUNNING,
        "its ranks still write (loaded while it runs)",
        of=("run", "sweep"),
        colour="info",
    ),
    Status(SUCCEEDED, "every rank finished", of=("group", "run", "sweep"), colour="success"),
    Status(
        PARTIAL,
        "some of the sweep's runs succeeded, others did not",
        of=("sweep",),
        colour="warning",
    ),
    Status(
        FAILED,
        "a rank failed, or left no final record",
        of=("group", "run", "sweep"),
        colour="danger",
    ),
    Status(DIVERGED, "the loss stopped being a number", of=("group", "run"), colour="danger"),
    Status(CANCELLED, "stopped on request", of=("group", "run", "sweep"), colour="secondary"),
    Status(TIMED_OUT, "stopped by the group's time limit", of=("group", "run"), colour="danger"),
    Status(
        PREEMPTED,
        "Kubernetes: a pod was preempted, evicted or drained",
        of=("group", "run"),
        colour="warning",
    ),
    Status(
        NOT_ADMITTED,
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
# Not ended yet: not started, or its ranks still write. A sweep with such a run is running.
UNFINISHED = (PLANNED, RUNNING)
# A sweep stopped on request: a group cancelled while it ran, or skipped before it started.
STOPPED = (CANCELLED, SKIPPED)
# A group's verdict that a rank gave (it failed or its loss diverged); it can name the rank.
RANK_FAILURES = (FAILED, DIVERGED)
# Verdicts only a cluster gives (Kubernetes): the launcher's reason is the run's.
CLUSTER_VERDICTS = (PREEMPTED, NOT_ADMITTED)


def colour(name: str) -> str:
    """The dashboard's badge colour of a status or outcome (``secondary`` for other text)."""
    status = BY_NAME.get(name)
    return status.colour if status else "secondary"
