"""The results database on SQLite and PostgreSQL: migrations, ingest, queries, roles."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import fsspec
import pytest
from records_factory import FakeRun, write_training_sweep
from sqlalchemy import Connection, Engine, func, select, text
from sqlalchemy.orm import Session

from results_db.database import current_revision, head_revision, make_engine, upgrade
from results_db.ingest import ingest_location, run_rows
from results_db.models import (
    AllReduceCurve,
    AllReduceSample,
    EpochEval,
    Price,
    Run,
    RunEnvironment,
    RunEvent,
    StepTiming,
    Sweep,
)
from results_db.queries.communication import allreduce_summary, phase_means
from results_db.queries.runs import run_infos
from results_db.queries.sweeps import scaling
from results_db.rows import BulkLoader
from results_db.scratch import scratch_database
from scalebench.tasks import get_task

TABLES = (
    Sweep,
    Run,
    EpochEval,
    StepTiming,
    AllReduceSample,
    AllReduceCurve,
    RunEvent,
    RunEnvironment,
)


def counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            model.__tablename__: conn.execute(select(func.count()).select_from(model)).scalar_one()
            for model in TABLES
        }


def test_upgrade_an_empty_database_and_one_at_the_previous_revision(database_url: str) -> None:
    upgrade(database_url, "0001")
    engine = make_engine(database_url)
    assert current_revision(engine) == "0001"
    upgrade(database_url)
    assert current_revision(engine) == head_revision() == "0019"
    with engine.connect() as conn:
        prices = conn.execute(select(Price.name, Price.regular_per_hour)).all()
    assert {(name, float(p)) for name, p in prices} == {
        ("n1-standard-4", 0.2092),
        ("nvidia-tesla-t4", 0.35),
    }
    upgrade(database_url)  # a second upgrade is a no-op
    engine.dispose()


def step_means(conn: Connection, sweep_id: str) -> dict[int, tuple[int, float, float]]:
    """Per worker count, straight from the step rows: count, mean forward and communication s."""
    rows = conn.execute(
        select(
            Run.world_size,
            func.count(),
            func.avg(StepTiming.forward_s),
            func.avg(StepTiming.communication_s),
        )
        .join(Run, Run.id == StepTiming.run_id)
        .where(Run.sweep_id == sweep_id)
        .group_by(Run.world_size)
    ).all()
    return {k: (n, float(forward), float(communication)) for k, n, forward, communication in rows}


def test_phase_totals_are_stored_at_ingest_and_filled_by_the_migration(
    database_url: str, tmp_path: Path
) -> None:
    from alembic import command

    from results_db.database import alembic_config

    write_training_sweep(tmp_path, "s1", [FakeRun(1), FakeRun(2), FakeRun(2, repeat=1)])
    upgrade(database_url)
    engine = make_engine(database_url)
    ingest_location(engine, str(tmp_path))

    def check() -> None:
        with engine.connect() as conn:
            expected = step_means(conn, "s1")
            means = {r.world_size: r for r in phase_means(conn, "s1")}
            records = dict(
                conn.execute(
                    select(Run.world_size, func.sum(Run.step_records)).group_by(Run.world_size)
                ).all()
            )
        assert sorted(means) == sorted(expected) == [1, 2]
        for k, (count, forward, communication) in expected.items():
            assert records[k] == count
            assert means[k].forward_s == pytest.approx(forward)
            assert means[k].communication_s == pytest.approx(communication)

    check()
    # Runs stored before the totals existed get them from their step rows.
    command.downgrade(alembic_config(database_url), "0003")
    upgrade(database_url)
    check()
    engine.dispose()


def test_allreduce_curves_are_stored_at_ingest_and_filled_by_the_migration(
    database_url: str, tmp_path: Path
) -> None:
    from alembic import command

    from results_db.database import alembic_config
    from results_db.queries.communication import allreduce_curves

    shutil.copytree(Path(__file__).with_name("data") / "sweep-allreduce", tmp_path / "a")
    upgrade(database_url)
    engine = make_engine(database_url)
    ingest_location(engine, str(tmp_path))
    (sweep_id,) = [p.name for p in (tmp_path / "a").iterdir() if p.is_dir()]
    sweep_id = sweep_id.rsplit("-w", 1)[0]

    def check() -> None:
        with engine.connect() as conn:
            stored = allreduce_curves(conn, sweep_id)  # from allreduce_curve
            scanned = allreduce_summary(conn, sweep_id)  # from every sample row
            curves = conn.execute(select(func.count()).select_from(AllReduceCurve)).scalar_one()
        assert {(r.sweep, r.device) for r in stored} == {(sweep_id, "cpu")}
        # the same figures; only the stored curves say whose they are
        stored = [replace(r, sweep="", device="") for r in stored]
        assert stored == scanned and len(stored) == curves == 26  # 13 sizes × 2 dtypes

    check()
    # Runs stored before the curves existed get them from their sample rows.
    command.downgrade(alembic_config(database_url), "0004")
    upgrade(database_url)
    check()
    engine.dispose()


def test_ingest_twice_leaves_the_same_rows(engine: Engine, tmp_path: Path) -> None:
    runs = [FakeRun(1, time_to_accuracy_s=120.0), FakeRun(2, time_to_accuracy_s=80.0)]
    write_training_sweep(tmp_path, "s1", runs)
    first = ingest_location(engine, str(tmp_path))
    before = counts(engine)
    for _ in range(2):
        ingest_location(engine, str(tmp_path))
    assert counts(engine) == before
    assert first.runs == 2 and first.quarantined_lines == 0
    assert before["step_timing"] == 12 + 24  # 3 epochs × 4 steps, per rank
    assert before["epoch_eval"] == 6 and before["run_environment"] == 3


def test_columns_are_typed(engine: Engine, tmp_path: Path) -> None:
    write_training_sweep(tmp_path, "s1", [FakeRun(2, time_to_accuracy_s=80.0)])
    ingest_location(engine, str(tmp_path))
    with Session(engine) as session:
        run = session.scalars(select(Run)).one()
        step = session.scalars(select(StepTiming).limit(1)).one()
        evaluation = session.scalars(select(EpochEval).order_by(EpochEval.epoch.desc())).first()
        sweep = session.scalars(select(Sweep)).one()
    assert run.time_to_accuracy_s == 80.0 and isinstance(run.compute_s, float)
    assert run.goal_reached is True and run.goal_target == 70.0
    assert run.status == "succeeded" and run.world_size == 2
    assert run.started_at is not None and run.started_at.year == 2026
    assert run.communication_ratio == pytest.approx(0.05 / 0.4)
    assert isinstance(step.forward_s, float) and step.forward_s == 0.1
    assert run.records_version == 3 and step.gradient_packing_s == 0.0
    assert evaluation.metric_value == 80.0 and evaluation.metrics["top1_accuracy"] == 80.0
    assert sweep.config["task"] == "task1a-resnet20-cifar10" and sweep.outcome == "succeeded"


def test_runs_recorded_before_packing_was_timed_apart_are_stored_as_such(
    engine: Engine, tmp_path: Path
) -> None:
    """Version 2 steps (no gradient_packing: it is inside communication) load with 0 packing
    seconds, and the run keeps the version that says what its communication means."""
    write_training_sweep(tmp_path, "s1", [FakeRun(2, time_to_accuracy_s=80.0)])
    for rank_file in tmp_path.rglob("rank-*.jsonl"):
        lines = []
        for line in rank_file.read_text().splitlines():
            record = json.loads(line)
            record["v"] = 2
            if record["kind"] == "step":
                del record["phases"]["gradient_packing"]
            lines.append(json.dumps(record))
        rank_file.write_text("\n".join(lines) + "\n")
    ingest_location(engine, str(tmp_path))
    with Session(engine) as session:
        run = session.scalars(select(Run)).one()
        step = session.scalars(select(StepTiming).limit(1)).one()
    assert run.records_version == 2 and run.quarantined_lines == 0
    assert step.gradient_packing_s == 0.0 and step.communication_s == 0.05
    assert run.communication_ratio == pytest.approx(0.05 / 0.4)


def test_groups_not_started_are_rows_with_their_reason_and_no_repeat_of_the_scaling(
    engine: Engine, tmp_path: Path
) -> None:
    """While a sweep runs, its groups not started yet are ``planned`` rows; stopped, they
    become ``skipped`` rows with the reason (the report and the dashboard list them). A
    run never made counts in the runs of its worker count but is no repeat of its time to
    accuracy, and the sweep's outcome says it was stopped."""
    from results_db.report import sweep_report
    from scalebench import manifest

    runs = [
        FakeRun(1, repeat=0, time_to_accuracy_s=100.0),
        FakeRun(1, repeat=1, time_to_accuracy_s=None, launcher_status="planned"),
    ]
    sweep_dir = write_training_sweep(tmp_path, "stopped", runs)
    never = sweep_dir / "stopped-w1-r2"
    shutil.rmtree(never)  # not started yet

    def stored() -> tuple[dict[str, tuple[str, str]], str]:
        with engine.connect() as conn:
            rows = conn.execute(select(Run.id, Run.status, Run.reason, Run.ended_at)).all()
            outcome = conn.execute(select(Sweep.outcome)).scalar_one()
        assert all(r.ended_at is None for r in rows if r.status in ("planned", "skipped"))
        return {r.id[-5:]: (r.status, r.reason) for r in rows}, outcome

    ingest_location(engine, str(tmp_path))
    assert stored() == ({"w1-r1": ("succeeded", ""), "w1-r2": ("planned", "")}, "running")
    manifest.cancel(sweep_dir, None, "the DAG run was marked failed")
    manifest.finish(sweep_dir)
    ingest_location(engine, str(tmp_path))
    skipped = ("skipped", "the DAG run was marked failed")
    assert stored() == ({"w1-r1": ("succeeded", ""), "w1-r2": skipped}, "cancelled")
    with engine.connect() as conn:
        (row,) = scaling(conn, "stopped")
        report = sweep_report(conn, "stopped")
    assert (row.runs, row.reached, row.time_to_accuracy_s) == (2, 1, pytest.approx(100.0))
    assert "skipped" in report and "the DAG run was marked failed" in report


