"""The Kubernetes launcher: manifests checked against the official schemas, names,
scheduling problems read from pod status, and the wait loop against an in-memory
stand-in for the API (no API server can run here)."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from operators.kubernetes import (
    API_CALLS,
    DATA_MOUNT,
    RESULTS_MOUNT,
    GroupNames,
    KubernetesGroup,
    KubernetesSettings,
    group_names,
    job_manifest,
    job_verdict,
    label_value,
    pending_problem,
    pod_argv,
    service_manifest,
)
from operators.kubernetes.settings import SETTINGS, settings_table
from scalebench.network import HOST_PROFILE, parse_profile
from scalebench.request import SweepRequest
from scalebench.sweep import GroupPlan

K8S_VERSION = "1.33"
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
UGLY_RUN_ID = "manual__2026-11-22T02:00:00.123456+00:00"
ROOT = Path("/srv/scalebench/results")
DATA = Path("/srv/scalebench/data")
RUN_ID = "task1a-resnet20-cifar10-20261122T020000Z-ab12-w4-r0"
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def planned(
    world_size: int = 4, sweep_dir: Path = ROOT / "sweep-1", data_dir: Path = DATA
) -> GroupPlan:
    """A planned light Task 1a group on nccl, as the sweep plans it on the Airflow side."""
    request = SweepRequest(
        task="task1a-resnet20-cifar10",
        light=True,
        backend="nccl",
        compile="off",
        launcher="kubernetes",
        placement="pack",
        gpus_per_worker=1,  # what validate_request decides for a pod when not asked
        group_timeout_s=3600.0,
        data_dir=data_dir,
    )
    return GroupPlan(
        request=request,
        run_id=RUN_ID,
        world_size=world_size,
        repeat=0,
        network=HOST_PROFILE,
        sweep_dir=str(sweep_dir),
    )


NAMES = group_names("task1a_resnet20_cifar10", UGLY_RUN_ID, 2, 1, 4)


def render(world_size: int = 4, **settings: Any) -> tuple[dict, dict]:
    config = KubernetesSettings(**settings)
    args = pod_argv(planned(world_size), ROOT, DATA)
    job = job_manifest(
        NAMES, args, world_size, config, gpus_per_worker=1, timeout_s=3599.2, run_id=RUN_ID
    )
    return job, service_manifest(NAMES, config, run_id=RUN_ID)


# --------------------------------------------------------------------------- manifests


def test_job_and_service_pass_the_official_schemas() -> None:
    job, service = render(
        data_claim="datasets",
        node_selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
        tolerations=(GPU_TOLERATION,),
    )
    assert kubernetes_validate.validate(job, K8S_VERSION, strict=True) == K8S_VERSION
    assert kubernetes_validate.validate(service, K8S_VERSION, strict=True) == K8S_VERSION


def test_a_stacks_image_and_variables_are_the_pods_and_pass_the_schema() -> None:
    """A sweep of stacks on Kubernetes: each group's pods run its stack's image, with the
    stack's variables and its name for the rank's environment record."""
    from scalebench.stacks import STACK_VARIABLE, Stack

    stack = Stack("tonight", image="registry.example/worker:tonight", env=(("X", "1"),))
    plan = replace(planned(), stack=stack)
    cluster = FakeCluster([({"active": 4}, [running_pod(r) for r in range(4)])])
    group = make_group(cluster, plan=plan)
    (job,) = cluster.jobs.values()
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/worker:tonight"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["X"] == "1"
    assert json.loads(env[STACK_VARIABLE]) == {"name": "tonight", "env": {"X": "1"}}
    assert env["MASTER_ADDR"]  # the launcher's rendezvous is the launcher's, whatever the stack
    assert kubernetes_validate.validate(job, K8S_VERSION, strict=True) == K8S_VERSION
    group.stop()


def test_the_schemas_do_catch_a_broken_manifest() -> None:
    job, _ = render()
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 7
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)


def test_job_is_one_indexed_group_without_retries() -> None:
    job, _ = render()
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == 4
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 3600  # rounded up
    assert spec["ttlSecondsAfterFinished"] > 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["command"][:3] == ["python", "-m", "workers.run"]
    assert container["image"] == "scalebench-worker:latest"
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_rendezvous_is_rank_0_behind_the_headless_service() -> None:
    job, service = render()
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] == NAMES.service
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"][0]["port"] == 29500
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": NAMES.job}
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    node = next(e for e in pod["containers"][0]["env"] if e["name"] == "NODE_NAME")
    assert node["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["MASTER_ADDR"] == f"{NAMES.job}-0.{NAMES.service}"
    assert env["MASTER_PORT"] == "29500"
    assert env["WORLD_SIZE"] == "4"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert "RANK" not in env  # the rank is JOB_COMPLETION_INDEX, set by Kubernetes


def test_pods_run_as_non_root_with_shared_memory_and_the_results_claim() -> None:
    job, _ = render()
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 1000
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    assert volumes[mounts[RESULTS_MOUNT]]["persistentVolumeClaim"]["claimName"] == (
        "scalebench-results"
    )
    assert DATA_MOUNT not in mounts  # no data claim configured
    assert pod["serviceAccountName"] == "scalebench-worker"
    assert container["command"][container["command"].index("--results") + 1] == (
        f"{RESULTS_MOUNT}/sweep-1/{RUN_ID}"
    )


def test_optional_data_claim_node_selector_tolerations_and_cpu_only() -> None:
    config = KubernetesSettings(
        data_claim="datasets", node_selector={"pool": "gpu"}, tolerations=(GPU_TOLERATION,)
    )
    job = job_manifest(NAMES, ["--results", "/x"], 2, config, gpus_per_worker=0, image="me/w:1")
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    data = next(m for m in container["volumeMounts"] if m["mountPath"] == DATA_MOUNT)
    assert data["readOnly"] is True
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["tolerations"] == [GPU_TOLERATION]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]  # CPU clusters
    assert container["image"] == "me/w:1"
    assert "activeDeadlineSeconds" not in job["spec"]
    assert kubernetes_validate.validate(job, K8S_VERSION, strict=True)


def test_labels_are_valid_and_carry_the_run_id() -> None:
    job, service = render()
    for labels in (
        job["metadata"]["labels"],
        job["spec"]["template"]["metadata"]["labels"],
        service["metadata"]["labels"],
    ):
        assert labels["app.kubernetes.io/name"] == "scalebench-worker"
        assert labels["app.kubernetes.io/managed-by"] == "scalebench"
        assert labels["scalebench.io/run-id"] == RUN_ID
    ugly = label_value(UGLY_RUN_ID + "x" * 80)
    assert len(ugly) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", ugly)
    assert label_value("a" * 70) != label_value("a" * 71)


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("dag_id", "run_id"),
    [
        ("task1a_resnet20_cifar10", UGLY_RUN_ID),
        ("scheduled_Nightly.Regression", "scheduled__2026-11-22T02:00:00+00:00"),
        ("x" * 250, "backfill__2026-01-01T00:00:00+00:00"),
        ("42-starts-with-digits", "asset_triggered__2026-11-22T02:00:00.1+00:00"),
        ("___", "::::"),
    ],
)
def test_names_are_dns_labels_short_enough_for_pod_hostnames(dag_id: str, run_id: str) -> None:
    for map_index in (-1, 0, 17):
        for try_number in (1, 12):
            names = group_names(dag_id, run_id, map_index, try_number, 32)
            for name in (names.job, names.service):
                assert DNS_1035.match(name), name
                assert len(name) <= 59
            assert len(f"{names.job}-31") <= 63  # hostname of the last pod
            assert len(f"{names.job}-0.{names.service}") <= 253


def test_names_are_unique_per_try_and_map_index_and_readable() -> None:
    names = {
        group_names("task1a", UGLY_RUN_ID, m, t, 4).job for m in (-1, 0, 1, 2) for t in (1, 2, 3)
    }
    assert len(names) == 12
    assert group_names("task1a", "run-a", 0, 1, 4) != group_names("task1a", "run-b", 0, 1, 4)
    assert group_names("task1a", "r", 0, 1, 4) == group_names("task1a", "r", 0, 1, 4)
    assert NAMES.job.startswith("sb-task1a-resnet20-cifar10-w4-m2-t1-")


# --------------------------------------------------------------------------- pod status

STARTED = 1000.0


def pending_pod(
    rank: int = 2, *, unschedulable: bool = False, waiting: str | None = None, message: str = ""
) -> dict:
    """A Pending Job pod as the API returns it (JSON, camelCase)."""
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "BestEffort"}
    if unschedulable:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": UNSCHEDULABLE,
                "lastTransitionTime": "2026-11-22T02:00:05Z",
            }
        ]
    if waiting:
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        status["containerStatuses"] = [
            {
                "name": "worker",
                "image": "registry.example/scalebench-worker:nope",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"waiting": {"reason": waiting, "message": message}},
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{NAMES.job}-{rank}-x7k2p",
            "namespace": "scalebench",
            "labels": {
                "batch.kubernetes.io/job-name": NAMES.job,
                "batch.kubernetes.io/job-completion-index": str(rank),
            },
            "annotations": {"batch.kubernetes.io/job-completion-index": str(rank)},
            "creationTimestamp": "2026-11-22T02:00:00Z",
        },
        "spec": {"containers": [{"name": "worker", "image": "scalebench-worker:latest"}]},
        "status": status,
    }


def running_pod(rank: int = 0) -> dict:
    pod = pending_pod(rank)
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {
                "name": "worker",
                "image": "scalebench-worker:latest",
                "imageID": "sha256:1",
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-11-22T02:00:10Z"}},
            }
        ],
    }
    return pod


def finished_pod(
    rank: int,
    exit_code: int,
    reason: str = "Error",
    *,
    finished_s: int = 30,
    deleting: bool = False,
) -> dict:
    pod = running_pod(rank)
    pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
    pod["status"]["containerStatuses"][0]["state"] = {
        "terminated": {
            "exitCode": exit_code,
            "reason": reason if exit_code else "Completed",
            "startedAt": "2026-11-22T02:00:10Z",
            "finishedAt": f"2026-11-22T02:00:{finished_s:02d}Z",
        }
    }
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-11-22T02:01:00Z"
    return pod


class _Body:
    def __init__(self, data: Any) -> None:
        self.data = json.dumps(data)


def as_model(data: dict, kind: str) -> Any:
    """``data`` deserialised the way the client deserialises the API's answer."""
    return client.ApiClient().deserialize(_Body(data), kind)


