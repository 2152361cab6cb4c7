"""Ingest against damaged files and impossible values, with the same verdict on SQLite and
PostgreSQL: no good row destroyed, one bad line never refuses a run, nothing stored that
the schema cannot hold."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from records_factory import FakeRun, write_rank, write_training_sweep
from sqlalchemy import Engine, func, select

from results_db.ingest import ingest_location
from results_db.models import (
    AllReduceSample,
    EpochEval,
    Run,
    RunEnvironment,
    RunEvent,
    StepTiming,
    Sweep,
)
from results_db.queries.sweeps import running_runs

TABLES = (Sweep, Run, EpochEval, StepTiming, AllReduceSample, RunEvent, RunEnvironment)
DATA = Path(__file__).parent / "data"


def counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            model.__tablename__: conn.execute(select(func.count()).select_from(model)).scalar_one()
            for model in TABLES
        }


def edit_lines(path: Path, change: Callable[[list[dict]], list[dict]]) -> None:
    """Rewrite a rank file's records through ``change`` (records as dicts, in file order)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in change(records)))


def truncate_half(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: len(lines) // 2]))


def drop_some_steps(path: Path) -> None:
    edit_lines(path, lambda rs: [r for r in rs if not (r["kind"] == "step" and r["epoch"] == 2)])


def drop_final_record(path: Path) -> None:
    edit_lines(path, lambda rs: [r for r in rs if r.get("event") != "finished"])


def remove_run(path: Path) -> None:
    shutil.rmtree(path.parent)


@pytest.mark.parametrize(
    ("damage", "why", "replaced"),
    [
        (truncate_half, "stored as succeeded, and the files now read as failed", "failed"),
        (drop_some_steps, "the files now hold 20 step records, the stored run 24", "succeeded"),
        (drop_final_record, "stored as succeeded, and the files now read as failed", "failed"),
        (remove_run, "stored as succeeded, and the files now read as failed", "failed"),
    ],
)
def test_files_damaged_after_a_good_ingest_never_replace_the_stored_run(
    engine: Engine, tmp_path: Path, damage: Callable[[Path], None], why: str, replaced: str
) -> None:
    sweep = write_training_sweep(tmp_path, "d", [FakeRun(1), FakeRun(2)])
    ingest_location(engine, str(tmp_path))
    good = counts(engine)
    damage(sweep / "d-w2-r1" / "rank-1.jsonl")

    report = ingest_location(engine, str(tmp_path))
    assert len(report.conflicts) == 1 and report.conflicts[0].startswith("d-w2-r1: ")
    assert why in report.conflicts[0]
    assert counts(engine) == good  # nothing deleted, nothing downgraded
    with engine.connect() as conn:
        assert conn.execute(select(Run.status).where(Run.id == "d-w2-r1")).scalar_one() == (
            "succeeded"
        )
        assert conn.execute(select(Sweep.outcome)).scalar_one() == "succeeded"

    # An explicit replace follows the files.
    report = ingest_location(engine, str(tmp_path), replace=True)
    assert not report.conflicts
    with engine.connect() as conn:
        assert conn.execute(select(Run.status).where(Run.id == "d-w2-r1")).scalar_one() == (
            replaced
        )
    assert counts(engine) != good


def test_a_reading_that_completes_a_run_replaces_the_partial_one(
    engine: Engine, tmp_path: Path
) -> None:
    sweep = write_training_sweep(tmp_path, "p", [FakeRun(2)])
    rank_file = sweep / "p-w2-r1" / "rank-1.jsonl"
    whole = rank_file.read_text()
    truncate_half(rank_file)  # read while rank 1 was still writing
    ingest_location(engine, str(tmp_path))
    partial = counts(engine)
    rank_file.write_text(whole)
    report = ingest_location(engine, str(tmp_path))
    assert not report.conflicts and not report.refused
    assert counts(engine)["step_timing"] > partial["step_timing"]
    with engine.connect() as conn:
        assert conn.execute(select(Run.status)).scalar_one() == "succeeded"


def _first(kind: str, event: str | None = None) -> Callable[[dict], bool]:
    return lambda r: r["kind"] == kind and (event is None or r.get("event") == event)


def _edit_first(match: Callable[[dict], bool], change: Callable[[dict], None]):
    def edit(records: list[dict]) -> list[dict]:
        record = next(r for r in records if match(r))
        change(record)
        return records

    return edit


def _repeat_first_eval(records: list[dict]) -> list[dict]:
    return [*records, next(r for r in records if r["kind"] == "eval")]


BAD_LINES = {
    "a repeated evaluation": _repeat_first_eval,
    "goal event without its time": _edit_first(
        _first("event", "goal_reached"), lambda r: r.pop("time_to_accuracy_s")
    ),
    "compile time in words": _edit_first(
        _first("event", "start"), lambda r: r.update(compile_s="fast")
    ),
    "metric in words": _edit_first(
        _first("eval"), lambda r: r["metrics"].update(top1_accuracy="fast")
    ),
    "negative phase time": _edit_first(
        _first("step"), lambda r: r["phases"].update(compute=1, communication=-800.0)
    ),
    "negative evaluation time": _edit_first(_first("eval"), lambda r: r.update(eval_s=-3)),
    "a phase of 1e308 seconds": _edit_first(
        _first("step"), lambda r: r["phases"].update(forward=1e308)
    ),
    "a record time beyond any group's limit": _edit_first(
        _first("eval"), lambda r: r.update(t=1e12)
    ),
    "an evaluation longer than any group": _edit_first(
        _first("eval"), lambda r: r.update(eval_s=1e9)
    ),
    "negative record time": _edit_first(_first("step"), lambda r: r.update(t=-1.0)),
    "a host name of 100,000 characters": _edit_first(
        _first("env"), lambda r: r.update(host="h" * 100_000)
    ),
    "a 70-character device": _edit_first(
        _first("event", "start"), lambda r: r.update(device="d" * 70)
    ),
    "a rank beyond the group": _edit_first(_first("step"), lambda r: r.update(rank=7)),
}


@pytest.mark.parametrize("damage", list(BAD_LINES), ids=list(BAD_LINES))
def test_one_bad_line_is_quarantined_with_its_number_and_the_rest_of_the_run_loads(
    engine: Engine, tmp_path: Path, damage: str
) -> None:
    sweep = write_training_sweep(tmp_path, "b", [FakeRun(2)])
    edit_lines(sweep / "b-w2-r1" / "rank-0.jsonl", BAD_LINES[damage])
    report = ingest_location(engine, str(tmp_path))
    assert not report.refused and report.runs == 1
    assert report.quarantined_lines == 1
    assert len(report.problems) == 1 and report.problems[0].startswith("rank-0.jsonl:")
    with engine.connect() as conn:
        run = conn.execute(select(Run)).one()
        steps = conn.execute(select(func.count()).select_from(StepTiming)).scalar_one()
        evals = conn.execute(select(func.count()).select_from(EpochEval)).scalar_one()
        negative = conn.execute(
            select(func.count()).where(StepTiming.communication_s < 0)
        ).scalar_one()
    assert run.quarantined_lines == 1 and negative == 0
    assert run.samples_per_s > 1  # no impossible time reached the run's figures
    assert steps >= 2 * 12 - 1 and evals >= 2
    # A re-ingest yields the same rows.
    before = counts(engine)
    assert not ingest_location(engine, str(tmp_path)).conflicts
    assert counts(engine) == before


def test_a_rank_file_outside_the_group_is_left_out(engine: Engine, tmp_path: Path) -> None:
    sweep = write_training_sweep(tmp_path, "o", [FakeRun(2)])
    write_rank(sweep / "o-w2-r1", "o-w2-r1", 5, FakeRun(8))  # a stray file of a larger group
    report = ingest_location(engine, str(tmp_path))
    assert not report.refused
    assert any("rank-5.jsonl: rank 5 is outside the group of 2" in p for p in report.problems)
    with engine.connect() as conn:
        ranks = set(conn.execute(select(StepTiming.rank).distinct()).scalars())
        run = conn.execute(select(Run)).one()
    assert ranks == {0, 1} and run.world_size == 2 and run.quarantined_lines > 0


def test_a_manifest_run_id_that_leaves_the_sweep_directory_is_refused(
    engine: Engine, tmp_path: Path
) -> None:
    write_training_sweep(tmp_path / "other", "victim", [FakeRun(1)])
    sweep = write_training_sweep(tmp_path / "mine", "mine", [FakeRun(1)])
    data = json.loads((sweep / "sweep.json").read_text())
    data["groups"][0]["run_id"] = "../../other/victim/victim-w1-r1"
    (sweep / "sweep.json").write_text(json.dumps(data))
    report = ingest_location(engine, str(sweep))
    assert (
        len(report.refused) == 2 and "one directory name inside the sweep's" in (report.refused[0])
    )
    # the run's own folder, which the manifest no longer lists, is said too
    assert report.refused[1] == "mine-w1-r1: a run folder that sweep.json does not list; not read"
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Run)).scalar_one() == 0


