"""A group that fits on one node runs as one pod through the provider's real
KubernetesPodOperator, over HTTP against the API server emulator
(tests/kube_emulator.py): blocking and deferred, the verdicts the pod's end gives,
the pod the operator sends, the NetworkPolicy around it, and nothing left behind."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_emulator import (
    NETWORK_POLICIES,
    PODS,
    UNSCHEDULABLE,
    EmulatedCluster,
    Stage,
    emulated_cluster,
    evicted,
    exited,
    resolved_image,
    running,
    unschedulable,
    waiting,
)

from scalebench import manifest

CONN_ID = "emulated_k8s"
NS = "scalebench"
MODES = ["blocking", "deferred"]


class TaskInstance(SimpleNamespace):
    """What the pod operator reads of its task instance, and the XComs it pushes."""

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


def pod_sweep(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    world_size: int = 2,
    ranks_per_node: int = 2,
    request_options: dict[str, Any] | None = None,
    **environment: str,
) -> tuple[Any, Any, dict[str, Any]]:
    """A planned one-group sweep of light Task 1a on Kubernetes, nodes of
    ``ranks_per_node`` GPUs; the settings point at the emulated cluster: (the sweep, its
    group, the context an operator is given)."""
    from scalebench.sweep import start_sweep, validate_request

    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "results"))
    monkeypatch.setenv("SCALEBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", f"sqlite:///{tmp_path / 'live.db'}")
    monkeypatch.setenv("SCALEBENCH_K8S_CONN_ID", CONN_ID)
    monkeypatch.setenv("SCALEBENCH_K8S_NAMESPACE", NS)
    monkeypatch.setenv("SCALEBENCH_K8S_POLL_S", "0.05")
    monkeypatch.setenv("SCALEBENCH_LIVE_INGEST_S", "0")
    monkeypatch.setenv("SCALEBENCH_K8S_DEFERRABLE", "true" if mode == "deferred" else "false")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    request = validate_request(
        task="task1a-resnet20-cifar10",
        workers=[world_size],
        light=True,
        repeats=1,
        launcher="kubernetes",
        backend="nccl",
        gpus_per_worker=1,
        ranks_per_node=ranks_per_node,
        **(request_options or {}),
    )
    sweep = start_sweep(request, tmp_path / "results", "manual")
    [plan] = sweep.groups
    ti = TaskInstance(
        dag_id="task1a_resnet20_cifar10",
        task_id="train",
        run_id="manual__x",
        map_index=0,
        try_number=1,
        start_date=datetime.datetime.now(datetime.UTC),
        xcoms={},
    )
    context = {"ti": ti, "run_id": ti.run_id, "dag": SimpleNamespace(dag_id=ti.dag_id)}
    return sweep, plan, context


def run_trigger(trigger: Any) -> dict[str, Any]:
    """The trigger's one event, as the triggerer gets it (built from what was stored)."""
    kind, arguments = trigger.serialize()
    module, _, name = kind.rpartition(".")
    import importlib

    rebuilt = getattr(importlib.import_module(module), name)(**arguments)

    async def first_event() -> dict[str, Any]:
        async for event in rebuilt.run():
            return event.payload
        raise AssertionError("the trigger fired no event")

    return asyncio.run(asyncio.wait_for(first_event(), 60))


def run_task(mode: str, plan: Any, context: dict[str, Any]) -> dict[str, Any]:
    """Run the training task as Airflow would: execute, and deferred, each event the
    trigger fires handed to a freshly built task's ``trigger_reentry``."""
    from airflow.sdk.exceptions import TaskDeferred

    from operators.training_group import TrainingGroupOperator

    def task() -> TrainingGroupOperator:
        return TrainingGroupOperator(task_id="train", group=plan.to_xcom())

    if mode == "blocking":
        return task().execute(context)
    call: Any = lambda: task().execute(context)  # noqa: E731
    while True:
        try:
            return call()
        except TaskDeferred as deferred:
            assert deferred.method_name == "trigger_reentry"
            event = run_trigger(deferred.trigger)
            call = lambda event=event: task().trigger_reentry(context, event)  # noqa: E731


def sent_pod(cluster: EmulatedCluster) -> dict[str, Any]:
    [body] = [
        body
        for method, path, _, body in cluster.requests()
        if method == "POST" and path == f"/api/v1/namespaces/{NS}/pods"
    ]
    return body