@pytest.mark.parametrize("form", ["json", "model"])
def test_unschedulable_pod_fails_after_the_schedule_timeout(form: str) -> None:
    pods = [running_pod(0), pending_pod(2, unschedulable=True)]
    if form == "model":
        pods = [as_model(p, "V1Pod") for p in pods]
    assert pending_problem(pods, STARTED + 599, STARTED, 600) is None
    problem = pending_problem(pods, STARTED + 600, STARTED, 600)
    assert problem == (
        f"pod {NAMES.job}-2-x7k2p (rank 2) could not be scheduled within 600 s: {UNSCHEDULABLE}"
    )


@pytest.mark.parametrize("form", ["json", "model"])
def test_image_pull_errors_fail_after_a_short_grace(form: str) -> None:
    pods = [
        pending_pod(
            1,
            waiting="ImagePullBackOff",
            message='Back-off pulling image "registry.example/scalebench-worker:nope"',
        )
    ]
    if form == "model":
        pods = [as_model(pods[0], "V1Pod")]
    assert pending_problem(pods, STARTED + 5, STARTED, 600) is None
    problem = pending_problem(pods, STARTED + 61, STARTED, 600)
    assert problem is not None
    assert "rank 1" in problem and "ImagePullBackOff" in problem
    assert "registry.example/scalebench-worker:nope" in problem


@pytest.mark.parametrize("reason", ["InvalidImageName", "CreateContainerConfigError"])
def test_hopeless_container_states_fail_at_once(reason: str) -> None:
    pods = [pending_pod(3, waiting=reason, message='secret "x" not found')]
    problem = pending_problem(pods, STARTED + 1, STARTED, 600)
    assert problem is not None and reason in problem and "rank 3" in problem


def test_running_or_early_pods_are_no_problem() -> None:
    assert pending_problem([running_pod(0), running_pod(1)], STARTED + 9999, STARTED, 600) is None
    assert pending_problem([pending_pod(1, unschedulable=True)], STARTED + 10, STARTED, 600) is None
    slow = [pending_pod(1, waiting="ContainerCreating")]
    assert pending_problem(slow, STARTED + 10, STARTED, 600) is None
    late = pending_problem(slow, STARTED + 700, STARTED, 600)
    assert late is not None and "still pending after 600 s: ContainerCreating" in late


