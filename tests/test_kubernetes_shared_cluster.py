"""The Kubernetes launcher on a shared GPU cluster, over real HTTP against the API server
emulator (tests/kube_emulator.py), in the blocking and the deferred wait: a Kueue queue
(the Job created suspended, admitted later or never), a pod evicted (``preempted``, the
group run again), the Job's podFailurePolicy, the pods' QoS class, the group's own
NetworkPolicy and the site's settings, refused before anything is created when bad."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kube_emulator import (
    JOBS,
    NETWORK_POLICIES,
    PODS,
    SERVICES,
    UNSCHEDULABLE,
    Stage,
    emulated_cluster,
    exited,
    running,
    unschedulable,
)
from test_kubernetes_http import (
    CONN_ID,
    MODES,
    NAMES,
    NS,
    POLICIES_PATH,
    assert_cleaned_up,
    calls,
    kubernetes_sweep,
    make_group,
    run_group,
    run_trigger,
)

from operators.kubernetes import KubernetesGroup, KubernetesSettings
from operators.kubernetes.trigger import GroupTrigger

QUEUE = "team-a"
JOBS_PATH = f"/apis/batch/v1/namespaces/{NS}/jobs"


def pod_of(job: str, rank: int) -> str:
    return f"{job}-{rank}-x7k2p"


def sent_job(cluster: Any) -> dict:
    return next(body for m, p, _, body in cluster.requests() if (m, p) == ("POST", JOBS_PATH))


# -- Kueue ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_queued_job_waits_for_admission_and_its_schedule_timeout_starts_then(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kueue admits the Job after 0.6 s; its pods then stay unschedulable. The 0.3 s
    schedule timeout counts from the admission, not from the Job's creation."""
    with emulated_cluster(
        [Stage(0, unschedulable())], tmp_path, monkeypatch, admit_after_s=0.6
    ) as cluster:
        lines: list[str] = []
        started = time.monotonic()
        result = run_group(mode, lines, queue_name=QUEUE, schedule_timeout_s=0.3)
        assert time.monotonic() - started >= 0.9
        assert result.status == "failed", result.reason
        assert "could not be scheduled within 0.3 s" in result.reason
        assert UNSCHEDULABLE in result.reason
        assert cluster.admitted[NAMES.job] >= 0.6
        job = sent_job(cluster)
        assert job["spec"]["suspend"] is True
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE
        said = "\n".join(lines)
        assert f"waiting for admission in queue {QUEUE}" in said
        assert f"admitted by queue {QUEUE} after" in said
        assert said.count("waiting for admission") == 1  # said once, not at every look
        assert len([m for m, _ in calls(cluster) if m != "GET"]) == 7  # as without a queue
        assert_cleaned_up(cluster)