def assert_nothing_left(cluster: EmulatedCluster) -> None:
    assert cluster.objects(PODS) == [] and cluster.objects(NETWORK_POLICIES) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_group_on_one_node_is_one_pod_of_the_pod_operator_with_its_ranks_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    sweep, plan, context = pod_sweep(tmp_path, monkeypatch, mode)
    stages = [
        Stage(0, running(), logs={0: "[rank 0] epoch 1\n"}),
        Stage(0.6, exited(0), logs={0: "[rank 0] epoch 1\n[rank 0] epoch 2\n"}),
    ]
    with emulated_cluster(stages, tmp_path, monkeypatch, conn_id=CONN_ID) as cluster:
        verdict = run_task(mode, plan, context)
        pod = sent_pod(cluster)
        assert_nothing_left(cluster)
        [policy] = [
            body
            for method, path, _, body in cluster.requests()
            if method == "POST" and path.endswith("/networkpolicies")
        ]
    assert verdict["status"] == "succeeded", verdict["reason"]
    entry = manifest.load(sweep.sweep_dir).entry(plan.run_id)
    assert entry.status == "succeeded"
    [container] = pod["spec"]["containers"]
    # the image the pod ran, as the kubelet resolved it, beside its QoS class
    assert entry.image_digest == resolved_image(container["image"])
    assert entry.qos_class == "Guaranteed"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MASTER_ADDR"] == "127.0.0.1" and env["WORLD_SIZE"] == "2"
    assert env["LOCAL_WORLD_SIZE"] == "2"
    assert container["command"][:3] == ["python", "-m", "workers.node"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "subdomain" not in pod["spec"] and pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["activeDeadlineSeconds"] >= 1
    labels = pod["metadata"]["labels"]
    assert labels["kubernetes_pod_operator"] == "True"  # the provider's operator made it
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "scalebench.io/group": pod["metadata"]["name"]
    }
    assert labels["scalebench.io/group"] == pod["metadata"]["name"]


@pytest.mark.parametrize("mode", MODES)
def test_a_failed_rank_in_the_pod_is_named_and_status_3_is_divergence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    _, plan, context = pod_sweep(tmp_path, monkeypatch, mode)
    stages = [
        Stage(0, running()),
        Stage(0.3, exited(1, message="rank 1 exited with status 1")),
    ]
    with emulated_cluster(stages, tmp_path, monkeypatch, conn_id=CONN_ID) as cluster:
        verdict = run_task(mode, plan, context)
        assert_nothing_left(cluster)
    assert verdict["status"] == "failed"
    assert "exited with status 1" in verdict["reason"] and "rank 1" in verdict["reason"]
    _, plan, context = pod_sweep(tmp_path / "again", monkeypatch, mode)
    with emulated_cluster([Stage(0, exited(3))], tmp_path, monkeypatch, conn_id=CONN_ID):
        verdict = run_task(mode, plan, context)
    assert verdict["status"] == "diverged", verdict["reason"]


@pytest.mark.parametrize("mode", MODES)
def test_a_pod_that_cannot_start_fails_in_the_schedulers_or_kubelets_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    _, plan, context = pod_sweep(tmp_path, monkeypatch, mode, SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S="1")
    with emulated_cluster(
        [Stage(0, unschedulable())], tmp_path, monkeypatch, conn_id=CONN_ID
    ) as cluster:
        verdict = run_task(mode, plan, context)
        assert_nothing_left(cluster)
    assert verdict["status"] == "failed" and UNSCHEDULABLE in verdict["reason"]
    _, plan, context = pod_sweep(tmp_path / "again", monkeypatch, mode)
    pull = waiting("ErrImagePull", "pull access denied for scalebench-wroker")
    with emulated_cluster([Stage(0, pull)], tmp_path, monkeypatch, conn_id=CONN_ID):
        verdict = run_task(mode, plan, context)
    assert verdict["status"] == "failed" and "ErrImagePull" in verdict["reason"], verdict


@pytest.mark.parametrize("mode", MODES)
def test_a_preempted_pod_runs_again_as_a_new_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    sweep, plan, context = pod_sweep(
        tmp_path, monkeypatch, mode, SCALEBENCH_K8S_PREEMPTION_RETRIES="1"
    )
    with emulated_cluster(
        [Stage(0, running()), Stage(0.3, evicted())],
        tmp_path,
        monkeypatch,
        conn_id=CONN_ID,
        retry_stages=[Stage(0, running()), Stage(0.3, exited(0))],
    ) as cluster:
        verdict = run_task(mode, plan, context)
        pods = [
            body["metadata"]["name"]
            for method, path, _, body in cluster.requests()
            if method == "POST" and path == f"/api/v1/namespaces/{NS}/pods"
        ]
        assert_nothing_left(cluster)
    assert verdict["status"] == "succeeded", verdict["reason"]
    assert len(pods) == 2 and pods[0] != pods[1]
    [attempt] = manifest.load(sweep.sweep_dir).entry(plan.run_id).attempts
    assert attempt["status"] == "preempted"


