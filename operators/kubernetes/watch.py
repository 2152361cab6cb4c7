"""What one look at a running group says, the same for the blocking wait
(:meth:`~operators.kubernetes.group.KubernetesGroup.wait`, on an Airflow worker)
and the deferred one (:class:`~operators.kubernetes.trigger.GroupTrigger`, in
the triggerer): :class:`GroupWatch` turns the Job and its pods into a verdict
or "keep watching", and :class:`Rank0Log` passes on the lines of rank 0's log
not passed on yet. Neither talks to the API; both survive being rebuilt from
their fields (the trigger is serialised between looks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from operators.kubernetes.constants import LOG_PHASES
from operators.kubernetes.pod_status import _exit_code, _get, job_verdict, pending_problem, pod_rank


@dataclass(frozen=True)
class Verdict:
    """How a group ended: ``status`` as the manifest records it, ``reason`` in words,
    and the first rank that failed (its log tail goes with the verdict)."""

    status: str
    reason: str = ""
    first_failed_rank: int | None = None


SETTLE = "settle"  # a rank failed: look once more after SETTLE_S before judging


@dataclass
class GroupWatch:
    """The verdict rules for the Job ``job`` of ``world_size`` pods in ``namespace``.

    ``started_s`` is the wall-clock time (``time.time()``, seconds) the Job was
    created; ``timeout_s`` and ``schedule_timeout_s`` count from it.
    """

    world_size: int
    namespace: str
    job: str
    started_s: float
    timeout_s: float
    schedule_timeout_s: float
    settled: bool = False

    def look(self, job: Any, pods: list[Any], now_s: float) -> Verdict | str | None:
        """The verdict, :data:`SETTLE` (look again shortly), or ``None`` (keep watching)."""
        verdict = job_verdict(job, pods)
        if verdict is not None and verdict[0] in ("failed", "diverged") and not self.settled:
            # Ranks that stop together (divergence) exit moments apart: let them.
            self.settled = True
            return SETTLE
        if verdict is not None:
            return Verdict(*verdict)
        problem = pending_problem(
            pods, now_s, self.started_s, self.schedule_timeout_s
        ) or self.missing_pods(pods, now_s)
        if problem:
            return Verdict("failed", problem)
        if now_s - self.started_s > self.timeout_s:
            return Verdict("timed_out", f"the group did not finish within {self.timeout_s:g} s")
        return None

    def missing_pods(self, pods: list[Any], now_s: float) -> str | None:
        """Pods the Job controller never created (quota, admission) count as unschedulable."""
        timeout = self.schedule_timeout_s
        if now_s - self.started_s < timeout or len(pods) >= self.world_size:
            return None
        return (
            f"only {len(pods)} of {self.world_size} pods were created within {timeout:g} s; "
            f"kubectl -n {self.namespace} describe job {self.job} says why "
            "(e.g. a ResourceQuota, or a missing service account)"
        )

    def exit_codes(self, pods: list[Any]) -> list[int | None]:
        """Each rank's exit code (``None`` while it runs or where its pod is gone)."""
        codes: list[int | None] = [None] * self.world_size
        for pod in pods:
            rank = pod_rank(pod)
            if rank is not None and 0 <= rank < self.world_size:
                codes[rank] = _exit_code(pod)
        return codes


def rank0_pod(pods: list[Any]) -> Any:
    """Rank 0's pod once its log can be read, else ``None``."""
    return next(
        (p for p in pods if pod_rank(p) == 0 and _get(p, "status", "phase") in LOG_PHASES), None
    )


@dataclass
class Rank0Log:
    """Which lines of rank 0's log were passed on: ``lines`` of pod ``pod``."""

    pod: str | None = None
    lines: int = 0

    def new_lines(self, pod: Any, text: str) -> list[str]:
        """The complete lines of ``text`` (pod ``pod``'s whole log) not passed on yet."""
        name = _get(pod, "metadata", "name")
        if name != self.pod:
            self.pod, self.lines = name, 0
        lines = text.splitlines()
        if lines and not text.endswith("\n") and _get(pod, "status", "phase") == "Running":
            lines.pop()  # still being written
        new = lines[self.lines :]
        self.lines = max(self.lines, len(lines))
        return new
