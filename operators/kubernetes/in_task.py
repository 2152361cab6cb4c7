"""The Kubernetes launcher inside an Airflow task: :func:`launch_in_task`, the entry the
launcher registry names for a task (:mod:`scalebench.launchers`, ``task_entry``). A group on
one node is one pod of the task's own pod operator, a larger one an Indexed Job; the pod
operator's module is imported only for the first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.kubernetes.group import KubernetesGroup, launch
from operators.kubernetes.names import GroupNames, group_names
from operators.kubernetes.settings import KubernetesSettings

if TYPE_CHECKING:
    from operators.launcher import TaskRun
    from scalebench.sweep import GroupPlan


def launch_in_task(group: GroupPlan, names: GroupNames | None, task: TaskRun) -> KubernetesGroup:
    """The launcher for ``group`` in the Airflow task ``task``: one pod of the task's own pod
    operator (:class:`~operators.kubernetes.pod_group.PodGroup`) for a group on one node, an
    Indexed Job for a larger one; their objects are named after the task instance unless
    ``names`` (an event's) are given."""
    if names is None:
        ti = task.context["ti"]
        names = group_names(ti.dag_id, ti.run_id, ti.map_index, ti.try_number, group.world_size)
    if group.shape.nodes != 1:
        return launch(group, names, task.sink)
    # The pod operator's module is imported only for a group that is one pod.
    from operators.kubernetes.pod_group import PodGroup

    return PodGroup(
        group,
        names=names,
        settings=KubernetesSettings.from_env(),
        context=task.context,
        task_id=task.task_id,
        owner=task.owner,
        live_ingest_s=task.live_ingest_s,
        sink=task.sink,
    )