def test_failed_diverged_and_killed_runs_keep_their_metrics(engine: Engine, tmp_path: Path) -> None:
    runs = [
        FakeRun(1, time_to_accuracy_s=None, end="failed", launcher_status="failed"),
        FakeRun(2, time_to_accuracy_s=None, end="diverged", launcher_status="diverged"),
        FakeRun(4, time_to_accuracy_s=None, end="killed", launcher_status="failed"),
    ]
    write_training_sweep(tmp_path, "bad", runs)
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        status = dict(conn.execute(select(Run.world_size, Run.status)).all())
        reasons = dict(conn.execute(select(Run.world_size, Run.reason)).all())
        steps = dict(
            conn.execute(
                select(Run.world_size, func.count(StepTiming.step))
                .join(StepTiming, StepTiming.run_id == Run.id)
                .group_by(Run.world_size)
            ).all()
        )
        outcome = conn.execute(select(Sweep.outcome)).scalar_one()
    assert status == {1: "failed", 2: "diverged", 4: "failed"}
    assert "peer went away" in reasons[1] and "nan" in reasons[2]
    assert "left no final record" in reasons[4]
    assert steps == {1: 12, 2: 24, 4: 48}
    assert outcome == "failed"


def test_unreadable_lines_are_quarantined_and_counted(engine: Engine, tmp_path: Path) -> None:
    sweep = write_training_sweep(tmp_path, "q", [FakeRun(1)])
    rank_file = next(sweep.glob("*/rank-0.jsonl"))
    with rank_file.open("a") as handle:
        handle.write("{not json\n")
        handle.write('{"v": 1, "run_id": "q-w1-r1", "rank": 0, "world_size": 1, "kind": "st')
    report = ingest_location(engine, str(tmp_path))
    assert report.quarantined_lines == 2 and len(report.problems) == 2
    with engine.connect() as conn:
        assert conn.execute(select(Run.quarantined_lines)).scalar_one() == 2
        assert conn.execute(select(func.count()).select_from(StepTiming)).scalar_one() == 12


