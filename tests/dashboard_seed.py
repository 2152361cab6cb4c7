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
  10 % slower in every repeat, judged and flagged by the real regression detector;
- apart, in a database of their own (:func:`paired_database`): ``paired-00`` …
  ``paired-09``, paired nights of Task 2a (tonight's stack beside the reference), with a
  platform change on night 3 and a stack change on night 6, judged by the paired nightly.

Everything goes through the real ingest (``results_db.ingest.ingest_location``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from records_factory import PHASES, FakeRun, write_training_sweep
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


# -- the paired nightly ---------------------------------------------------------------------

PAIRED_TASK = "task2a-logreg-epsilon"
PAIRED_NIGHTS = 10
PAIRED_ROUNDS = 3
# From this night the machines are 20 % slower, both arms alike, on a CPU recorded anew:
# the reference arm moves, a finding blamed on the platform.
PLATFORM_NIGHT = 3
OLD_CPU, NEW_CPU = "AMD EPYC (family 25, model 1)", "AMD EPYC (family 25, model 17)"
# From this night tonight's stack runs forward and backward 8 % slower, on torch 2.14.0: the
# ratio moves, a finding blamed on the stack.
STACK_NIGHT = 6
OLD_TORCH, NEW_TORCH = "2.13.0", "2.14.0"


def paired_night_id(night: int) -> str:
    return f"paired-{night:02d}"


def write_paired(root: Path) -> Path:
    """Write :data:`PAIRED_NIGHTS` paired nights of :data:`PAIRED_TASK` at one worker under
    ``root``, :data:`PAIRED_ROUNDS` rounds each, every phase with 1 % noise of its own."""
    import random
    import sys

    rng = random.Random(11)
    # tonight's stack differs from the reference (on an A/A night a moved ratio is noise)
    stacks = {
        "tonight": {"python": sys.executable, "env": {"SCALEBENCH_TONIGHT": "1"}},
        "reference": {"python": sys.executable},
    }
    for night in range(PAIRED_NIGHTS):
        platform = 1.2 if night >= PLATFORM_NIGHT else 1.0
        runs = []
        for round_ in range(PAIRED_ROUNDS):
            for stack in ("tonight", "reference"):
                slower = 1.08 if stack == "tonight" and night >= STACK_NIGHT else 1.0
                phases = {
                    name: seconds
                    * platform
                    * (slower if name in ("forward", "backward") else 1.0)
                    * rng.gauss(1.0, 0.01)
                    for name, seconds in PHASES.items()
                }
                runs.append(
                    FakeRun(
                        1,
                        repeat=round_,
                        stack=stack,
                        epochs=2,
                        phases=phases,
                        cpu=NEW_CPU if night >= PLATFORM_NIGHT else OLD_CPU,
                    )
                )
        write_training_sweep(
            root,
            paired_night_id(night),
            runs,
            trigger="scheduled",
            created_at=f"2026-11-{night + 10:02d}T02:00:00+00:00",
            task=PAIRED_TASK,
            stacks=stacks,
        )
    return root


def seed_paired(url: str, records: Path) -> None:
    """Ingest the paired nights written under ``records`` into the migrated database at
    ``url``, record tonight's stack's new torch from :data:`STACK_NIGHT` (the records all
    carry one version), and judge each night in turn, as the nightly does."""
    from sqlalchemy import select, update

    from results_db.models import Run, RunEnvironment
    from results_db.service.nightly import check_paired

    engine = make_engine(url)
    try:
        report = ingest_location(engine, str(records))
        assert not report.refused, report.refused
        moved = [paired_night_id(n) for n in range(STACK_NIGHT, PAIRED_NIGHTS)]
        tonight = select(Run.id).where(Run.sweep_id.in_(moved), Run.stack == "tonight")
        with engine.begin() as conn:
            conn.execute(
                update(RunEnvironment)
                .where(RunEnvironment.run_id.in_(tonight.scalar_subquery()))
                .values(torch=NEW_TORCH)
            )
    finally:
        engine.dispose()
    for night in range(PAIRED_NIGHTS):
        check_paired(url, paired_night_id(night))


@contextmanager
def paired_database(
    kind: str, directory: Path, admin: Engine | None = None, records: Path | None = None
) -> Iterator[str]:
    """The URL of a migrated database of ``kind`` ("sqlite" or "postgresql": a fresh database
    on ``admin``'s server, dropped afterwards) holding the paired nights only, judged
    (:func:`seed_paired`); ``records``: where they are written already."""
    records = records or write_paired(directory / "paired-records")
    if kind == "sqlite":
        url = f"sqlite:///{directory / 'paired.db'}"
        upgrade(url)
        seed_paired(url, records)
        yield url
        return
    assert admin is not None, "PostgreSQL needs the admin engine"
    admin_url = admin.url.render_as_string(hide_password=False)
    with scratch_database(admin_url, "scalebench_nightly_test") as url:
        seed_paired(url, records)
        yield url
