"""The Kubernetes launcher over real HTTP: the provider's KubernetesHook (blocking
wait) and AsyncKubernetesHook (the trigger of the deferred wait), with the
official clients, against an API server emulator on 127.0.0.1 whose driver plays
the cluster (tests/kube_emulator.py). Every scenario runs in both modes, asserts
the verdict, the requests sent, and that the Job and the Service are gone."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import kmock
import kubernetes_validate
import pytest
from kube_emulator import (
    JOBS,
    NETWORK_POLICIES,
    PODS,
    SERVICES,
    UNSCHEDULABLE,
    EmulatedCluster,
    Stage,
    emulated_cluster,
    exited,
    resolved_image,
    running,
    unschedulable,
    waiting,
)

import operators.kubernetes.trigger as trigger_module
from operators.group import GroupResult
from operators.kubernetes import KubernetesGroup, KubernetesSettings, group_names
from operators.kubernetes.trigger import GroupTrigger
from scalebench.network import HOST_PROFILE
from scalebench.request import SweepRequest
from scalebench.sweep import GroupPlan

CONN_ID = "emulated_k8s"
NS = "scalebench"
ROOT = Path("/srv/scalebench/results")
DATA = Path("/srv/scalebench/data")
RUN_ID = "task1a-resnet20-cifar10-20261124T020000Z-ab12-w4-r0"
NAMES = group_names("task1a_resnet20_cifar10", "manual__2026-11-24T02:00:00+00:00", 0, 1, 4)
POLL_S = 0.05
LIVE_S = 0.15  # seconds between a deferred wait's "running" events (SCALEBENCH_LIVE_INGEST_S)
MODES = ["blocking", "deferred"]


def planned(
    world_size: int = 4, sweep_dir: Path = ROOT / "sweep-1", ranks_per_node: int = 1
) -> GroupPlan:
    request = SweepRequest(
        ranks_per_node=ranks_per_node,
        task="task1a-resnet20-cifar10",
        light=True,
        backend="nccl",
        compile="off",
        launcher="kubernetes",
        placement="pack",
        gpus_per_worker=1,  # what validate_request decides for a pod when not asked
        group_timeout_s=3600.0,
        data_dir=DATA,
    )
    return GroupPlan(
        request=request,
        run_id=RUN_ID,
        world_size=world_size,
        repeat=0,
        network=HOST_PROFILE,
        sweep_dir=str(sweep_dir),
    )


def make_group(
    lines: list[str], clock: Any = time.time, per_node: int = 1, **settings: Any
) -> KubernetesGroup:
    settings.setdefault("schedule_timeout_s", 600)
    return KubernetesGroup(
        planned(ranks_per_node=per_node),
        names=NAMES,
        sink=lines.append,
        clock=clock,
        settings=KubernetesSettings(conn_id=CONN_ID, **settings),
        results_root=ROOT,
        data_root=DATA,
        poll_interval_s=POLL_S,
    )


def run_group(
    mode: str,
    lines: list[str],
    timeout_s: float = 3600,
    speedup: float = 1.0,
    per_node: int = 1,
    live_ingest_s: float = LIVE_S,
    **settings: Any,
) -> GroupResult:
    """Start a group, follow it in ``mode``, delete it as the resumed task does.

    ``speedup`` makes the launcher's clock run that many times faster than the
    cluster's (waits of a minute in a fraction of a second); ``per_node``: ranks per pod.
    Deferred, the trigger fires a ``running`` event every ``live_ingest_s`` seconds, on
    which the resumed task passes rank 0's new lines on and defers again."""
    t0 = time.time()

    def clock() -> float:
        return t0 + (time.time() - t0) * speedup

    group = make_group(lines, clock, per_node, **settings)
    group.start()
    if mode == "blocking":
        return group.wait(timeout_s)
    trigger = group.trigger(timeout_s, live_ingest_s=live_ingest_s)
    while True:
        kind, arguments = trigger.serialize()  # the triggerer builds it from what was stored
        assert kind == "operators.kubernetes.trigger.GroupTrigger"
        event = run_trigger(GroupTrigger(**arguments), clock)
        lines += event.pop("logged")
        group = make_group(lines, clock, per_node, **settings).resumed(event["started_s"])
        if event["status"] != "running":
            break
        trigger = group.carry_on(event, timeout_s, live_ingest_s=live_ingest_s)
    assert event["job"] == NAMES.job and event["service"] == NAMES.service
    if event["status"] == "error":
        group.stop()
        raise RuntimeError(event["reason"])
    return group.conclude(event)  # what the resumed task does with the event


