"""What every launcher shares: how a group ended, the interface, and picking one for a plan.

A launcher runs one planned group (:class:`~scalebench.sweep.GroupPlan`) of
``python -m workers.run`` ranks and tells how it ended:

- ``local``: ranks as processes on this machine (:mod:`operators.local_launcher`);
- ``kubernetes``: an Indexed Job with one pod per rank plus a headless Service
  (:mod:`operators.kubernetes`).

Both classify the ranks' exit statuses, which :mod:`workers.request` defines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from operators.kubernetes import GroupNames
    from scalebench.sweep import GroupPlan


@dataclass
class GroupResult:
    """How a group ended.

    ``status``: ``succeeded`` (every rank exited 0), ``diverged`` (ranks stopped
    on a non-finite loss), ``failed`` (a rank failed; ``reason`` names it) or
    ``timed_out``. ``exit_codes`` per rank (negative: killed by that signal);
    ``seconds``: the group's wall time.
    """

    world_size: int
    status: str
    reason: str
    exit_codes: list[int | None]
    seconds: float
    first_failed_rank: int | None = None
    log_tail: list[str] = field(default_factory=list)

    def reason_with_log(self, lines: int = 3, limit: int = 400) -> str:
        """``reason``, followed for a failed rank by the last ``lines`` non-empty lines it
        wrote (at most ``limit`` characters): usually the exception that ended it."""
        rank = self.first_failed_rank
        if self.status not in ("failed", "diverged") or rank is None:
            return self.reason
        prefix = f"[rank {rank}] "
        own = [
            line.removeprefix(prefix).strip() for line in self.log_tail if line.startswith(prefix)
        ]
        last = [line for line in own if line][-lines:]
        if not last:
            return self.reason
        text = " | ".join(last)
        if len(text) > limit:
            text = "…" + text[-limit:]
        return f"{self.reason}; its last lines: {text}"


class Launcher(Protocol):
    """Start the ranks, follow them to the end (or ``timeout_s`` seconds), stop them early."""

    def start(self) -> None: ...
    def wait(self, timeout_s: float) -> GroupResult: ...
    def stop(self) -> None: ...


def launcher_for(
    group: GroupPlan, *, names: GroupNames | None = None, sink: Callable[[str], None] | None = None
) -> Launcher:
    """The launcher ``group`` asked for; ``names`` are the Kubernetes objects' names."""
    if group.launcher == "local":
        from operators.local_launcher import LocalGroup

        return LocalGroup.for_plan(group, sink=sink)
    if group.launcher == "kubernetes":
        from operators.kubernetes import KubernetesGroup, KubernetesSettings, group_names

        if names is None:
            names = group_names("scalebench", group.run_id, 0, 1, group.world_size)
        return KubernetesGroup(
            group, names=names, settings=KubernetesSettings.from_env(), sink=sink
        )
    raise ValueError(f"unknown launcher {group.launcher!r}")
