"""The Airflow DAGs: they parse fast, refuse bad triggers, and run a real sweep."""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from sqlalchemy import select

# one DAG per task, plus the nightly
DAG_IDS = {"task0_allreduce", "task1a_resnet20_cifar10", "task2a_logreg_epsilon",
           "task3a_awdlstm_wikitext2", "task4a_gnmt_wmt16", "task4b_transformer_wmt17"}  # fmt: skip


@pytest.fixture(scope="module")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_every_task_has_a_dag_and_nothing_fails_to_import(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == DAG_IDS | {"scalebench_nightly"}
    for dag_id in DAG_IDS:
        dag = dagbag.get_dag(dag_id)
        assert "scalebench" in dag.tags and dag.doc_md
        per_size = {f"workers_{k}.{step}" for k in (1, 2, 4, 8, 16, 32)
                    for step in ("select", "train")}  # fmt: skip
        expected = {"validate", "plan", "ingest", "summarize", *per_size}
        if dag_id != "task0_allreduce":  # the all-reduce task has no data set
            expected.add("prepare_dataset")
        assert {t.task_id for t in dag.tasks} == expected
        for k in (1, 2, 4, 8, 16, 32):  # a group of k takes k slots of the workers pool
            train = dag.get_task(f"workers_{k}.train")
            assert (train.pool, train.pool_slots) == ("scalebench_workers", k)


@pytest.mark.parametrize("dag_file", ["benchmarks.py", "nightly.py"])
def test_dag_files_parse_fast_and_import_no_torch(dag_file: str) -> None:
    code = (
        "import sys, time\n"
        "import airflow.sdk  # Airflow's own import is not the DAG file's cost\n"
        "import importlib.util as u\n"
        "t = time.perf_counter()\n"
        f"s = u.spec_from_file_location('d', {str(REPO / 'dags' / dag_file)!r})\n"
        "m = u.module_from_spec(s); s.loader.exec_module(m)\n"
        "print(time.perf_counter() - t, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout.split()  # fmt: skip
    seconds, torch_loaded = float(out[-2]), out[-1]
    assert torch_loaded == "False"
    assert seconds < 1.0, f"{dag_file} took {seconds:.2f} s to parse"


@pytest.mark.parametrize(
    ("conf", "field"),
    [
        ({"workers": [3]}, "workers"),
        ({"workers": [0]}, "workers"),
        ({"workers": []}, "workers"),
        ({"workers": [1, 1]}, "workers"),
        ({"workers": "1,2"}, "workers"),
        ({"repeats": "abc"}, "repeats"),
        ({"repeats": 0}, "repeats"),
        ({"backend": "carrier-pigeon"}, "backend"),
        ({"light": "yes"}, "light"),
        ({"variant": "async"}, "variant"),
        ({"collective_timeout_s": -1}, "collective_timeout_s"),
        ({"group_timeout_s": "soon"}, "group_timeout_s"),
        ({"seed": -5}, "seed"),
        ({"launcher": "slurm"}, "launcher"),
        ({"gpus_per_worker": -1}, "gpus_per_worker"),
        ({"gpus_per_worker": 1.5}, "gpus_per_worker"),
        ({"precision": "fp8"}, "precision"),
        ({"worker_image": "x" * 300}, "worker_image"),
    ],
)
def test_the_trigger_form_refuses_bad_input_naming_the_field(dagbag, conf, field) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dagbag.get_dag("task1a_resnet20_cifar10").params)
    with pytest.raises(ParamValidationError, match=f"param {field}"):
        params.update(conf)  # a bad value is refused as it is set...
        params.validate()  # ...or, at the latest, when the run is created


@pytest.fixture
def sweep_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "results"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path


@pytest.mark.slow
def test_a_refused_combination_fails_before_any_worker_starts(
    dagbag, airflow_db, sweep_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", f"sqlite:///{sweep_env / 'r.db'}")
    dag = dagbag.get_dag("task1a_resnet20_cifar10")
    run = dag.test(run_conf={"light": False, "workers": [1]})  # no CIFAR-10 here
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["validate"] == "failed"
    assert not (sweep_env / "results").exists()  # nothing was planned or started


@pytest.mark.slow
def test_a_light_sweep_runs_end_to_end_into_the_database(
    dagbag, airflow_db, sweep_env, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from results_db.database import make_engine
    from results_db.models import Run, Sweep

    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", database_url)
    started = time.monotonic()
    # Task 2a: its light runs reach the goal within seconds; the DAG is the same for every task.
    run = dagbag.get_dag("task2a_logreg_epsilon").test(
        run_conf={"workers": [1, 2], "light": True}
    )
    assert run.state == "success", f"DAG run ended {run.state}"
    engine = make_engine(database_url)
    with engine.connect() as conn:
        runs = conn.execute(select(Run.world_size, Run.status, Run.goal_reached)).all()
        sweep = conn.execute(select(Sweep.trigger, Sweep.outcome)).one()
    engine.dispose()
    assert sorted(runs) == [(1, "succeeded", True), (2, "succeeded", True)]
    assert tuple(sweep) == ("manual", "succeeded")
    assert time.monotonic() - started < 300


@pytest.mark.slow
def test_stopping_the_airflow_task_cancels_the_sweep_and_keeps_what_it_measured(
    airflow_db, sweep_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM to the process running the task (what Airflow sends when a running task
    is marked failed or its run is stopped) → on_kill stops every rank, the group is
    recorded as cancelled with its steps, and the sweep's next group never starts."""
    import json
    import os
    import signal

    from results_db.database import make_engine
    from results_db.models import Run, StepTiming

    url = f"sqlite:///{sweep_env / 'r.db'}"
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", url)
    script = (
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"dag = DagBag(dag_folder={str(REPO / 'dags')!r}).get_dag('task1a_resnet20_cifar10')\n"
        "run = dag.test(run_conf={'workers': [2], 'repeats': 2, 'light': True,\n"
        "                         'precision': 'bf16'})  # bf16 on a CPU: slow enough to catch\n"
        "print('DAG RUN', run.state, flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=REPO)  # fmt: skip
    results = sweep_env / "results"
    deadline = time.monotonic() + 180
    running = None  # the run directory whose ranks are training when the task is stopped
    while time.monotonic() < deadline and proc.poll() is None and running is None:
        for rank_file in results.glob("*/*/rank-0.jsonl"):
            text = rank_file.read_text()
            if '"kind":"step"' in text and '"finished"' not in text:
                running = rank_file.parent
        time.sleep(0.05)
    if running is None:
        proc.kill()
        pytest.fail("no group was seen training:\n" + proc.communicate()[0][-3000:])
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert "DAG RUN failed" in out, out[-3000:]

    (sweep_dir,) = results.iterdir()
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    statuses = {g["run_id"]: g["status"] for g in manifest["groups"]}
    assert statuses.pop(running.name) == "cancelled"
    # The other repeat ran before (Airflow may run mapped instances in any order)
    # or was skipped because the sweep had been cancelled.
    assert list(statuses.values()) in (["succeeded"], ["skipped"])
    engine = make_engine(url)
    with engine.connect() as conn:
        runs = dict(conn.execute(select(Run.id, Run.status)).all())
        steps = conn.execute(select(StepTiming.step).where(StepTiming.run_id == running.name)).all()
    engine.dispose()
    assert runs[running.name] == "cancelled"
    assert steps, "the cancelled group's measurements were lost"
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):  # no rank outlived it
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert str(sweep_dir).encode() not in cmdline
