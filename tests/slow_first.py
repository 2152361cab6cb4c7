"""One pytest-xdist run for the quick tests and the slow ones: ``pytest -n 3 --slow-first``.

The slow tests (marked ``slow``: each trains or starts a group, seconds to a minute) are
handed out one at a time and first, while the processes are fresh; the quick ones follow,
a file at a time (a file's tests stay on one process, so they never race each other for
the host's network namespaces or firewall rules, and a module's fixtures are set up once),
the files with the most tests first. The many short files at the end even out the
processes, so none waits long for the others at the finish.

xdist's controller never collects, and every worker collects the same tests (xdist checks):
the first worker writes the node ids of the slow ones to a file named by ``SLOW_FIRST_PLAN``
(the controller sets it before starting them), which the controller's scheduler reads once
every worker has collected.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

PLAN = "SLOW_FIRST_PLAN"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow-first",
        action="store_true",
        help="with -n: the slow tests one at a time and first, then the others file by file",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("slow_first") and not hasattr(config, "workerinput"):
        folder = tempfile.mkdtemp(prefix="scalebench-slow-first-")
        os.environ[PLAN] = str(Path(folder) / "slow.json")  # the workers inherit it


@pytest.hookimpl(trylast=True)  # after -m has deselected what this run leaves out
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("slow_first") or not hasattr(config, "workerinput"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    quick = [item for item in items if not item.get_closest_marker("slow")]
    per_file = Counter(item.nodeid.split("::", 1)[0] for item in quick)
    # Python's sort is stable: a file's tests keep their order; the biggest files go first.
    quick.sort(key=lambda item: -per_file[item.nodeid.split("::", 1)[0]])
    items[:] = slow + quick
    if config.workerinput["workerid"] == "gw0":
        Path(os.environ[PLAN]).write_text(json.dumps([item.nodeid for item in slow]))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if not config.getoption("slow_first"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SlowFirst(LoadScopeScheduling):
        """Scopes: a slow test alone, a quick test's file. They are queued in the order the
        workers collected them in (slow first, then the biggest files)."""

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            config.option.loadscopereorder = False
            self._slow: frozenset[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._slow is None:  # first asked once every worker has collected
                self._slow = frozenset(json.loads(Path(os.environ[PLAN]).read_text()))
            return nodeid if nodeid in self._slow else nodeid.split("::", 1)[0]

    return SlowFirst(config, log)
