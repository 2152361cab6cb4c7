"""Recording what became of a sweep's groups: one line appended to ``verdicts.jsonl`` each.

A group's verdict (:func:`record_verdict`), the start of an attempt that runs it
(:func:`start_attempt`), an earlier attempt's verdict kept beside it
(:func:`record_attempt`), and the verdicts of a sweep that was stopped (:func:`cancel`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from scalebench.manifest.files import append_verdicts, load
from scalebench.manifest.processes import this_process
from scalebench.statuses import CANCELLED, GROUP_STATUSES, PLANNED, SKIPPED


def start_attempt(sweep_dir: Path, run_id: str, attempt: str) -> None:
    """Say that attempt ``attempt`` (e.g. ``try 2`` of an Airflow task) runs group ``run_id``
    from this process: the group is ``planned`` (running) again whatever an earlier attempt
    decided, only verdicts signed ``attempt`` decide it from now on, and
    :func:`~scalebench.manifest.closing.close` waits for this process before it settles the
    group."""
    owner = {**this_process(), "attempt": attempt}
    append_verdicts(sweep_dir, [{"run_id": run_id, "status": PLANNED, "owner": owner}])


def record_verdict(
    sweep_dir: Path,
    run_id: str,
    status: str,
    reason: str = "",
    seconds: float | None = None,
    *,
    qos_class: str = "",
    image_digest: str = "",
    attempt: str | None = None,
) -> None:
    """Append one group's verdict: one line, whatever the size of the sweep
    (``qos_class``: its pods' Kubernetes QoS class, when known; ``image_digest``: the image
    they ran, as the kubelet resolved it, ``repo@sha256:…``; ``attempt``: the attempt
    deciding it, as :func:`start_attempt` named it; a superseded attempt's verdict is
    kept in the file but decides nothing)."""
    verdict = {"run_id": run_id, "status": status, "reason": reason, "seconds": seconds}
    if qos_class:
        verdict["qos_class"] = qos_class
    if image_digest:
        verdict["image_digest"] = image_digest
    if attempt is not None:
        verdict["by"] = attempt
    append_verdicts(sweep_dir, [verdict])


def record_attempt(
    sweep_dir: Path,
    run_id: str,
    *,
    attempt: int,
    status: str,
    reason: str,
    seconds: float,
    job: str,
) -> None:
    """Append the verdict of attempt ``attempt`` of a group that is run again (a preempted
    one): it does not decide the group's status, and stays in its ``attempts``."""
    if status not in GROUP_STATUSES:
        raise ValueError(f"unknown group status {status!r}")
    record = {"attempt": attempt, "status": status, "reason": reason, "seconds": seconds}
    append_verdicts(
        sweep_dir, [{"run_id": run_id, "status": PLANNED, "attempt": {**record, "job": job}}]
    )


def cancel(sweep_dir: Path, running: str | Sequence[str] | None, reason: str) -> None:
    """The sweep was stopped: ``running`` (a run id, the ids of a duet's arms, or none) is
    ``cancelled``, the unstarted ``skipped``."""
    planned = [g.run_id for g in load(sweep_dir).planned]
    stopped = [running] if isinstance(running, str) else list(running or ())
    verdicts = [{"run_id": run_id, "status": CANCELLED, "reason": reason} for run_id in stopped]
    verdicts += [
        {"run_id": run_id, "status": SKIPPED, "reason": reason}
        for run_id in planned
        if run_id not in stopped
    ]
    append_verdicts(sweep_dir, verdicts)