@pytest.mark.parametrize("mode", MODES)
def test_a_pod_past_its_deadline_is_timed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # The group's timeout is the pod's deadline.
    _sweep, plan, context = pod_sweep(
        tmp_path,
        monkeypatch,
        mode,
        request_options={"group_timeout_s": 1.0, "collective_timeout_s": 1.0},
    )
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch, conn_id=CONN_ID):
        verdict = run_task(mode, plan, context)
    assert verdict["status"] == "timed_out", verdict["reason"]


def rbac_call(method: str, path: str, query: dict[str, str]) -> tuple[str, str, str]:
    """``(API group, resource, verb)`` of an HTTP request to the API, as RBAC sees it."""
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[parts.index("namespaces") + 2 :]  # resource, name, subresource
    resource = "/".join([rest[0], *rest[2:3]])
    named = len(rest) > 1
    verb = {
        "POST": "create",
        "PATCH": "patch",
        "DELETE": "delete",
        "GET": "get" if named else ("watch" if query.get("watch") else "list"),
    }[method]
    return group, resource, verb


@pytest.mark.parametrize("mode", MODES)
def test_the_role_grants_every_call_the_pod_operator_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Every request the pod path sent (a pod that starts, then fails: the operator reads
    its events; waiting from the triggerer, it watches them while the pod starts) is
    granted by the Role (API_CALLS, which deploy/kubernetes's Role equals), and every pod
    or event call the Role grants beyond a Job's is one the pod path made."""
    from operators.kubernetes import API_CALLS

    _sweep, plan, context = pod_sweep(tmp_path, monkeypatch, mode)
    # Pending for a second, as a real pod is while its image is pulled: the trigger's
    # watch of the pod's events starts only while the pod has not ended.
    stages = [Stage(0, waiting("ContainerCreating")), Stage(1.0, running()), Stage(1.2, exited(1))]
    with emulated_cluster(stages, tmp_path, monkeypatch, conn_id=CONN_ID) as cluster:
        run_task(mode, plan, context)
        made = {rbac_call(m, path, query) for m, path, query, _ in cluster.requests()}
    granted = set(API_CALLS.values())
    assert made <= granted, made - granted
    beyond_jobs = {("", "pods", v) for v in ("create", "get", "patch", "delete")}
    events = {("", "events", "list")} | ({("", "events", "watch")} if mode == "deferred" else set())
    assert beyond_jobs | events <= made


def test_stopping_the_task_deletes_the_pod_and_its_policy_and_records_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocking: Airflow's ``on_kill`` while the pod operator waits for the pod."""
    import threading

    from airflow.sdk.exceptions import AirflowException

    from operators.training_group import TrainingGroupOperator

    sweep, plan, context = pod_sweep(tmp_path, monkeypatch, "blocking")
    operator = TrainingGroupOperator(task_id="train", group=plan.to_xcom())
    raised: list[BaseException] = []

    def execute() -> None:
        try:
            operator.execute(context)
        except BaseException as exc:
            raised.append(exc)

    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch, conn_id=CONN_ID) as c:
        task = threading.Thread(target=execute)
        task.start()
        deadline = time.monotonic() + 30
        while not c.objects(PODS) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the pod operator follows the running pod
        operator.on_kill()
        task.join(60)
        assert not task.is_alive()
        assert_nothing_left(c)
    [error] = raised
    assert isinstance(error, AirflowException) and "cancelled" in str(error)
    assert manifest.load(sweep.sweep_dir).entry(plan.run_id).status == "cancelled"


def test_stopping_the_deferred_task_deletes_the_pod_and_its_policy_and_records_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deferred: the triggerer calls the trigger's ``on_kill`` (the user stopped the task)."""
    import importlib

    from airflow.sdk.exceptions import TaskDeferred

    from operators.training_group import TrainingGroupOperator

    sweep, plan, context = pod_sweep(tmp_path, monkeypatch, "deferred")
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch, conn_id=CONN_ID) as c:
        with pytest.raises(TaskDeferred) as deferred:
            TrainingGroupOperator(task_id="train", group=plan.to_xcom()).execute(context)
        kind, arguments = deferred.value.trigger.serialize()
        assert kind == "operators.kubernetes.pod_group.GroupPodTrigger"
        module, _, name = kind.rpartition(".")
        trigger = getattr(importlib.import_module(module), name)(**arguments)

        async def watch_then_kill() -> None:
            waiting = asyncio.ensure_future(anext(trigger.run()))
            await asyncio.sleep(0.5)
            assert not waiting.done()  # the pod runs: no event yet
            waiting.cancel()
            await trigger.on_kill()

        asyncio.run(watch_then_kill())
        assert_nothing_left(c)
    assert manifest.load(sweep.sweep_dir).entry(plan.run_id).status == "cancelled"