@pytest.mark.parametrize("mode", MODES)
def test_a_job_the_queue_never_admits_is_not_admitted_and_never_gets_pods(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ClusterQueue whose quota is taken: the admission wait has its own limit and verdict."""
    with emulated_cluster(
        [Stage(0, running())], tmp_path, monkeypatch, admit_after_s=None
    ) as cluster:
        result = run_group(
            mode, [], queue_name=QUEUE, admission_timeout_s=0.5, schedule_timeout_s=0.1
        )
        assert result.status == "not_admitted", result.reason
        assert f"queue {QUEUE} did not admit the Job within 0.5 s" in result.reason
        assert NAMES.job not in cluster.admitted
        # While it waits, a look reads the Job only: a suspended Job has no pods to list.
        assert calls(cluster).count(("GET", f"{JOBS_PATH}/{NAMES.job}")) >= 2
        assert not [p for m, p in calls(cluster) if p.endswith("/pods")]
        assert_cleaned_up(cluster)


@pytest.mark.parametrize("mode", MODES)
def test_kueue_taking_an_admitted_job_back_makes_the_group_preempted(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cluster(
        [Stage(0, running())], tmp_path, monkeypatch, admit_after_s=0.1
    ) as cluster:

        def take_back_once_running() -> None:
            deadline = time.monotonic() + 20
            while NAMES.job not in cluster.admitted and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # the launcher has seen it admitted
            cluster.take_back(NAMES.job)

        threading.Thread(target=take_back_once_running, daemon=True).start()
        result = run_group(mode, [], queue_name=QUEUE, preemption_retries=0, admission_timeout_s=10)
        assert result.status == "preempted", result.reason
        assert f"queue {QUEUE} suspended the Job again" in result.reason
        assert_cleaned_up(cluster)


def test_without_a_queue_the_job_is_not_suspended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stages = [Stage(0, running()), Stage(0.2, exited(0))]
    with emulated_cluster(stages, tmp_path, monkeypatch, admit_after_s=None) as cluster:
        lines: list[str] = []
        assert run_group("blocking", lines).status == "succeeded"
        job = sent_job(cluster)
        assert "suspend" not in job["spec"]
        assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
        assert not [line for line in lines if "admission" in line]


# -- preemption ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_an_evicted_pod_makes_the_group_preempted_with_its_node_and_reason(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch) as cluster:
        threading.Timer(0.3, cluster.evict, [pod_of(NAMES.job, 1)]).start()
        result = run_group(mode, [], preemption_retries=0)
        assert result.status == "preempted", result.reason
        assert f"rank 1 (pod {pod_of(NAMES.job, 1)}) on node gpu-node-1" in result.reason
        assert "EvictionByEvictionAPI" in result.reason
        # The Job failed at once by its first podFailurePolicy rule (DisruptionTarget).
        assert "rule at index 0" in cluster.failed_by_policy[NAMES.job]
        assert calls(cluster).count(("POST", JOBS_PATH)) == 1  # no retry was asked
        assert_cleaned_up(cluster)


def test_a_rank_refusing_its_input_fails_the_job_at_once_by_its_pod_failure_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stages = [Stage(0, running()), Stage(0.2, running(), ranks={1: exited(2)})]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        result = run_group("blocking", [])
        assert result.status == "failed" and result.first_failed_rank == 1
        assert "exited with status 2" in result.reason
        assert "exit code 2 matching FailJob rule at index 1" in cluster.failed_by_policy[NAMES.job]
        assert_cleaned_up(cluster)


def evict_first_job(cluster: Any, job: str, after_s: float = 0.3) -> None:
    threading.Timer(after_s, cluster.evict, [pod_of(job, 1)]).start()


def test_a_preempted_group_runs_again_and_the_sweep_keeps_both_attempts_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operators.group import record_verdict
    from scalebench import manifest

    sweep, plan, _ = kubernetes_sweep(tmp_path, monkeypatch, 4)
    stages = [Stage(0, running()), Stage(0.8, exited(0))]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        lines: list[str] = []
        group = KubernetesGroup(
            plan,
            names=NAMES,
            settings=KubernetesSettings(conn_id=CONN_ID),
            results_root=tmp_path / "results",
            data_root=plan.data_dir,
            sink=lines.append,
            poll_interval_s=0.05,
        )
        group.start()
        plan.run_dir.mkdir(parents=True)
        (plan.run_dir / "rank-1.jsonl").write_text("{}\n")  # what attempt 1 wrote
        evict_first_job(cluster, NAMES.job)
        result = group.wait(3600)
        record_verdict(plan, result)
        jobs = [b["metadata"]["name"] for m, p, _, b in cluster.requests() if p == JOBS_PATH]
        policies = [
            b["metadata"]["name"] for m, p, _, b in cluster.requests() if p == POLICIES_PATH
        ]
        # Each attempt: POST Service, policy, Job, PATCH Service, DELETE Job, policy, Service.
        assert len([m for m, _ in calls(cluster) if m != "GET"]) == 2 * 7
        assert_cleaned_up(cluster)
    assert result.status == "succeeded" and result.attempt == 2, result.reason
    assert len(jobs) == 2 and jobs[0] == NAMES.job and jobs[1] != jobs[0]
    assert len(jobs[1]) == len(jobs[0]) and "-a2" in jobs[1][-11:]
    assert policies == jobs  # each attempt had its own policy
    entry = manifest.load(sweep.sweep_dir).entry(plan.run_id)
    assert entry.status == "succeeded"
    (first,) = entry.attempts
    assert (first["attempt"], first["status"], first["job"]) == (1, "preempted", NAMES.job)
    assert "gpu-node-1" in first["reason"]
    assert (plan.run_dir.parent / f"{plan.run_id}.attempt-1" / "rank-1.jsonl").exists()
    assert any("running the group again (2 of 2)" in line for line in lines)


def test_a_preempted_deferred_group_runs_again_and_ingest_shows_both_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deferred: the resumed task sees ``preempted``, starts the group again and defers
    once more; the second trigger's verdict is the group's. Ingest marks the first."""
    from airflow.sdk.exceptions import TaskDeferred
    from sqlalchemy import select

    from operators.training_group import TrainingGroupOperator
    from results_db.database import make_engine
    from results_db.models import Run
    from results_db.service import ingest, upgrade
    from scalebench import manifest

    sweep, plan, ti = kubernetes_sweep(tmp_path, monkeypatch, 2)
    stages = [Stage(0, running()), Stage(0.8, exited(0))]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        with pytest.raises(TaskDeferred) as deferred:
            TrainingGroupOperator(task_id="train", group=plan.to_xcom()).execute({"ti": ti})
        first = deferred.value.trigger
        evict_first_job(cluster, first.job, after_s=0.2)
        event = run_trigger(GroupTrigger(**first.serialize()[1]))
        event.pop("logged")
        assert event["status"] == "preempted" and event["attempt"] == 1
        with pytest.raises(TaskDeferred) as again:
            TrainingGroupOperator(task_id="train", group=plan.to_xcom()).resume({"ti": ti}, event)
        second = again.value.trigger
        assert second.attempt == 2 and second.job != first.job
        assert cluster.objects(JOBS) == [second.job]  # the first Job is gone
        event = run_trigger(GroupTrigger(**second.serialize()[1]))
        event.pop("logged")
        verdict = TrainingGroupOperator(task_id="train", group=plan.to_xcom()).resume(
            {"ti": ti}, event
        )
        assert_cleaned_up(cluster)
    assert verdict["status"] == "succeeded"
    entry = manifest.load(sweep.sweep_dir).entry(plan.run_id)
    assert [a["status"] for a in entry.attempts] == ["preempted"]
    assert entry.qos_class == "Guaranteed"
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    ingest(url, str(sweep.sweep_dir))
    engine = make_engine(url)
    with engine.connect() as conn:
        (reason,) = conn.execute(select(Run.reason)).one()
    engine.dispose()
    assert "attempt 1 preempted: rank 1" in reason and "gpu-node-1" in reason


def test_a_preempted_verdict_is_stored_as_such_by_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import select

    from operators.group import record_verdict
    from operators.kubernetes import launch
    from results_db.database import make_engine
    from results_db.models import Run
    from results_db.service import ingest, upgrade

    sweep, plan, _ = kubernetes_sweep(tmp_path, monkeypatch, 2)
    monkeypatch.setenv("SCALEBENCH_K8S_PREEMPTION_RETRIES", "0")
    monkeypatch.setenv("SCALEBENCH_K8S_POLL_S", "0.05")
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch) as cluster:
        group = launch(plan, NAMES, lambda line: None)
        group.start()
        evict_first_job(cluster, NAMES.job, after_s=0.2)
        record_verdict(plan, group.wait(3600))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    ingest(url, str(sweep.sweep_dir))
    engine = make_engine(url)
    with engine.connect() as conn:
        status, reason = conn.execute(select(Run.status, Run.reason)).one()
    engine.dispose()
    assert status == "preempted" and "EvictionByEvictionAPI" in reason