class TaskLog:
    """Stands in for the task's logger (or the one the triggerer routes into the task's
    log): keeps each message in ``lines``."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: Any) -> None:
        self.lines.append(message % args)

    warning = error = info


def run_trigger(trigger: GroupTrigger, clock: Any = time.time) -> dict[str, Any]:
    """The trigger's one event, with what it wrote to the task log under ``logged``."""
    task_log = TaskLog()
    logged = task_log.lines
    trigger._log = task_log
    original = trigger_module.now_s
    trigger_module.now_s = clock
    try:

        async def first_event() -> dict[str, Any]:
            events = [e.payload async for e in trigger.run()]
            assert len(events) == 1
            return events[0]

        event = asyncio.run(asyncio.wait_for(first_event(), 60))
    finally:
        trigger_module.now_s = original
    return {**event, "logged": logged}


def assert_cleaned_up(cluster: EmulatedCluster) -> None:
    assert cluster.objects(JOBS) == [] and cluster.objects(SERVICES) == []
    assert cluster.objects(NETWORK_POLICIES) == []
    time.sleep(0.1)  # the driver removes the pods of a deleted Job at its next tick
    assert cluster.objects(PODS) == []


def calls(cluster: EmulatedCluster) -> list[tuple[str, str]]:
    return [(method, path) for method, path, _, _ in cluster.requests()]


JOB_PATH = f"/apis/batch/v1/namespaces/{NS}/jobs/{NAMES.job}"
SERVICE_PATH = f"/api/v1/namespaces/{NS}/services/{NAMES.service}"
POLICIES_PATH = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
POLICY_PATH = f"{POLICIES_PATH}/{NAMES.job}"
PODS_PATH = f"/api/v1/namespaces/{NS}/pods"


# -- scenarios ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_success_sends_the_manifests_streams_rank_0_and_deletes(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Running for 1 s: at least two looks at rank 0's log (each a few HTTP calls, 0.05 s
    # apart) even on a busy machine; 0.3 s once saw only one.
    stages = [
        Stage(0, waiting("ContainerCreating")),
        Stage(0.2, running(), logs={0: "epoch 1\npartial"}),
        Stage(1.2, exited(0), logs={0: "epoch 1\nepoch 2\ndone\n"}),
    ]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        lines: list[str] = []
        result = run_group(mode, lines)
        assert result.status == "succeeded", result.reason
        assert result.exit_codes == [0, 0, 0, 0]
        rank0 = [line for line in lines if "[rank 0]" in line]
        assert [line.split("[rank 0] ")[1] for line in rank0] == ["epoch 1", "epoch 2", "done"]
        sent = cluster.requests()
        method, path, _, service = sent[0]
        assert (method, path) == ("POST", f"/api/v1/namespaces/{NS}/services")
        assert service == make_group([]).service_manifest()
        method, path, _, policy = sent[1]
        assert (method, path) == ("POST", POLICIES_PATH)
        assert policy == make_group([]).network_policy_manifest()
        method, path, _, job = sent[2]
        assert (method, path) == ("POST", f"/apis/batch/v1/namespaces/{NS}/jobs")
        assert job == make_group([]).job_manifest()
        # The image the pods ran, as the kubelet resolved it (the emulator's digest of it).
        [container] = job["spec"]["template"]["spec"]["containers"]
        assert result.image_digest == resolved_image(container["image"])
        assert result.image_digest.startswith("scalebench-worker@sha256:")
        for body in (service, policy, job):  # what reached the server passes the schemas
            kubernetes_validate.validate(body, "1.33", strict=True)
        method, path, _, patch = sent[3]
        assert (method, path) == ("PATCH", SERVICE_PATH)
        assert patch == [
            {
                "op": "add",
                "path": "/metadata/ownerReferences",
                "value": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": NAMES.job,
                        "uid": f"uid-{NAMES.job}",
                    }
                ],
            }
        ]
        polls = [(m, p, q) for m, p, q, _ in sent[4:-3]]
        assert {(m, p) for m, p, _ in polls} == {
            ("GET", JOB_PATH),
            ("GET", PODS_PATH),
            ("GET", f"{PODS_PATH}/{NAMES.job}-0-x7k2p/log"),
        }
        assert all(
            q == {"labelSelector": f"batch.kubernetes.io/job-name={NAMES.job}"}
            for m, p, q in polls
            if p == PODS_PATH
        )
        # Rank 0's log: stamped lines, and after the first line passed on only the last
        # minute or so of it, not the whole log again at every look.
        # Deferred, the resumed task reads it (the trigger reads none), and at the end
        # reads the tail too, of which it passed on lines on earlier resumes.
        log_reads = [q for m, p, q in polls if p.endswith("/log")]
        if mode == "deferred":
            assert log_reads[-1] == {"container": "worker", "tailLines": "50"}
            log_reads = log_reads[:-1]
        stamped = {"container": "worker", "timestamps": log_reads[0]["timestamps"]}
        assert log_reads[0] == stamped
        assert len(log_reads) >= 2
        assert all(q["timestamps"].lower() == "true" for q in log_reads)  # sync client: True
        # back to the line passed on (at most the second it ran, and a busy machine's slack)
        # plus the minute's overlap
        assert all(61 <= int(q["sinceSeconds"]) <= 64 for q in log_reads[1:]), log_reads
        assert result.log_tail == ["[rank 0] epoch 1", "[rank 0] epoch 2", "[rank 0] done"]
        assert [(m, p, q) for m, p, q, _ in sent[-3:]] == [
            ("DELETE", JOB_PATH, {"propagationPolicy": "Background"}),
            ("DELETE", POLICY_PATH, {}),
            ("DELETE", SERVICE_PATH, {}),
        ]
        assert_cleaned_up(cluster)


