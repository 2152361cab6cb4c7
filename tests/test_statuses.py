"""Statuses are declared once (``scalebench/statuses.py``): what can have each, and how the
dashboard shows it; the manifest, the store and the dashboard read that declaration, and
name each status from it rather than spell it."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from typing import NamedTuple

from dash_app.components import badge
from results_db.ingest import _sweep_outcome
from scalebench import statuses
from scalebench.manifest import contents, files, recording
from scalebench.statuses import (
    BY_NAME,
    CLUSTER_VERDICTS,
    COLOURS,
    GROUP_STATUSES,
    NOT_STARTED,
    RANK_FAILURES,
    RUN_STATUSES,
    STATUSES,
    STOPPED,
    SWEEP_OUTCOMES,
    UNFINISHED,
    colour,
)

ROOT = Path(__file__).resolve().parents[1]
# The product's folders (``tests`` and ``benchmarks`` are not product), and where in them
# the statuses are spelled.
PRODUCT = ("scalebench", "workers", "operators", "results_db", "dash_app", "cli", "dags")
DECLARATION = "scalebench/statuses.py"

# Literals spelled like a status that are something else: (file, a piece of their line) →
# what they are. Rank events share three spellings with statuses.
NOT_STATUSES: dict[tuple[str, str], str] = {
    ("workers/records/schema.py", "EVENTS = ("): "the rank events, and those that end a rank",
    ("workers/records/schema.py", '{"reason": (str,), **_FINAL_FIELDS}'): "an event's fields",
    ("workers/run.py", "tracker.fail("): "the event that ends a rank's records",
    ("results_db/run_summary.py", 'e["event"] == '): "the ranks' events, read back",
    ("dash_app/pages/run/figures.py", "EVENT_COLOURS = "): "the colour of a rank's event",
    ("workers/gpu_check/probe.py", 'compile_mode, status="failed"'): "the GPU probe's result",
    ("workers/gpu_check/probe.py", "result.status.startswith("): "the GPU probe's result",
    ("operators/night_gate.py", "ENDED_TASK_STATES = "): "the Airflow task states that end",
    ("operators/night_gate.py", '== "running"'): "an Airflow task's or run's state",
    ("operators/notify.py", 'what = "flagged a regression"'): "a notification's verb",
    ("operators/kubernetes/pod_status.py", 'get_field(job, "status", "succeeded")'): (
        "a Kubernetes Job's count of pods that succeeded"
    ),
    ("dash_app/reasons.py", '("failed", "failed")'): "a status's verbs",
    ("dash_app/reasons.py", '("diverged", "diverged")'): "a status's verbs",
    ("dash_app/reasons.py", '("succeeded", "succeeded")'): "a status's verbs",
}


class Spelled(NamedTuple):
    """A string literal in a product file that spells a status."""

    file: str  # relative to the checkout
    line: int
    text: str  # the line's source

    def allowed_by(self) -> tuple[str, str] | None:
        """The entry of :data:`NOT_STATUSES` that says it is no status (``None``: none)."""
        return next(
            (key for key in NOT_STATUSES if key[0] == self.file and key[1] in self.text), None
        )


def spelled_statuses() -> list[Spelled]:
    """Every string literal equal to a status in the product, but in its declaration."""
    found = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            file = path.relative_to(ROOT).as_posix()
            if file == DECLARATION:
                continue
            source = path.read_text(encoding="utf-8")
            lines = source.splitlines()
            for node in ast.walk(ast.parse(source, filename=file)):
                spelled = isinstance(node, ast.Constant) and isinstance(node.value, str)
                if spelled and node.value in BY_NAME:
                    found.append(Spelled(file, node.lineno, lines[node.lineno - 1].strip()))
    return found


def test_each_status_is_declared_once_with_a_meaning_and_a_colour() -> None:
    names = [s.name for s in STATUSES]
    assert len(names) == len(set(names))
    for status in STATUSES:
        assert status.meaning and status.colour in COLOURS, status
        assert status.of and set(status.of) <= {"group", "run", "sweep"}, status
    # a group's verdict is stored as its run's status; what was never started is a group
    assert set(GROUP_STATUSES) <= set(RUN_STATUSES)
    assert set(NOT_STARTED) == {"planned", "skipped"} and set(NOT_STARTED) <= set(GROUP_STATUSES)


def test_each_status_is_named_and_each_group_holds_statuses() -> None:
    """A constant for each status in the table, none without one."""
    named = {
        value for name, value in vars(statuses).items() if name.isupper() and isinstance(value, str)
    }
    assert named == set(BY_NAME)
    for group in (NOT_STARTED, UNFINISHED, STOPPED, RANK_FAILURES, CLUSTER_VERDICTS):
        assert group and set(group) <= set(RUN_STATUSES), group


def test_no_product_file_spells_a_status() -> None:
    """The product names a status (``statuses.FAILED``), so that a status renamed or added
    is one change in :mod:`scalebench.statuses`; the literals of :data:`NOT_STATUSES` are
    something else spelled alike."""
    spelled = [s for s in spelled_statuses() if s.allowed_by() is None]
    assert not spelled, "statuses spelled out; name them from scalebench.statuses:\n" + "\n".join(
        f"{s.file}:{s.line}: {s.text}" for s in spelled
    )


def test_every_literal_allowed_is_still_there() -> None:
    """An entry of :data:`NOT_STATUSES` that matches nothing any more leaves the list."""
    used = {s.allowed_by() for s in spelled_statuses()}
    assert set(NOT_STATUSES) <= used, f"to take off NOT_STATUSES: {set(NOT_STATUSES) - used}"


def test_every_sweep_outcome_ingest_can_reach_is_declared() -> None:
    seen = set()
    for size in (0, 1, 2):
        for runs in itertools.product(RUN_STATUSES, repeat=size):
            for finished in (False, True):
                seen.add(_sweep_outcome(list(runs), finished=finished))
    assert seen == set(SWEEP_OUTCOMES)


def test_a_sweep_is_running_until_its_record_is_closed() -> None:
    """Every group decided is not enough: a sweep reads as ended only with its finishing
    time, and never while a group is planned or running."""
    for size in (1, 2):
        for runs in itertools.product(RUN_STATUSES, repeat=size):
            assert _sweep_outcome(list(runs), finished=False) == "running"
            if {"planned", "running"} & set(runs):
                assert _sweep_outcome(list(runs), finished=True) == "running"


def test_the_manifest_reads_the_declared_group_statuses() -> None:
    for module in (contents, files, recording):
        assert module.GROUP_STATUSES is GROUP_STATUSES, module.__name__


def test_the_dashboard_badge_takes_each_declared_colour() -> None:
    for status in STATUSES:
        assert badge(status.name).color == status.colour == colour(status.name)
    assert colour("something else") == "secondary"