def test_a_sweep_id_the_schema_cannot_hold_is_refused_on_both_databases(
    engine: Engine, tmp_path: Path
) -> None:
    sweep = write_training_sweep(tmp_path, "long", [FakeRun(1)])
    data = json.loads((sweep / "sweep.json").read_text())
    data["sweep_id"] = "s" * 300
    (sweep / "sweep.json").write_text(json.dumps(data))
    report = ingest_location(engine, str(tmp_path))
    assert report.refused == [
        f"sweep {'s' * 60}: id is 300 characters long; the database keeps at most 200"
    ]
    assert sum(counts(engine).values()) == 0


def test_an_allreduce_dtype_no_tensor_has_is_quarantined(engine: Engine, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep-allreduce"
    shutil.copytree(DATA / "sweep-allreduce", sweep)
    rank_file = sorted(sweep.glob("*/rank-0.jsonl"))[0]
    edit_lines(rank_file, _edit_first(_first("allreduce"), lambda r: r.update(dtype="f" * 70)))
    report = ingest_location(engine, str(sweep))
    assert not report.refused and report.quarantined_lines == 1
    assert "all-reduce of unknown dtype 'ffff" in report.problems[0]
    with engine.connect() as conn:
        longest = conn.execute(select(func.max(func.length(AllReduceSample.dtype)))).scalar_one()
    assert longest <= 20


# -- a database that goes away in the middle of an ingest ------------------------------------


class PrivateCluster:
    """A PostgreSQL cluster of the test's own (``initdb`` into a temporary folder, its own
    port), which the test may stop and start at will."""

    def __init__(self, root: Path) -> None:
        import os
        import subprocess

        from workers.distributed import free_port

        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not bins:
            pytest.fail("no PostgreSQL server binaries (pg_ctl) under /usr/lib/postgresql")
        self.bin = bins[-1].parent
        self.data = root / "data"
        self.port = free_port()
        # initdb and the server refuse to run as root: as root, run them as "postgres".
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(root, "postgres")
        self._run = lambda *args: subprocess.run(
            [*self.as_user, *args], check=True, capture_output=True, text=True, timeout=120
        )
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
        )
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.data / "server.log"),
            "-o",
            options,
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")


