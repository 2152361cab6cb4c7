"""Which process runs a sweep or a group, and whether it has ended.

A process is named by its host, its id and its start time in clock ticks since boot
(:func:`this_process`), so that an id used again by a later process is not taken for it;
:func:`launcher_gone` judges only processes of this host.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalebench.statuses import PLANNED

if TYPE_CHECKING:
    from scalebench.manifest.contents import GroupEntry, Manifest


def this_process() -> dict[str, Any]:
    """Who runs a sweep from here: host, process id and the process's start time (clock
    ticks since boot, so that a process id used again later is not taken for it)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": _start_ticks(os.getpid())}


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, from ``/proc`` (``None``: no such process, one that
    has exited and waits for its parent to collect it, or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # from field 3, after the command's name
    if fields[0] in ("Z", "X"):  # a zombie, or dead: it has ended
        return None
    return int(fields[19])  # field 22


def launcher_gone(launcher: dict[str, Any]) -> bool:
    """Whether the process that ran a sweep (:func:`this_process` then) has ended; a sweep
    run on another host is never judged from here."""
    if launcher.get("host") != socket.gethostname() or not isinstance(launcher.get("pid"), int):
        return False
    if not Path("/proc/self/stat").exists():  # no /proc: whether the id is in use at all
        try:
            os.kill(launcher["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    started = _start_ticks(launcher["pid"])
    return started is None or started != launcher.get("started", started)


def this_or_gone(owner: dict[str, Any]) -> bool:
    """Whether ``owner``'s process has ended or is this one (``dags test`` runs every task in
    one process: a group it ran is not running beside it)."""
    if owner.get("host") == socket.gethostname() and owner.get("pid") == os.getpid():
        return True
    return launcher_gone(owner)


def still_running(sweep: Manifest, besides: str) -> list[GroupEntry]:
    """The groups of ``sweep`` other than run ``besides`` that an attempt has started and not
    ended: no verdict yet, and the process running them alive (or on another host, where
    it cannot be judged from here). Two groups of a sweep never run at once; one still
    running beside a group about to start is being stopped (its task was marked failed)."""
    return [
        group
        for group in sweep.groups
        if group.run_id != besides
        and group.status == PLANNED
        and group.owner is not None
        and not this_or_gone(group.owner)
    ]
