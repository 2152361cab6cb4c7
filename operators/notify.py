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
    """The nightly sweep is significantly slower than its baseline. ``messages``: one text
    per finding that is new tonight (each sent alone); empty where every series that moved
    belongs to a finding already sent."""

    def __init__(self, text: str, messages: list[str] | None = None) -> None:
        super().__init__(text)
        self.paired = messages is not None  # a paired night's: one message per new finding
        self.messages = messages or []


def check(sweep_id: str, url: str | None = None) -> list[str]:
    """Run the detector on ``sweep_id``; raise :class:`RegressionFlagged` naming what got worse.

    A paired night (tonight's stack beside the pinned reference) is judged over the whole
    history of each series (:func:`results_db.service.nightly.check_paired`); another night
    against the recent nights' runs (:func:`results_db.service.check_regressions`)."""
    from results_db.service import check_regressions, describe_finding
    from results_db.service.nightly import is_paired_sweep

    if is_paired_sweep(url, sweep_id):
        return check_paired_night(sweep_id, url)

    findings = check_regressions(url, sweep_id)
    flagged = [describe_finding(f) for f in findings if f.flagged]
    if flagged:
        raise RegressionFlagged(
            f"sweep {sweep_id}: {len(flagged)} regression(s) against the recent nightly "
            "baseline:\n" + "\n".join(flagged)
        )
    return [describe_finding(f) for f in findings]


def check_paired_night(sweep_id: str, url: str | None = None) -> list[str]:
    """Judge a paired night; raise :class:`RegressionFlagged` where a series moved, with one
    message per new finding (its link on the dashboard)."""
    from results_db.service.nightly import (
        check_paired,
        describe_finding_row,
        describe_judgement,
        finding_link,
    )

    checked = check_paired(url, sweep_id)
    lines = [describe_judgement(judged) for judged in checked.judgements]
    for line in lines:
        print(line)
    messages = [describe_finding_row(f, finding_link(f.id)) for f in checked.new]
    still = [describe_finding_row(f, finding_link(f.id)) for f in checked.updated]
    if messages or still:
        raise RegressionFlagged(
            f"sweep {sweep_id}: {len(checked.new)} new finding(s), {len(checked.updated)} "
            "finding(s) moving again:\n" + "\n".join(messages + still),
            messages,
        )
    return lines


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
    error = context.get("exception")
    texts = [text]
    if isinstance(error, RegressionFlagged) and error.paired:  # one per new finding, none for old
        texts = [f"scalebench: nightly {message}" for message in error.messages]
    for message in texts:
        _send(message)
    callback = os.environ.get("SCALEBENCH_NOTIFY_CALLBACK")
    if callback:
        try:
            module, _, name = callback.partition(":")
            getattr(importlib.import_module(module), name)(context)
        except Exception:
            log.exception("SCALEBENCH_NOTIFY_CALLBACK=%s failed", callback)


def _send(text: str) -> None:
    """Post ``text`` to ``SCALEBENCH_NOTIFY_WEBHOOK`` (where set); a failure is logged."""
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
