"""A results database for the dashboard tests: real recorded sweeps plus chosen numbers.

- ``tests/data/sweep-light`` and ``tests/data/sweep-allreduce``: real light sweeps
  (Task 1a at 1 and 2 workers, Task 0 at 2 workers), recorded on a 2-core machine;
- ``known-scaling``: Task 1a at 1, 2 and 4 workers, three repeats each, with times to
  accuracy chosen so that MLPerf's rule and the speedups are easy to check by hand
  (:data:`KNOWN_TTA`, :data:`KNOWN_SPEEDUP`);
- ``node-scaling``: Task 1a at 1, 2, 4 and 8 workers on nodes of 4 ranks, whose speedup
  stops past one node (:data:`NODE_TTA`);
- ``bad-runs``: one failed, one diverged run;
- ``nightly-01`` … ``nightly-08``: scheduled sweeps at 2 workers, the last one about
  10 % slower in every repeat, judged and flagged by the real regression detector.

Everything goes through the real ingest (``results_db.ingest.ingest_location``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from records_factory import FakeRun, write_training_sweep
from sqlalchemy import Engine

from results_db import regressions
from results_db.database import make_engine, upgrade
from results_db.ingest import ingest_location
from results_db.scratch import scratch_database

DATA = Path(__file__).with_name("data")
LIGHT = "task1a-resnet20-cifar10-20261122T021829Z-37f8"
ALLREDUCE = "task0-allreduce-20261122T021847Z-80d9"
KNOWN = "known-scaling"
BAD = "bad-runs"
NODES = "node-scaling"
# one repeat per worker count on nodes of 4 ranks: scaling inside the node, not across it
NODE_TTA = {1: 100.0, 2: 52.0, 4: 27.0, 8: 30.0}
LATEST_NIGHT = "nightly-08"
BASELINE_NIGHT = "nightly-07"

# per worker count: the three repeats' TTA in seconds; MLPerf keeps the middle one
KNOWN_TTA = {1: (100.0, 102.0, 98.0), 2: (55.0, 50.0, 60.0), 4: (30.0, 40.0, 31.0)}
KNOWN_MEAN = {1: 100.0, 2: 55.0, 4: 31.0}
KNOWN_SPEEDUP = {1: 1.0, 2: 100.0 / 55.0, 4: 100.0 / 31.0}
# the real light sweep: two workers share a 2-core machine, so they are slower than one
LIGHT_TTA = {1: 1.8260793619999731, 2: 2.823128280999981}
LIGHT_SPEEDUP = LIGHT_TTA[1] / LIGHT_TTA[2]  # 0.6468
NIGHTS = [
    [100.0, 101.5, 99.0],
    [98.5, 100.5, 102.0],
    [101.0, 99.5, 100.0],
    [100.2, 98.8, 101.2],
    [99.7, 100.9, 100.1],
    [101.8, 99.2, 100.4],
    [100.6, 99.9, 98.9],
    [109.0, 111.0, 110.5],
]


def write_all(root: Path) -> Path:
    """Write every sweep's records under ``root``; returns ``root``."""
    for name, created in (
        ("sweep-light", "2026-11-22T02:18:29+00:00"),
        ("sweep-allreduce", "2026-11-22T02:18:47+00:00"),
    ):
        shutil.copytree(DATA / name, root / name)
        manifest = json.loads((root / name / "sweep.json").read_text(encoding="utf-8"))
        manifest.setdefault("created_at", created)  # a fixed order, whatever the clock says
        (root / name / "sweep.json").write_text(json.dumps(manifest), encoding="utf-8")
    runs = [
        FakeRun(size, repeat=i, time_to_accuracy_s=tta)
        for size, ttas in KNOWN_TTA.items()
        for i, tta in enumerate(ttas)
    ]
    write_training_sweep(root, KNOWN, runs, created_at="2026-11-23T10:00:00+00:00")
    write_training_sweep(
        root,
        NODES,
        [FakeRun(size, time_to_accuracy_s=tta) for size, tta in NODE_TTA.items()],
        created_at="2026-11-19T10:00:00+00:00",
        ranks_per_node=4,
    )
    bad = [
        FakeRun(1, time_to_accuracy_s=None, end="failed", launcher_status="failed"),
        FakeRun(2, time_to_accuracy_s=None, end="diverged", launcher_status="diverged"),
    ]
    write_training_sweep(root, BAD, bad, created_at="2026-11-20T10:00:00+00:00")
    for night, values in enumerate(NIGHTS, start=1):
        write_training_sweep(
            root,
            f"nightly-{night:02d}",
            [FakeRun(2, repeat=i, time_to_accuracy_s=value) for i, value in enumerate(values)],
            trigger="scheduled",
            created_at=f"2026-11-{night:02d}T02:00:00+00:00",
        )
    return root


def seed(engine: Engine, root: Path) -> None:
    """Ingest every sweep into the migrated database of ``engine`` and judge the last night."""
    report = ingest_location(engine, str(write_all(root)))
    assert not report.refused, report.refused
    with engine.begin() as conn:
        findings = regressions.detect(conn, LATEST_NIGHT)
        assert regressions.record(conn, LATEST_NIGHT, findings) >= 1


@contextmanager
def seeded_database(kind: str, directory: Path, admin: Engine | None = None) -> Iterator[str]:
    """The URL of a migrated, seeded database of ``kind`` ("sqlite" or "postgresql": a fresh
    database on ``admin``'s server, dropped afterwards)."""
    if kind == "sqlite":
        url = f"sqlite:///{directory / 'dashboard.db'}"
        upgrade(url)
        engine = make_engine(url)
        seed(engine, directory / "records")
        engine.dispose()
        yield url
        return
    assert admin is not None, "PostgreSQL needs the admin engine"
    admin_url = admin.url.render_as_string(hide_password=False)
    with scratch_database(admin_url, "scalebench_dash_test") as url:
        engine = make_engine(url)
        seed(engine, directory / "records")
        engine.dispose()
        yield url