# -- QoS, the group's NetworkPolicy, the site's settings -------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_pods_qos_class_is_read_from_their_status(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stages = [Stage(0, running()), Stage(0.3, exited(0))]
    with emulated_cluster(stages, tmp_path, monkeypatch):
        assert run_group(mode, []).qos_class == "Guaranteed"
    with emulated_cluster(stages, tmp_path, monkeypatch):
        burstable = run_group(mode, [], qos="Burstable", cpu_limit="4")
        assert burstable.qos_class == "Burstable"


def test_a_burstable_group_is_marked_in_the_stored_run(tmp_path: Path) -> None:
    from results_db.ingest import cluster_marks
    from scalebench.manifest import GroupEntry

    assert cluster_marks(GroupEntry("r", 2, 0, qos_class="Guaranteed")) == []
    assert cluster_marks(GroupEntry("r", 2, 0)) == []  # a local group
    (mark,) = cluster_marks(GroupEntry("r", 2, 0, qos_class="Burstable"))
    assert mark.startswith("QoS Burstable")


def test_the_groups_network_policy_lives_exactly_as_long_as_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stages = [Stage(0, running()), Stage(0.6, exited(0))]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        group = make_group([])
        group.start()
        assert cluster.objects(NETWORK_POLICIES) == [NAMES.job]
        (policy,) = [b for m, p, _, b in cluster.requests() if (m, p) == ("POST", POLICIES_PATH)]
        assert kubernetes_validate.validate(policy, "1.33", strict=True)
        assert policy["spec"]["podSelector"]["matchLabels"] == {
            "batch.kubernetes.io/job-name": NAMES.job
        }
        order = [p for m, p, _, _ in cluster.requests() if m == "POST"]
        assert order == [f"/api/v1/namespaces/{NS}/services", POLICIES_PATH, JOBS_PATH]
        assert group.wait(3600).status == "succeeded"
        assert_cleaned_up(cluster)


