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
- ``SCALEBENCH_NOTIFY_WEBHOOK``: a URL that is POSTed ``{"text": ...}`` when a nightly
  task fails (Slack and Mattermost incoming webhooks take this as is)
- ``SCALEBENCH_NOTIFY_CALLBACK``: ``module:function`` called with the Airflow
  context on failure, for anything else (e-mail, paging)

Regressions are judged by the rule :data:`results_db.regressions.RULE`
(Mann–Whitney U, ``p < 0.01`` and at least 5 % worse than the last 7
scheduled nights, unless changed there).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


class RegressionFlagged(RuntimeError):
    """The nightly sweep is significantly slower than its baseline."""


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
    network: tuple[str, ...] = ("host",)  # link profiles (workers.network), each its own trend

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> NightlySettings:
        """Read the ``SCALEBENCH_NIGHTLY_*`` variables; a bad value raises, naming it.

        The full check of each task's request runs when the night starts
        (``validate``), like for a manual trigger.
        """
        from croniter import croniter

        from scalebench.sweep import LAUNCHERS, PLACEMENTS, InvalidParameter, parse_world_sizes
        from workers.distributed import BACKENDS
        from workers.network import BadProfile, parse_profiles
        from workers.tasks import task_ids

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


def check(sweep_id: str, url: str | None = None) -> list[str]:
    """Run the detector on ``sweep_id``; raise :class:`RegressionFlagged` naming what got worse."""
    from scalebench.database_commands import check_regressions, describe_finding

    findings = check_regressions(url, sweep_id)
    flagged = [describe_finding(f) for f in findings if f.flagged]
    if flagged:
        raise RegressionFlagged(
            f"sweep {sweep_id}: {len(flagged)} regression(s) against the recent nightly "
            "baseline:\n" + "\n".join(flagged)
        )
    return [describe_finding(f) for f in findings]


def failure_message(context: Mapping[str, Any]) -> str:
    """A short, self-contained text about a failed task of a scalebench DAG."""
    ti = context.get("ti") or context.get("task_instance")
    dag_id = getattr(ti, "dag_id", "?")
    task_id = getattr(ti, "task_id", "?")
    run_id = getattr(ti, "run_id", "?")
    error = context.get("exception")
    what = "flagged a regression" if isinstance(error, RegressionFlagged) else "failed"
    text = f"scalebench: {dag_id} {what} in task {task_id} (run {run_id})"
    if error is not None:
        text += f"\n{error}"
    url = getattr(ti, "log_url", None)
    if url:
        text += f"\nlog: {url}"
    return text


def notify_failure(context: Mapping[str, Any]) -> None:
    """Airflow ``on_failure_callback``: log the failure, post it to the webhook, call the hook.

    A notifier that fails is logged and never hides the task's own failure.
    """
    text = failure_message(context)
    log.error("%s", text)
    webhook = os.environ.get("SCALEBENCH_NOTIFY_WEBHOOK")
    if webhook:
        body = json.dumps({"text": text}).encode()
        request = urllib.request.Request(
            webhook, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                reply.read()
        except OSError as exc:
            log.error("SCALEBENCH_NOTIFY_WEBHOOK: posting failed: %s", exc)
    callback = os.environ.get("SCALEBENCH_NOTIFY_CALLBACK")
    if callback:
        try:
            module, _, name = callback.partition(":")
            getattr(importlib.import_module(module), name)(context)
        except Exception:
            log.exception("SCALEBENCH_NOTIFY_CALLBACK=%s failed", callback)
