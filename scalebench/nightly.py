"""The nightly regression run: what it runs, when, and whom it tells when something got slower.

Settings come from the environment (read when the DAG file is parsed; a bad
value is an import error that names the variable, shown in the Airflow UI):

- ``SCALEBENCH_NIGHTLY_SCHEDULE``: cron, UTC (default ``0 2 * * *``)
- ``SCALEBENCH_NIGHTLY_TASKS``: the suite (``task1a-resnet20-cifar10,task0-allreduce``)
- ``SCALEBENCH_NIGHTLY_WORKERS``: worker counts (``1,2``)
- ``SCALEBENCH_NIGHTLY_REPEATS``: runs per worker count (``3``)
- ``SCALEBENCH_NIGHTLY_FULL``: ``1`` runs the full tasks instead of the light ones (``0``)
- ``SCALEBENCH_NIGHTLY_LAUNCHER``: ``local`` or ``kubernetes`` (``local``)
- ``SCALEBENCH_NIGHTLY_BACKEND``: ``gloo`` or ``nccl`` (``gloo``)
- ``SCALEBENCH_NIGHTLY_PLACEMENT``: ``spread``, ``pack`` or ``auto`` (``auto``)

Whom a failure is told is :mod:`operators.notify`.

Regressions are judged by the rule :data:`results_db.regressions.RULE`
(Mann–Whitney U, ``p < 0.01`` and at least 5 % worse than the last 7
scheduled nights, unless changed there).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NightlySettings:
    schedule: str = "0 2 * * *"
    tasks: tuple[str, ...] = ("task1a-resnet20-cifar10", "task0-allreduce")
    workers: tuple[int, ...] = (1, 2)
    repeats: int = 3
    light: bool = True
    launcher: str = "local"
    backend: str = "gloo"
    placement: str = "auto"
    network: tuple[str, ...] = ("host",)  # link profiles (scalebench.network), each its own trend

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> NightlySettings:
        """Read the ``SCALEBENCH_NIGHTLY_*`` variables; a bad value raises, naming it.

        The full check of each task's request runs when the night starts
        (``validate``), like for a manual trigger.
        """
        from croniter import croniter

        from scalebench.launchers import LAUNCHERS
        from scalebench.network import BadProfile, parse_profiles
        from scalebench.request import PLACEMENTS, InvalidParameter, parse_world_sizes
        from scalebench.tasks import task_ids
        from scalebench.worker_request import BACKENDS

        default = cls()

        def read(name: str, fallback: str) -> str:
            return env.get(f"SCALEBENCH_NIGHTLY_{name}", fallback).strip()

        def bad(name: str, message: str) -> ValueError:
            return ValueError(f"SCALEBENCH_NIGHTLY_{name}: {message}")

        schedule = read("SCHEDULE", default.schedule)
        if not croniter.is_valid(schedule):
            raise bad("SCHEDULE", f"not a cron expression: {schedule!r}")
        tasks = tuple(t.strip() for t in read("TASKS", ",".join(default.tasks)).split(","))
        unknown = [t for t in tasks if t not in task_ids()]
        if unknown or not tasks:
            raise bad("TASKS", f"unknown task(s) {unknown}; known: {', '.join(task_ids())}")
        try:
            workers = parse_world_sizes(read("WORKERS", "1,2"))
        except InvalidParameter as exc:
            raise bad("WORKERS", str(exc)) from None
        repeats = read("REPEATS", str(default.repeats))
        if not repeats.isdigit() or int(repeats) < 1:
            raise bad("REPEATS", f"expected a whole number of at least 1, got {repeats!r}")
        full = read("FULL", "0").lower()
        if full not in ("0", "1", "true", "false"):
            raise bad("FULL", f"expected 0 or 1, got {full!r}")
        launcher = read("LAUNCHER", default.launcher)
        if launcher not in LAUNCHERS:
            raise bad("LAUNCHER", f"expected one of {', '.join(LAUNCHERS)}, got {launcher!r}")
        backend = read("BACKEND", default.backend)
        if backend not in BACKENDS:
            raise bad("BACKEND", f"expected one of {', '.join(BACKENDS)}, got {backend!r}")
        placement = read("PLACEMENT", default.placement)
        if placement not in PLACEMENTS:
            raise bad("PLACEMENT", f"expected one of {', '.join(PLACEMENTS)}, got {placement!r}")
        try:
            network = tuple(p.name for p in parse_profiles(read("NETWORK", "host")))
        except BadProfile as exc:
            raise bad("NETWORK", str(exc)) from None
        return cls(
            schedule=schedule,
            tasks=tasks,
            workers=workers,
            repeats=int(repeats),
            light=full in ("0", "false"),
            launcher=launcher,
            backend=backend,
            placement=placement,
            network=network,
        )

    def request(self) -> dict[str, Any]:
        """The fixed sweep request of every task in the suite (without ``task``)."""
        return {
            "workers": list(self.workers),
            "repeats": self.repeats,
            "light": self.light,
            "launcher": self.launcher,
            "backend": self.backend,
            "placement": self.placement,
            "network": list(self.network),
        }