def test_while_the_pod_runs_the_deferred_task_wakes_to_load_and_defers_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``SCALEBENCH_LIVE_INGEST_S`` seconds the trigger fires ``running``: the task
    loads what the ranks wrote so far and defers again, to a trigger of the same pod."""
    from airflow.sdk.exceptions import TaskDeferred

    from operators.training_group import TrainingGroupOperator

    _sweep, plan, context = pod_sweep(
        tmp_path, monkeypatch, "deferred", SCALEBENCH_LIVE_INGEST_S="0.3"
    )
    loads: list[bool] = []
    monkeypatch.setattr(
        TrainingGroupOperator, "publish", lambda self, group, final=True: loads.append(final)
    )
    stages = [Stage(0, running(), logs={0: "epoch 1\n"}), Stage(1.5, exited(0))]
    with emulated_cluster(stages, tmp_path, monkeypatch, conn_id=CONN_ID) as cluster:
        statuses = []
        call: Any = lambda: TrainingGroupOperator(  # noqa: E731
            task_id="train", group=plan.to_xcom()
        ).execute(context)
        while True:
            try:
                verdict = call()
                break
            except TaskDeferred as deferred:
                event = run_trigger(deferred.trigger)
                statuses.append(event["status"])
                call = lambda event=event: TrainingGroupOperator(  # noqa: E731
                    task_id="train", group=plan.to_xcom()
                ).trigger_reentry(context, event)
        assert_nothing_left(cluster)
    assert verdict["status"] == "succeeded", verdict["reason"]
    # The last event says the pod ended, unless it ended between a running event and the
    # deferral after it: the pod operator then ends it at once, with no further event.
    assert statuses[0] == "running" and set(statuses[1:-1]) <= {"running"}
    assert statuses[-1] in ("success", "running")
    assert loads == [False] * statuses.count("running") + [True]  # live loads, then the last


@pytest.mark.parametrize("admitted", [True, False])
def test_a_queued_pod_waits_for_kueue_and_one_never_admitted_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, admitted: bool
) -> None:
    _sweep, plan, context = pod_sweep(
        tmp_path,
        monkeypatch,
        "deferred",
        SCALEBENCH_K8S_QUEUE_NAME="team-a",
        SCALEBENCH_K8S_ADMISSION_TIMEOUT_S="1",
        SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S="1",
    )
    stages = [Stage(0, running()), Stage(0.3, exited(0))]
    with emulated_cluster(
        stages, tmp_path, monkeypatch, conn_id=CONN_ID, admit_after_s=0.3 if admitted else None
    ) as cluster:
        verdict = run_task("deferred", plan, context)
        pod = sent_pod(cluster)
        assert_nothing_left(cluster)
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    expected = "succeeded" if admitted else "not_admitted"
    assert verdict["status"] == expected, verdict["reason"]


def test_the_pod_is_valid_against_the_official_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import kubernetes_validate

    from operators.kubernetes import KubernetesSettings, group_names
    from operators.kubernetes.pod_group import PodGroup

    _, plan, context = pod_sweep(tmp_path, monkeypatch, "deferred")
    names = group_names("task1a_resnet20_cifar10", "manual__x", 0, 1, plan.world_size)
    group = PodGroup(plan, names=names, settings=KubernetesSettings.from_env(), context=context)
    from test_kubernetes_manifests import K8S_VERSION

    for doc in (group.pod_manifest(), group.network_policy_manifest()):
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


def test_the_pod_triggers_event_is_read_typed_and_handed_back_to_the_provider_whole() -> None:
    """What scalebench reads of the pod trigger's event (its job, attempt and start, the
    pod) is typed; the provider's own ``trigger_reentry`` gets the event as it was fired."""
    from operators.kubernetes.watch import PodEvent

    fired = {
        "status": "running",
        "namespace": NS,
        "name": "train-w1-r1",
        "last_log_time": "2026-12-02T07:00:00Z",
        "job": "train-w1-r1",
        "attempt": 2,
        "started_s": 1764658800.5,
        "message": "the provider's own key",
    }
    event = PodEvent.of(fired)
    assert (event.job, event.attempt, event.started_s) == ("train-w1-r1", 2, 1764658800.5)
    assert event.running and (event.name, event.namespace) == ("train-w1-r1", NS)
    assert dict(event.payload) == fired and PodEvent.of(event) is event
    ended = PodEvent.of({"status": "success", "job": "j", "started_s": 1})
    assert not ended.running and ended.attempt == 1 and ended.name == ""
