"""Where the suite's processor time goes: ``SCALEBENCH_TEST_CPU=1 ./scripts/test.sh``.

The suite is bound by processor time on two cores (its cores stay busy to the end), so a test's
wall-clock duration under pytest-xdist says little about its cost: a test that waits while the
others compute looks long and costs nothing. With ``SCALEBENCH_TEST_CPU_DIR`` set to a folder,
every pytest process appends one JSON line per test to a file of its own there: the processor
seconds of the pytest process itself during the test (``own_cpu_s``), those of the processes
it started and that ended during the test (``children_cpu_s``: training ranks, the command
line, Airflow; the kernel adds a child's seconds to its parent once it has been waited for),
and the wall-clock seconds (``wall_s``). Setup and teardown are counted with the test that ran
them. Servers the suite did not start (PostgreSQL, Docker) are counted by no test.

``python tests/processor_time.py DIR [--machine-s S]`` prints the tests and the files that
cost the most, and, given the machine's processor seconds over the runs, the share no test
accounts for.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

FOLDER = "SCALEBENCH_TEST_CPU_DIR"


def _processor_s() -> tuple[float, float]:
    """(this process's, its waited-for children's) user + system processor seconds."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    folder = os.environ.get(FOLDER)
    if not folder:
        yield
        return
    own_before, children_before = _processor_s()
    began = time.monotonic()
    yield
    own_after, children_after = _processor_s()
    line = {
        "test": item.nodeid,
        "own_cpu_s": round(own_after - own_before, 3),
        "children_cpu_s": round(children_after - children_before, 3),
        "wall_s": round(time.monotonic() - began, 3),
    }
    with (Path(folder) / f"{os.getpid()}.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


@dataclass(frozen=True)
class Cost:
    """One test's, or one file's, processor and wall-clock seconds."""

    name: str
    cpu_s: float
    own_cpu_s: float
    wall_s: float
    tests: int = 1


def read_records(folder: Path) -> list[dict[str, Any]]:
    """Every record the pytest processes wrote into ``folder`` (a torn last line skipped)."""
    records = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def by_test(records: Iterable[dict[str, Any]]) -> list[Cost]:
    """One cost a test, the costliest first (a test run in both runs counted once per run)."""
    costs = [
        Cost(r["test"], r["own_cpu_s"] + r["children_cpu_s"], r["own_cpu_s"], r["wall_s"])
        for r in records
    ]
    return sorted(costs, key=lambda c: (-c.cpu_s, c.name))


def by_file(tests: Iterable[Cost]) -> list[Cost]:
    """The tests' costs summed by the file that holds them, the costliest first."""
    files: dict[str, list[Cost]] = defaultdict(list)
    for cost in tests:
        files[cost.name.split("::", 1)[0]].append(cost)
    summed = [
        Cost(
            file,
            sum(c.cpu_s for c in costs),
            sum(c.own_cpu_s for c in costs),
            sum(c.wall_s for c in costs),
            len(costs),
        )
        for file, costs in files.items()
    ]
    return sorted(summed, key=lambda c: (-c.cpu_s, c.name))


def report(records: list[dict[str, Any]], machine_s: float | None, top: int = 20) -> str:
    """The costliest tests and files, and what share of ``machine_s`` (the machine's processor
    seconds over the runs, when known) the tests account for."""
    tests = by_test(records)
    total_s = sum(c.cpu_s for c in tests)
    lines = [f"processor time of {len(tests)} tests: {total_s:,.0f} s"]
    if machine_s:
        lines[0] += (
            f" of the machine's {machine_s:,.0f} s ({total_s / machine_s:.0%}; the rest is what"
            " no test runs: collection, servers, processes still running after their test)"
        )
    for title, costs in (("tests", tests[:top]), ("files", by_file(tests)[:top])):
        lines += ["", f"the {len(costs)} costliest {title}: processor s (in pytest), wall s"]
        for cost in costs:
            share = f"{cost.cpu_s / total_s:5.1%}" if total_s else "  -  "
            count = f" ({cost.tests} tests)" if title == "files" else ""
            lines.append(
                f"{cost.cpu_s:8.1f} {share} ({cost.own_cpu_s:6.1f}) {cost.wall_s:7.1f}  "
                f"{cost.name}{count}"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description="where the suite's processor time went")
    parser.add_argument("folder", type=Path, help=f"the folder {FOLDER} named")
    parser.add_argument("--machine-s", type=float, help="the machine's processor seconds")
    parser.add_argument("--top", type=int, default=20, help="how many tests and files")
    args = parser.parse_args()
    records = read_records(args.folder)
    if not records:
        print(f"no test recorded its processor time in {args.folder}")
        return 1
    print(report(records, args.machine_s, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
