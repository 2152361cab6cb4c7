"""The command line, end to end: real local groups, printed tables, the sweep manifest."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import TASK0_QUICK_ARGS
from sqlalchemy import select

from cli import main as cli
from cli.run import option_table
from scalebench.request import FIELDS

if TYPE_CHECKING:
    from conftest import CliSweep


def test_the_command_line_offers_every_field_of_the_trigger_form() -> None:
    from operators.benchmark_dag import params
    from scalebench.tasks import get_task

    run = next(
        action
        for action in cli.build_parser()._subparsers._group_actions
        if action.dest == "command"
    ).choices["run"]
    options = {action.dest: action for action in run._actions}
    form = params(get_task("task1a-resnet20-cifar10"))
    assert set(form) <= set(options)
    # every field, with its declared default, whatever the form shows
    for field in FIELDS:
        if field.kind == "stacks":  # --stack appends to a list: none given is no stack
            assert options[field.name].default is None and field.default == ()
            continue
        assert options[field.name].default == field.default, field.name


def test_the_documented_options_are_the_declared_fields() -> None:
    """docs/command-line.md's option table is the one the declarations give."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "command-line.md").read_text()
    table = text.split("<!-- request fields -->\n")[1].split("<!-- end -->")[0]
    assert table == option_table(), (
        'paste the output of python -c "from cli.run import option_table as t; print(t())"'
    )