def test_models_built_directly_work_too() -> None:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="p", annotations={"batch.kubernetes.io/job-completion-index": "5"}
        ),
        status=client.V1PodStatus(
            phase="Pending",
            conditions=[
                client.V1PodCondition(
                    type="PodScheduled",
                    status="False",
                    reason="Unschedulable",
                    message=UNSCHEDULABLE,
                )
            ],
        ),
    )
    problem = pending_problem([pod], 700.0, 0.0, 600)
    assert problem == f"pod p (rank 5) could not be scheduled within 600 s: {UNSCHEDULABLE}"


DIGEST_A = "sha256:" + "a1" * 32
DIGEST_B = "sha256:" + "b2" * 32


def pod_that_ran(rank: int, image_id: str, image: str = "repo/worker:tonight") -> dict:
    """A finished pod whose worker container ran ``image``, which the kubelet reports as
    ``image_id``; beside it, an init container that ran another image."""
    pod = finished_pod(rank, 0)
    pod["status"]["containerStatuses"][0].update(image=image, imageID=image_id)
    pod["status"]["initContainerStatuses"] = [
        {
            "name": "setup",
            "image": "busybox:1",
            "imageID": f"docker.io/library/busybox@{DIGEST_B}",
            "ready": False,
            "restartCount": 0,
        }
    ]
    return pod


@pytest.mark.parametrize("form", ["json", "model"])
def test_the_image_digest_is_the_worker_containers_image_as_the_kubelet_resolved_it(
    form: str,
) -> None:
    from operators.kubernetes.pod_status import image_digest

    def digest(*pods: dict) -> str:
        return image_digest(as_model(p, "V1Pod") if form == "model" else p for p in pods)

    pullable = pod_that_ran(0, f"docker-pullable://repo/worker@{DIGEST_A}")
    plain = pod_that_ran(1, f"registry.example:5000/team/worker@{DIGEST_A}")
    assert digest(pullable) == f"repo/worker@{DIGEST_A}"
    assert digest(plain) == f"registry.example:5000/team/worker@{DIGEST_A}"
    # An image built on the node has no registry digest: its ID, with the image's repository.
    local = pod_that_ran(0, f"docker://{DIGEST_B}", image="me/worker:dev")
    assert digest(local) == f"me/worker@{DIGEST_B}"
    assert digest(pod_that_ran(0, DIGEST_B)) == f"repo/worker@{DIGEST_B}"
    # No status yet, an image still being pulled, an ID that names no digest: nothing.
    assert digest() == ""
    assert digest(pending_pod(0)) == digest(pending_pod(1, waiting="ContainerCreating")) == ""
    assert digest(running_pod(0)) == ""  # imageID "sha256:1"
    # Pods that agree give it once; pods that ran different images, all of them, sorted.
    same = pod_that_ran(1, f"repo/worker@{DIGEST_A}")
    assert digest(pullable, same, pending_pod(2)) == f"repo/worker@{DIGEST_A}"
    moved = pod_that_ran(1, f"repo/worker@{DIGEST_B}")
    assert digest(moved, pullable) == f"repo/worker@{DIGEST_A},repo/worker@{DIGEST_B}"


def job_status(**status: Any) -> dict:
    job, _ = render()
    job["metadata"]["uid"] = "0b1c"
    job["status"] = status
    return job


