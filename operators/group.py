"""What every launcher shares: how a group ended, and the interface a launcher offers.

Imports no launcher: the launchers (:mod:`operators.local_launcher`,
:mod:`operators.kubernetes`) import it, and :mod:`operators.launcher` picks one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


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
