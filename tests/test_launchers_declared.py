"""Every launcher is declared once, with what it can do and the entry that makes it."""

from __future__ import annotations

import inspect

import pytest

from operators.launcher import entry
from scalebench.launchers import LAUNCHERS


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_every_declared_launcher_names_an_entry_that_makes_it(name: str) -> None:
    make = entry(name)
    assert callable(make)
    assert list(inspect.signature(make).parameters) == ["group", "names", "sink"]
