"""Picking the launcher a planned group asked for.

A launcher runs one planned group (:class:`~scalebench.sweep.GroupPlan`) of
``python -m workers.run`` ranks and tells how it ended:

- ``local``: ranks as processes on this machine (:mod:`operators.local_launcher`);
- ``kubernetes``: an Indexed Job with one pod per rank plus a headless Service
  (:mod:`operators.kubernetes`).

Both classify the ranks' exit statuses, which :mod:`scalebench.worker_request` defines,
into a :class:`~operators.group.GroupResult`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from operators.group import Launcher

Sink = Callable[[str], None]

if TYPE_CHECKING:
    from operators.kubernetes import GroupNames
    from scalebench.sweep import GroupPlan


def _local(group: GroupPlan, names: GroupNames | None, sink: Sink) -> Launcher:
    from operators.local_launcher import LocalGroup

    return LocalGroup.for_plan(group, sink=sink)


def _kubernetes(group: GroupPlan, names: GroupNames | None, sink: Sink) -> Launcher:
    from operators.kubernetes import KubernetesGroup, KubernetesSettings, group_names

    if names is None:
        names = group_names("scalebench", group.run_id, 0, 1, group.world_size)
    return KubernetesGroup(group, names=names, settings=KubernetesSettings.from_env(), sink=sink)


# Each launcher of scalebench.launchers.LAUNCHERS, by name: how to make it for a planned group
# (imported only when picked, so the Kubernetes client loads only for Kubernetes groups).
IMPLEMENTATIONS: dict[str, Callable[[GroupPlan, GroupNames | None, Sink], Launcher]] = {
    "local": _local,
    "kubernetes": _kubernetes,
}


def launcher_for(
    group: GroupPlan, *, names: GroupNames | None = None, sink: Sink | None = None
) -> Launcher:
    """The launcher ``group`` asked for; ``names`` are the Kubernetes objects' names."""
    make = IMPLEMENTATIONS.get(group.launcher)
    if make is None:
        raise ValueError(f"unknown launcher {group.launcher!r}")
    return make(group, names, sink)
