"""Statuses are declared once (``scalebench/statuses.py``): what can have each, and how the
dashboard shows it; the manifest, the store and the dashboard read that declaration."""

from __future__ import annotations

import itertools

from dash_app.components import badge
from results_db.ingest import _sweep_outcome
from scalebench.manifest import contents, files, recording
from scalebench.statuses import (
    COLOURS,
    GROUP_STATUSES,
    NOT_STARTED,
    RUN_STATUSES,
    STATUSES,
    SWEEP_OUTCOMES,
    colour,
)


def test_each_status_is_declared_once_with_a_meaning_and_a_colour() -> None:
    names = [s.name for s in STATUSES]
    assert len(names) == len(set(names))
    for status in STATUSES:
        assert status.meaning and status.colour in COLOURS, status
        assert status.of and set(status.of) <= {"group", "run", "sweep"}, status
    # a group's verdict is stored as its run's status; what was never started is a group
    assert set(GROUP_STATUSES) <= set(RUN_STATUSES)
    assert set(NOT_STARTED) == {"planned", "skipped"} and set(NOT_STARTED) <= set(GROUP_STATUSES)


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