def test_tasks_lists_every_task(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "task0-allreduce" in out and "task1a-resnet20-cifar10" in out
    assert "top1_accuracy ≥ 80 (light: 85)" in out


@pytest.mark.slow
def test_run_light_training_sweep_prints_time_to_accuracy_and_speedup(
    light_2a_cli_sweep: CliSweep, capsys: pytest.CaptureFixture[str]
) -> None:
    from results_db.database import make_engine
    from results_db.queries.sweeps import scaling

    sweep, out, database = light_2a_cli_sweep, light_2a_cli_sweep.out, light_2a_cli_sweep.database
    assert sweep.status == 0, out
    # Every group is stored from the plan on, running from its start, and loaded as soon as
    # it ends while the sweep goes on: what the dashboard shows as each group starts.
    assert sweep.stored_before_each_group == [
        [[1, "running"], [2, "planned"]],
        [[1, "succeeded"], [2, "running"]],
    ]
    assert out.count("loaded into the results database") == 2
    sweep_dir = sweep.sweep_dir
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    assert manifest["trigger"] == "cli"
    assert [g["world_size"] for g in manifest["groups"]] == [1, 2]
    assert all(g["status"] == "succeeded" for g in manifest["groups"])
    table = out[out.index("workers") :].splitlines()
    header, rows = table[0], table[2:4]

    def cells(row: str) -> list[str]:
        """A row's cells, less the "~" that marks a run contended on a busy machine."""
        return [cell for cell in row.split() if cell != "~"]

    assert "TTA s" in header and "speedup" in header and "communication ratio" in header
    # one repeat: its time says so, then the time without evaluation and the speedup
    assert cells(rows[0])[:3] == ["1", "1/1", "succeeded"] and "(1 repeat)" in rows[0]
    assert cells(rows[0])[7] == "1.00"  # speedup of 1 worker against itself
    assert float(cells(rows[1])[7]) > 0
    assert "group 2/2: 2 worker(s)" in out

    # The same table again: from the database by sweep id, and from the directory alone.
    assert cli.main(["report", sweep_dir.name, "--database", database]) == 0
    again = capsys.readouterr().out
    assert again[again.index("workers") :].splitlines()[:4] == table[:4]
    assert cli.main(["report", str(sweep_dir)]) == 0
    copy = capsys.readouterr().out
    assert copy[copy.index("workers") :].splitlines()[:4] == table[:4]
    assert cli.main(["report", "no-such-sweep", "--database", database]) == 2
    assert "sweep: sweep 'no-such-sweep' is not in the results database" in (
        capsys.readouterr().err
    )

    # the sweep was ingested: the database agrees with the printed table
    engine = make_engine(database)
    with engine.connect() as conn:
        rows = {r.world_size: r for r in scaling(conn, sweep_dir.name)}
    engine.dispose()
    assert rows[1].speedup == 1.0 and rows[2].reached == 1
    # one worker communicates nothing: its ratio is 0, not the cost of packing gradients
    assert rows[1].communication_ratio == 0.0 and rows[2].communication_ratio > 0
    assert f"{rows[2].speedup:.2f}" == cells(table[3])[7]


@pytest.mark.slow
def test_run_all_reduce_prints_latency_and_bus_bandwidth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    status = cli.main(
        [
            "run",
            "task0-allreduce",
            "--light",
            "--workers",
            "2",
            "--ranks-per-node",  # both ranks on one node: the table names the shape
            "2",
            "--repeats",
            "1",
            "--results",
            str(tmp_path),
            "--no-ingest",
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert "busbw GB/s" in out and "p95 ms" in out
    curves = out.split("ring model")[0]  # the curves' table; the ring-model fits follow it
    assert "ring model" in out and "α µs" in out
    rows = [line.split()[1:] for line in curves.splitlines() if line.startswith("2 (1×2) ")]
    sizes = {(row[1], int(row[2])) for row in rows}
    assert ("float32", 1_000_000) in sizes and ("float32", 1) in sizes
    big = next(r for r in rows if r[1] == "float32" and r[2] == "1000000")
    assert float(big[-2]) > 0  # busbw
    assert big[-1] == "10"  # repetitions behind the figures


def test_a_quick_all_reduce_sweep_measures_only_the_sizes_type_and_repetitions_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task 0's own fields: sizes up to 1,000 elements, float32 only, 2 timed repetitions
    each; every rank measured just that, and the sweep is another configuration than the
    task's whole light sweep."""
    import json

    from scalebench.config_hash import configuration_hash

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    argv = ["run", "task0-allreduce", "--light", "--workers", "2", "--repeats", "1"]
    argv += TASK0_QUICK_ARGS
    status = cli.main([*argv, "--results", str(tmp_path), "--no-ingest"])
    out = capsys.readouterr().out
    assert status == 0, out
    (sweep_dir,) = tmp_path.iterdir()
    for rank in (0, 1):
        records = [
            json.loads(line)
            for line in next(sweep_dir.glob(f"*/rank-{rank}.jsonl")).read_text().splitlines()
        ]
        measured = [r for r in records if r["kind"] == "allreduce"]
        assert {(r["dtype"], r["elements"]) for r in measured} == {
            ("float32", n) for n in (1, 3, 10, 32, 100, 316, 1000)
        }
        assert all(len(r["seconds"]) == 2 for r in measured)
    request = json.loads((sweep_dir / "sweep.json").read_text())["request"]
    assert (request["max_elements"], request["dtype"], request["repetitions"]) == (
        1000,
        "float32",
        2,
    )
    whole = {**request, "max_elements": None, "dtype": None, "repetitions": None}
    assert configuration_hash(request) != configuration_hash(whole)
    # a sweep stored before these fields existed keeps its configuration
    older = {k: v for k, v in whole.items() if k not in ("max_elements", "dtype", "repetitions")}
    assert configuration_hash(whole) == configuration_hash(older)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["task1a-resnet20-cifar10", "--max-elements", "10"], "max_elements: only the all-reduce"),
        (["task2a-logreg-epsilon", "--dtype", "float16"], "dtype: only the all-reduce task"),
        (["task0-allreduce", "--max-elements", "0"], "max_elements: must be at least 1"),
        (["task0-allreduce", "--repetitions", "-1"], "repetitions: must be at least 1"),
        (["task0-allreduce", "--dtype", "int8"], "dtype: must be one of float32, float16"),
    ],
)
def test_task0s_fields_are_refused_elsewhere_and_out_of_range(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with contextlib.suppress(SystemExit):
        status = cli.main(["run", *argv, "--light", "--results", str(tmp_path), "--no-ingest"])
        assert status == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())  # refused before any worker started


def test_report_refuses_a_directory_without_a_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "sweep: no sweep.json" in capsys.readouterr().err


def test_run_fetches_a_missing_data_set_first_and_stops_when_it_cannot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCALEBENCH_CIFAR10_URL", (tmp_path / "gone.tar.gz").as_uri())
    data, results = str(tmp_path / "data"), str(tmp_path / "results")
    args = [
        "run",
        "task1a-resnet20-cifar10",
        "--workers",
        "1",
        "--no-ingest",
        "--data-dir",
        data,
        "--results",
        results,
    ]
    assert cli.main(args) == 2  # on by default for CIFAR-10: tried, and it failed
    assert "download: could not download" in capsys.readouterr().err
    assert cli.main([*args, "--no-download"]) == 2
    assert "data_dir: CIFAR-10 is not in" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()  # no sweep was started


