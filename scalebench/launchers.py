"""What each launcher can do, declared once: validation and the trigger form read it.

A launcher is named in a request (``launcher``) and implemented in
:mod:`operators`. What it can run, and the entry that makes it, are declared
here, as data, so that the domain can refuse a request before any worker
starts without importing a launcher (``operators.launcher.launcher_for``
imports the entry of the one a group asked for). A new launcher is its
implementation module and one :class:`LauncherSpec` below.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalebench.rank import BACKENDS


@dataclass(frozen=True)
class LauncherSpec:
    """What a launcher can do.

    ``on_this_host``: its ranks are processes of this machine, so this host's
    GPUs, MPI and network emulation decide what it can run. ``spreads``: it can
    put one rank per node (placement ``spread``). ``runs_images``: it starts
    the worker image (``worker_image`` applies). ``gpus_per_rank``: it asks
    for ``gpus_per_worker`` GPUs for each rank. ``queues``: a cluster's scheduler
    queues its groups (``queue_name``, ``priority_class`` apply). ``backends``: the
    ``torch.distributed`` backends it starts. ``delays``: it can add a one-way
    delay to an emulated link (rates it limits either way). ``entry``:
    ``module:function`` in :mod:`operators` that makes the launcher for a
    planned group, called as ``function(group, names, sink)``; ``task_entry``, where set,
    the one that makes it inside an Airflow task, called as ``function(group, names,
    task)`` (:class:`operators.launcher.TaskRun`): Kubernetes runs a group on one node as
    the task's own pod operator there.
    """

    name: str
    description: str
    on_this_host: bool
    spreads: bool
    runs_images: bool
    gpus_per_rank: bool
    queues: bool
    nodes: bool
    backends: tuple[str, ...]
    delays: bool
    entry: str
    task_entry: str = ""

    @property
    def default_placement(self) -> str:
        """What placement ``auto`` means here: spread where the launcher can spread."""
        return "spread" if self.spreads else "pack"


LAUNCHERS = {
    spec.name: spec
    for spec in (
        LauncherSpec(
            name="local",
            description="ranks as processes on this machine (the Airflow worker)",
            on_this_host=True,
            spreads=False,
            runs_images=False,
            gpus_per_rank=False,
            queues=False,
            nodes=True,
            backends=BACKENDS,
            delays=True,
            entry="operators.local_launcher:launch",
        ),
        LauncherSpec(
            name="kubernetes",
            description=(
                "an Indexed Job with one pod per node (ranks_per_node ranks each); in an "
                "Airflow task, a group on one node is one KubernetesPodOperator pod"
            ),
            on_this_host=False,
            spreads=True,
            runs_images=True,
            gpus_per_rank=True,
            queues=True,
            nodes=True,
            backends=("gloo", "nccl"),
            delays=False,
            entry="operators.kubernetes:launch",
            task_entry="operators.kubernetes.in_task:launch_in_task",
        ),
    )
}