def test_job_verdicts() -> None:
    assert job_verdict(job_status(active=4), [running_pod(r) for r in range(4)]) is None
    done = job_status(succeeded=4, conditions=[{"type": "Complete", "status": "True"}])
    assert job_verdict(as_model(done, "V1Job"), []) == ("succeeded", "", None)
    deadline = job_status(
        conditions=[{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]
    )
    status, reason, _ = job_verdict(deadline, [finished_pod(0, 143, deleting=True)])
    assert status == "timed_out" and "3600 s" in reason
    # The Job controller kills rank 0 after rank 1 failed: rank 1 is to blame.
    pods = [finished_pod(0, 143, finished_s=40, deleting=True), finished_pod(1, 137, "OOMKilled")]
    status, reason, rank = job_verdict(job_status(failed=2), pods)
    assert (status, rank) == ("failed", 1)
    assert reason == f"rank 1 (pod {NAMES.job}-1-x7k2p) exited with status 137 (OOMKilled)"
    # A rank whose results volume filled up (status 4) names the cause, whatever the others did.
    pods = [finished_pod(0, 1, finished_s=20), finished_pod(1, 4, finished_s=25)]
    status, reason, rank = job_verdict(job_status(failed=2), pods)
    assert (status, rank) == ("failed", None)
    assert reason == "no space left on /var/scalebench/results (the results volume; rank 1)"


# --------------------------------------------------------------------------- the wait loop


class FakeCluster:
    """In-memory BatchV1Api + CoreV1Api: only the calls the launcher makes.

    ``states`` is what successive polls see: a ``(job status, pods)`` pair per
    poll (the last one repeats). Answers are client models, as from a real API.
    """

    def __init__(self, states: list[tuple[dict, list[dict]]], logs: dict[int, str] | None = None):
        self.states = states
        self.logs = logs or {}
        self.jobs: dict[str, dict] = {}
        self.services: dict[str, dict] = {}
        self.policies: dict[str, dict] = {}
        self.deleted: list[tuple[str, str]] = []
        self.created_jobs: list[dict] = []
        self.polls = 0
        self.calls: set[str] = set()  # API methods called
        self.now = 0.0
        self.fail_reads_with: Exception | None = None
        self.on_sleep: Any = None

    # clock
    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep()

    # BatchV1Api
    def create_namespaced_job(self, namespace: str, body: dict) -> Any:
        self.calls.add("create_namespaced_job")
        kubernetes_validate.validate(body, K8S_VERSION, strict=True)
        body = {**body, "metadata": {**body["metadata"], "uid": "u-1"}}
        self.jobs[body["metadata"]["name"]] = body
        self.created_jobs.append(body)
        return as_model(body, "V1Job")

    def read_namespaced_job(self, name: str, namespace: str) -> Any:
        self.calls.add("read_namespaced_job")
        if self.fail_reads_with is not None:
            raise self.fail_reads_with
        if name not in self.jobs:
            raise ApiException(status=404, reason="Not Found")
        status, _ = self.states[min(self.polls, len(self.states) - 1)]
        self.polls += 1
        return as_model({**self.jobs[name], "status": status}, "V1Job")

    def delete_namespaced_job(self, name: str, namespace: str, propagation_policy: str) -> None:
        self.calls.add("delete_namespaced_job")
        assert propagation_policy in ("Background", "Foreground")
        if self.jobs.pop(name, None) is None:
            raise ApiException(status=404, reason="Not Found")
        self.deleted.append(("job", name))

    # CoreV1Api
    def create_namespaced_service(self, namespace: str, body: dict) -> Any:
        self.calls.add("create_namespaced_service")
        kubernetes_validate.validate(body, K8S_VERSION, strict=True)
        self.services[body["metadata"]["name"]] = body
        return as_model(body, "V1Service")

    def patch_namespaced_service(self, name: str, namespace: str, body: list) -> None:
        self.calls.add("patch_namespaced_service")
        (op,) = body
        self.services[name]["metadata"]["ownerReferences"] = op["value"]

    def delete_namespaced_service(self, name: str, namespace: str) -> None:
        self.calls.add("delete_namespaced_service")
        if self.services.pop(name, None) is None:
            raise ApiException(status=404, reason="Not Found")
        self.deleted.append(("service", name))

    # NetworkingV1Api
    def create_namespaced_network_policy(self, namespace: str, body: dict) -> Any:
        self.calls.add("create_namespaced_network_policy")
        kubernetes_validate.validate(body, K8S_VERSION, strict=True)
        self.policies[body["metadata"]["name"]] = body
        return as_model(body, "V1NetworkPolicy")

    def delete_namespaced_network_policy(self, name: str, namespace: str) -> None:
        self.calls.add("delete_namespaced_network_policy")
        if self.policies.pop(name, None) is None:
            raise ApiException(status=404, reason="Not Found")
        self.deleted.append(("policy", name))

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        self.calls.add("list_namespaced_pod")
        assert label_selector == f"batch.kubernetes.io/job-name={NAMES.job}"
        _, pods = self.states[min(self.polls - 1, len(self.states) - 1)]
        return as_model({"items": pods}, "V1PodList")

    def read_namespaced_pod_log(self, name: str, namespace: str, **options: Any) -> Any:
        self.calls.add("read_namespaced_pod_log")
        assert options["container"] == "worker"
        rank = int(name.removeprefix(f"{NAMES.job}-").split("-")[0])
        text = self.logs.get(rank, "")
        if options.get("tail_lines"):
            text = "".join(text.splitlines(keepends=True)[-options["tail_lines"] :])

        class Response:
            data = text.encode()

            def release_conn(self) -> None:
                pass

        return Response()


def make_group(
    cluster: FakeCluster,
    lines: list[str] | None = None,
    plan: GroupPlan | None = None,
    **settings: Any,
):
    """A started group of ``plan`` (default :func:`planned`) on ``cluster``."""
    settings.setdefault("schedule_timeout_s", 600)
    group = KubernetesGroup(
        plan or planned(),
        names=NAMES,
        settings=KubernetesSettings(**settings),
        sink=(lines.append if lines is not None else lambda line: None),
        batch_api=cluster,
        core_api=cluster,
        networking_api=cluster,
        clock=cluster.clock,
        sleep=cluster.sleep,
        results_root=ROOT,
        data_root=DATA,
        poll_interval_s=5,
    )
    group.start()
    assert cluster.jobs and cluster.services
    return group


def assert_cleaned_up(cluster: FakeCluster) -> None:
    assert not cluster.jobs and not cluster.services and not cluster.policies
    assert sorted(cluster.deleted) == [
        ("job", NAMES.job),
        ("policy", NAMES.job),
        ("service", NAMES.service),
    ]


def test_success_streams_rank_0_and_deletes_job_and_service() -> None:
    running = [running_pod(r) for r in range(4)]
    done = [finished_pod(r, 0) for r in range(4)]
    cluster = FakeCluster(
        [
            ({"active": 4}, running),
            ({"active": 4}, running),
            ({"succeeded": 4, "conditions": [{"type": "Complete", "status": "True"}]}, done),
        ],
        logs={0: "epoch 1\nepoch 2\nfinished\n"},
    )
    lines: list[str] = []
    group = make_group(cluster, lines)
    owners = cluster.services[NAMES.service]["metadata"]["ownerReferences"]
    assert owners[0]["kind"] == "Job" and owners[0]["uid"] == "u-1"
    result = group.wait(3600)
    assert result.status == "succeeded", result.reason
    assert result.exit_codes == [0, 0, 0, 0]
    assert [line for line in lines if line.startswith("[rank 0]")] == [
        "[rank 0] epoch 1",
        "[rank 0] epoch 2",
        "[rank 0] finished",
    ]
    assert_cleaned_up(cluster)
    group.stop()  # idempotent: nothing left, no error
    assert_cleaned_up(cluster)


def test_rank_0_log_is_passed_on_once_and_a_partial_line_waits() -> None:
    cluster = FakeCluster([({"active": 4}, [running_pod(r) for r in range(4)])])
    lines: list[str] = []
    group = make_group(cluster, lines)
    script = iter(["a\nhalf", "a\nhalf line\nb\n", "a\nhalf line\nb\n"])

    def grow() -> None:
        cluster.logs[0] = next(script, cluster.logs[0])
        if cluster.polls >= 4:
            group.stop()

    cluster.logs[0] = "a\n"
    cluster.on_sleep = grow
    group.wait(3600)
    assert [line for line in lines if line.startswith("[rank")] == [
        "[rank 0] a",
        "[rank 0] half line",
        "[rank 0] b",
    ]


def test_failed_rank_is_named_with_exit_code_and_its_log_tail() -> None:
    running = [running_pod(r) for r in range(4)]
    failed = [
        finished_pod(0, 143, deleting=True),
        running_pod(1),
        finished_pod(2, 1, "Error", finished_s=20),
        running_pod(3),
    ]
    cluster = FakeCluster(
        [({"active": 4}, running), ({"active": 3, "failed": 1}, failed)],
        logs={2: "".join(f"line {i}\n" for i in range(80)) + "ValueError: boom\n"},
    )
    lines: list[str] = []
    result = make_group(cluster, lines).wait(3600)
    assert result.status == "failed"
    assert result.first_failed_rank == 2
    assert result.reason == f"rank 2 (pod {NAMES.job}-2-x7k2p) exited with status 1 (Error)"
    assert result.exit_codes == [143, None, 1, None]
    assert result.log_tail[-1] == "[rank 2] ValueError: boom"
    assert len(result.log_tail) == 50
    assert "[rank 2] ValueError: boom" in lines
    assert_cleaned_up(cluster)


def test_every_rank_exiting_3_is_divergence() -> None:
    diverged = [finished_pod(r, 3, finished_s=20 + r) for r in range(4)]
    cluster = FakeCluster(
        [({"active": 4}, [running_pod(r) for r in range(4)]), ({"failed": 4}, diverged)]
    )
    result = make_group(cluster).wait(3600)
    assert result.status == "diverged", result.reason
    assert result.first_failed_rank == 0
    assert_cleaned_up(cluster)


def test_divergence_seen_on_one_rank_first_waits_for_the_others() -> None:
    first = [finished_pod(0, 3), running_pod(1), running_pod(2), running_pod(3)]
    later = [finished_pod(r, 3) for r in range(4)]
    cluster = FakeCluster([({"active": 3, "failed": 1}, first), ({"failed": 4}, later)])
    result = make_group(cluster).wait(3600)
    assert result.status == "diverged"
    assert cluster.polls == 2  # looked again before the verdict


def test_unschedulable_group_fails_within_the_schedule_timeout() -> None:
    pods = [
        running_pod(0),
        running_pod(1),
        pending_pod(2, unschedulable=True),
        pending_pod(3, unschedulable=True),
    ]
    cluster = FakeCluster([({"active": 4}, pods)])
    result = make_group(cluster, schedule_timeout_s=120).wait(3600)
    assert result.status == "failed"
    assert "could not be scheduled within 120 s" in result.reason
    assert "nvidia.com/gpu" in result.reason and "rank 2" in result.reason
    assert 120 <= result.seconds <= 130
    assert_cleaned_up(cluster)


def test_pods_never_created_fail_within_the_schedule_timeout() -> None:
    cluster = FakeCluster([({}, [])])
    result = make_group(cluster, schedule_timeout_s=60).wait(3600)
    assert result.status == "failed"
    assert "only 0 of 4 pods were created within 60 s" in result.reason
    assert_cleaned_up(cluster)


def test_wall_clock_and_job_deadline_time_out() -> None:
    cluster = FakeCluster([({"active": 4}, [running_pod(r) for r in range(4)])])
    result = make_group(cluster).wait(100)
    assert result.status == "timed_out" and "100 s" in result.reason
    assert_cleaned_up(cluster)

    deadline = {
        "failed": 4,
        "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}],
    }
    cluster = FakeCluster([(deadline, [finished_pod(r, 143, deleting=True) for r in range(4)])])
    result = make_group(cluster).wait(3600)
    assert result.status == "timed_out"
    assert_cleaned_up(cluster)


def test_stop_from_another_thread_ends_the_wait_and_deletes() -> None:
    cluster = FakeCluster([({"active": 4}, [running_pod(r) for r in range(4)])])
    group = make_group(cluster)

    def stop_on_third_poll() -> None:
        if cluster.polls == 3:
            killer = threading.Thread(target=group.stop)
            killer.start()
            killer.join()

    cluster.on_sleep = stop_on_third_poll
    result = group.wait(3600)
    assert result.status == "failed" and "stopped" in result.reason
    assert cluster.polls == 3
    assert_cleaned_up(cluster)


@pytest.mark.parametrize(
    "error", [RuntimeError("connection reset"), ApiException(status=403, reason="Forbidden")]
)
def test_api_error_while_waiting_still_deletes(error: Exception) -> None:
    cluster = FakeCluster([({"active": 4}, [running_pod(r) for r in range(4)])])
    group = make_group(cluster)
    cluster.fail_reads_with = error
    with pytest.raises(type(error)):
        group.wait(3600)
    assert_cleaned_up(cluster)


def test_transient_api_errors_are_retried() -> None:
    done = {"succeeded": 4, "conditions": [{"type": "Complete", "status": "True"}]}
    cluster = FakeCluster([(done, [finished_pod(r, 0) for r in range(4)])])
    lines: list[str] = []
    group = make_group(cluster, lines)
    cluster.fail_reads_with = ApiException(status=503, reason="Service Unavailable")

    def recover() -> None:
        cluster.fail_reads_with = None

    cluster.on_sleep = recover
    assert group.wait(3600).status == "succeeded"
    assert any("trying again" in line for line in lines)


def test_job_deleted_by_someone_else_is_a_failure() -> None:
    cluster = FakeCluster([({"active": 4}, [])])
    group = make_group(cluster)
    cluster.jobs.clear()
    result = group.wait(3600)
    assert result.status == "failed" and "deleted by someone else" in result.reason
    assert not cluster.services


def test_a_failed_job_creation_removes_the_service() -> None:
    cluster = FakeCluster([({}, [])])
    cluster.create_namespaced_job = lambda namespace, body: (_ for _ in ()).throw(
        ApiException(status=409, reason="AlreadyExists")
    )
    group = KubernetesGroup(
        planned(),
        names=NAMES,
        settings=KubernetesSettings(),
        batch_api=cluster,
        core_api=cluster,
        networking_api=cluster,
        results_root=ROOT,
        data_root=DATA,
        sink=lambda line: None,
    )
    with pytest.raises(RuntimeError, match="already exists"):
        group.start()
    assert not cluster.services and not cluster.policies


def test_constructing_needs_no_cluster() -> None:
    group = KubernetesGroup(
        planned(),
        names=NAMES,
        settings=KubernetesSettings(),
        results_root=ROOT,
        data_root=DATA,
    )
    assert group.job_manifest()["spec"]["completions"] == 4
    group.stop()  # nothing created, nothing to delete


def test_a_planned_network_profile_reaches_the_pods_and_their_arguments() -> None:
    plan = planned()
    plan = replace(plan, network=parse_profile("10gbit"))
    group = KubernetesGroup(
        plan, names=NAMES, settings=KubernetesSettings(), results_root=ROOT, data_root=DATA
    )
    template = group.job_manifest()["spec"]["template"]
    assert template["metadata"]["annotations"]["kubernetes.io/egress-bandwidth"] == "10G"
    command = template["spec"]["containers"][0]["command"]
    assert command[command.index("--network") + 1] == "10gbit"  # recorded by every rank


# --------------------------------------------------------------------------- arguments


def test_the_pods_arguments_put_results_and_data_on_the_mounts() -> None:
    args = pod_argv(planned(), ROOT, DATA)
    assert args[args.index("--results") + 1] == f"{RESULTS_MOUNT}/sweep-1/{RUN_ID}"
    assert args[args.index("--data-dir") + 1] == DATA_MOUNT
    assert args[:2] == ["--task", "task1a-resnet20-cifar10"] and "--light" in args
    relative = pod_argv(
        planned(sweep_dir=Path("var/results/s"), data_dir=Path("var/data/c")),
        "var/results",
        "var/data",
    )
    assert relative[relative.index("--results") + 1] == f"{RESULTS_MOUNT}/s/{RUN_ID}"
    assert relative[relative.index("--data-dir") + 1] == f"{DATA_MOUNT}/c"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"sweep_dir": Path("/elsewhere/s")},
            "/elsewhere/s/" + RUN_ID + " is not under the results root",
        ),
        ({"sweep_dir": ROOT / ".." / "x"}, "is not under the results root"),
        ({"data_dir": Path("/tmp/d")}, "/tmp/d is not under the data root"),
    ],
)
def test_paths_the_pods_cannot_see_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        pod_argv(planned(**changes), ROOT, DATA)