@pytest.mark.parametrize("mode", MODES)
def test_an_unschedulable_group_fails_within_the_schedule_timeout_in_the_schedulers_words(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cluster([Stage(0, unschedulable())], tmp_path, monkeypatch) as cluster:
        started = time.monotonic()
        result = run_group(mode, [], schedule_timeout_s=0.5)
        assert time.monotonic() - started < 5
        assert result.status == "failed"
        assert UNSCHEDULABLE in result.reason and "could not be scheduled" in result.reason
        assert result.image_digest == ""  # no pod ever ran
        assert_cleaned_up(cluster)


@pytest.mark.parametrize("mode", MODES)
def test_an_image_that_cannot_be_pulled_fails_the_group(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pull = waiting("ImagePullBackOff", 'Back-off pulling image "registry.example/sb:nope"')
    with emulated_cluster([Stage(0, pull)], tmp_path, monkeypatch) as cluster:
        result = run_group(mode, [], speedup=300)  # the 60 s grace in a fifth of a second
        assert result.status == "failed"
        assert "ImagePullBackOff" in result.reason and "registry.example/sb:nope" in result.reason
        assert result.image_digest == ""  # never pulled
        assert_cleaned_up(cluster)


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_rank_is_named_with_its_exit_code_and_log_tail(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = {1: "".join(f"step {i}\n" for i in range(80)) + "RuntimeError: NCCL timeout\n"}
    stages = [
        Stage(0, running()),
        Stage(0.2, running(), ranks={1: exited(1, finished="2026-11-24T02:00:30Z")}, logs=logs),
        Stage(0.3, exited(143), ranks={1: exited(1, finished="2026-11-24T02:00:30Z")}, logs=logs),
    ]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        result = run_group(mode, [])
        assert result.status == "failed" and result.first_failed_rank == 1
        assert f"rank 1 (pod {NAMES.job}-1-x7k2p) exited with status 1" in result.reason
        assert result.log_tail[-1] == "[rank 1] RuntimeError: NCCL timeout"
        assert len(result.log_tail) == 50
        tail_reads = [q for m, p, q, _ in cluster.requests() if p.endswith("-1-x7k2p/log")]
        assert tail_reads == [{"container": "worker", "tailLines": "50"}]
        assert_cleaned_up(cluster)


@pytest.mark.parametrize("mode", MODES)
def test_a_group_on_nodes_of_two_ranks_is_two_pods_and_names_the_rank_that_failed(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 ranks on nodes of 2: the Job's 2 pods run the node starter; pod 1's starter names
    rank 3 in its termination message, and the verdict names rank 3, blocking or deferred."""
    died = exited(1, finished="2026-11-24T02:00:30Z", message="rank 3 exited with status 1")
    logs = {
        0: "[rank 0] epoch 1\n[rank 1] epoch 1\n",
        1: "[rank 3] RuntimeError: boom\n[node 1] rank 3 exited with status 1\n",
    }
    stages = [
        Stage(0, running(), logs={0: logs[0]}),
        Stage(0.2, running(), ranks={1: died}, logs=logs),
        Stage(0.3, exited(143), ranks={1: died}, logs=logs),
    ]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        lines: list[str] = []
        result = run_group(mode, lines, per_node=2)
        assert (result.status, result.first_failed_rank) == ("failed", 3), result.reason
        assert result.reason.startswith(
            f"ranks 2-3 (pod {NAMES.job}-1-x7k2p) exited with status 1 (Error): rank 3 exited"
        )
        codes = result.exit_codes  # node 0's two ranks share its status (stopped, or not yet)
        assert codes[2:] == [1, 1] and codes[0] == codes[1] and codes[0] in (None, 143)
        assert result.log_tail[-1] == "[node 1] rank 3 exited with status 1"
        assert "[rank 1] epoch 1" in lines  # node 0's log, each line behind its own rank
        assert "[rank 3] RuntimeError: boom" in lines  # the failed rank's tail, either way
        (job,) = [body for method, path, _, body in cluster.requests() if path.endswith("/jobs")]
        assert job["spec"]["completions"] == 2
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["command"][2] == "workers.node"
        assert_cleaned_up(cluster)


@pytest.mark.parametrize("mode", MODES)
def test_every_rank_exiting_3_is_divergence(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stages = [Stage(0, running()), Stage(0.2, exited(3))]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        result = run_group(mode, [])
        assert result.status == "diverged", result.reason
        assert result.exit_codes == [3, 3, 3, 3]
        assert_cleaned_up(cluster)


def test_stopping_a_blocking_wait_deletes_the_job_and_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch) as cluster:
        group = make_group([])
        group.start()
        threading.Timer(0.3, group.stop).start()  # Airflow's on_kill, from another thread
        result = group.wait(3600)
        assert result.status == "failed" and "stopped" in result.reason
        assert_cleaned_up(cluster)


def test_killing_a_deferred_task_deletes_the_job_and_service_and_records_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scalebench import manifest
    from scalebench.sweep import start_sweep, validate_request

    request = validate_request(
        task="task1a-resnet20-cifar10",
        workers=[4],
        light=True,
        repeats=1,
        launcher="kubernetes",
        backend="nccl",
        gpus_per_worker=1,
    )
    sweep = start_sweep(request, tmp_path / "results", "manual")
    [plan] = sweep.groups
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch) as cluster:
        group = KubernetesGroup(
            plan,
            names=NAMES,
            settings=KubernetesSettings(conn_id=CONN_ID),
            results_root=tmp_path / "results",
            data_root=plan.data_dir,
            sink=lambda line: None,
            poll_interval_s=POLL_S,
        )
        group.start()
        trigger = group.trigger(3600, plan.to_xcom())

        async def watch_then_kill() -> None:
            watching = asyncio.ensure_future(trigger.run().__anext__())
            await asyncio.sleep(0.3)
            assert not watching.done()
            watching.cancel()  # the triggerer cancels the trigger, then calls on_kill
            await trigger.on_kill()

        asyncio.run(watch_then_kill())
        assert_cleaned_up(cluster)
    entry = manifest.load(sweep.sweep_dir).entry(plan.run_id)
    assert (entry.status, entry.reason) == ("cancelled", "the Airflow task was stopped")


# -- API errors --------------------------------------------------------------------------------


def test_a_leftover_service_is_a_409_and_nothing_is_created_or_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch) as cluster:
        leftover = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAMES.service, "namespace": NS},
        }
        cluster.call(lambda h: h.objects.__setitem__((SERVICES, NS, NAMES.service), leftover))
        group = make_group([])
        with pytest.raises(RuntimeError, match=r"already exists.*leftover"):
            group.start()
        assert calls(cluster) == [("POST", f"/api/v1/namespaces/{NS}/services")]
        assert cluster.objects(JOBS) == [] and cluster.objects(SERVICES) == [NAMES.service]


@pytest.mark.parametrize("mode", MODES)
def test_a_job_already_gone_at_deletion_is_a_404_that_counts_as_deleted(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cluster(
        [Stage(0, running()), Stage(0.2, exited(0))], tmp_path, monkeypatch
    ) as cluster:
        # The Job's TTL controller was quicker: the delete finds nothing.
        cluster.call(lambda h: h["delete", JOB_PATH] << kmock.KubernetesNotFoundError())
        lines: list[str] = []
        result = run_group(mode, lines)
        assert result.status == "succeeded"
        assert not [line for line in lines if "could not delete" in line]
        assert ("DELETE", JOB_PATH) in calls(cluster) and ("DELETE", SERVICE_PATH) in calls(cluster)


@pytest.mark.parametrize("mode", MODES)
def test_a_500_on_a_poll_is_retried(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cluster(
        [Stage(0, running()), Stage(0.3, exited(0))], tmp_path, monkeypatch
    ) as cluster:
        cluster.call(lambda h: h["get", JOB_PATH][:1] << 500)  # the first read only
        lines: list[str] = []
        result = run_group(mode, lines)
        assert result.status == "succeeded", result.reason
        assert any("trying again" in line for line in lines)
        assert_cleaned_up(cluster)


@pytest.mark.parametrize("mode", MODES)
def test_an_api_failing_on_every_poll_ends_the_wait_and_still_deletes(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch) as cluster:
        cluster.call(lambda h: h["get", JOB_PATH] << 500)
        with pytest.raises(Exception, match=r"500|Internal Server Error"):
            run_group(mode, [])
        assert calls(cluster).count(("GET", JOB_PATH)) == 4  # MAX_API_ERRORS + 1
        assert_cleaned_up(cluster)


def _drop_connection(request: Any) -> None:
    """Close the client's connection without an answer (a proxy or API server restart)."""
    request._raw_request.transport.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_dropped_connection_on_a_poll_is_retried(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cluster(
        [Stage(0, running()), Stage(0.3, exited(0))], tmp_path, monkeypatch
    ) as cluster:
        cluster.call(lambda h: h["get", PODS_PATH][:1] << _drop_connection)
        result = run_group(mode, [])
        assert result.status == "succeeded", result.reason
        assert len([p for m, p in calls(cluster) if p == PODS_PATH]) >= 2
        assert_cleaned_up(cluster)


# -- the deferred path through the Airflow operator and ingest ------------------------------------


def kubernetes_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world_size: int
) -> tuple[Any, GroupPlan, Any]:
    """A planned one-group Kubernetes sweep of light Task 1a, the settings pointing at the
    emulated cluster: (the sweep, its group, the task instance an operator is given)."""
    from types import SimpleNamespace

    from scalebench.sweep import start_sweep, validate_request

    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "results"))
    monkeypatch.setenv("SCALEBENCH_DATA_DIR", str(tmp_path / "data"))
    # The operator loads each group as it ends: into this test's database, nobody else's.
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", f"sqlite:///{tmp_path / 'live.db'}")
    monkeypatch.setenv("SCALEBENCH_K8S_CONN_ID", CONN_ID)
    monkeypatch.setenv("SCALEBENCH_LIVE_INGEST_S", "0")
    request = validate_request(
        task="task1a-resnet20-cifar10",
        workers=[world_size],
        light=True,
        repeats=1,
        launcher="kubernetes",
        backend="nccl",
        gpus_per_worker=1,
    )
    sweep = start_sweep(request, tmp_path / "results", "manual")
    [plan] = sweep.groups
    ti = SimpleNamespace(
        dag_id="task1a_resnet20_cifar10", run_id="manual__x", map_index=0, try_number=1
    )
    return sweep, plan, ti


def test_the_operator_defers_and_records_the_triggers_verdict_through_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    from airflow.sdk.exceptions import TaskDeferred
    from sqlalchemy import select

    from operators.training_group import TrainingGroupOperator
    from results_db.database import make_engine
    from results_db.models import Run
    from results_db.service import ingest, upgrade
    from scalebench import manifest

    monkeypatch.setenv("SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S", "0.5")
    sweep, plan, ti = kubernetes_sweep(tmp_path, monkeypatch, 4)
    with emulated_cluster([Stage(0, unschedulable())], tmp_path, monkeypatch) as cluster:
        operator = TrainingGroupOperator(task_id="train", group=plan.to_xcom())
        with pytest.raises(TaskDeferred) as deferred:
            operator.execute({"ti": ti})
        assert deferred.value.method_name == "resume"
        assert cluster.objects(JOBS) != []  # the group runs while the task is deferred
        assert manifest.load(sweep.sweep_dir).entry(plan.run_id).status == "planned"
        trigger = deferred.value.trigger
        event = run_trigger(GroupTrigger(**trigger.serialize()[1]))
        event.pop("logged")
        verdict = TrainingGroupOperator(task_id="train", group=plan.to_xcom()).resume(
            {"ti": ti}, event
        )
        assert_cleaned_up(cluster)
    assert verdict["status"] == "failed" and UNSCHEDULABLE in verdict["reason"]
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    ingest(url, str(sweep.sweep_dir))
    engine = make_engine(url)
    with engine.connect() as conn:
        status, reason = conn.execute(select(Run.status, Run.reason)).one()
    engine.dispose()
    assert status == "failed" and "Insufficient nvidia.com/gpu" in reason


def test_the_image_the_pods_ran_reaches_the_manifest_and_the_stored_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stack's image named by a tag: the digest the kubelet resolved it to travels in the
    trigger's event to the group's verdict, and ingest stores it on the run."""
    from airflow.sdk.exceptions import TaskDeferred
    from sqlalchemy import select

    from operators.training_group import TrainingGroupOperator
    from results_db.database import make_engine
    from results_db.models import Run
    from results_db.service import ingest, upgrade
    from scalebench import manifest

    image = "registry.example:5000/team/worker:tonight"
    monkeypatch.setenv("SCALEBENCH_WORKER_IMAGE", image)
    sweep, plan, ti = kubernetes_sweep(tmp_path, monkeypatch, 2)
    stages = [Stage(0, running()), Stage(0.3, exited(0))]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        with pytest.raises(TaskDeferred) as deferred:
            TrainingGroupOperator(task_id="train", group=plan.to_xcom()).execute({"ti": ti})
        event = run_trigger(GroupTrigger(**deferred.value.trigger.serialize()[1]))
        event.pop("logged")
        [job] = [b for m, p, _, b in cluster.requests() if m == "POST" and p.endswith("/jobs")]
        [container] = job["spec"]["template"]["spec"]["containers"]
        assert container["image"] == image
        digest = resolved_image(image)
        assert digest.startswith("registry.example:5000/team/worker@sha256:")
        assert event["image_digest"] == digest
        verdict = TrainingGroupOperator(task_id="train", group=plan.to_xcom()).resume(
            {"ti": ti}, event
        )
        assert_cleaned_up(cluster)
    assert verdict["status"] == "succeeded", verdict["reason"]
    assert manifest.load(sweep.sweep_dir).entry(plan.run_id).image_digest == digest
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    ingest(url, str(sweep.sweep_dir))
    engine = make_engine(url)
    with engine.connect() as conn:
        (stored,) = conn.execute(select(Run.image_digest)).one()
    engine.dispose()
    assert stored == digest


def test_a_deferred_group_is_loaded_and_rank_0s_lines_logged_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``SCALEBENCH_LIVE_INGEST_S`` seconds the deferred task resumes on the
    trigger's ``running`` event: what the ranks wrote so far is in the results database
    (as ``running``) and rank 0's new lines are in the task's log, then the task defers
    again; the last event concludes the group, each line of rank 0 logged once."""
    from airflow.sdk.exceptions import TaskDeferred
    from records_factory import FakeRun, write_rank
    from sqlalchemy import select

    from operators.training_group import TrainingGroupOperator
    from results_db.database import make_engine
    from results_db.models import Run
    from results_db.service import upgrade

    _, plan, ti = kubernetes_sweep(tmp_path, monkeypatch, 2)
    monkeypatch.setenv("SCALEBENCH_LIVE_INGEST_S", "0.2")
    monkeypatch.setenv("SCALEBENCH_K8S_POLL_S", "0.05")
    url = f"sqlite:///{tmp_path / 'live.db'}"
    upgrade(url)

    def stored() -> list[str]:
        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                return list(conn.execute(select(Run.status)).scalars())
        finally:
            engine.dispose()

    def resumed(event: dict[str, Any]) -> Any:
        operator = TrainingGroupOperator(task_id="train", group=plan.to_xcom())
        operator._cached_logger = task_log
        return operator.resume({"ti": ti}, {k: v for k, v in event.items() if k != "logged"})

    task_log = TaskLog()
    stages = [
        Stage(0, running(), logs={0: "epoch 1\n"}),
        Stage(1.0, exited(0), logs={0: "epoch 1\nepoch 2\n"}),
    ]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        with pytest.raises(TaskDeferred) as deferred:
            TrainingGroupOperator(task_id="train", group=plan.to_xcom()).execute({"ti": ti})
        for rank in range(2):  # what the ranks wrote so far
            write_rank(Path(plan.run_dir), plan.run_id, rank, FakeRun(2, end="killed"))
        assert stored() == ["running"]  # a row from its start, before any live load
        event = run_trigger(GroupTrigger(**deferred.value.trigger.serialize()[1]))
        assert event["status"] == "running"
        while event["status"] == "running":
            with pytest.raises(TaskDeferred) as deferred:
                resumed(event)
            assert deferred.value.method_name == "resume"
            assert stored() == ["running"]  # loaded while the group runs
            assert "[rank 0] epoch 1" in task_log.lines  # passed on while it runs
            event = run_trigger(GroupTrigger(**deferred.value.trigger.serialize()[1]))
        shutil.rmtree(plan.run_dir)
        for rank in range(2):  # what the ranks wrote by the end
            write_rank(Path(plan.run_dir), plan.run_id, rank, FakeRun(2))
        verdict = resumed(event)
        assert_cleaned_up(cluster)
    assert verdict["status"] == "succeeded"
    assert stored() == ["succeeded"]  # the final load replaced the live one
    rank0 = [line for line in task_log.lines if line.startswith("[rank 0]")]
    assert rank0 == ["[rank 0] epoch 1", "[rank 0] epoch 2"]


def test_a_running_event_the_task_cannot_act_on_records_the_group_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resumed on a ``running`` event, the task cannot build the launcher (a setting changed
    meanwhile): it does not defer again, the group is recorded as failed, the task fails."""
    from airflow.sdk.exceptions import AirflowException

    from operators.training_group import TrainingGroupOperator
    from scalebench import manifest

    sweep, plan, ti = kubernetes_sweep(tmp_path, monkeypatch, 2)
    monkeypatch.setenv("SCALEBENCH_K8S_SHM_SIZE", "lots")
    event = {"status": "running", "job": NAMES.job, "service": NAMES.service, "started_s": 0.0}
    with pytest.raises(AirflowException, match="SHM"):
        TrainingGroupOperator(task_id="train", group=plan.to_xcom()).resume({"ti": ti}, event)
    assert manifest.load(sweep.sweep_dir).entry(plan.run_id).status == "failed"


def test_a_group_that_cannot_be_deferred_is_deleted_and_recorded_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between creating the Job and deferring, a failure (here: the trigger cannot be
    built) still deletes the Job and the Service: they would hold GPUs for an hour."""

    from operators.kubernetes.group import KubernetesGroup
    from operators.training_group import TrainingGroupOperator
    from scalebench import manifest

    def broken_trigger(*args: Any, **kwargs: Any) -> GroupTrigger:
        raise RuntimeError("no trigger today")

    monkeypatch.setattr(KubernetesGroup, "trigger", broken_trigger)
    sweep, plan, ti = kubernetes_sweep(tmp_path, monkeypatch, 2)
    with emulated_cluster([Stage(0, unschedulable())], tmp_path, monkeypatch) as cluster:
        operator = TrainingGroupOperator(task_id="train", group=plan.to_xcom())
        with pytest.raises(RuntimeError, match="no trigger today"):
            operator.execute({"ti": ti})
        assert ("POST", f"/apis/batch/v1/namespaces/{NS}/jobs") in calls(cluster)
        assert_cleaned_up(cluster)
    entry = manifest.load(sweep.sweep_dir).entry(plan.run_id)
    assert entry.status == "failed" and "no trigger today" in entry.reason


def test_a_verdict_is_recorded_even_when_the_group_cannot_be_cleaned_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the task resumes, its launcher cannot be built (a setting changed meanwhile), or
    when a user stops the deferred task, the cluster cannot be reached: the Job is left to
    its deadline and TTL, but the group's verdict is recorded all the same."""
    from airflow.sdk.exceptions import TaskDeferred

    from operators.training_group import TrainingGroupOperator
    from scalebench import manifest

    monkeypatch.setenv("SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S", "0.5")
    sweep, plan, ti = kubernetes_sweep(tmp_path, monkeypatch, 2)
    with emulated_cluster([Stage(0, unschedulable())], tmp_path, monkeypatch):
        with pytest.raises(TaskDeferred) as deferred:
            TrainingGroupOperator(task_id="train", group=plan.to_xcom()).execute({"ti": ti})
        arguments = deferred.value.trigger.serialize()[1]
        event = run_trigger(GroupTrigger(**arguments))
    monkeypatch.setenv("SCALEBENCH_K8S_SHM_SIZE", "lots")  # the launcher's settings now fail
    verdict = TrainingGroupOperator(task_id="train", group=plan.to_xcom()).resume(
        {"ti": ti}, {k: v for k, v in event.items() if k != "logged"}
    )
    assert verdict["status"] == "failed" and UNSCHEDULABLE in verdict["reason"]
    assert manifest.load(sweep.sweep_dir).entry(plan.run_id).status == "failed"
    # Stopped while deferred through a connection that does not exist: still cancelled.
    sweep, plan, ti = kubernetes_sweep(tmp_path / "other", monkeypatch, 2)
    trigger = GroupTrigger(
        **{**arguments, "conn_id": "no_such_connection", "group": plan.to_xcom()}
    )
    with pytest.raises(Exception, match="no_such_connection"):
        asyncio.run(asyncio.wait_for(trigger.on_kill(), 60))
    assert manifest.load(sweep.sweep_dir).entry(plan.run_id).status == "cancelled"


def test_the_trigger_only_waits_and_the_resumed_task_reads_the_log_and_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trigger reads the Job and its pods, nothing else: no log, no results loaded,
    nothing deleted. Without live loads (``live_ingest_s`` 0) it fires no ``running``
    event: the task resumed by its one event reads rank 0's last lines, passes them on,
    and deletes the group."""
    from results_db import service

    loads: list[str] = []
    monkeypatch.setattr(service, "load_quietly", lambda *args: loads.append("load"))
    stages = [Stage(0, running(), logs={0: "epoch 1\n"}), Stage(0.6, exited(0), logs={0: "a\nb\n"})]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        group = make_group([])
        group.start()
        before = len(calls(cluster))
        event = run_trigger(group.trigger(3600, planned().to_xcom()))
        waited = {(method, path.split("?")[0]) for method, path in calls(cluster)[before:]}
        assert waited == {
            ("GET", JOB_PATH),
            ("GET", PODS_PATH),
        }, waited
        assert event["status"] == "succeeded" and event["logged"] == []
        assert event["rank0_pod"] is not None and event["failed_pod"] is None
        lines: list[str] = []
        result = make_group(lines).resumed(event["started_s"]).conclude(event)
        assert_cleaned_up(cluster)
    assert loads == []
    assert result.status == "succeeded" and lines == ["[rank 0] a", "[rank 0] b"]
    assert result.log_tail == lines


def test_every_live_ingest_interval_the_trigger_fires_running_and_the_next_one_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the group runs the trigger fires ``running`` every ``live_ingest_s`` seconds,
    having read only the Job and its pods; the resumed task passes rank 0's new lines on
    and defers to a trigger that carries what the looks learnt (the admission time of a
    queued Job, from which the timeouts count) and the log's place, so no line is passed
    on twice."""
    stages = [
        Stage(0, running(), logs={0: "epoch 1\n"}),
        Stage(0.5, running(), logs={0: "epoch 1\nepoch 2\n"}),
        Stage(1.0, exited(0), logs={0: "epoch 1\nepoch 2\ndone\n"}),
    ]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        lines: list[str] = []
        group = make_group(lines)
        group.start()
        admitted_s = group.watch(3600).started_s + 7.0
        trigger = group.trigger(3600, live_ingest_s=0.2)
        trigger.watch_state = {"admitted_s": admitted_s}  # as an earlier look saw it
        before = len(calls(cluster))
        event = run_trigger(trigger)
        waited = {(method, path.split("?")[0]) for method, path in calls(cluster)[before:]}
        assert waited == {("GET", JOB_PATH), ("GET", PODS_PATH)}, waited
        assert event["status"] == "running" and event["logged"] == []
        assert event["watch"]["admitted_s"] == admitted_s  # carried, not seen again
        assert event["rank0_pod"] == f"{NAMES.job}-0-x7k2p"
        assert event["rank0_phase"] == "Running"
        assert event["rank0_log"] == {"pod": None, "lines": 0, "since": None, "at_since": 0}
        events = [event]
        while event["status"] == "running":
            group = make_group(lines).resumed(event["started_s"])
            trigger = group.carry_on(event, 3600, live_ingest_s=0.2)
            arguments = trigger.serialize()[1]
            assert arguments["watch_state"] == event["watch"]
            assert arguments["rank0_log"]["lines"] == len(lines) - 1  # "started Job"
            event = run_trigger(GroupTrigger(**arguments))
            events.append(event)
        result = make_group(lines).resumed(event["started_s"]).conclude(event)
        assert_cleaned_up(cluster)
    assert len(events) >= 3 and result.status == "succeeded"
    assert lines[1:] == ["[rank 0] epoch 1", "[rank 0] epoch 2", "[rank 0] done"]
    assert result.log_tail == lines[1:]


def test_a_triggerer_restart_leaves_the_group_running_and_the_next_trigger_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The triggerer stops (its triggers are cancelled, on_kill is not called) and a new
    one builds the trigger again from what was stored at the deferral: the Job ran on
    untouched meanwhile and the verdict is the group's own."""
    stages = [
        Stage(0, running(), logs={0: "epoch 1\n"}),
        Stage(0.8, exited(0), logs={0: "epoch 1\nepoch 2\n"}),
    ]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        group = make_group([])
        group.start()
        stored = group.trigger(3600).serialize()[1]

        async def until_shutdown() -> None:
            watching = asyncio.ensure_future(GroupTrigger(**stored).run().__anext__())
            await asyncio.sleep(0.3)
            watching.cancel()

        asyncio.run(until_shutdown())
        assert cluster.objects(JOBS) == [NAMES.job] and cluster.objects(SERVICES) == [NAMES.service]
        assert not [m for m, _ in calls(cluster) if m == "DELETE"]
        event = run_trigger(GroupTrigger(**stored))
        lines: list[str] = []
        result = make_group(lines).resumed(event["started_s"]).conclude(event)
        assert event["status"] == result.status == "succeeded"
        assert lines == ["[rank 0] epoch 1", "[rank 0] epoch 2"]  # read by the resumed task
        assert_cleaned_up(cluster)