@pytest.fixture
def private_cluster():
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="scalebench-pg-"))  # reachable by the postgres user
    cluster = PrivateCluster(root)
    yield cluster
    with contextlib.suppress(Exception):
        cluster.stop("immediate")
    shutil.rmtree(root, ignore_errors=True)


def test_an_ingest_survives_a_database_restart_and_loses_nothing(
    private_cluster: PrivateCluster, tmp_path: Path
) -> None:
    """The cluster is stopped outright (connections cut) before the third run loads and
    comes back two seconds later: the ingest waits, tries again, and every table holds
    exactly what a clean ingest of the same files gives."""
    import threading

    from results_db.database import make_engine, upgrade

    runs = [FakeRun(1), FakeRun(2), FakeRun(4), FakeRun(1, repeat=1), FakeRun(2, repeat=1)]
    write_training_sweep(tmp_path, "pg", runs)
    upgrade(private_cluster.url)
    engine = make_engine(private_cluster.url)
    lines: list[str] = []
    comeback = threading.Timer(2.0, private_cluster.start)

    def progress(line: str) -> None:
        lines.append(line)
        if line.startswith("[3/5] loading"):
            private_cluster.stop("immediate")  # every connection cut, the server gone
            comeback.start()

    try:
        report = ingest_location(engine, str(tmp_path), progress)
    finally:
        comeback.join()
        engine.dispose()
    assert any("the database did not answer" in line for line in lines), lines
    assert report.runs == 5 and not report.refused and not report.conflicts
    restarted = counts(make_engine(private_cluster.url))

    clean_url = private_cluster.url.rsplit("/", 1)[0] + "/clean"
    with make_engine(private_cluster.url).connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "CREATE DATABASE clean"
        )
    upgrade(clean_url)
    clean = make_engine(clean_url)
    ingest_location(clean, str(tmp_path))
    assert restarted == counts(clean)
    clean.dispose()


