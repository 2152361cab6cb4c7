"""Ending a sweep whatever stopped it: the groups left without a verdict are settled.

:func:`close` settles them and finishes the sweep, giving a group still running a grace
period for its own verdict; :func:`close_vanished` closes the sweeps whose launcher
process is gone, and :func:`as_closed_if_vanished` shows one as it would be closed,
writing nothing.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from scalebench.manifest.contents import MANIFEST, GroupEntry, Manifest
from scalebench.manifest.files import append_verdicts, finish, load
from scalebench.manifest.processes import launcher_gone, this_or_gone
from scalebench.statuses import CANCELLED, PLANNED, SKIPPED

LAUNCHER_VANISHED = "launcher vanished: the process running the sweep ended without closing it"


def close(
    sweep_dir: Path,
    *,
    started_reason: str,
    unstarted_reason: str,
    grace_s: float = 30.0,
    quiet_s: float = 5.0,
) -> Manifest:
    """End a sweep whatever stopped it, then :func:`finish` it; return the result.

    Groups that still have no verdict are settled: one whose run directory
    exists had started, and is ``cancelled``; one without had not, and is
    ``skipped``, each with its reason. While a started group's process is
    alive (its ``owner``, :func:`~scalebench.manifest.recording.start_attempt`)
    or its files still change (written within the last ``quiet_s`` seconds), it
    gets up to ``grace_s`` seconds for its own verdict, which its launcher
    records as it stops the ranks (Airflow may begin this step while a killed
    task is still stopping them); a group whose ranks died with their task is settled at once. A
    sweep whose every group has a verdict only gets finished.
    """

    def undecided() -> tuple[list[GroupEntry], list[GroupEntry]]:
        planned = load(sweep_dir).planned
        started = [g for g in planned if (sweep_dir / g.run_id).exists()]
        return started, [g for g in planned if g not in started]

    def still_running(groups: list[GroupEntry]) -> bool:
        recent = time.time() - quiet_s
        return any(
            group.owner is not None and not this_or_gone(group.owner) for group in groups
        ) or any(
            path.stat().st_mtime > recent
            for group in groups
            for path in [sweep_dir / group.run_id, *(sweep_dir / group.run_id).iterdir()]
        )

    deadline = time.monotonic() + grace_s
    started, unstarted = undecided()
    while started and still_running(started) and time.monotonic() < deadline:
        time.sleep(0.5)
        started, unstarted = undecided()
    append_verdicts(
        sweep_dir,
        [{"run_id": g.run_id, "status": CANCELLED, "reason": started_reason} for g in started]
        + [{"run_id": g.run_id, "status": SKIPPED, "reason": unstarted_reason} for g in unstarted],
    )
    return finish(sweep_dir)


def close_vanished(root: Path) -> list[Manifest]:
    """Close every unfinished sweep at ``root`` (a sweep directory or a folder of them)
    whose launcher process (its ``runner``, written by the command line) is gone: groups
    left without a verdict become ``cancelled`` (started) or ``skipped``, with
    :data:`LAUNCHER_VANISHED` as the reason. Returns the manifests closed."""
    sweep_dirs = (
        [root]
        if (root / MANIFEST).is_file()
        else sorted(path.parent for path in root.glob(f"*/{MANIFEST}"))
    )
    closed = []
    for sweep_dir in sweep_dirs:
        try:
            sweep = load(sweep_dir)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: ingest says so, with the reason
        runner = sweep.extra.get("runner")
        if sweep.finished_at is None and isinstance(runner, dict) and launcher_gone(runner):
            try:
                closed.append(
                    close(
                        sweep_dir,
                        started_reason=LAUNCHER_VANISHED,
                        unstarted_reason=LAUNCHER_VANISHED,
                        grace_s=15.0,
                    )
                )
            except OSError:
                continue  # not writable (a link in a file's place): left as it is, ingest says
    return closed


def as_closed_if_vanished(sweep: Manifest, sweep_dir: Path) -> Manifest:
    """``sweep`` as :func:`close_vanished` would leave it, without writing anything (for
    commands that only read): when its runner is gone, its groups without a verdict are
    ``cancelled`` (started) or ``skipped``, with :data:`LAUNCHER_VANISHED` as the reason."""
    runner = sweep.extra.get("runner")
    if sweep.finished_at is not None or not isinstance(runner, dict) or not launcher_gone(runner):
        return sweep
    settled = tuple(
        replace(
            group,
            status=CANCELLED if (sweep_dir / group.run_id).exists() else SKIPPED,
            reason=LAUNCHER_VANISHED,
        )
        if group.status == PLANNED
        else group
        for group in sweep.groups
    )
    return replace(sweep, groups=settled)
