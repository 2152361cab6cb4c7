"""The Airflow DAGs: they parse fast, refuse bad triggers, and run a real sweep."""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, TASK0_QUICK
from sqlalchemy import select

from operators.benchmark_dag import ENDED_BEFORE_START, ENDED_WITHOUT_VERDICT
from scalebench.host import shaping_problems
from scalebench.network import parse_profile

# one DAG per task, plus the nightly
DAG_IDS = {
    "task0_allreduce",
    "task1a_resnet20_cifar10",
    "task2a_logreg_epsilon",
    "task3a_awdlstm_wikitext2",
    "task4a_gnmt_wmt16",
    "task4b_transformer_wmt17",
}


@pytest.fixture(scope="module")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_every_task_has_a_dag_and_nothing_fails_to_import(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == DAG_IDS | {"scalebench_nightly"}
    from scalebench.tasks import TASKS

    for spec in TASKS.values():
        dag_id = spec.id.replace("-", "_")
        dag = dagbag.get_dag(dag_id)
        assert "scalebench" in dag.tags and dag.doc_md
        # one task group per worker count of the task (Task 2a stops at 16)
        per_size = {
            f"workers_{k:02d}.{step}" for k in spec.world_sizes for step in ("select", "train")
        }
        expected = {"validate", "plan", "ingest", "summarize", *per_size}
        if dag_id != "task0_allreduce":  # the all-reduce task has no data set
            expected.add("prepare_dataset")
        assert {t.task_id for t in dag.tasks} == expected
        for k in spec.world_sizes:  # a group of k takes k slots of the workers pool
            train = dag.get_task(f"workers_{k:02d}.train")
            assert (train.pool, train.pool_slots) == ("scalebench_workers", k)


@pytest.mark.timing  # it asserts on seconds: run alone, not beside other tests
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
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout.split()
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
        ({"seed": 2**63}, "seed"),
        ({"collective_timeout_s": 0.000001}, "collective_timeout_s"),
        ({"collective_timeout_s": 1e15}, "collective_timeout_s"),
        ({"launcher": "slurm"}, "launcher"),
        ({"gpus_per_worker": -1}, "gpus_per_worker"),
        ({"gpus_per_worker": 1.5}, "gpus_per_worker"),
        ({"precision": "fp8"}, "precision"),
        ({"worker_image": "x" * 300}, "worker_image"),
        ({"network": ["10mbps"]}, "network"),
        ({"network": []}, "network"),
        ({"network": "host"}, "network"),
        ({"network": ["host", "host"]}, "network"),
        ({"placement": "everywhere"}, "placement"),
        ({"device": "tpu"}, "device"),
        ({"download": "maybe"}, "download"),
    ],
)
def test_the_trigger_form_refuses_bad_input_naming_the_field(dagbag, conf, field) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(dagbag.get_dag("task1a_resnet20_cifar10").params)
    with pytest.raises(ParamValidationError, match=f"param {field}"):
        params.update(conf)  # a bad value is refused as it is set...
        params.validate()  # ...or, at the latest, when the run is created


def test_every_form_field_and_dag_says_what_it_is_in_its_tasks_words(dagbag) -> None:
    """Each field of each form explains itself (more than its title restated), in the words
    of its task; each DAG has a one-line description; the worker counts' task groups sort
    as numbers (Airflow's grid sorts them by name)."""
    for dag_id in sorted(DAG_IDS):
        dag = dagbag.get_dag(dag_id)
        assert dag.description and len(dag.description.split()) >= 6, dag_id
        for name, param in dag.params.items():
            words = (param.description or "").split()
            assert len(words) >= 8, (dag_id, name, param.description)
        groups = sorted({t.task_id.split(".")[0] for t in dag.tasks if "." in t.task_id})
        sizes = [int(group.removeprefix("workers_")) for group in groups]
        assert sizes == sorted(sizes) and groups[0] == "workers_01", (dag_id, groups)
    assert dagbag.get_dag("scalebench_nightly").description
    words = {name: p.description for name, p in dagbag.get_dag("task0_allreduce").params.items()}
    assert "training group" not in words["workers"] and "all-reduce" in words["workers"]
    assert "data and target" not in words["light"] and "message sizes" in words["light"]
    assert (
        "nccl: NVIDIA GPUs only" in words["backend"]
        and "mpi: a torch built with MPI" in (words["backend"])
    )
    task3a = dagbag.get_dag("task3a_awdlstm_wikitext2").params
    assert "bf16" not in task3a.get_param("precision").description
    assert "implements fp32 only" in task3a.get_param("precision").description
    assert "ddp" not in task3a.get_param("variant").description
    limit = dagbag.get_dag("task1a_resnet20_cifar10").params.get_param("group_timeout_s")
    assert limit.value is None and "21,600 s full, 3,600 s light" in limit.description


