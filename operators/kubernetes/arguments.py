"""The worker pods' command line: :func:`pod_argv` renders a group's
``python -m workers.run`` arguments with paths on the pods' volumes, which
:func:`pod_path` moves from below the Airflow side's roots to below the pods'
mounts. The results claim must therefore be the volume the Airflow workers see
at ``SCALEBENCH_RESULTS_URI``, so that a run directory below that root is the
same place below the pod's mount.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from operators.kubernetes.constants import DATA_MOUNT, RESULTS_MOUNT

if TYPE_CHECKING:
    from scalebench.sweep import GroupPlan


def pod_path(path: str | Path, root: str | Path, mount: str, what: str) -> str:
    """``path`` on the Airflow side, moved from below ``root`` to below ``mount`` (pod side).

    Raises :class:`ValueError` when ``path`` is outside ``root``: the pods see
    only that volume, so they could not use the path.
    """
    absolute, absolute_root = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    try:
        relative = absolute.relative_to(absolute_root)
    except ValueError:
        raise ValueError(
            f"{path} is not under {what} {root}: the pods see only that volume "
            f"(at {mount}), so they could not use this path"
        ) from None
    return str(PurePosixPath(mount, *relative.parts))


def pod_argv(group: GroupPlan, results_root: str | Path, data_root: str | Path) -> list[str]:
    """The ``python -m workers.run`` arguments of ``group``'s pods: paths on their mounts.

    The run directory below ``results_root`` moves below
    ``/var/scalebench/results`` and the data directory below ``data_root``
    below ``/var/scalebench/data``.
    """
    return group.worker_argv(
        results_dir=pod_path(
            group.run_dir, results_root, RESULTS_MOUNT, "the results root (SCALEBENCH_RESULTS_URI)"
        ),
        data_dir=pod_path(
            group.data_dir, data_root, DATA_MOUNT, "the data root (SCALEBENCH_DATA_DIR)"
        ),
    )
