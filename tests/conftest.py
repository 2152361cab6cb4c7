"""Shared fixtures: paths and helpers for running real worker groups."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _run_from_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers are started as ``python -m workers.run``: run from the repository root."""
    monkeypatch.chdir(REPO)


@pytest.fixture
def light_env() -> dict[str, str]:
    """Environment for worker processes: one thread each, so two ranks fit two cores."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}
