"""The Airflow operator that runs one training group (one worker count, one repeat).

It starts the group with a launcher, waits for it, records the verdict in the
sweep's manifest and returns it. A failed, diverged or timed-out group does
not fail the task: the verdict is data, and the ingest that follows keeps
what the group measured. Killing the task (a cancelled run in the UI) stops
every rank and records the group as cancelled.

Launchers: ``local`` (ranks as processes on the worker running the task).
The Kubernetes launcher (an Indexed Job per group) plugs in behind the same
``start``/``wait``/``stop`` interface.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from operators.local_launcher import LocalGroup
from scalebench.sweep import write_manifest
from workers.records import SWEEP_MANIFEST

LAUNCHERS = ("local",)


class TrainingGroupOperator(BaseOperator):
    """Run the group described by ``group`` (an entry planned by the sweep).

    ``group`` holds ``run_id``, ``world_size``, ``repeat``, ``worker_args``
    (the ``python -m workers.run`` arguments), ``timeout_s`` and ``sweep_dir``.
    """

    template_fields = ("group",)

    def __init__(self, *, group: dict[str, Any], launcher: str = "local", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if launcher not in LAUNCHERS:
            raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
        self.group = group
        self.launcher = launcher
        self._running: LocalGroup | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        group = self.group
        self.log.info("%s: %d worker(s), repeat %d", group["run_id"], group["world_size"],
                      group["repeat"] + 1)  # fmt: skip
        self._running = LocalGroup(group["worker_args"], group["world_size"], sink=self.log.info)
        self._running.start()
        result = self._running.wait(group["timeout_s"])
        self._running = None
        verdict = {"status": result.status, "reason": result.reason, "seconds": result.seconds}
        record_verdict(Path(group["sweep_dir"]), group["run_id"], verdict)
        self.log.info("%s: %s %s", group["run_id"], result.status, result.reason)
        return {**group, **verdict}

    def on_kill(self) -> None:
        if self._running is not None:
            self._running.stop()
            record_verdict(
                Path(self.group["sweep_dir"]),
                self.group["run_id"],
                {"status": "cancelled", "reason": "the Airflow task was stopped"},
            )


def record_verdict(sweep_dir: Path, run_id: str, verdict: dict[str, Any]) -> None:
    """Write a group's verdict into the sweep manifest (groups run one at a time)."""
    path = sweep_dir / SWEEP_MANIFEST
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for entry in manifest["groups"]:
        if entry["run_id"] == run_id:
            entry.update(verdict)
    write_manifest(path, manifest)