def test_rank_files_that_disagree_are_refused_and_nothing_of_the_run_written(
    engine: Engine, tmp_path: Path
) -> None:
    sweep = write_training_sweep(tmp_path, "x", [FakeRun(1), FakeRun(2)])
    other = next(sweep.glob("x-w2-r1/rank-1.jsonl"))
    good = other.read_text()
    other.write_text(good.replace('"run_id":"x-w2-r1"', '"run_id":"elsewhere"'))
    report = ingest_location(engine, str(tmp_path))
    assert len(report.refused) == 1 and "different runs" in report.refused[0]
    with engine.connect() as conn:
        assert conn.execute(select(Run.id)).scalars().all() == ["x-w1-r1"]
        assert conn.execute(select(Sweep.outcome)).scalar_one() == "partial"

    # Stored first, damaged after: the stored run stays unless the user says --replace.
    other.write_text(good)
    ingest_location(engine, str(tmp_path))
    before = counts(engine)
    other.write_text(good.replace('"run_id":"x-w2-r1"', '"run_id":"elsewhere"'))
    report = ingest_location(engine, str(tmp_path))
    assert not report.refused and len(report.conflicts) == 1
    assert "x-w2-r1: the rank files now disagree" in report.conflicts[0]
    assert counts(engine) == before
    report = ingest_location(engine, str(tmp_path), replace=True)
    assert len(report.refused) == 1 and not report.conflicts
    with engine.connect() as conn:
        assert conn.execute(select(Run.id)).scalars().all() == ["x-w1-r1"]