def test_a_spread_run_whose_ranks_shared_a_node_is_flagged(engine: Engine, tmp_path: Path) -> None:
    from dash_app.tables import run_rows
    from results_db.queries.runs import run_infos

    sweep = write_training_sweep(tmp_path, "sp", [FakeRun(2), FakeRun(4)])
    data = json.loads((sweep / "sweep.json").read_text())
    data["request"]["placement"] = "spread"  # as a Kubernetes sweep asks by default
    (sweep / "sweep.json").write_text(json.dumps(data))
    for rank in (1, 3):  # ranks 0 and 1, and 2 and 3, of the 4-worker run on one node each
        edit_lines(
            sweep / "sp-w4-r1" / f"rank-{rank}.jsonl",
            _edit_first(_first("env"), lambda r, n=rank: r.update(node=f"node-{n - 1}")),
        )
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        runs = {r.world_size: r for r in run_infos(conn)}
    assert not runs[2].shared_node and runs[2].placement == "spread"
    assert runs[4].shared_node and runs[4].status == "succeeded"
    assert runs[4].reason == (
        "placement: one rank per node was asked, but ranks 0, 1 on node-0; ranks 2, 3 on node-2"
    )
    rows, _ = run_rows(list(runs.values()), "workers", "asc", 0, 10)
    assert [row["status"] for row in rows] == ["succeeded", "succeeded ⚠ ranks shared a node"]


def test_a_group_read_while_it_runs_is_running_and_its_final_load_completes_it(
    engine: Engine, tmp_path: Path
) -> None:
    """A partial load (the operator's live results) stores ``running``, not ``failed``; the
    load after the verdict replaces it whole, without duplicates."""
    sweep = write_training_sweep(tmp_path, "live", [FakeRun(2, launcher_status="planned")])
    rank_files = sorted((sweep / "live-w2-r1").glob("rank-*.jsonl"))
    whole = {path: path.read_text() for path in rank_files}
    for path in rank_files:  # the ranks are in their second epoch
        edit_lines(
            path,
            lambda rs: [
                r
                for r in rs
                if r.get("epoch", 0) < 2 and r.get("event") not in ("goal_reached", "finished")
            ],
        )
    ingest_location(engine, str(tmp_path), only=["live-w2-r1"])
    with engine.connect() as conn:
        run = conn.execute(select(Run)).one()
        assert (run.status, run.reason, run.epochs) == ("running", "", 2)
        assert run.started_at is not None and run.ended_at is None  # it has not ended
        [progress] = running_runs(conn)  # how far it was when loaded, for the dashboard
        assert progress.id == "live-w2-r1" and progress.elapsed_s is not None
        assert progress.elapsed_s >= 0
        assert conn.execute(select(Sweep.outcome, Sweep.finished_at)).one() == ("running", None)
    for path, text in whole.items():
        path.write_text(text)
    from scalebench import manifest

    manifest.record_verdict(sweep, "live-w2-r1", "succeeded", "", 10.0)
    report = ingest_location(engine, str(tmp_path), only=["live-w2-r1"])
    assert not report.conflicts
    with engine.connect() as conn:
        status, started_at, ended_at = conn.execute(
            select(Run.status, Run.started_at, Run.ended_at)
        ).one()
        assert status == "succeeded" and ended_at is not None and ended_at > started_at
        steps = conn.execute(select(func.count()).select_from(StepTiming)).scalar_one()
    assert steps == 2 * 12  # every step once