# --------------------------------------------------------------------------- settings


def test_settings_defaults() -> None:
    settings = KubernetesSettings.from_env({})
    assert settings == KubernetesSettings()
    assert (settings.namespace, settings.conn_id) == ("scalebench", "kubernetes_default")
    assert settings.image == "scalebench-worker:latest"
    assert settings.image_pull_policy == "IfNotPresent"
    assert settings.service_account == "scalebench-worker"
    assert (settings.node_selector, settings.tolerations) == ({}, ())
    assert (settings.results_claim, settings.data_claim) == ("scalebench-results", "")
    assert (settings.schedule_timeout_s, settings.shm_size) == (600.0, "2Gi")
    assert (settings.deferrable, settings.poll_interval_s) == (True, 5.0)


def test_settings_from_env() -> None:
    settings = KubernetesSettings.from_env(
        {
            "SCALEBENCH_K8S_NAMESPACE": "bench",
            "SCALEBENCH_K8S_CONN_ID": "k8s_gpu",
            "SCALEBENCH_WORKER_IMAGE": "ghcr.io/acme/scalebench-worker:1.2",
            "SCALEBENCH_K8S_IMAGE_PULL_POLICY": "Always",
            "SCALEBENCH_K8S_SERVICE_ACCOUNT": "runner",
            "SCALEBENCH_K8S_NODE_SELECTOR": '{"pool": "a100"}',
            "SCALEBENCH_K8S_TOLERATIONS": json.dumps([GPU_TOLERATION]),
            "SCALEBENCH_K8S_RESULTS_CLAIM": "res",
            "SCALEBENCH_K8S_DATA_CLAIM": "cifar",
            "SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S": "90.5",
            "SCALEBENCH_K8S_SHM_SIZE": "16Gi",
            "SCALEBENCH_K8S_DEFERRABLE": "false",
            "SCALEBENCH_K8S_POLL_S": "30",
        }
    )
    assert not settings.deferrable and settings.poll_interval_s == 30.0
    assert settings.namespace == "bench" and settings.conn_id == "k8s_gpu"
    assert settings.image == "ghcr.io/acme/scalebench-worker:1.2"
    assert settings.node_selector == {"pool": "a100"}
    assert settings.tolerations[0]["effect"] == "NoSchedule"
    assert settings.schedule_timeout_s == 90.5 and settings.data_claim == "cifar"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SCALEBENCH_K8S_NAMESPACE", "Bench_NS"),
        ("SCALEBENCH_WORKER_IMAGE", "bad image"),
        ("SCALEBENCH_K8S_IMAGE_PULL_POLICY", "sometimes"),
        ("SCALEBENCH_K8S_SERVICE_ACCOUNT", "Runner!"),
        ("SCALEBENCH_K8S_NODE_SELECTOR", "pool=gpu"),
        ("SCALEBENCH_K8S_NODE_SELECTOR", '["pool"]'),
        ("SCALEBENCH_K8S_NODE_SELECTOR", '{"gpus": 2}'),
        ("SCALEBENCH_K8S_TOLERATIONS", '{"key": "x"}'),
        ("SCALEBENCH_K8S_TOLERATIONS", '[{"key": "x", "efect": "NoSchedule"}]'),
        ("SCALEBENCH_K8S_TOLERATIONS", '[{"key": "x", "operator": "In"}]'),
        ("SCALEBENCH_K8S_TOLERATIONS", '[{"key": "x", "tolerationSeconds": "60"}]'),
        ("SCALEBENCH_K8S_RESULTS_CLAIM", "Results Claim"),
        ("SCALEBENCH_K8S_DATA_CLAIM", "-data"),
        ("SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S", "ten minutes"),
        ("SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S", "0"),
        ("SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S", "nan"),
        ("SCALEBENCH_K8S_SHM_SIZE", "2 GB"),
        ("SCALEBENCH_K8S_DEFERRABLE", "sometimes"),
        ("SCALEBENCH_K8S_POLL_S", "0"),
        ("SCALEBENCH_K8S_POLL_S", "often"),
    ],
)
def test_bad_settings_name_their_variable(variable: str, value: str) -> None:
    with pytest.raises(ValueError, match=variable):
        KubernetesSettings.from_env({variable: value})