def test_a_crash_in_the_middle_leaves_the_run_as_it_was(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_training_sweep(tmp_path, "c", [FakeRun(2, time_to_accuracy_s=50.0)])
    ingest_location(engine, str(tmp_path))
    before = counts(engine)

    def explode(*args: object, **kwargs: object) -> dict:
        raise RuntimeError("disk full")

    monkeypatch.setattr(run_rows, "eval_row", explode)  # after steps were written
    report = ingest_location(engine, str(tmp_path))
    assert report.refused == ["c-w2-r1: disk full"]  # the reason in words, not a repr
    assert counts(engine) == before
    with engine.connect() as conn:
        assert conn.execute(select(Run.time_to_accuracy_s)).scalar_one() == 50.0


def test_ingest_reads_fsspec_uris(engine: Engine, tmp_path: Path) -> None:
    sweep = write_training_sweep(tmp_path / "local", "m", [FakeRun(1)])
    memory = fsspec.filesystem("memory")
    for path in sweep.rglob("*"):
        if path.is_file():
            memory.pipe(f"/bucket/results/m/{path.relative_to(sweep)}", path.read_bytes())
    report = ingest_location(engine, "memory://bucket/results")
    assert report.runs == 1 and report.sweeps == 1
    report = ingest_location(engine, f"file://{tmp_path / 'local' / 'm'}")
    assert report.runs == 1
    assert counts(engine)["run"] == 1


def test_scaling_and_phases_from_the_database(engine: Engine, tmp_path: Path) -> None:
    runs = [
        FakeRun(1, repeat=0, time_to_accuracy_s=100.0),
        FakeRun(1, repeat=1, time_to_accuracy_s=110.0),
        FakeRun(1, repeat=2, time_to_accuracy_s=300.0),  # slowest: dropped by the MLPerf rule
        FakeRun(2, repeat=0, time_to_accuracy_s=50.0),
        FakeRun(2, repeat=1, time_to_accuracy_s=60.0),
        FakeRun(2, repeat=2, time_to_accuracy_s=10.0),  # fastest: dropped
    ]
    write_training_sweep(tmp_path, "r", runs)
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        rows = {r.world_size: r for r in scaling(conn, "r")}
        phases = phase_means(conn, "r")
    assert rows[1].time_to_accuracy_s == pytest.approx(110.0)  # 100, 110, 300 → 110
    assert rows[2].time_to_accuracy_s == pytest.approx(50.0)  # 10, 50, 60 → 50
    assert rows[2].speedup == pytest.approx(2.2)
    assert rows[2].efficiency == pytest.approx(1.1)
    assert rows[2].runs == 3 and rows[2].reached == 3
    assert rows[1].communication_ratio == pytest.approx(0.125)
    assert [p.world_size for p in phases] == [1, 2]
    assert phases[0].backward_s == pytest.approx(0.2)


def test_readonly_role_can_read_but_not_write(postgres_admin: Engine, tmp_path: Path) -> None:
    import uuid

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ProgrammingError

    from cli import main as cli

    role = f"reader_{uuid.uuid4().hex[:8]}"
    other = f"stranger_{uuid.uuid4().hex[:8]}"
    admin_url = postgres_admin.url.render_as_string(hide_password=False)
    try:
        with scratch_database(admin_url, "scalebench_test", migrate=False) as url:
            name = make_url(url).database
            assert cli.main(["db", "upgrade", "--database", url]) == 0
            write_training_sweep(tmp_path, "ro", [FakeRun(1)])
            assert cli.main(["ingest", str(tmp_path), "--database", url]) == 0
            assert cli.main(["db", "grant-readonly", role, "--database", url]) == 0
            reader = make_engine(make_url(url).set(username=role).render_as_string(False))
            with reader.connect() as conn:
                assert conn.execute(select(func.count()).select_from(Run)).scalar_one() == 1
            with (
                reader.connect() as conn,
                pytest.raises(ProgrammingError, match="permission denied"),
            ):
                conn.execute(text("DELETE FROM run"))
            reader.dispose()
            with postgres_admin.connect() as conn:  # as init.sql: PUBLIC may neither connect
                conn.execute(text(f'CREATE ROLE "{other}" LOGIN'))  # nor make temporary tables
                privileges = {
                    (who, what): conn.execute(
                        text("SELECT has_database_privilege(:who, :db, :what)"),
                        {"who": who, "db": name, "what": what},
                    ).scalar_one()
                    for who in (role, other)
                    for what in ("CONNECT", "TEMPORARY")
                }
            assert privileges == {
                (role, "CONNECT"): True,
                (role, "TEMPORARY"): False,
                (other, "CONNECT"): False,
                (other, "TEMPORARY"): False,
            }
    finally:  # after the database is gone: its privileges depend on the roles
        with postgres_admin.connect() as conn:
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{other}"'))


def test_ingest_of_real_worker_records(engine: Engine, tmp_path: Path) -> None:
    """Records from the worker runtime's own test fixtures ingest without quarantine."""
    for name in ("sweep-light", "sweep-allreduce"):
        shutil.copytree(Path(__file__).with_name("data") / name, tmp_path / name)
    report = ingest_location(engine, str(tmp_path))
    assert report.quarantined_lines == 0 and not report.refused
    assert report.sweeps == 2 and report.runs == 3
    with engine.connect() as conn:
        summary = allreduce_summary(conn)
        rows = {
            r.world_size: r for r in scaling(conn, "task1a-resnet20-cifar10-20261122T021829Z-37f8")
        }
    assert {(r.dtype, r.world_size) for r in summary} == {("float32", 2), ("float16", 2)}
    assert all(r.samples == 10 and r.busbw == pytest.approx(r.algbw) for r in summary)
    assert rows[1].speedup == 1.0 and rows[2].reached == 1


def test_how_a_run_was_compiled_is_stored_and_older_runs_read_as_eager(
    engine: Engine, tmp_path: Path
) -> None:
    write_training_sweep(tmp_path, "s-compiled", [FakeRun(1), FakeRun(2, compile_s=20.0)])
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        runs = {r.world_size: r for r in run_infos(conn, sweep_id="s-compiled")}
    eager, compiled = runs[1], runs[2]
    assert (eager.compile, eager.compiled, eager.compile_s, eager.recompilations) == (
        "off",
        False,
        0.0,
        None,
    )
    # The slowest rank's compilation, and the most recompilations of any rank.
    assert (compiled.compile, compiled.compiled, compiled.compile_s, compiled.recompilations) == (
        "auto",
        True,
        21.0,
        1,
    )


def test_a_run_keeps_the_target_it_trained_to(engine: Engine, tmp_path: Path) -> None:
    """A run that reached its goal says its target (70 here, the light target of its day);
    one that did not, and whose start record predates targets, gets the task's current one."""
    write_training_sweep(tmp_path, "s-targets", [FakeRun(1, time_to_accuracy_s=None), FakeRun(2)])
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        runs = {r.world_size: r for r in run_infos(conn, sweep_id="s-targets")}
    light_target = get_task("task1a-resnet20-cifar10").goal.light_threshold
    assert runs[1].goal_target == light_target and runs[2].goal_target == 70.0


def test_migrations_build_exactly_the_models(engine: Engine) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from results_db.models import Base

    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []


# What the fake ranks' final events hold of every run metric (records_factory.FakeRun).
MEASURED = {"machine_reference_s": 0.002, "peak_memory_bytes": 3 * 2**30}


def test_the_image_a_kubernetes_run_ran_is_stored_and_names_tonights_stack(
    engine: Engine, tmp_path: Path
) -> None:
    """The digest the kubelet resolved a group's image to, from the manifest's verdict to
    ``run.image_digest``: tonight's stack names it (the nightly's and the comparison's
    identities); a run whose pods ran different images keeps them all and says so, cut to
    the column where they do not fit."""
    import sys

    from results_db.ingest.run_checks import run_image
    from results_db.queries.paired_nights import night_identity
    from results_db.queries.stacks import stack_identities
    from scalebench import manifest
    from scalebench.manifest import GroupEntry

    stacks = {"tonight": {"python": sys.executable}, "reference": {"python": sys.executable}}
    runs = [FakeRun(1, stack=stack) for stack in ("tonight", "reference")]
    sweep_dir = write_training_sweep(tmp_path, "s1", runs, finished=False, stacks=stacks)
    tonight, reference = (g.run_id for g in manifest.load(sweep_dir).groups)
    digest = "registry.example/worker@sha256:" + "ab" * 32
    moved = "registry.example/worker@sha256:" + "cd" * 32
    manifest.record_verdict(sweep_dir, tonight, "succeeded", "", 9.0, image_digest=digest)
    both = f"{digest},{moved}"
    manifest.record_verdict(sweep_dir, reference, "succeeded", "", 9.0, image_digest=both)
    manifest.finish(sweep_dir)
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        stored = dict(conn.execute(select(Run.stack, Run.image_digest)).all())
        reasons = dict(conn.execute(select(Run.stack, Run.reason)).all())
        identity = night_identity(conn, "s1")
        identities = stack_identities(conn, "s1")
    assert stored == {"tonight": digest, "reference": both}
    assert f"the pods ran 2 different images: {digest}, {moved}" in reasons["reference"]
    assert "different images" not in reasons["tonight"]
    assert identity["stack"]["image_digest"] == digest
    assert "image_digest" not in identity["platform"]
    assert identities["tonight"]["image_digest"] == digest
    assert identities["reference"]["image_digest"] == both
    # A local run has none: the key is absent, not empty.
    write_training_sweep(tmp_path / "local", "s2", [FakeRun(1, stack="tonight")], stacks=stacks)
    ingest_location(engine, str(tmp_path / "local"))
    with engine.connect() as conn:
        assert "image_digest" not in night_identity(conn, "s2")["stack"]
        assert "image_digest" not in stack_identities(conn, "s2")["tonight"]
    # Too many images for the column: the ones that fit, and how many more.
    many = ",".join(f"registry.example/worker@sha256:{i:064x}" for i in range(6))
    fitted = run_image(GroupEntry("r", 1, 0, image_digest=many))
    assert len(fitted) <= 300 and fitted.endswith(",+3 more")
    assert fitted.removesuffix(",+3 more") == ",".join(many.split(",")[:3])
    assert run_image(GroupEntry("r", 1, 0, image_digest=digest)) == digest


def test_every_run_metric_is_a_column_a_written_value_and_a_fact(
    engine: Engine, tmp_path: Path
) -> None:
    """Each run metric of scalebench.run_metrics is a nullable column of ``run`` of its kind,
    written at ingest as the summary reduced it and read back into ``RunInfo.metrics``; a run
    whose records predate the metrics has None. A metric that the model, the row written or
    RunInfo lacks fails here (one the migrations lack: the test above)."""
    from sqlalchemy import BigInteger, Float

    from results_db.run_summary import summarise
    from scalebench.run_metrics import RUN_METRICS
    from workers.records import read_run

    names = [metric.name for metric in RUN_METRICS]
    for metric in RUN_METRICS:
        column = Run.__table__.c[metric.name]
        assert column.nullable, metric.name
        assert type(column.type) is (BigInteger if metric.kind is int else Float), metric.name
    sweep_dir = write_training_sweep(
        tmp_path,
        "s-metrics",
        [FakeRun(2, **MEASURED), FakeRun(1)],  # the second: records from before the metrics
    )
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        runs = {r.world_size: r for r in run_infos(conn, sweep_id="s-metrics")}
    measured, older = runs[2], runs[1]
    summary = summarise(read_run(sweep_dir / measured.id), measured.id)
    assert list(summary.metrics) == list(measured.metrics) == names
    assert all(summary.metrics[name] is not None for name in names)
    assert measured.metrics == pytest.approx(summary.metrics)
    assert older.metrics == dict.fromkeys(names)
    assert measured.metrics["peak_memory_bytes"] == 6 * 2**30  # the larger of the two ranks


def test_binary_copy_round_trips_nulls_and_text_of_any_length(postgres_admin: Engine) -> None:
    from results_db import pg_copy

    kinds = ["text", "int4", "int8", "float8"]
    columns = [
        ["run-a", "run-a", "a-much-longer-run-id", "run-a"],
        [0, 1, None, 3],
        [2**40, 5, 6, 7],
        [0.1, None, 2.5e-9, float("inf")],
    ]
    stream, count = pg_copy.encode(kinds, columns)
    assert count == 4
    with postgres_admin.connect() as conn:
        conn.execute(text("CREATE TEMP TABLE copied (s text, i int4, b int8, f float8)"))
        with conn.connection.dbapi_connection.cursor() as cursor:
            cursor.copy_expert("COPY copied FROM STDIN WITH (FORMAT binary)", stream)
        rows = set(conn.execute(text("SELECT s, i, b, f FROM copied")).all())
    assert rows == set(zip(*columns, strict=True))


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_failed_background_copy_rolls_the_run_back(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_training_sweep(tmp_path, "bg", [FakeRun(2, time_to_accuracy_s=50.0)])
    ingest_location(engine, str(tmp_path))
    before = counts(engine)

    def refuse(self: object, sql: str, stream: object) -> None:
        raise RuntimeError("server went away during COPY")

    monkeypatch.setattr(BulkLoader, "_copy", refuse)
    report = ingest_location(engine, str(tmp_path))
    assert len(report.refused) == 1 and "during COPY" in report.refused[0]
    assert counts(engine) == before


def test_the_processor_of_every_rank_is_kept_and_shown(engine: Engine, tmp_path: Path) -> None:
    """The CPU model and torch's threads come with each rank's environment record; the Run
    page's environment table shows them."""
    from dash_app.tables import environment_rows
    from results_db.queries.runs import run_environments
    from scalebench.host import cpu_model

    write_training_sweep(tmp_path, "s1", [FakeRun(2, time_to_accuracy_s=80.0)])
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        run_id = conn.execute(select(Run.id)).scalar_one()
        envs = run_environments(conn, run_id)
    assert [(e.rank, e.cpu, e.torch_threads) for e in envs] == [
        (0, "AMD EPYC (family 25, model 1)", 1),
        (1, "AMD EPYC (family 25, model 1)", 1),
    ]
    shown = environment_rows(envs)[0]
    assert (shown["cpu"], shown["torch threads"]) == ("AMD EPYC (family 25, model 1)", "1")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Xeon X\n")
    assert cpu_model(cpuinfo) == "Xeon X (family 6, model 85)"
    assert cpu_model(tmp_path / "missing")  # no /proc: the platform's name, never empty