def test_each_form_offers_only_what_its_task_implements(dagbag) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    def offered(dag_id: str, field: str) -> list:
        schema = dagbag.get_dag(dag_id).params.get_param(field).schema
        return schema.get("enum") or schema["items"]["enum"]

    assert offered("task1a_resnet20_cifar10", "precision") == ["fp32", "bf16"]
    assert offered("task1a_resnet20_cifar10", "variant") == ["sync", "ddp"]
    assert offered("task3a_awdlstm_wikitext2", "precision") == ["fp32"]
    assert offered("task4b_transformer_wmt17", "variant") == ["sync"]
    assert offered("task2a_logreg_epsilon", "workers") == [1, 2, 4, 8, 16]
    # Downloading is on where the publisher's checksums prove the download intact.
    download = {
        dag_id: dagbag.get_dag(dag_id).params.get_param("download").value
        for dag_id in (
            "task1a_resnet20_cifar10",
            "task2a_logreg_epsilon",
            "task3a_awdlstm_wikitext2",
            "task4a_gnmt_wmt16",
            "task4b_transformer_wmt17",
        )
    }
    assert download == {
        "task1a_resnet20_cifar10": True,
        "task2a_logreg_epsilon": False,
        "task3a_awdlstm_wikitext2": True,
        "task4a_gnmt_wmt16": True,
        "task4b_transformer_wmt17": True,
    }
    assert "download" not in dagbag.get_dag("task0_allreduce").params
    params = copy.deepcopy(dagbag.get_dag("task2a_logreg_epsilon").params)
    with pytest.raises(ParamValidationError, match="param workers"):
        params.update({"workers": [1, 32]})
        params.validate()


@pytest.fixture
def sweep_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "results"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return tmp_path