def test_bad_settings_say_what_they_must_be() -> None:
    """The kind's words, the setting's own words, and the rules that tie fields together."""
    cases = {
        "SCALEBENCH_K8S_PREEMPTION_RETRIES": (
            "once",
            "SCALEBENCH_K8S_PREEMPTION_RETRIES='once': must be a whole number from 0 to 10",
        ),
        "SCALEBENCH_K8S_QOS": ("BestEffort", "must be one of Guaranteed, Burstable"),
        "SCALEBENCH_K8S_IMAGE_PULL_CREDENTIALS": (
            " ok , Not Ok ",
            "SCALEBENCH_K8S_IMAGE_PULL_CREDENTIALS='ok,Not Ok': must be comma-separated Secret",
        ),
        "SCALEBENCH_K8S_DATA_CLAIM": ("-data", "must be a PersistentVolumeClaim name, or empty"),
        "SCALEBENCH_K8S_CPU_LIMIT": (
            "2",
            "SCALEBENCH_K8S_CPU_LIMIT='2': must be equal to the request (3) in the Guaranteed",
        ),
    }
    for variable, (value, message) in cases.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            KubernetesSettings.from_env({variable: value})
    with pytest.raises(ValueError, match=r"^SCALEBENCH_K8S_MEMORY_LIMIT='8Gi': must be at least"):
        KubernetesSettings(qos="Burstable", memory_limit="8Gi")
    with pytest.raises(ValueError, match=r"^SCALEBENCH_K8S_DEFERRABLE=1: must be true or false"):
        KubernetesSettings(deferrable=1)  # type: ignore[arg-type]


