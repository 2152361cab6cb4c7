"""Telling people that a nightly task failed, or that a nightly got slower.

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
from typing import Any

from scalebench.config import location_problem, shown_location

log = logging.getLogger(__name__)


class RegressionFlagged(RuntimeError):
    """The nightly sweep is significantly slower than its baseline."""


def check(sweep_id: str, url: str | None = None) -> list[str]:
    """Run the detector on ``sweep_id``; raise :class:`RegressionFlagged` naming what got worse."""
    from results_db.service import check_regressions, describe_finding

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
    problem = location_problem(webhook) if webhook else None
    if problem is not None:
        log.error(
            "SCALEBENCH_NOTIFY_WEBHOOK=%s %s: not posted; set it without",
            shown_location(webhook),
            problem,
        )
    elif webhook:
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