@pytest.mark.timing
@pytest.mark.slow
def test_sigterm_stops_a_sweep_of_200_groups_within_seconds_and_records_each(
    tmp_path: Path,
) -> None:
    """The running group is recorded ``cancelled``, the 199 never started ``skipped``."""
    import os
    import signal
    import subprocess
    import sys
    import time

    results = tmp_path / "results"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "run",
            "task1a-resnet20-cifar10",
            "--light",
            "--workers",
            "1,2",
            "--repeats",
            "100",
            "--results",
            str(results),
            "--no-ingest",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list(results.glob("*/*/rank-0.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.2)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert time.monotonic() - signalled < 15, "stopping took longer than the ranks' grace"
    (sweep_dir,) = results.iterdir()
    manifest = json.loads((sweep_dir / "sweep.json").read_text())  # verdicts folded in
    assert manifest["finished_at"] and not (sweep_dir / "verdicts.jsonl").exists()
    statuses = [g["status"] for g in manifest["groups"]]
    assert len(statuses) == 200
    assert statuses[0] == "cancelled" and set(statuses[1:]) == {"skipped"}
    # no rank outlived the command
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert str(sweep_dir).encode() not in cmdline


@pytest.mark.slow
def test_an_interrupted_sweep_loads_what_it_measured_before_exiting(tmp_path: Path) -> None:
    """Ctrl-C while the first group trains: exit 130, and the database holds the stopped
    group (cancelled, with the steps it took) and the unstarted one (skipped)."""
    import signal
    import subprocess
    import sys
    import time

    from results_db.database import make_engine
    from results_db.models import Run, StepTiming, Sweep

    results, url = tmp_path / "results", f"sqlite:///{tmp_path / 'r.db'}"
    # light Task 1a: a group of a minute or more (light Task 2a reaches its goal in seconds)
    argv = ["run", "task1a-resnet20-cifar10", "--light", "--workers", "1", "--repeats", "2"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", *argv, "--results", str(results), "--database", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # the first group's first steps are on disk
        first = list(results.glob("*/*-r1/rank-0.jsonl"))
        if first and b'"step"' in first[0].read_bytes():
            break
        time.sleep(0.1)
    engine = make_engine(url)
    with engine.connect() as conn:  # the whole plan is stored, the group training running
        training = {r.id[-2:]: r.status for r in conn.execute(select(Run.id, Run.status))}
        sweep = conn.execute(select(Sweep.outcome, Sweep.finished_at)).one()
    engine.dispose()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert training == {"r1": "running", "r2": "planned"}, (training, out)
    assert tuple(sweep) == ("running", None)
    assert proc.returncode == 130, out
    assert "interrupted: loading what was measured" in out and "loaded sweep" in out, out
    with engine.connect() as conn:
        runs = {r.id[-2:]: r.status for r in conn.execute(select(Run.id, Run.status))}
        steps = conn.execute(select(StepTiming.step)).all()
        outcome = conn.execute(select(Sweep.outcome)).scalar_one()
    engine.dispose()
    assert runs == {"r1": "cancelled", "r2": "skipped"}, runs
    assert steps and outcome == "cancelled"


def rank_processes(marker: Path) -> list[int]:
    """Process ids whose command line names ``marker`` (a sweep's directory)."""
    import os

    found = []
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"workers.run" in cmdline and str(marker).encode() in cmdline:
            found.append(pid)
    return found


# Beside the other tests: the ranks end within a second of the kill (a watchdog polls every
# 0.5 s), far inside the bound below even on a busy machine.
@pytest.mark.slow
def test_ranks_die_with_a_killed_launcher_and_the_next_ingest_closes_its_sweep(
    tmp_path: Path,
) -> None:
    """``kill -9`` of the command line: its ranks stop within seconds (not hours later,
    under PID 1), and the next ingest records the group ``cancelled``, the launcher gone."""
    import signal
    import subprocess
    import sys
    import time

    from scalebench.manifest import LAUNCHER_VANISHED
    from workers.records import read_rank_file
    from workers.run import LAUNCHER_VANISHED as RANK_REASON

    results = tmp_path / "results"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli.main",
            "run",
            "task3a-awdlstm-wikitext2",
            "--light",
            "--workers",
            "2",
            "--repeats",
            "2",
            "--results",
            str(results),
            "--no-ingest",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rank1 = list(results.glob("*/*/rank-1.jsonl"))
        if rank1 and rank1[0].read_text().count('"kind":"step"') >= 2:
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the ranks never started training")
    (sweep_dir,) = results.iterdir()
    assert len(rank_processes(sweep_dir)) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = time.monotonic()
    while rank_processes(sweep_dir) and time.monotonic() - killed < 20:
        time.sleep(0.2)
    assert not rank_processes(sweep_dir), "ranks outlived their launcher"
    assert time.monotonic() - killed < 15
    endings = [
        read_rank_file(path).of_kind("event")[-1] for path in sweep_dir.glob("*/rank-*.jsonl")
    ]
    assert len(endings) == 2 and {e["event"] for e in endings} == {"failed"}
    # the first to notice says why; its peer may see the connection drop first
    assert RANK_REASON in [e["reason"] for e in endings]
    assert json.loads((sweep_dir / "sweep.json").read_text())["finished_at"] is None

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "ingest",
            str(results),
            "--database",
            f"sqlite:///{tmp_path / 'results.db'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"closed sweep {sweep_dir.name}: {LAUNCHER_VANISHED}" in done.stdout
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    assert manifest["finished_at"]
    verdicts = [(g["status"], g["reason"]) for g in manifest["groups"]]
    assert verdicts == [("cancelled", LAUNCHER_VANISHED), ("skipped", LAUNCHER_VANISHED)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["task9_unknown"], "invalid choice: 'task9_unknown'"),
        (["task4a_gnmt_wmt16", "{light: true}"], "conf is not JSON"),
        (["task4a_gnmt_wmt16", "[1, 2]"], "conf must be a JSON object"),
        (
            ["task2a_logreg_epsilon", '{"workers": "1,2", "light": true}'],
            "conf refused: workers: '1,2' is not of type 'array'",
        ),
        (
            ["task2a_logreg_epsilon", '{"light": true, "seed": 9223372036854775807}'],
            "conf refused: seed: with 3 repeat(s) the seed may be at most",
        ),
        (
            ["task2a_logreg_epsilon", '{"light": true, "speed": "fast"}'],
            "conf refused: speed: unknown field 'speed'",
        ),
    ],
)
def test_the_embedded_runner_refuses_bad_arguments_before_starting_airflow(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import embedded

    with pytest.raises(SystemExit) as exited:
        embedded.main(argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_the_embedded_runner_names_a_failed_task_with_its_error() -> None:
    from cli.embedded import TaskFailures

    log = """\
2026-11-23T23:26:27.64Z [info     ] starting [task] loc=task_runner.py:1
2026-11-23T23:26:28.77Z [error    ] Task failed with exception     [task] loc=task_runner.py:1676
Traceback (most recent call last):
  File "x.py", line 1, in f
    raise ConfigException("Service host/port is not set.")
kubernetes.config.config_exception.ConfigException: Service host/port is not set.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "y.py", line 2, in g
ConfigException: Invalid kube-config file. No configuration found.
2026-11-23T23:26:28.80Z [info     ] Task finished [task] loc=task_runner.py:1
"""
    failures = TaskFailures()
    for line in log.splitlines(keepends=True):
        failures.feed(line, "workers_01.train[0]")
    failures.close()
    assert failures.failures == [
        (
            "workers_01.train[0]",
            "ConfigException: Invalid kube-config file. No configuration found.",
        )
    ]


def test_the_embedded_runner_knows_every_task_dag_and_the_nightly() -> None:
    from cli.embedded import known_dag_ids, parse_args

    assert "task4a_gnmt_wmt16" in known_dag_ids() and "scalebench_nightly" in known_dag_ids()
    args = parse_args(["task4a_gnmt_wmt16", '{"workers": [2], "light": true}'])
    assert (args.dag_id, args.conf) == ("task4a_gnmt_wmt16", {"workers": [2], "light": True})


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("garbage", "database: not a results database URL"),
        ("nosuch://x", "database: not a results database URL"),
        ("mysql://x", "needs a driver scalebench does not install (MySQLdb)"),
        ("postgresql+psycopg2://postgres@127.0.0.1:9/x", "Is the server running"),
    ],
)
def test_an_unusable_database_gets_one_line_not_a_traceback(
    url: str, message: str, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "SCALEBENCH_DATABASE_URL": url}
    env.pop("SCALEBENCH_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "ingest", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    debug = subprocess.run(
        [sys.executable, "-m", "cli.main", "ingest", str(tmp_path)],
        env={**env, "SCALEBENCH_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" in debug.stderr


def test_a_diverged_runs_nan_metric_shows_as_a_dash() -> None:
    from types import SimpleNamespace

    from results_db.analytics import scaling_rows
    from results_db.report import training_table

    run = SimpleNamespace(
        id="r",
        world_size=1,
        status="diverged",
        goal_reached=False,
        time_to_accuracy_s=None,
        time_to_accuracy_without_eval_s=None,
        compute_s=None,
        communication_ratio=float("nan"),
        ranks_per_node=1,
    )
    table = training_table(scaling_rows([run]), [run], {"r": float("nan")}, "bleu")
    assert "nan" not in table.lower()
    assert "0 of 1 reached the goal" in table and table.splitlines()[-1].endswith("—")


def test_placement_on_the_command_line_is_checked_before_any_worker_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One rank per node cannot be had from one machine's processes: refused by name, and no
    sweep directory is made; ``pack`` is accepted locally and recorded in the request."""
    results = tmp_path / "results"
    args = [
        "run",
        "task0-allreduce",
        "--light",
        "--workers",
        "2",
        "--repeats",
        "1",
        "--results",
        str(results),
        "--no-ingest",
    ]
    assert cli.main([*args, "--placement", "spread"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scalebench: error: placement:") and "local" in err
    assert not results.exists()
    parsed = cli.build_parser().parse_args([*args, "--placement", "pack"])
    assert parsed.placement == "pack"


def test_a_database_that_cannot_take_the_results_is_said_before_any_worker_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    status = cli.main(
        [
            "run",
            "task0-allreduce",
            "--light",
            "--workers",
            "2",
            "--repeats",
            "1",
            "--results",
            str(results),
            "--database",
            "postgresql+psycopg2://nobody@127.0.0.1:1/none",
        ]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("scalebench: error: database: cannot use the results database")
    assert not results.exists()  # no sweep was started


def test_a_launcher_that_cannot_start_fails_its_group_not_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kubernetes pods see only the results volume: a results folder outside it cannot be
    given to them. The group fails saying so (as in Airflow), the sweep goes on and ends
    with exit status 1, and no traceback reaches the user. (The cluster, read first for the
    fit, is the API emulator.)"""
    from kube_emulator import Stage, emulated_cluster, running

    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "volume"))
    results = tmp_path / "elsewhere"
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch, "kubernetes_default"):
        status = cli.main(
            [
                "run",
                "task0-allreduce",
                "--light",
                "--workers",
                "2",
                "--repeats",
                "2",
                "--launcher",
                "kubernetes",
                "--gpus-per-worker",
                "0",
                "--no-ingest",
                "--results",
                str(results),
            ]
        )
    out, err = capsys.readouterr()
    assert status == 1 and "Traceback" not in out + err
    assert out.count("failed in 0.0 s: the kubernetes launcher failed: ") == 2
    assert "is not under the results root" in out
    (sweep_dir,) = results.iterdir()
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    assert [g["status"] for g in manifest["groups"]] == ["failed", "failed"]


