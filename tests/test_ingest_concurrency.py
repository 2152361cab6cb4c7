"""Several ``scalebench ingest`` of one sweep at the same time end as one would.

Real processes against real databases: a fresh PostgreSQL database (every process
migrates it first), a migrated one, and the same two on SQLite. Each time the database
must hold exactly what a single ingest of the sweep leaves, and every process exits 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import POSTGRES_URL
from records_factory import FakeRun, write_training_sweep
from sqlalchemy import create_engine, select

from results_db.database import upgrade
from results_db.models import Base

pytestmark = pytest.mark.slow

PROCESSES = 4


def sweep(tmp_path: Path) -> Path:
    """A light Task 1a sweep of six finished runs (three repeats at 1 and 2 workers)."""
    runs = [FakeRun(world_size, repeat=r, epochs=4) for world_size in (1, 2) for r in range(3)]
    return write_training_sweep(tmp_path / "results", "sweep-concurrent", runs)


def ingest_at_once(url: str, sweep_dir: Path, count: int) -> list[tuple[int, str]]:
    """``count`` ``scalebench ingest`` processes of ``sweep_dir`` into ``url``, started
    together; returns each one's exit status and output."""
    command = [sys.executable, "-m", "cli.main", "ingest", str(sweep_dir), "--database", url]
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    started = [
        subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(count)
    ]
    return [(p.wait(timeout=300), p.communicate()[0]) for p in started]


def contents(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every results table's rows, sorted, without when they were loaded (``ingested_at``)
    and without the events' serial numbers, keyed by table."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            tables = {}
            for table in Base.metadata.sorted_tables:
                columns = [
                    column
                    for column in table.columns
                    if column.name != "ingested_at"
                    and not (table.name == "run_event" and column.name == "id")
                ]
                rows = conn.execute(select(*columns)).all()
                tables[table.name] = sorted((tuple(row) for row in rows), key=repr)
            return tables
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def two_databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two empty databases of one engine: one for the concurrent ingests, one for a single."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'concurrent.db'}", f"sqlite:///{tmp_path / 'single.db'}"
        return
    from results_db.scratch import scratch_database

    request.getfixturevalue("postgres_admin")
    with (
        scratch_database(POSTGRES_URL, "scalebench_test", migrate=False) as concurrent,
        scratch_database(POSTGRES_URL, "scalebench_test", migrate=False) as single,
    ):
        yield concurrent, single


@pytest.mark.parametrize("schema", ["fresh", "migrated"])
def test_concurrent_ingests_of_one_sweep_equal_one_ingest(
    two_databases: tuple[str, str], schema: str, tmp_path: Path
) -> None:
    concurrent, single = two_databases
    sweep_dir = sweep(tmp_path)
    if schema == "migrated":
        upgrade(concurrent)
    [(status, output)] = ingest_at_once(single, sweep_dir, 1)
    assert status == 0, output

    results = ingest_at_once(concurrent, sweep_dir, PROCESSES)

    for status, output in results:
        assert status == 0, output
        assert "refused" not in output, output
    expected = contents(single)
    assert len(expected["run"]) == 6
    assert {row[0]: row for row in expected["sweep"]}["sweep-concurrent"]
    assert contents(concurrent) == expected


def test_a_waiting_ingest_says_what_it_waits_for(postgres_admin, tmp_path: Path) -> None:
    """While one ingest holds a sweep, another of it says it waits, then loads it."""
    import threading

    from results_db.database import make_engine
    from results_db.ingest import ingest_location, sweep_lock
    from results_db.scratch import scratch_database

    sweep_dir = sweep(tmp_path)
    with scratch_database(POSTGRES_URL, "scalebench_test") as url:
        engine = make_engine(url)
        lines: list[str] = []
        try:
            with sweep_lock(engine, "sweep-concurrent", print):
                waiting = threading.Thread(
                    target=ingest_location, args=(engine, str(sweep_dir), lines.append)
                )
                waiting.start()
                waiting.join(timeout=3)
                assert waiting.is_alive(), "the second ingest did not wait for the first"
                assert lines == ["sweep sweep-concurrent: waiting for another ingest of it to end"]
            waiting.join(timeout=60)
            assert not waiting.is_alive()
            assert any(
                "6 run" in line or "sweep-concurrent-w2-r3: succeeded" in line for line in lines
            ), lines
        finally:
            engine.dispose()