def test_a_manifest_from_before_its_optional_fields_ingests_with_their_defaults(
    engine: Engine, tmp_path: Path
) -> None:
    """An older ``sweep.json`` without trigger, times, versions or per-group verdicts and
    profiles: the manifest reader's defaults stand in, and a verdict line still counts."""
    sweep = write_training_sweep(
        tmp_path, "old", [FakeRun(1), FakeRun(2, repeat=1, launcher_status="failed")]
    )
    data = json.loads((sweep / "sweep.json").read_text())
    for key in ("trigger", "created_at", "code_version", "config_hash", "finished_at"):
        data.pop(key, None)
    for group in data["groups"]:
        for key in ("status", "reason", "seconds", "network"):
            group.pop(key, None)
    (sweep / "sweep.json").write_text(json.dumps(data))
    verdict = {"run_id": "old-w2-r2", "status": "failed", "reason": "rank 1 was killed"}
    (sweep / "verdicts.jsonl").write_text(json.dumps(verdict) + "\n")
    report = ingest_location(engine, str(tmp_path))
    assert report.runs == 2 and not report.refused
    with engine.connect() as conn:
        row = conn.execute(select(Sweep.__table__)).one()
        runs = {r.id: r for r in conn.execute(select(Run.__table__))}
    assert (row.trigger, row.code_version, row.finished_at) == ("cli", "", None)
    assert row.config_hash and row.created_at is not None
    assert row.outcome == "running"  # the group without a status is still planned
    assert sorted(runs) == ["old-w1-r1", "old-w2-r2"]
    assert (runs["old-w1-r1"].status, runs["old-w1-r1"].repeat) == ("running", 0)
    failed = runs["old-w2-r2"]
    assert (failed.status, failed.reason, failed.repeat, failed.world_size) == (
        "failed",
        "rank 1 was killed",
        1,
        2,
    )
    assert {r.network for r in runs.values()} == {"host"}
    assert {(r.backend, r.variant, r.placement) for r in runs.values()} == {
        ("gloo", "sync", "pack")
    }


DAMAGED_MANIFESTS: dict[str, Callable[[dict], bytes]] = {
    "empty": lambda good: b"",
    "truncated": lambda good: json.dumps(good).encode()[:40],
    "not an object": lambda good: b"[1, 2, 3]",
    "without groups": lambda good: json.dumps(
        {k: v for k, v in good.items() if k != "groups"}
    ).encode(),
    "without request": lambda good: json.dumps(
        {k: v for k, v in good.items() if k != "request"}
    ).encode(),
    "groups not a list": lambda good: json.dumps({**good, "groups": "g"}).encode(),
    "a group not an object": lambda good: json.dumps({**good, "groups": [7]}).encode(),
    "bad created_at": lambda good: json.dumps({**good, "created_at": "yesterday"}).encode(),
    "not UTF-8": lambda good: b"\xff\xfe\x00binary",
    # what one database would store and the other refuse: refused on both alike
    "NaN": lambda good: json.dumps(
        {**good, "request": {**good["request"], "seed": float("nan")}}
    ).encode(),
    "Infinity": lambda good: json.dumps({**good, "created_at": float("inf")}).encode(),
    "a NUL character": lambda good: json.dumps({**good, "code_version": "v\u0000"}).encode(),
}