def test_a_kubernetes_run_is_fitted_to_the_cluster_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``scalebench run --launcher kubernetes`` reads the cluster first: a group its GPU
    nodes cannot hold is refused naming the numbers, and a cluster that cannot be reached in
    one line; nothing is created either way."""
    from kube_emulator import JOBS, PODS, Inventory, Stage, emulated_cluster, gpu_node, running

    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "volume"))
    inventory = Inventory(nodes=[gpu_node("h100-0", 8), gpu_node("h100-1", 8)])
    args = ["run", "task0-allreduce", "--light", "--workers", "32", "--launcher", "kubernetes"]
    with emulated_cluster(
        [Stage(0, running())], tmp_path, monkeypatch, "kubernetes_default", inventory=inventory
    ) as cluster:
        status = cli.main([*args, "--no-ingest", "--results", str(tmp_path / "volume")])
        left = cluster.objects(JOBS) + cluster.objects(PODS)
    out, err = capsys.readouterr()
    assert status == 2 and left == [] and "Traceback" not in out + err
    assert err.startswith(
        "scalebench: error: workers: 32 ranks need 4 nodes of 8 GPUs each (8 ranks × 1 GPU), "
        "and the cluster has 2"
    ), err
    monkeypatch.setenv("SCALEBENCH_K8S_CONN_ID", "nowhere")
    assert cli.main([*args, "--no-ingest"]) == 2
    out, err = capsys.readouterr()
    [said] = err.splitlines()
    assert said.startswith("scalebench: error: launcher: cannot reach the cluster"), said