@pytest.mark.slow
def test_a_refused_combination_fails_before_any_worker_starts(
    dagbag, airflow_db, sweep_env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused before anything starts, the task log's first error line being the refusal
    in one sentence naming the field (Airflow's own record with its stack follows it)."""
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", f"sqlite:///{sweep_env / 'r.db'}")
    dag = dagbag.get_dag("task1a_resnet20_cifar10")
    results = sweep_env / "results"
    for conf, field in (
        ({"light": False, "workers": [1], "download": False}, "data_dir"),  # no CIFAR-10 here
        ({"workers": [1], "light": True, "bogus_key": 5}, "bogus_key"),
    ):
        caplog.clear()
        run = dag.test(run_conf=conf)
        assert run.state == "failed"
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors and errors[0].startswith("request refused: "), errors
        assert errors[0].split("request refused: ", 1)[1].startswith(f"{field}: "), errors
        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        # One red task, the refusal; nothing after it ran, ingest included.
        assert states.pop("validate") == "failed"
        assert set(states.values()) <= {"upstream_failed", "skipped"}, states
        assert not results.exists()  # nothing was planned or started

    # Asked to download, the request passes; the data step fetches from the mirror, finds
    # an archive that is not CIFAR-10's and fails, and nothing trains.
    mirror = sweep_env / "mirror.tar.gz"
    mirror.write_bytes(b"not an archive")
    monkeypatch.setenv("SCALEBENCH_CIFAR10_URL", mirror.as_uri())
    monkeypatch.setenv("SCALEBENCH_DATA_DIR", str(sweep_env / "data"))
    run = dag.test(run_conf={"light": False, "workers": [1], "download": True})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "failed"
    assert states["validate"] == "success" and states["prepare_dataset"] == "failed", states
    assert not results.exists()
    assert not (sweep_env / "data" / "cifar-10-batches-py").exists()


# Both run beside the other tests: nothing here is timed, and a shaped group keeps to its own
# namespaces, bridge and firewall rule, as two sweeps at once do.
@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_a_light_sweep_runs_end_to_end_into_the_database(
    dagbag, airflow_db, sweep_env, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from results_db.database import make_engine
    from results_db.models import AllReduceSample, Run, Sweep

    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", database_url)
    # The DAG is the same for every task. Into SQLite, Task 2a (its light runs reach the goal
    # within seconds) at one worker on host. Into PostgreSQL (the deployment's database) a
    # group of two on an emulated 1gbit link where this machine can build one (root), else on
    # host: Task 0 at its quick size (sizes up to 1,000 elements, float32, twice each), the
    # cheapest group of two, whose all-reduce timings are loaded too. (The command line's
    # light sweep runs Task 2a at 1 and 2 workers into SQLite; a sweep's groups on several
    # networks are planned in tests/test_network.py.)
    shaping = not shaping_problems([parse_profile("1gbit")])
    postgres = database_url.startswith("postgresql")
    networks = ["1gbit"] if shaping and postgres else ["host"]
    if postgres:
        dag_id, workers, goal, quick = "task0_allreduce", [2], False, TASK0_QUICK
    else:
        dag_id, workers, goal, quick = "task2a_logreg_epsilon", [1], True, {}
    run = dagbag.get_dag(dag_id).test(
        run_conf={"workers": workers, "light": True, "repeats": 1, "network": networks, **quick}
    )
    assert run.state == "success", f"DAG run ended {run.state}"
    engine = make_engine(database_url)
    with engine.connect() as conn:
        runs = conn.execute(select(Run.world_size, Run.status, Run.goal_reached, Run.network))
        runs = runs.all()
        sweep = conn.execute(select(Sweep.trigger, Sweep.outcome, Sweep.finished_at)).one()
        timings = conn.execute(select(AllReduceSample.elements).distinct()).scalars().all()
    engine.dispose()
    assert sorted(runs) == sorted(
        (k, "succeeded", goal, network) for network in networks for k in workers
    )
    assert tuple(sweep)[:2] == ("manual", "succeeded") and sweep.finished_at is not None
    assert sorted(timings) == ([1, 3, 10, 32, 100, 316, 1000] if postgres else []), timings


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
    # Task 2a: its ranks start within seconds, and a light group of two trains for seconds
    # more, long after its first step (when it is caught); the DAG is the same for every task.
    script = (
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"dag = DagBag(dag_folder={str(REPO / 'dags')!r}).get_dag('task2a_logreg_epsilon')\n"
        "run = dag.test(run_conf={'workers': [2], 'repeats': 2, 'light': True})\n"
        "print('DAG RUN', run.state, flush=True)\n"
    )
    log = sweep_env / "dag-test.log"
    proc = start_in_background(script, log)
    results = sweep_env / "results"
    running = wait_for_training(proc, log, results)  # its ranks train when the task is stopped
    engine = make_engine(url)
    with engine.connect() as conn:  # every group a row from the plan on; this one running
        rows = dict(conn.execute(select(Run.id, Run.status)).all())
    engine.dispose()
    proc.send_signal(signal.SIGTERM)
    assert rows.pop(running.name) == "running", rows
    assert list(rows.values()) in (["succeeded"], ["planned"]), rows
    out = output_when_done(proc, log, timeout=180)
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


@pytest.mark.slow
def test_a_launcher_that_breaks_fails_its_task_and_the_sweep_is_still_closed_and_loaded(
    dagbag, airflow_db, sweep_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Kubernetes group whose cluster passes validate and then fails every create (an
    API server that breaks mid-sweep): its task fails, its verdict says why, and ingest
    closes and loads the sweep all the same."""
    import re

    from kube_emulator import Stage, emulated_cluster, running

    from results_db.database import make_engine
    from results_db.models import Run, Sweep

    url = f"sqlite:///{sweep_env / 'r.db'}"
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", url)
    monkeypatch.setenv("SCALEBENCH_WORKER_IMAGE", "scalebench/worker:test")
    monkeypatch.setenv("SCALEBENCH_K8S_CONN_ID", "emulated_k8s")
    with emulated_cluster([Stage(0, running())], sweep_env, monkeypatch) as cluster:
        creates = re.compile(r"/apis/networking.k8s.io/v1/namespaces/[^/]+/networkpolicies")
        cluster.call(lambda h: h["post", creates] << 500)
        # Every field an earlier test of this module set is given: dag.test keeps a run's
        # conf in the DAG's stored form, and the next run of the same DAG would inherit it.
        run = dagbag.get_dag("task2a_logreg_epsilon").test(
            run_conf={
                "workers": [1],
                "light": True,
                "repeats": 1,
                "launcher": "kubernetes",
                "gpus_per_worker": 0,
                "network": ["host"],
            }
        )
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["validate"] == "success"
    assert states["workers_01.train"] == "failed" and states["ingest"] == "success"
    engine = make_engine(url)
    with engine.connect() as conn:
        ((status, reason),) = conn.execute(select(Run.status, Run.reason)).all()
        sweep = conn.execute(select(Sweep.outcome, Sweep.finished_at)).one()
    engine.dispose()
    assert status == "failed" and reason.startswith("the kubernetes launcher failed: "), reason
    assert sweep.outcome == "failed" and sweep.finished_at is not None


def test_a_kubernetes_sweep_is_refused_at_validate_when_the_cluster_does_not_answer(
    dagbag, airflow_db, sweep_env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing is planned or started against a cluster that does not answer: validate fails
    in one sentence naming the API server, without a retry."""
    import json

    kubeconfig = sweep_env / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: nowhere\n"
        "clusters: [{name: nowhere, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: nowhere, context: {cluster: nowhere, user: nobody}}]\n"
        "users: [{name: nobody, user: {}}]\n"
    )
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
    monkeypatch.setenv("AIRFLOW_CONN_NOWHERE_K8S", json.dumps(connection))
    monkeypatch.setenv("SCALEBENCH_K8S_CONN_ID", "nowhere_k8s")
    run = dagbag.get_dag("task2a_logreg_epsilon").test(
        run_conf={
            "workers": [1],
            "light": True,
            "repeats": 1,
            "launcher": "kubernetes",
            "gpus_per_worker": 0,
            "network": ["host"],
        }
    )
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["validate"] == "failed" and states["plan"] != "success", states
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors[0].startswith("request refused: launcher: the API server at "), errors
    assert "http://127.0.0.1:9 does not answer" in errors[0], errors


@pytest.mark.slow
def test_a_full_kubernetes_sweep_is_refused_at_validate_by_the_data_pod(
    dagbag, airflow_db, sweep_env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """In Airflow the data pod is the provider's KubernetesPodOperator, run by validate: a set
    missing from the claim refuses the sweep there, in the pod's own words, and the pod is
    gone."""
    from kube_emulator import PODS, Stage, emulated_cluster, exited

    missing = "workers.data: epsilon: epsilon is not prepared in /var/scalebench/data/epsilon"
    monkeypatch.setenv("SCALEBENCH_WORKER_IMAGE", "scalebench/worker:test")
    monkeypatch.setenv("SCALEBENCH_K8S_CONN_ID", "emulated_k8s")
    monkeypatch.setenv("SCALEBENCH_K8S_DATA_CLAIM", "scalebench-data")
    with emulated_cluster(
        [Stage(0, exited(1), logs={0: missing + "\n"})], sweep_env, monkeypatch
    ) as cluster:
        run = dagbag.get_dag("task2a_logreg_epsilon").test(
            run_conf={
                "workers": [1],
                "light": False,
                "download": False,
                "repeats": 1,
                "launcher": "kubernetes",
                "gpus_per_worker": 0,
                "network": ["host"],
            }
        )
        left = cluster.objects(PODS)
        created = [p for m, p, _, _ in cluster.requests() if m == "POST" and p.endswith("/pods")]
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["validate"] == "failed" and states["plan"] != "success", states
    assert len(created) == 1 and left == []  # the data pod, and it is gone
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    refused = [e for e in errors if e.startswith("request refused: ")]
    assert refused and refused[0] == (
        f"request refused: data_dir: {missing} Or ask for the download (download: true)."
    ), errors


@pytest.mark.slow
def test_a_kubernetes_group_is_watched_from_the_triggerer_and_its_verdict_loaded(
    dagbag, airflow_db, sweep_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deferred path end to end, for a group on one node (one pod of the provider's
    KubernetesPodOperator, on an emulated API server): the training task creates the
    group's NetworkPolicy and the pod, defers, dag.test runs the trigger in line (as the
    triggerer would), the task resumes on each ``running`` event and defers again, and
    the task resumed by the last event removes the pod and the policy and records the
    failed rank's verdict with its last lines. (A group of several pods, an Indexed Job,
    takes the same way: tests/test_kubernetes_http.py.)"""
    from kube_emulator import NETWORK_POLICIES, PODS, Stage, emulated_cluster, exited, running

    from results_db.database import make_engine
    from results_db.models import Run

    url = f"sqlite:///{sweep_env / 'r.db'}"
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", url)
    monkeypatch.setenv("SCALEBENCH_WORKER_IMAGE", "scalebench/worker:test")
    monkeypatch.setenv("SCALEBENCH_K8S_CONN_ID", "emulated_k8s")
    monkeypatch.setenv("SCALEBENCH_K8S_POLL_S", "0.2")
    monkeypatch.setenv("SCALEBENCH_LIVE_INGEST_S", "0.5")  # resumed on "running", deferred again
    stages = [
        Stage(0, running(), logs={0: "epoch 1\n"}),
        Stage(2.0, exited(1), logs={0: "epoch 1\nValueError: boom\n"}),
    ]
    with emulated_cluster(stages, sweep_env, monkeypatch) as cluster:
        run = dagbag.get_dag("task2a_logreg_epsilon").test(
            run_conf={
                "workers": [1],
                "light": True,
                "repeats": 1,
                "launcher": "kubernetes",
                "gpus_per_worker": 0,
                "network": ["host"],
            }
        )
        assert cluster.objects(PODS) == [] and cluster.objects(NETWORK_POLICIES) == []
        sent = [(method, path) for method, path, _, _ in cluster.requests()]
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["workers_01.train"] == "success" and states["ingest"] == "success", states
    # The group's NetworkPolicy, then the pod; both deleted at the end, the policy last.
    # (validate asked first what the launcher may do: its access reviews are no objects)
    created = [p for method, p in sent if method == "POST" and not p.endswith("accessreviews")]
    assert created[0].endswith("/networkpolicies") and created[1].endswith("/pods"), created
    deleted = [path for method, path in sent if method == "DELETE"]
    assert "/pods/" in deleted[0] and "/networkpolicies/" in deleted[-1], deleted
    # Rank 0's log read by the pod operator, and the failed pod's last lines.
    assert len([path for _, path in sent if path.endswith("/log")]) >= 2, sent
    engine = make_engine(url)
    with engine.connect() as conn:
        ((status, reason),) = conn.execute(select(Run.status, Run.reason)).all()
    engine.dispose()
    assert status == "failed" and "exited with status 1" in reason, reason
    assert "its last lines: epoch 1 | ValueError: boom" in reason, reason


@pytest.mark.slow
def test_a_task_that_dies_with_its_machine_is_closed_by_the_teardown(
    airflow_db, sweep_env, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The machine running a group's task dies (a scheduler's container restarted: the
    task and its ranks are gone, no verdict written). The restarted scheduler fails the
    silent task and runs the teardown, run here as one task instance of the same DAG
    run: the sweep is closed and loaded with the dead group ``cancelled``."""
    import json
    import os
    import signal

    from results_db.database import make_engine
    from results_db.models import Run, Sweep

    url = f"sqlite:///{sweep_env / 'r.db'}"
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", url)
    script = (
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"dag = DagBag(dag_folder={str(REPO / 'dags')!r}).get_dag('task2a_logreg_epsilon')\n"
        "dag.test(run_conf={'workers': [1, 2], 'light': True, 'repeats': 1})\n"
    )
    log = sweep_env / "dag-test.log"
    proc = start_in_background(script, log)
    results = sweep_env / "results"
    wait_for_sweep(proc, log, results)  # the restarted scheduler's Airflow loads meanwhile
    go, teardown_log = sweep_env / "teardown-now", sweep_env / "teardown.log"
    teardown = airflow_cli_when_told(go, teardown_log)
    request.addfinalizer(teardown.kill)  # a failure before it is told: it need not wait
    running = wait_for_training(proc, log, results, "-w1-")
    sweep_dir = running.parent
    proc.kill()
    proc.wait()
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):  # its ranks die with it
        try:
            if str(sweep_dir).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    run_id = re.search(r"run_id=(manual__\S+?)[,\s]", log.read_text()).group(1)
    began = time.monotonic()
    tell(go, [["tasks", "test", "task2a_logreg_epsilon", "ingest", run_id]])
    out = output_when_done(teardown, teardown_log, timeout=300)
    assert teardown.returncode == 0 and "DONE tasks test" in out, out[-3000:]
    closed = json.loads((sweep_dir / "sweep.json").read_text())
    assert [(g["status"], g["reason"]) for g in closed["groups"]] == [
        ("cancelled", ENDED_WITHOUT_VERDICT),
        ("skipped", ENDED_BEFORE_START),
    ]
    assert time.monotonic() - began < 60  # the dead group was not waited for
    engine = make_engine(url)
    with engine.connect() as conn:
        runs = conn.execute(select(Run.id, Run.status, Run.reason)).all()
        sweep = conn.execute(select(Sweep.outcome, Sweep.finished_at)).one()
    engine.dispose()
    by_id = {r.id: (r.status, r.reason) for r in runs}
    assert by_id.pop(running.name) == ("cancelled", ENDED_WITHOUT_VERDICT)
    assert list(by_id.values()) == [("skipped", ENDED_BEFORE_START)]  # the 2-worker group
    assert sweep.outcome == "cancelled" and sweep.finished_at is not None


PATCH_RUN_FAILED = """
import json, sys, time
from pathlib import Path
from fastapi.testclient import TestClient
from airflow.api_fastapi.app import create_app

dag_id, go = sys.argv[1], Path(sys.argv[2])
client = TestClient(create_app("core"))  # the public API alone, ready before it is needed
while not go.exists():
    time.sleep(0.05)
runs = client.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"state": "running"}).json()
# the newest: a run an earlier test killed outright may still be marked running
run = max(runs["dag_runs"], key=lambda r: r["start_date"] or "")
answer = client.patch(f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}",
                      json={"state": "failed"})
print("PATCHED", answer.status_code, flush=True)
"""


@pytest.mark.slow
def test_marking_the_dag_run_failed_still_closes_and_loads_the_sweep(
    airflow_db, sweep_env, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """PATCH the running DAG run to ``failed`` through the REST API (the UI's "mark
    failed") while the second of three repeats trains, then SIGTERM the task as
    Airflow's supervisor does: the finished group (in the database already while the
    sweep ran), the stopped one and the unstarted one all reach the database, the
    sweep closed, with its finishing time. Then the stopped group is run again."""
    import json
    import os
    import signal

    from results_db.database import make_engine
    from results_db.models import Run, Sweep

    url = f"sqlite:///{sweep_env / 'r.db'}"
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", url)
    script = (
        "import json\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"dag = DagBag(dag_folder={str(REPO / 'dags')!r}).get_dag('task2a_logreg_epsilon')\n"
        # Ten epochs a group (a third of the way to the goal): enough to be caught training
        # (4 s on a slow CPU), and the groups that finish need no goal here.
        "run = dag.test(run_conf={'workers': [1], 'repeats': 3, 'light': True,"
        " 'max_epochs': 10})\n"
        "states = {f'{ti.task_id}[{ti.map_index}]': ti.state for ti in run.get_task_instances()}\n"
        "print('DAG RUN', run.state, json.dumps(states), flush=True)\n"
        "print('RUN ID', run.run_id, flush=True)\n"
    )
    log = sweep_env / "dag-test.log"
    proc = start_in_background(script, log)
    results = sweep_env / "results"
    # The API client and the later reruns' Airflow load while the first group trains.
    wait_for_sweep(proc, log, results)
    go = sweep_env / "mark-failed-now"
    patch_log = sweep_env / "patch.log"
    with patch_log.open("w") as patch_out:
        patch = subprocess.Popen(
            [sys.executable, "-c", PATCH_RUN_FAILED, "task2a_logreg_epsilon", str(go)],
            env={**os.environ, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True"},
            stdout=patch_out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )
    go_again, again_log = sweep_env / "run-again-now", sweep_env / "again.log"
    again = airflow_cli_when_told(go_again, again_log)
    request.addfinalizer(again.kill)  # a failure before it is told: it need not wait
    # Airflow runs mapped instances in any order: wait for the second group to train.
    running = wait_for_training(proc, log, results, after=1)
    (done,) = [d.name[-5:] for d in running.parent.iterdir() if d.is_dir() and d != running]
    stopped = running.name[-5:]
    (unstarted_id,) = {"w1-r1", "w1-r2", "w1-r3"} - {done, stopped}
    # Hold the training rank still until the task is stopped: a light run ends within
    # seconds, and on a quick machine it could finish before the PATCH and the SIGTERM.
    rank = rank_of_run(running)
    rank.suspend()
    go.touch()
    # Live results: every group is in the database from the plan on, each as soon as it
    # ended, the one training as running, the one not started as planned (read while the
    # PATCH goes out).
    engine = make_engine(url)
    with engine.connect() as conn:
        live = dict(conn.execute(select(Run.id, Run.status)).all())
        outcome = conn.execute(select(Sweep.outcome)).scalar_one()
    engine.dispose()
    assert {k[-5:]: v for k, v in live.items()} == {
        done: "succeeded",
        stopped: "running",
        unstarted_id: "planned",
    }
    assert outcome == "running"
    answer = output_when_done(patch, patch_log, timeout=180)
    assert "PATCHED 200" in answer, answer[-3000:]
    proc.send_signal(signal.SIGTERM)  # the supervisor stops a task that is no longer running
    time.sleep(0.5)
    with contextlib.suppress(psutil.NoSuchProcess):
        rank.resume()  # the launcher's SIGTERM waits for it: the rank ends as it would running
    out = output_when_done(proc, log, timeout=240)
    assert "DAG RUN failed" in out, out[-3000:]
    states = json.loads(out.split("DAG RUN failed", 1)[1].splitlines()[0])
    assert states["ingest[-1]"] == "success", states
    # Airflow marks every instance of a mapped task that was running failed, the
    # finished ones too, so the task states tell little; the sweep's record below is
    # what says which group did what.
    stopped_index = int(stopped[-1]) - 1  # mapped instance i runs repeat i + 1
    assert states[f"workers_01.train[{stopped_index}]"] == "failed"
    assert states["summarize[-1]"] == "failed"

    (sweep_dir,) = results.iterdir()
    closed = json.loads((sweep_dir / "sweep.json").read_text())
    assert closed["finished_at"]
    verdicts = {g["run_id"][-5:]: (g["status"], g["reason"]) for g in closed["groups"]}
    unstarted = verdicts.pop(unstarted_id)
    assert verdicts == {
        done: ("succeeded", ""),
        stopped: ("cancelled", "the Airflow task was stopped"),
    }
    # Skipped by Airflow and closed by ingest, or (if it was already scheduled) started
    # and skipped by its own task: the sweep had been cancelled.
    assert unstarted in (
        ("skipped", "the DAG run ended before this group started"),
        ("skipped", "the sweep was cancelled before this group started"),
    )
    engine = make_engine(url)
    with engine.connect() as conn:
        runs = {
            r.id[-5:]: (r.status, r.reason)
            for r in conn.execute(select(Run.id, Run.status, Run.reason))
        }
        sweep = conn.execute(select(Sweep.outcome, Sweep.finished_at)).one()
    engine.dispose()
    assert runs == {
        done: ("succeeded", ""),
        stopped: ("cancelled", "the Airflow task was stopped"),
        unstarted_id: unstarted,  # never started, in the database with its reason
    }
    assert sweep.outcome == "cancelled" and sweep.finished_at is not None

    # Then clear the stopped group's task and run it again, and ingest (what the
    # scheduler does for a cleared task instance; `airflow tasks test` runs it here).
    run_id = out.split("RUN ID ", 1)[1].split()[0]
    commands = [
        ["tasks", "test", "task2a_logreg_epsilon", task_id, run_id, "--map-index", map_index]
        for task_id, map_index in (("workers_01.train", str(stopped_index)), ("ingest", "-1"))
    ]
    tell(go_again, commands)
    rerun_out = output_when_done(again, again_log, timeout=600)
    assert again.returncode == 0, rerun_out[-3000:]
    assert rerun_out.count("DONE tasks test") == 2, rerun_out[-3000:]
    assert (running.parent / f"{running.name}.attempt-1" / "rank-0.jsonl").is_file()
    engine = make_engine(url)
    with engine.connect() as conn:
        rerun = conn.execute(select(Run.status).where(Run.id == running.name)).scalar_one()
        sweep = conn.execute(select(Sweep.outcome, Sweep.finished_at)).one()
    engine.dispose()
    assert rerun == "succeeded"
    assert sweep.outcome == "cancelled" and sweep.finished_at is not None  # one never ran


AIRFLOW_CLI_WHEN_TOLD = """
import sys, time
from pathlib import Path
from airflow.__main__ import main
# Loaded while the test goes on: what the DAG file imports, the command that runs a task,
# and the in-process API server that `tasks test` runs it through (one a process).
import operators.benchmark_dag
import airflow.cli.commands.task_command
from airflow.sdk.execution_time.supervisor import in_process_api_server
in_process_api_server().app

go, deadline = Path(sys.argv[1]), time.monotonic() + 900
while not go.exists():
    if time.monotonic() > deadline:
        sys.exit("never told what to run")  # the test that started it failed before
    time.sleep(0.05)
for command in go.read_text().splitlines():
    sys.argv = ["airflow", *command.split()]
    main()  # what `python -m airflow <command>` runs
    print("DONE", command, flush=True)
"""


def airflow_cli_when_told(go: Path, log: Path) -> subprocess.Popen:
    """A Python that loads Airflow's command line now and, once ``go`` appears (see
    :func:`tell`), runs the ``airflow`` commands it lists one after the other, as
    ``python -m airflow`` would, printing ``DONE <command>`` after each; output into ``log``.
    A command that fails ends it with a non-zero status."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-c", AIRFLOW_CLI_WHEN_TOLD, str(go)],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )


def tell(go: Path, commands: list[list[str]]) -> None:
    """Hand ``commands`` (each an ``airflow`` command's arguments) to
    :func:`airflow_cli_when_told`: ``go`` appears whole, never half written."""
    ready = go.with_name(go.name + ".part")
    ready.write_text("".join(" ".join(command) + "\n" for command in commands))
    ready.rename(go)


def wait_for_sweep(proc: subprocess.Popen, log: Path, results: Path) -> None:
    """Return once the DAG run has planned its sweep (its folder is in ``results``)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if results.exists() and any(results.iterdir()):
            return
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    pytest.fail("no sweep was planned:\n" + log.read_text()[-3000:])


def start_in_background(script: str, log: Path) -> subprocess.Popen:
    """Run ``script`` in a new Python, its output into ``log`` (not a pipe: a pipe that
    nobody reads while it runs fills up and stalls it)."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )


def output_when_done(proc: subprocess.Popen, log: Path, timeout: float) -> str:
    proc.wait(timeout=timeout)
    return log.read_text()


def rank_of_run(run_dir: Path) -> psutil.Process:
    """The process of the rank writing into ``run_dir`` (a one-worker group's only rank)."""
    for process in psutil.process_iter(["cmdline"]):
        argv = process.info["cmdline"] or []
        if "workers.run" in argv and str(run_dir) in argv:
            return process
    pytest.fail(f"no rank process writes into {run_dir}")


def wait_for_training(
    proc: subprocess.Popen, log: Path, results: Path, marker: str = "", after: int = 0
) -> Path:
    """The run directory (name containing ``marker``) whose rank 0 is between steps, once
    ``after`` groups of the sweep have finished."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        rank_files = [(f, f.read_text()) for f in results.glob("*/*/rank-0.jsonl")]
        finished = sum('"finished"' in text for _, text in rank_files)
        for rank_file, text in rank_files:
            if (
                marker in rank_file.parent.name
                and finished >= after
                and '"kind":"step"' in text
                and '"finished"' not in text
            ):
                return rank_file.parent
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    pytest.fail("no group was seen training:\n" + log.read_text()[-3000:])
