"""The Airflow operator that runs one training group (one worker count, one repeat).

It starts the group with the launcher the sweep chose, waits for it, records
the verdict in the sweep's manifest and returns it. A failed, diverged or
timed-out group does not fail the task: the verdict is data, and the ingest
that follows keeps what the group measured.

Cancelling (marking the task or its DAG run failed in the UI, or any other
SIGTERM to the task) makes Airflow call :meth:`TrainingGroupOperator.on_kill`:
every rank is stopped, the group is recorded as ``cancelled`` and the task
fails. Groups of the same sweep that have not started yet are then skipped.

Launchers, behind the same ``start``/``wait``/``stop`` interface:

- ``local``: ranks as processes on the Airflow worker running the task
  (:class:`operators.local_launcher.LocalGroup`);
- ``kubernetes``: an Indexed Job with one pod per rank plus a headless
  Service (:class:`operators.kubernetes_launcher.KubernetesGroup`).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Protocol

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from operators.local_launcher import GroupResult, LocalGroup
from scalebench.sweep import write_manifest
from workers.records import SWEEP_MANIFEST

CANCELLED_REASON = "the Airflow task was stopped"


class Launcher(Protocol):
    def start(self) -> None: ...
    def wait(self, timeout_s: float) -> GroupResult: ...
    def stop(self) -> None: ...


class TrainingGroupOperator(BaseOperator):
    """Run the group described by ``group`` (an entry planned by the sweep).

    ``group`` holds ``run_id``, ``world_size``, ``repeat``, ``worker_args``
    (the ``python -m workers.run`` arguments), ``timeout_s`` (seconds),
    ``sweep_dir``, ``launcher``, ``gpus_per_worker`` and ``worker_image``.
    """

    template_fields = ("group",)
    ui_color = "#d7ecd9"

    def __init__(self, *, group: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.group = group
        self._running: Launcher | None = None
        self._cancelled = threading.Event()

    def execute(self, context: Any) -> dict[str, Any]:
        group = self.group
        sweep_dir = Path(group["sweep_dir"])
        if sweep_cancelled(sweep_dir):
            record_verdict(sweep_dir, group["run_id"],
                           {"status": "cancelled", "reason": "the sweep was cancelled before "
                            "this group started"})  # fmt: skip
            raise AirflowSkipException("the sweep was cancelled; this group does not start")
        self.log.info(
            "%s: %d worker(s), repeat %d, %s launcher",
            group["run_id"], group["world_size"], group["repeat"] + 1,
            group.get("launcher", "local"),
        )  # fmt: skip
        self._running = self.launcher_for(group, context)
        self._running.start()
        result = self._running.wait(group["timeout_s"])
        self._running = None
        if self._cancelled.is_set():
            verdict = {"status": "cancelled", "reason": CANCELLED_REASON,
                       "seconds": result.seconds}  # fmt: skip
        else:
            verdict = {"status": result.status, "reason": result.reason,
                       "seconds": result.seconds}  # fmt: skip
        record_verdict(sweep_dir, group["run_id"], verdict)
        log = self.log.info if result.status == "succeeded" else self.log.error
        log("%s: %s %s", group["run_id"], verdict["status"], verdict["reason"])
        if self._cancelled.is_set():
            raise AirflowException(f"{group['run_id']}: cancelled; what it measured is kept")
        return {**group, **verdict}

    def launcher_for(self, group: dict[str, Any], context: Any) -> Launcher:
        launcher = group.get("launcher", "local")
        if launcher == "local":
            return LocalGroup(group["worker_args"], group["world_size"], sink=self.log.info)
        if launcher == "kubernetes":
            from operators.kubernetes_launcher import (
                KubernetesGroup,
                KubernetesSettings,
                group_names,
            )

            ti = context["ti"]
            names = group_names(ti.dag_id, ti.run_id, ti.map_index, ti.try_number,
                                group["world_size"])  # fmt: skip
            return KubernetesGroup(
                group["worker_args"],  # rewritten for the pods' volumes by the launcher
                group["world_size"],
                names=names,
                settings=KubernetesSettings.from_env(),
                gpus_per_worker=group.get("gpus_per_worker", 1),
                image=group.get("worker_image") or None,
                sink=self.log.info,
                timeout_s=group["timeout_s"],
            )
        raise ValueError(f"unknown launcher {launcher!r}")

    def on_kill(self) -> None:
        """Called by Airflow (on SIGTERM) while :meth:`execute` waits: stop every rank."""
        self._cancelled.set()
        running = self._running
        if running is not None:
            running.stop()
            record_verdict(
                Path(self.group["sweep_dir"]),
                self.group["run_id"],
                {"status": "cancelled", "reason": CANCELLED_REASON},
            )


def sweep_cancelled(sweep_dir: Path) -> bool:
    """Whether a group of the sweep at ``sweep_dir`` was cancelled."""
    manifest = json.loads((sweep_dir / SWEEP_MANIFEST).read_text(encoding="utf-8"))
    return any(entry.get("status") == "cancelled" for entry in manifest["groups"])


def record_verdict(sweep_dir: Path, run_id: str, verdict: dict[str, Any]) -> None:
    """Write a group's verdict into the sweep manifest (groups run one at a time)."""
    path = sweep_dir / SWEEP_MANIFEST
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for entry in manifest["groups"]:
        if entry["run_id"] == run_id:
            entry.update(verdict)
    write_manifest(path, manifest)
