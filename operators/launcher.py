"""Picking the launcher a planned group asked for.

A launcher runs one planned group (:class:`~scalebench.sweep.GroupPlan`) of
``python -m workers.run`` ranks and tells how it ended. Each is declared in
:data:`scalebench.launchers.LAUNCHERS` with what it can do and the entry that
makes it (``module:function``), imported only when picked, so the Kubernetes
client loads only for Kubernetes groups:

- ``local``: ranks as processes on this machine (:mod:`operators.local_launcher`);
- ``kubernetes``: an Indexed Job with one pod per node plus a headless Service
  (:mod:`operators.kubernetes`); in an Airflow task, a group that fits on one node
  (:func:`fits_one_pod`) is one pod, run by the provider's ``KubernetesPodOperator``
  (:mod:`operators.kubernetes.pod_group`).

Both classify the ranks' exit statuses, which :mod:`scalebench.rank` defines,
into a :class:`~operators.group.GroupResult`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from operators.group import Launcher
from scalebench.launchers import LAUNCHERS

Sink = Callable[[str], None] | None

if TYPE_CHECKING:
    from operators.kubernetes import GroupNames
    from scalebench.sweep import GroupPlan


def entry(launcher: str) -> Callable[[GroupPlan, GroupNames | None, Sink], Launcher]:
    """The function that makes the launcher named ``launcher`` for a planned group."""
    module, _, function = LAUNCHERS[launcher].entry.partition(":")
    return getattr(importlib.import_module(module), function)


def launcher_for(
    group: GroupPlan, *, names: GroupNames | None = None, sink: Sink | None = None
) -> Launcher:
    """The launcher ``group`` asked for; ``names`` are the Kubernetes objects' names."""
    if group.request.launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {group.request.launcher!r}")
    return entry(group.request.launcher)(group, names, sink)


@dataclass(frozen=True)
class TaskRun:
    """The Airflow task a group runs in: its ``context``, its id, the try that owns the
    group (``owner``), how often a deferred wait wakes it to load the live results
    (``live_ingest_s``, seconds; 0: never), and where its lines go (``sink``)."""

    context: Any
    task_id: str
    owner: str | None
    live_ingest_s: float
    sink: Sink


def launcher_in_task(group: GroupPlan, task: TaskRun, names: GroupNames | None = None) -> Launcher:
    """The launcher ``group`` asked for, inside the Airflow task ``task``: the registry's
    ``task_entry`` where the launcher has one, else its plain entry."""
    spec = LAUNCHERS.get(group.request.launcher)
    if spec is None:
        raise ValueError(f"unknown launcher {group.request.launcher!r}")
    if not spec.task_entry:
        return launcher_for(group, names=names, sink=task.sink)
    module, _, function = spec.task_entry.partition(":")
    return getattr(importlib.import_module(module), function)(group, names, task)


def fits_one_pod(group: GroupPlan) -> bool:
    """Whether ``group`` is a Kubernetes group on one node: one pod, no Job."""
    return group.request.launcher == "kubernetes" and group.shape.nodes == 1
