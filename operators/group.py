"""What every launcher shares: how a group ended, the interface a launcher offers, and
running one planned group to its verdict.

Imports no launcher: the launchers (:mod:`operators.local_launcher`,
:mod:`operators.kubernetes`) import it, and :mod:`operators.launcher` picks one.
:func:`run_group` is the one way a group is run and its verdict recorded: the
command line and the Airflow operator both call it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from scalebench import manifest
from scalebench.statuses import CANCELLED, FAILED, RANK_FAILURES

if TYPE_CHECKING:
    from scalebench.sweep import GroupPlan


@dataclass
class GroupResult:
    """How a group ended.

    ``status``: ``succeeded`` (every rank exited 0), ``diverged`` (ranks stopped
    on a non-finite loss), ``failed`` (a rank failed; ``reason`` names it) or
    ``timed_out``; on Kubernetes also ``preempted`` (a pod was disrupted) and
    ``not_admitted`` (Kueue never admitted the Job). ``exit_codes`` per rank (negative:
    killed by that signal); ``seconds``: the group's wall time. ``qos_class``: the
    pods' Kubernetes QoS class and ``image_digest`` the image they ran as the kubelet
    resolved it (``repo@sha256:…``; empty elsewhere); ``attempt``: which run of the group
    this was (a preempted group may be run again).
    """

    world_size: int
    status: str
    reason: str
    exit_codes: list[int | None]
    seconds: float
    first_failed_rank: int | None = None
    log_tail: list[str] = field(default_factory=list)
    qos_class: str = ""
    image_digest: str = ""
    attempt: int = 1

    def reason_with_log(self, lines: int = 3, limit: int = 400) -> str:
        """``reason``, followed for a failed rank by the last ``lines`` non-empty lines it
        wrote (at most ``limit`` characters): usually the exception that ended it."""
        rank = self.first_failed_rank
        if self.status not in RANK_FAILURES or rank is None:
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


class LauncherFailed(RuntimeError):
    """The launcher itself broke (no cluster, a refused manifest, a network that could not
    be built); the group is recorded ``failed`` with this message as its reason."""


def launcher_failed(group: GroupPlan, error: object) -> str:
    """The reason recorded for a group whose launcher broke."""
    return f"the {group.request.launcher} launcher failed: {error}"


def run_group(
    group: GroupPlan,
    make_launcher: Callable[[], Launcher],
    *,
    started: Callable[[Launcher], None] = lambda launcher: None,
    alongside: Callable[[], AbstractContextManager[object]] = nullcontext,
    cancelled: Callable[[], bool] = lambda: False,
    attempt: str | None = None,
) -> GroupResult:
    """Start the group's launcher, wait for the group (at most ``group.timeout_s`` seconds)
    and return how it ended.

    ``started`` is called once the ranks are started (the operator may defer there),
    ``alongside`` is entered while waiting (live loads of the results). When the launcher
    breaks, everything it started is stopped, the group is recorded ``failed`` (unless
    ``cancelled()``: its canceller records it; signed ``attempt``, see
    :func:`scalebench.manifest.start_attempt`) and :class:`LauncherFailed` is raised.
    """
    launcher = None
    try:
        launcher = make_launcher()
        launcher.start()
        started(launcher)
        with alongside():
            return launcher.wait(group.timeout_s)
    except Exception as exc:
        if launcher is not None:
            with contextlib.suppress(Exception):
                launcher.stop()
        reason = launcher_failed(group, exc)
        if not cancelled():
            manifest.record_verdict(
                Path(group.sweep_dir), group.run_id, FAILED, reason, attempt=attempt
            )
        raise LauncherFailed(reason) from exc


def run_together(
    groups: Sequence[GroupPlan],
    make_launcher: Callable[[GroupPlan], Launcher],
    *,
    started: Callable[[GroupPlan, Launcher], None] = lambda group, launcher: None,
    alongside: Callable[[], AbstractContextManager[object]] = nullcontext,
    cancelled: Callable[[], bool] = lambda: False,
    attempt: str | None = None,
) -> list[GroupResult | LauncherFailed]:
    """Run ``groups`` at once (the arms of a duet round, each pinned to its own cores), each
    as :func:`run_group` runs one, on a thread of its own; how each ended, in their order: its
    result, or the :class:`LauncherFailed` its launcher raised (already recorded ``failed``).
    One group alone runs on this thread. ``alongside`` is entered once, around them all.
    Interrupted while they run, every arm is stopped before the interruption goes on."""
    ended: list[GroupResult | LauncherFailed | None] = [None] * len(groups)
    made: list[Launcher] = []

    def arm(index: int) -> None:
        group = groups[index]

        def make() -> Launcher:
            made.append(launcher := make_launcher(group))
            return launcher

        try:
            ended[index] = run_group(
                group,
                make,
                started=lambda launcher: started(group, launcher),
                cancelled=cancelled,
                attempt=attempt,
            )
        except LauncherFailed as exc:
            ended[index] = exc

    with alongside():
        if len(groups) == 1:
            arm(0)
        else:
            threads = [
                threading.Thread(target=arm, args=(i,), name=f"arm-{g.run_id}")
                for i, g in enumerate(groups)
            ]
            for thread in threads:
                thread.start()
            try:
                for thread in threads:
                    while thread.is_alive():  # in short waits: an interruption gets through
                        thread.join(0.1)
            except BaseException:  # interrupted (Ctrl-C): every arm stops, then it goes on
                for launcher in made:
                    with contextlib.suppress(Exception):
                        launcher.stop()
                for thread in threads:
                    thread.join()
                raise
    return [
        result if result is not None else LauncherFailed(f"{group.run_id}: no verdict")
        for group, result in zip(groups, ended, strict=True)
    ]


def record_verdict(
    group: GroupPlan, result: GroupResult, cancelled_reason: str = "", attempt: str | None = None
) -> tuple[str, str]:
    """Record how ``group`` ended in its sweep's manifest (``cancelled`` with
    ``cancelled_reason`` when one is given; signed ``attempt`` when an attempt owns the
    group); returns the status and reason recorded."""
    status, reason = result.status, result.reason_with_log()
    if cancelled_reason:
        status, reason = CANCELLED, cancelled_reason
    manifest.record_verdict(
        Path(group.sweep_dir),
        group.run_id,
        status,
        reason,
        result.seconds,
        qos_class=result.qos_class,
        image_digest=result.image_digest,
        attempt=attempt,
    )
    return status, reason


def set_aside_earlier_attempt(run_dir: Path) -> Path | None:
    """Move what an earlier attempt of this group wrote (an Airflow retry, or a task cleared
    and run again) to ``<run id>.attempt-<n>`` beside it, so that the new attempt starts
    from an empty run directory and ingest reads only its records. Returns the new place."""
    if not run_dir.exists():
        return None
    attempt = 1
    while (aside := run_dir.with_name(f"{run_dir.name}.attempt-{attempt}")).exists():
        attempt += 1
    run_dir.rename(aside)
    return aside