def test_the_sites_settings_reach_the_job_that_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    monkeypatch.setenv("NCCL_IB_HCA", "mlx5_0")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("UNRELATED_SECRET", "x")
    stages = [Stage(0, running()), Stage(0.2, exited(0))]
    with emulated_cluster(stages, tmp_path, monkeypatch) as cluster:
        run_group(
            "blocking",
            [],
            priority_class="gpu-high",
            runtime_class="nvidia",
            image_pull_credentials=("registry-a", "registry-b"),
            service_account="trainer",
            labels={"team": "ml-perf", "cost-center": "42"},
            annotations={"example.com/owner": "perf team"},
            tolerations=({"key": "nvidia.com/gpu", "operator": "Exists"},),
            node_selector={"nvidia.com/gpu.product": "H100"},
            shm_size="8Gi",
            env_passthrough=("NCCL_*",),
        )
        job = sent_job(cluster)
        kubernetes_validate.validate(job, "1.33", strict=True)
        pod = job["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == "gpu-high"
        assert pod["runtimeClassName"] == "nvidia"
        assert pod["imagePullSecrets"] == [{"name": "registry-a"}, {"name": "registry-b"}]
        assert pod["serviceAccountName"] == "trainer"
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["sizeLimit"] == "8Gi"
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert labels["team"] == "ml-perf" and labels["cost-center"] == "42"
        assert labels["app.kubernetes.io/name"] == "scalebench-worker"
        assert job["spec"]["template"]["metadata"]["annotations"] == {
            "example.com/owner": "perf team"
        }
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert (env["NCCL_SOCKET_IFNAME"], env["NCCL_IB_HCA"], env["NCCL_DEBUG"]) == (
            "eth0",
            "mlx5_0",
            "INFO",
        )
        assert "UNRELATED_SECRET" not in env
        pods = [b for m, p, _, b in cluster.requests() if p.endswith("/pods")]
        assert pods and cluster.objects(PODS) == [] and cluster.objects(SERVICES) == []


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SCALEBENCH_K8S_PRIORITY_CLASS", "High_Priority"),
        ("SCALEBENCH_K8S_RUNTIME_CLASS", "nvidia runtime"),
        ("SCALEBENCH_K8S_IMAGE_PULL_CREDENTIALS", "ok,Not Ok"),
        ("SCALEBENCH_K8S_LABELS", '{"bad key!": "x"}'),
        ("SCALEBENCH_K8S_LABELS", '{"team": "a value with spaces"}'),
        ("SCALEBENCH_K8S_LABELS", '{"-example.com/x": "y"}'),
        ("SCALEBENCH_K8S_ANNOTATIONS", '{"ok": 3}'),
        ("SCALEBENCH_K8S_SHM_SIZE", "lots"),
        ("SCALEBENCH_K8S_ENV_PASSTHROUGH", "NCCL_*,not-a-name"),
        ("SCALEBENCH_K8S_QUEUE_NAME", "Team A"),
        ("SCALEBENCH_K8S_ADMISSION_TIMEOUT_S", "0"),
        ("SCALEBENCH_K8S_PREEMPTION_RETRIES", "-1"),
        ("SCALEBENCH_K8S_PREEMPTION_RETRIES", "once"),
        ("SCALEBENCH_K8S_QOS", "BestEffort"),
        ("SCALEBENCH_K8S_MEMORY_LIMIT", "32Gi"),  # above the request: not Guaranteed
    ],
)
def test_a_bad_site_setting_is_refused_naming_it_before_anything_is_created(
    variable: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operators.kubernetes import launch

    _sweep, plan, _ = kubernetes_sweep(tmp_path, monkeypatch, 2)
    monkeypatch.setenv(variable, value)
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch) as cluster:
        with pytest.raises(ValueError, match=variable) as refused:
            launch(plan, NAMES, lambda line: None).start()
        assert str(refused.value).count("\n") == 0  # one sentence
        assert cluster.requests() == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"queue_name": "Team A"}, "queue_name"),
        ({"priority_class": "x" * 64}, "priority_class"),
        ({"priority_class": "high", "launcher": "local"}, "priority_class"),
    ],
)
def test_a_bad_queue_or_priority_class_in_a_sweep_is_refused_naming_the_field(
    fields: dict[str, Any], field: str
) -> None:
    from scalebench.request_fields import InvalidParameter
    from scalebench.sweep import validate_request

    request = {
        "task": "task1a-resnet20-cifar10",
        "workers": [2],
        "light": True,
        "launcher": "kubernetes",
        "backend": "nccl",
        **fields,
    }
    with pytest.raises(InvalidParameter) as refused:
        validate_request(**request)
    assert refused.value.field == field


