"""Every launcher is declared once with what it can do, and implemented once, by the same name."""

from __future__ import annotations

from operators.launcher import IMPLEMENTATIONS
from scalebench.launchers import LAUNCHERS


def test_every_declared_launcher_has_an_implementation_and_no_other() -> None:
    assert set(IMPLEMENTATIONS) == set(LAUNCHERS)
