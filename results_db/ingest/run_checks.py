"""Judging a reading of a run's rank files before it is written: whether its records can
be one real run of its group (:func:`run_problem`), how much of the run it holds against
what is stored (:class:`RunExtent`), the goal it trained to, what the cluster did to it
(shared machines, QoS class, earlier attempts) and the image its pods ran
(:func:`run_image`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select

from results_db.models import AllReduceSample, Run, RunEvent
from results_db.run_summary import RunSummary
from scalebench.manifest import GroupEntry
from scalebench.statuses import SUCCEEDED
from scalebench.tasks import TASKS, Goal, TrainingSpec
from workers.records import RankRecords, rank_of


@dataclass(frozen=True)
class RunExtent:
    """How much of a run a reading holds: its verdict and how many records of each kind."""

    status: str
    step_records: int
    evaluations: int
    events: int
    allreduce_samples: int

    def shortfall(self, stored: RunExtent) -> str | None:
        """Why this reading must not replace ``stored`` (``None`` when it may)."""
        if stored.status == SUCCEEDED and self.status != SUCCEEDED:
            return f"it is stored as succeeded, and the files now read as {self.status}"
        for name in ("step_records", "evaluations", "events", "allreduce_samples"):
            now, before = getattr(self, name), getattr(stored, name)
            if now < before:
                label = name.replace("_", " ")
                return f"the files now hold {now:,} {label}, the stored run {before:,}"
        return None


def run_problem(
    ranks: Sequence[RankRecords],
    group: GroupEntry,
    summary: RunSummary,
    request: dict[str, Any],
) -> str | None:
    """Why a run's records, each readable, cannot be one real run of ``group`` together
    (``None``: they can): records of another run or group size than the manifest's,
    evaluations whose times go back, a time to accuracy longer than the run, or a goal
    recorded reached that no evaluation reached."""
    for rank in ranks:
        first = rank.records[0] if rank.records else None
        if first is not None and (
            first["run_id"] != group.run_id or first["world_size"] != group.world_size
        ):
            return (
                f"{rank.path.name} holds records of run {first['run_id'][:80]} with "
                f"{first['world_size']} rank(s); the manifest's group is {group.run_id} of "
                f"{group.world_size}"
            )
        times = [e["t"] for e in rank.of_kind("eval")]
        back = next((i for i in range(1, len(times)) if times[i] < times[i - 1]), None)
        if back is not None:
            return (
                f"{rank.path.name}: evaluation times go back, from {times[back - 1]:g} s "
                f"to {times[back]:g} s"
            )
    tta = summary.time_to_accuracy_s
    if tta is not None and tta > summary.duration_s * 1.01 + 1.0:
        return (
            f"its time to accuracy ({tta:g} s) is longer than the run ({summary.duration_s:g} s "
            "from the common start to its last record)"
        )
    spec = TASKS.get(request["task"])
    goal = spec.goal if isinstance(spec, TrainingSpec) else None
    target = goal_target(summary.start, ranks, goal, bool(request.get("light")))
    if summary.goal_reached and goal is not None and target is not None:
        values = [e["metrics"].get(goal.metric) for e in ranks[0].of_kind("eval")]
        if not any(
            isinstance(v, int | float) and (v >= target if goal.direction == "max" else v <= target)
            for v in values
        ):
            return (
                f"the goal ({goal.metric} {target:g}) is recorded reached, yet no evaluation "
                "reached it"
            )
    return None


def cluster_marks(group: GroupEntry) -> list[str]:
    """What the tables must show of how the cluster ran a group: pods outside the
    Guaranteed QoS class, pods that ran different images (each named), and the earlier
    attempts of a group run again after a preemption."""
    marks = []
    if group.qos_class and group.qos_class != "Guaranteed":
        marks.append(f"QoS {group.qos_class}: the pods' limits were above their requests")
    images = [i for i in group.image_digest.split(",") if i]
    if len(images) > 1:
        marks.append(f"the pods ran {len(images)} different images: {', '.join(images)}")
    for earlier in group.attempts:
        marks.append(
            f"attempt {earlier.get('attempt')} {earlier.get('status')}: {earlier.get('reason')}"
        )
    return marks


def run_image(group: GroupEntry) -> str:
    """The image the group's pods ran as the run row keeps it (``run.image_digest``): the
    manifest's (``repo@sha256:…``, several comma-separated), whole where it fits the
    column; else as many of the images as fit, then ``+N more`` (the run's reason names
    them all: :func:`cluster_marks`)."""
    width = Run.__table__.c.image_digest.type.length
    if len(group.image_digest) <= width:
        return group.image_digest
    images = [i for i in group.image_digest.split(",") if i]
    for kept in range(len(images) - 1, -1, -1):
        fitted = ",".join([*images[:kept], f"+{len(images) - kept} more"])
        if len(fitted) <= width:
            return fitted
    return f"+{len(images)} more"


def shared_nodes(ranks: Sequence[RankRecords]) -> dict[str, list[int]]:
    """Machines that more than one of the group's nodes ran on (machine -> node indexes),
    from the environment records' ``node`` (a pod's machine; ``host`` in records from
    before it was written) and ``node_rank`` (where a record has none, one rank per node:
    the rank's own number)."""
    on: dict[str, set[int]] = {}
    for rank in ranks:
        for record in rank.of_kind("env")[:1]:
            machine = record.get("node") or record.get("host")
            index = record.get("node_rank")
            if not isinstance(index, int):
                index = rank_of(rank.path)
            if isinstance(machine, str) and machine:
                on.setdefault(machine, set()).add(index)
    return {machine: sorted(nodes) for machine, nodes in on.items() if len(nodes) > 1}


def stored_extent(conn: Connection, run_id: str) -> RunExtent | None:
    """How much of run ``run_id`` the database holds (``None``: nothing)."""
    row = conn.execute(
        select(Run.status, Run.step_records, Run.epochs).where(Run.id == run_id)
    ).first()
    if row is None:
        return None
    events = conn.execute(select(func.count()).where(RunEvent.run_id == run_id)).scalar_one()
    samples = conn.execute(
        select(func.count()).where(AllReduceSample.run_id == run_id)
    ).scalar_one()
    return RunExtent(row.status, row.step_records, row.epochs, events, samples)


def extent_of(summary: RunSummary, ranks: Sequence[RankRecords]) -> RunExtent:
    """How much of its run a reading of the rank files holds."""
    return RunExtent(
        status=summary.status,
        step_records=summary.step_records,
        evaluations=summary.epochs,
        events=sum(len(rank.of_kind("event")) for rank in ranks),
        allreduce_samples=sum(
            len(r["seconds"]) for rank in ranks for r in rank.of_kind("allreduce")
        ),
    )


def goal_target(
    start: dict[str, Any], ranks: Sequence[RankRecords], goal: Goal | None, light: bool
) -> float | None:
    """The target the run trained to: from its own records when they say (a light variant's
    target may change between versions), else the task's current one."""
    if goal is None:
        return None
    if isinstance(start.get("goal_target"), int | float):
        return float(start["goal_target"])
    for rank in ranks:
        for event in rank.of_kind("event"):
            if event["event"] == "goal_reached" and isinstance(event.get("target"), int | float):
                return float(event["target"])
    return goal.target(light)