@pytest.mark.parametrize("mode", MODES)
def test_a_sweeps_queue_and_priority_class_replace_the_settings(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operators.kubernetes import launch
    from scalebench.sweep import start_sweep, validate_request

    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "results"))
    monkeypatch.setenv("SCALEBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SCALEBENCH_K8S_CONN_ID", CONN_ID)
    monkeypatch.setenv("SCALEBENCH_K8S_QUEUE_NAME", "default-queue")
    monkeypatch.setenv("SCALEBENCH_K8S_PRIORITY_CLASS", "low")
    request = validate_request(
        task="task1a-resnet20-cifar10",
        workers=[2],
        light=True,
        repeats=1,
        launcher="kubernetes",
        backend="nccl",
        queue_name="team-b",
        priority_class="gpu-high",
    )
    [plan] = start_sweep(request, tmp_path / "results", "manual").groups
    with emulated_cluster([Stage(0, running())], tmp_path, monkeypatch) as cluster:
        group = launch(plan, NAMES, lambda line: None)
        group.start()
        group.stop()
        job = sent_job(cluster)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-b"
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "gpu-high"


def test_the_trigger_form_asks_for_the_queue_and_the_priority_class() -> None:
    from operators.benchmark_dag import params
    from scalebench.tasks import get_task

    form = params(get_task("task1a-resnet20-cifar10"))
    assert form["queue_name"].schema["title"] == "Kueue queue (Kubernetes)"
    assert form["priority_class"].schema["title"] == "Priority class (Kubernetes)"
    assert form["queue_name"].value == form["priority_class"].value == ""


def test_an_earlier_attempt_is_kept_beside_the_verdict_and_survives_finishing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from scalebench import manifest

    sweep, plan, _ = kubernetes_sweep(tmp_path, monkeypatch, 2)
    manifest.record_attempt(
        sweep.sweep_dir,
        plan.run_id,
        attempt=1,
        status="preempted",
        reason="evicted",
        seconds=4.0,
        job="sb-x-a1",
    )
    assert manifest.load(sweep.sweep_dir).entry(plan.run_id).status == "planned"
    manifest.record_verdict(
        sweep.sweep_dir, plan.run_id, "succeeded", "", 9.0, qos_class="Burstable"
    )
    done = manifest.finish(sweep.sweep_dir).entry(plan.run_id)
    again = manifest.load(sweep.sweep_dir).entry(plan.run_id)  # from sweep.json alone now
    for entry in (done, again):
        assert (entry.status, entry.qos_class) == ("succeeded", "Burstable")
        assert [(a["attempt"], a["status"]) for a in entry.attempts] == [(1, "preempted")]
    line = {"run_id": plan.run_id, "status": "planned", "attempt": {"status": "lost"}}
    (sweep.sweep_dir / manifest.VERDICTS).write_text(json.dumps(line) + "\n")
    with pytest.raises(manifest.BadManifest, match="'status' must be one of"):
        manifest.load(sweep.sweep_dir)