def test_every_setting_is_read_from_its_variable() -> None:
    """Each declared variable sets its own field, and only it."""
    examples: dict[str, tuple[str, Any]] = {
        "namespace": ("bench", "bench"),
        "conn_id": ("k8s_gpu", "k8s_gpu"),
        "image": ("registry.example/w:1", "registry.example/w:1"),
        "image_pull_policy": ("Never", "Never"),
        "image_pull_credentials": ("regcred, other", ("regcred", "other")),
        "service_account": ("runner", "runner"),
        "node_selector": ('{"pool": "gpu"}', {"pool": "gpu"}),
        "tolerations": (json.dumps([GPU_TOLERATION]), (GPU_TOLERATION,)),
        "runtime_class": ("nvidia", "nvidia"),
        "priority_class": ("high", "high"),
        "queue_name": ("team-a", "team-a"),
        "admission_timeout_s": ("60", 60.0),
        "preemption_retries": ("3", 3),
        "labels": ('{"team": "ml"}', {"team": "ml"}),
        "annotations": ('{"note": "a b"}', {"note": "a b"}),
        "env_passthrough": ("NCCL_*,HOME", ("NCCL_*", "HOME")),
        "results_claim": ("res", "res"),
        "data_claim": ("cifar", "cifar"),
        "rdma_resource": ("rdma/ib", "rdma/ib"),
        "rdma_devices": ("2", 2),
        "require_rdma": ("true", True),
        "schedule_timeout_s": ("90.5", 90.5),
        "shm_size": ("4Gi", "4Gi"),
        "cpu_request": ("4", "4"),
        "cpu_limit": ("4", "4"),
        "memory_request": ("32Gi", "32Gi"),
        "memory_limit": ("32Gi", "32Gi"),
        "qos": ("Burstable", "Burstable"),
        "deferrable": ("off", False),
        "poll_interval_s": ("0.5", 0.5),
    }
    assert list(examples) == list(SETTINGS)  # a new setting needs an example here
    defaults = KubernetesSettings()
    paired = {"cpu_request": "cpu_limit", "memory_request": "memory_limit"}  # Guaranteed
    paired |= {limit: request for request, limit in paired.items()}
    for name, (text, value) in examples.items():
        env = {SETTINGS[name].variable: text}
        if name in paired:
            env[SETTINGS[paired[name]].variable] = text
        settings = KubernetesSettings.from_env(env)
        assert getattr(settings, name) == value != getattr(defaults, name)
        assert KubernetesSettings.from_env({SETTINGS[name].variable: "  "}) == defaults


def test_the_documented_settings_are_the_declared_fields() -> None:
    """docs/kubernetes.md's settings table is the one the declarations give."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "kubernetes.md").read_text()
    table = text.split("<!-- kubernetes settings -->\n")[1].split("<!-- end -->")[0]
    assert table == settings_table(), (
        'paste the output of python -c "from operators.kubernetes.settings import '
        'settings_table as t; print(t())"'
    )
    configuration = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    assert "SCALEBENCH_K8S_NAMESPACE" not in configuration  # it links to the table instead
    assert "(kubernetes.md#settings)" in configuration and "## Settings" in text


def test_group_refuses_impossible_shapes() -> None:
    settings = KubernetesSettings()
    with pytest.raises(ValueError, match="world_size"):
        KubernetesGroup(
            planned(0), names=NAMES, settings=settings, results_root=ROOT, data_root=DATA
        )
    with pytest.raises(ValueError, match="too long"):
        KubernetesGroup(
            planned(),
            names=GroupNames("j" * 62, "s"),
            settings=settings,
            results_root=ROOT,
            data_root=DATA,
        )


def test_every_api_call_is_declared_for_rbac() -> None:
    """API_CALLS (what deploy/kubernetes/base/10-rbac.yaml grants) lists every call a Job's
    group makes; the rest are the pod operator's (tests/test_kubernetes_pod_group.py)."""
    calls: set[str] = set()
    failed = [finished_pod(0, 143, deleting=True), finished_pod(1, 1)]
    for states in (
        [({"succeeded": 4}, [finished_pod(r, 0) for r in range(4)])],
        [({"failed": 2}, failed)],
    ):
        cluster = FakeCluster(states)
        make_group(cluster).wait(3600)
        calls |= cluster.calls
    pod_operators = {name for name in API_CALLS if API_CALLS[name][1] == "events"} | {
        "create_namespaced_pod",
        "read_namespaced_pod",
        "patch_namespaced_pod",
        "delete_namespaced_pod",
    }
    assert calls == set(API_CALLS) - pod_operators