def test_a_damaged_sweep_json_is_refused_by_name_and_the_other_sweeps_still_load(
    engine: Engine, tmp_path: Path
) -> None:
    """Every way a sweep.json can be damaged gives one refusal naming the file and what is
    wrong; sweeps before and after it in the folder load; nothing raises."""
    good_dir = write_training_sweep(tmp_path, "a-good", [FakeRun(1)])
    good = json.loads((good_dir / "sweep.json").read_text())
    for index, damage in enumerate(DAMAGED_MANIFESTS.values()):
        bad_dir = tmp_path / f"b{index:02d}-damaged"
        bad_dir.mkdir()
        (bad_dir / "sweep.json").write_bytes(damage(good))
    write_training_sweep(tmp_path, "z-later", [FakeRun(2)])
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)))
    linked = tmp_path / "c-linked"
    linked.mkdir()
    (linked / "sweep.json").symlink_to(binary)
    lines: list[str] = []
    report = ingest_location(engine, str(tmp_path), lines.append)
    assert report.sweeps == 2
    refused = [r for r in report.refused if r.startswith("sweep ")]
    assert len(refused) == len(DAMAGED_MANIFESTS) + 1, refused
    for line in refused:
        assert "sweep.json: " in line and "Traceback" not in line
    assert any("not JSON" in r for r in refused) and any("not UTF-8" in r for r in refused)
    assert any("'groups' missing" in r for r in refused)
    assert any("not an ISO 8601 time" in r for r in refused)
    assert any("NaN is no JSON number" in r for r in refused)
    assert any("Infinity is no JSON number" in r for r in refused)
    assert any("NUL character" in r for r in refused)
    with engine.connect() as conn:
        stored = set(conn.execute(select(Sweep.id)).scalars())
    assert stored == {"a-good", "z-later"}


def test_the_command_line_refuses_a_damaged_sweep_json_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    sweep_dir = tmp_path / "broken"
    sweep_dir.mkdir()
    (sweep_dir / "sweep.json").write_text('{"sweep_id": ')
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert cli.main(["ingest", str(sweep_dir), "--database", url]) == 1
    out = capsys.readouterr().out
    assert "refused: sweep " in out and "sweep.json: not JSON" in out
    assert cli.main(["report", str(sweep_dir), "--database", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sweep.json: not JSON" in err and "Traceback" not in err


def _world_size(size: int) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        data["groups"][1]["world_size"] = size

    return change


def _planned_again(data: dict) -> None:
    data["groups"][1].update(status="planned", reason="", seconds=None)


@pytest.mark.parametrize(
    "rewrite",
    [_world_size(1), _world_size(3), _planned_again],
    ids=["world size 1", "world size 3", "planned again"],
)
def test_a_refused_reading_changes_no_stored_row_not_even_the_sweeps_outcome(
    engine: Engine, tmp_path: Path, rewrite: Callable[[dict], None]
) -> None:
    """A ``sweep.json`` rewritten after a good ingest, its 2-worker group now of another size
    or planned again: that run is refused (or kept), and the stored sweep still reads as it
    did: its outcome was counted from what is stored, not from the refused reading."""
    sweep = write_training_sweep(tmp_path, "d", [FakeRun(1), FakeRun(2)])
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        before = conn.execute(select(Sweep.outcome, Sweep.finished_at)).one()
        runs_before = conn.execute(
            select(Run.id, Run.status, Run.world_size).order_by(Run.id)
        ).all()
    assert before.outcome == "succeeded"
    record = sweep / "sweep.json"
    data = json.loads(record.read_text())
    rewrite(data)
    record.write_text(json.dumps(data))

    report = ingest_location(engine, str(tmp_path))
    assert report.refused or report.conflicts
    with engine.connect() as conn:
        assert conn.execute(select(Sweep.outcome, Sweep.finished_at)).one() == before
        runs = conn.execute(select(Run.id, Run.status, Run.world_size).order_by(Run.id)).all()
        assert runs == runs_before