def test_the_real_client_accepts_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher through the real BatchV1Api / CoreV1Api, with only HTTP replaced:
    parameter names, paths, query strings and the patch's content type are the client's."""
    import airflow.providers.cncf.kubernetes.hooks.kubernetes as provider

    requests: list[tuple[str, str, dict, Any]] = []
    done = {"succeeded": 4, "conditions": [{"type": "Complete", "status": "True"}]}
    created: dict[str, dict] = {}

    class Response:
        def __init__(self, status: int, payload: Any) -> None:
            self.status, self.reason = status, "OK"
            self.data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()

        def getheader(self, name: str, default: Any = None) -> Any:
            return "application/json" if name.lower() == "content-type" else default

        def getheaders(self) -> dict:
            return {}

    def request(
        method: str,
        url: str,
        query_params: Any = None,
        headers: Any = None,
        body: Any = None,
        **_: Any,
    ) -> Response:
        path = url.removeprefix("http://k8s.test")
        requests.append((method, path, dict(query_params or []), headers.get("Content-Type")))
        if method == "POST":
            created[path.rsplit("/", 1)[1]] = {**body, "metadata": {**body["metadata"], "uid": "u"}}
            return Response(201, created[path.rsplit("/", 1)[1]])
        if path.endswith("/log"):
            return Response(200, b"hello\n")
        if path.endswith("/pods"):
            return Response(200, {"items": [finished_pod(r, 0) for r in range(4)]})
        if method == "GET":
            return Response(200, {**created["jobs"], "status": done})
        return Response(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    class Hook:
        def __init__(self, conn_id: str) -> None:
            assert conn_id == "k8s_test"
            api = client.ApiClient(client.Configuration(host="http://k8s.test"))
            monkeypatch.setattr(api, "request", request)
            self.api_client = api
            self.batch_v1_client = client.BatchV1Api(api)
            self.core_v1_client = client.CoreV1Api(api)

    monkeypatch.setattr(provider, "KubernetesHook", Hook)
    lines: list[str] = []
    group = KubernetesGroup(
        planned(),
        names=NAMES,
        settings=KubernetesSettings(conn_id="k8s_test"),
        sink=lines.append,
        results_root=ROOT,
        data_root=DATA,
        sleep=lambda s: None,
    )
    assert not requests  # nothing is asked of the cluster before start()
    group.start()
    result = group.wait(3600)
    assert result.status == "succeeded", result.reason
    assert "[rank 0] hello" in lines
    calls = [(method, path) for method, path, _, _ in requests]
    ns, job = "/namespaces/scalebench", NAMES.job
    assert calls == [
        ("POST", f"/api/v1{ns}/services"),
        ("POST", f"/apis/networking.k8s.io/v1{ns}/networkpolicies"),
        ("POST", f"/apis/batch/v1{ns}/jobs"),
        ("PATCH", f"/api/v1{ns}/services/{job}"),
        ("GET", f"/apis/batch/v1{ns}/jobs/{job}"),
        ("GET", f"/api/v1{ns}/pods"),
        ("GET", f"/api/v1{ns}/pods/{job}-0-x7k2p/log"),
        ("DELETE", f"/apis/batch/v1{ns}/jobs/{job}"),
        ("DELETE", f"/apis/networking.k8s.io/v1{ns}/networkpolicies/{job}"),
        ("DELETE", f"/api/v1{ns}/services/{job}"),
    ]
    queries = {(m, p): q for m, p, q, _ in requests}
    assert queries[("GET", f"/api/v1{ns}/pods")] == {
        "labelSelector": f"batch.kubernetes.io/job-name={job}"
    }
    assert queries[("DELETE", f"/apis/batch/v1{ns}/jobs/{job}")] == {
        "propagationPolicy": "Background"
    }
    assert queries[("GET", f"/api/v1{ns}/pods/{job}-0-x7k2p/log")] == {
        "container": "worker",
        "timestamps": True,
    }
    content_types = {(m, p): c for m, p, _, c in requests}
    assert content_types[("PATCH", f"/api/v1{ns}/services/{job}")] == "application/json-patch+json"


# ------------------------------------------------------- through the Airflow operator and ingest


def test_an_unschedulable_group_is_recorded_as_failed_through_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator picks the Kubernetes launcher from the plan, and the scheduler's
    message reaches the results database as the run's reason (blocking mode; the
    deferred one is tested over HTTP in test_kubernetes_http.py)."""
    from types import SimpleNamespace

    from sqlalchemy import select

    from operators.training_group import TrainingGroupOperator
    from results_db.database import make_engine
    from results_db.models import Run
    from results_db.service import ingest, upgrade
    from scalebench.sweep import start_sweep, validate_request

    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "results"))
    monkeypatch.setenv("SCALEBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SCALEBENCH_K8S_SCHEDULE_TIMEOUT_S", "1")
    monkeypatch.setenv("SCALEBENCH_K8S_DEFERRABLE", "false")  # the blocking wait
    cluster = FakeCluster([({"active": 4}, [pending_pod(r, unschedulable=True) for r in range(4)])])
    hook = SimpleNamespace(batch_v1_client=cluster, core_v1_client=cluster, api_client=None)
    monkeypatch.setattr(
        "airflow.providers.cncf.kubernetes.hooks.kubernetes.KubernetesHook", lambda conn_id: hook
    )
    monkeypatch.setattr("kubernetes.client.NetworkingV1Api", lambda api_client: cluster)
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
    sweep_dir, [group] = sweep.sweep_dir, sweep.groups
    ti = SimpleNamespace(
        dag_id="task1a_resnet20_cifar10", run_id=UGLY_RUN_ID, map_index=2, try_number=1
    )
    operator = TrainingGroupOperator(task_id="train", group=group.to_xcom())
    verdict = operator.execute({"ti": ti})

    assert verdict["status"] == "failed" and UNSCHEDULABLE in verdict["reason"]
    assert sorted(cluster.deleted) == [
        ("job", NAMES.job),
        ("policy", NAMES.job),
        ("service", NAMES.service),
    ]
    [job] = cluster.created_jobs  # its pods write below the results mount
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    run_dir = f"{RESULTS_MOUNT}/{sweep_dir.name}/{group.run_id}"
    assert command[command.index("--results") + 1] == run_dir
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    ingest(url, str(sweep_dir))
    engine = make_engine(url)
    with engine.connect() as conn:
        status, reason = conn.execute(select(Run.status, Run.reason)).one()
    engine.dispose()
    assert status == "failed" and "Insufficient nvidia.com/gpu" in reason


def test_rank_0s_log_is_read_a_minute_at_a_time_and_each_line_passed_on_once() -> None:
    from operators.kubernetes.watch import LOG_OVERLAP_S, Rank0Log, stamp_key

    pod = {"metadata": {"name": "job-0-x"}, "status": {"phase": "Running"}}
    log = Rank0Log()
    assert log.options(pod, 1e9) == {"timestamps": True}  # nothing passed on: the whole log
    stamp = "2026-11-25T02:10:0{}Z".format
    first = f"{stamp('0.000000001')} a\n{stamp('0.000000001')} b\n{stamp('1.5')} c\n{stamp(2)} pa"
    assert log.new_lines(pod, first) == ["a", "b", "c"]  # the last line is still being written
    newest_s = stamp_key(stamp("1.5"))[0]  # type: ignore[index]
    assert log.options(pod, newest_s + 30.2) == {
        "timestamps": True,
        "since_seconds": 31 + LOG_OVERLAP_S,
    }
    # The next read overlaps the last one: what was passed on is passed over by its stamp,
    # and of two lines with one stamp, the second is new.
    again = f"{stamp('1.5')} c\n{stamp(2)} partial done\n{stamp(2)} d\n"
    assert log.new_lines(pod, again) == ["partial done", "d"]
    assert log.new_lines(pod, again + f"{stamp(2)} e\n") == ["e"]
    assert log.new_lines(pod, "") == [] and log.lines == 6
    # A progress bar's carriage return stays inside its line, and reading goes on after it.
    bar = f"{stamp(3)} 10%\r50%\r100%\n{stamp(4)} f\n"
    assert log.new_lines(pod, bar) == ["10%\r50%\r100%", "f"]
    assert log.new_lines(pod, bar + f"{stamp(5)} g\n") == ["g"]
    # stdout and stderr lines may arrive slightly out of order: none is passed on twice.
    mixed = f"{stamp('6.5')} h\n{stamp('6.4')} i\n"
    assert log.new_lines(pod, mixed) == ["h", "i"]
    assert log.new_lines(pod, mixed + f"{stamp(7)} j\n") == ["j"]
    # Another pod (rank 0 started again) starts over; an unstamped log is counted by lines.
    other = {"metadata": {"name": "job-0-y"}, "status": {"phase": "Succeeded"}}
    assert log.new_lines(other, "one\ntwo") == ["one", "two"]
    assert log.new_lines(other, "one\ntwo\nthree\n") == ["three"]
