"""Groups on nodes: the shape of a group, the request field, and the node starter.

A group of k workers with ``ranks_per_node`` p runs on ceil(k / p) nodes; each node's
ranks are started by :class:`workers.node.Node`, on this machine by the local launcher
and in a pod by ``python -m workers.node``. The real-process tests here start real
ranks; the emulated link between nodes is checked in ``tests/test_network.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from conftest import TASK0_QUICK_ARGS, light_rank_args

from operators.local_launcher import LocalGroup
from scalebench.config_hash import configuration_hash
from scalebench.nodes import NodeShape, nccl_node_environment, shape_label, shape_problem
from scalebench.rank import EXIT_DIVERGED, EXIT_FAILED, EXIT_NO_SPACE
from scalebench.sweep import InvalidParameter, plan_groups, validate_request
from workers.distributed import free_port
from workers.node import Node, node_from
from workers.records import read_run

ROOT = Path(__file__).resolve().parents[1]


# -- the shape of a group ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("world_size", "per_node", "label", "nodes"),
    [(1, 1, "1×1", 1), (4, 1, "4×1", 4), (2, 4, "1×2", 1), (4, 4, "1×4", 1), (8, 4, "2×4", 2)],
)
def test_a_group_runs_on_as_many_nodes_as_it_fills(
    world_size: int, per_node: int, label: str, nodes: int
) -> None:
    shape = NodeShape(world_size, per_node)
    assert (shape.label, shape.nodes) == (label, nodes)
    placed = [(shape.node_of(r), r % shape.local_world_size) for r in range(world_size)]
    assert [shape.global_rank(n, local) for n, local in placed] == list(range(world_size))
    assert [r for n in range(nodes) for r in shape.ranks_of(n)] == list(range(world_size))


def test_each_rank_is_told_what_torchrun_tells_it() -> None:
    env = NodeShape(8, 4).rank_environment(1, 2, "10.0.0.1", 29500)
    assert env == {
        "RANK": "6",
        "LOCAL_RANK": "2",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
    }
    with pytest.raises(ValueError, match="local rank 4 of node 0 is outside a group of 2×4"):
        NodeShape(8, 4).rank_environment(0, 4, "h", 1)


def test_a_shape_without_ranks_or_without_room_for_one_is_refused() -> None:
    for world_size, per_node in ((0, 1), (2, 0)):
        with pytest.raises(ValueError, match="at least one rank and one rank per node"):
            NodeShape(world_size, per_node)


def test_each_emulated_node_is_a_host_of_its_own_to_nccl() -> None:
    """Ranks of one node are joined directly (same host id); nodes only through the link's
    sockets. A node of one rank has no direct path to keep."""
    two = nccl_node_environment("node-1", "sbeth0", 2)
    assert two["NCCL_HOSTID"] == "node-1" and two["NCCL_NET"] == "Socket"
    assert two["NCCL_SOCKET_IFNAME"] == two["GLOO_SOCKET_IFNAME"] == "sbeth0"
    assert "NCCL_P2P_DISABLE" not in two and "NCCL_SHM_DISABLE" not in two
    one = nccl_node_environment("node-1", "sbeth0", 1)
    assert one["NCCL_P2P_DISABLE"] == one["NCCL_SHM_DISABLE"] == "1"


def test_a_group_that_does_not_fill_its_nodes_is_refused_naming_both_numbers() -> None:
    assert shape_problem(6, 4) == (
        "6 workers do not fill nodes of 4 ranks (ranks_per_node 4): a group larger than one "
        "node needs a multiple of 4"
    )
    assert shape_problem(3, 4) == "" and shape_problem(8, 4) == ""
    with pytest.raises(ValueError, match="6 workers do not fill nodes of 4"):
        NodeShape(6, 4)
    assert shape_label(6, 4) == "?" and shape_label(16, 8) == "2×8"
    with pytest.raises(InvalidParameter, match=r"^workers: 16 workers do not fill nodes of 3"):
        validate_request(
            task="task0-allreduce", workers="1,2,16", ranks_per_node=3, light=True, max_workers=32
        )
    with pytest.raises(InvalidParameter, match=r"^ranks_per_node: must be at least 1, got 0"):
        validate_request(task="task0-allreduce", workers="2", ranks_per_node=0, light=True)


def test_ranks_per_node_is_part_of_the_configuration_and_of_each_group_plan(
    tmp_path: Path,
) -> None:
    def request(**fields: object):  # type: ignore[no-untyped-def]
        return validate_request(task="task0-allreduce", workers="1,2,4,8", light=True, **fields)

    default, packed = request(max_workers=8), request(ranks_per_node=4, max_workers=8)
    # the default is what every run was before: the configurations stored then keep their hash
    before = {k: v for k, v in default.to_fields().items() if k != "ranks_per_node"}
    assert configuration_hash(default.to_fields()) == configuration_hash(before)
    assert configuration_hash(packed.to_fields()) != configuration_hash(default.to_fields())
    shapes = [g.shape.label for g in plan_groups(packed, "s", tmp_path)][:4]
    assert shapes == ["1×1", "1×2", "1×4", "2×4"]


def test_on_kubernetes_a_group_is_one_pod_per_node_running_the_node_starter() -> None:
    """8 GPU workers on nodes of 4: an Indexed Job of 2 pods, each with 4 GPUs, 4 ranks' CPUs,
    memory and shared memory, running ``python -m workers.node`` told its node's size, kept
    on different machines; schema-valid. One rank per pod keeps ``workers.run``."""
    import kubernetes_validate

    from operators.kubernetes import KubernetesSettings, group_names, job_manifest
    from operators.kubernetes.setting_fields import times

    request = validate_request(
        task="task0-allreduce",
        workers="8",
        light=True,
        launcher="kubernetes",
        backend="nccl",
        ranks_per_node=4,
        max_workers=8,
    )
    plan = plan_groups(request, "s", Path("/r"))[0]
    names = group_names("task0_allreduce", "manual__1", 0, 1, 8)
    settings = KubernetesSettings(cpu_request="500m", cpu_limit="500m")
    job = job_manifest(
        names,
        ["--task", "task0-allreduce"],
        8,
        settings,
        ranks_per_node=plan.shape.local_world_size,
        gpus_per_worker=request.gpus_per_worker,
        placement=request.placement,
    )
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["completions"] == spec["parallelism"] == 2
    assert container["command"][:3] == ["python", "-m", "workers.node"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("8", "4")
    assert env["MASTER_ADDR"] == f"{names.job}-0.{names.service}"
    assert container["resources"]["limits"] == {
        "cpu": "2000m",
        "memory": "64Gi",
        "nvidia.com/gpu": 4,
    }
    (shm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"]["sizeLimit"] == "8Gi"
    assert pod["affinity"]["podAntiAffinity"]  # spread: one pod per machine
    assert kubernetes_validate.validate(job, "1.31", strict=True)
    one = job_manifest(names, ["--task", "task0-allreduce"], 8, settings)
    assert one["spec"]["completions"] == 8 and "LOCAL_WORLD_SIZE" not in str(one)
    assert one["spec"]["template"]["spec"]["containers"][0]["command"][2] == "workers.run"
    assert times("1.5", 3) == "4.5" and times("16Gi", 1) == "16Gi"
    with pytest.raises(ValueError, match="6 ranks do not fill pods of 4"):
        job_manifest(names, [], 6, settings, ranks_per_node=4)


def test_a_pod_of_several_ranks_that_fails_names_the_rank_its_node_starter_named() -> None:
    """A 2×2 group on the cluster: pod 1 (ranks 2 and 3) fails with its node starter's
    termination message naming rank 3: the group fails naming rank 3, every rank of the pod
    gets its status, and the log tail is that pod's."""
    from test_kubernetes_launcher import (
        NAMES,
        FakeCluster,
        assert_cleaned_up,
        finished_pod,
        make_group,
        planned,
        running_pod,
    )

    failed = finished_pod(1, 1, "Error", finished_s=20)
    terminated = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    terminated["message"] = "rank 3 exited with status 1"
    running = [running_pod(0), running_pod(1)]
    cluster = FakeCluster(
        [({"active": 2}, running), ({"failed": 1}, [running_pod(0), failed])],
        logs={1: "[rank 3] ValueError: boom\n[node 1] rank 3 exited with status 1\n"},
    )
    plan = planned(4)
    plan = replace(plan, request=replace(plan.request, ranks_per_node=2))
    lines: list[str] = []
    group = make_group(cluster, lines, plan)
    (job,) = cluster.created_jobs
    assert job["spec"]["completions"] == 2
    assert any("2 pod(s) of 2 ranks" in line for line in lines)
    result = group.wait(3600)
    assert (result.status, result.first_failed_rank) == ("failed", 3)
    assert result.reason == (
        f"ranks 2-3 (pod {NAMES.job}-1-x7k2p) exited with status 1 (Error): "
        "rank 3 exited with status 1"
    )
    assert result.exit_codes == [None, None, 1, 1]
    assert result.log_tail[-1] == "[node 1] rank 3 exited with status 1"
    assert_cleaned_up(cluster)


# -- the node starter -------------------------------------------------------------------------


def test_a_pod_reads_its_node_from_the_environment_it_is_given() -> None:
    shape, node = node_from(
        {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "JOB_COMPLETION_INDEX": "1"}
    )
    assert (shape, node) == (NodeShape(8, 4), 1)
    assert node_from({})[0] == NodeShape(1, 1)
    with pytest.raises(ValueError, match="node 2 is outside a group of 2×4"):
        node_from({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "2"})
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE must be a whole number, got 'x'"):
        node_from({"LOCAL_WORLD_SIZE": "x"})


@pytest.mark.parametrize(
    ("codes", "first", "status", "reason"),
    [
        ([-9, -15], 0, EXIT_FAILED, "rank 4 exited with signal SIGKILL"),
        ([1, 1], 1, 1, "rank 5 exited with status 1"),
        ([EXIT_DIVERGED, EXIT_DIVERGED], 0, EXIT_DIVERGED, "rank 4 diverged"),
        ([EXIT_DIVERGED, 1], 0, 1, "rank 5 exited with status 1"),  # the real failure is named
        ([1, EXIT_NO_SPACE], 0, EXIT_NO_SPACE, "rank 5 found its results filesystem full"),
    ],
)
def test_a_node_exits_with_its_failed_ranks_status_naming_its_global_rank(
    codes: list[int], first: int, status: int, reason: str
) -> None:
    node = Node(NodeShape(6, 2), 2, [], master_addr="h", master_port=1, cpus=[0])
    assert node.ranks == [4, 5]
    got_status, got_reason = node.verdict(codes, first)
    assert got_status == status and got_reason.startswith(reason)


def test_each_rank_of_a_node_gets_its_share_of_the_cores() -> None:
    shape = NodeShape(4, 4)
    node = Node(shape, 0, [], master_addr="h", master_port=1, cpus=[0, 1, 2, 3, 4, 5, 6, 7])
    assert node.rank_cpus() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    fewer = Node(shape, 0, [], master_addr="h", master_port=1, cpus=[3, 5])
    assert fewer.rank_cpus() == [[3, 5]] * 4  # fewer cores than ranks: shared, not split


def test_a_pods_ranks_share_its_cpu_quota_not_the_machines_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import workers.node as node_module

    limit = tmp_path / "cpu.max"
    for text, cpus in (("300000 100000", 3), ("250000 100000", 3), ("max 100000", None)):
        limit.write_text(text)
        assert node_module.cpu_quota(limit) == cpus
    assert node_module.cpu_quota(tmp_path / "absent") is None
    monkeypatch.setattr(node_module, "available_cpus", lambda: list(range(64)))
    monkeypatch.setattr(node_module, "cpu_quota", lambda: 12)  # 4 ranks × 3 CPUs
    env: dict[str, str] = {}
    assert node_module.pod_cpus(env, 4) == [] and env["OMP_NUM_THREADS"] == "3"
    monkeypatch.setattr(node_module, "available_cpus", lambda: list(range(12)))
    assert node_module.pod_cpus({}, 4) == list(range(12))  # its own cores: pinned by share


def _worker_args(run_dir: Path, *extra: str) -> list[str]:
    """Light Task 0 at its quick size: seconds."""
    return light_rank_args("task0-allreduce", run_dir, *TASK0_QUICK_ARGS, *extra)


@pytest.mark.slow
def test_local_nodes_give_each_rank_its_node_local_rank_and_gpus(tmp_path: Path) -> None:
    """Two emulated nodes of two ranks on this host: each rank's environment record names
    its node, its local rank and its node's size; a node's ranks share its cores, and see
    the node's GPUs only (here ids of GPUs this host need not have: a CPU run ignores them;
    on a GPU host each rank then takes its node's cuda:LOCAL_RANK)."""
    run_dir = tmp_path / "r"
    group = LocalGroup(
        _worker_args(run_dir, "--device", "cpu"),
        4,
        ranks_per_node=2,
        sink=lambda line: None,
        gpus=["4", "5", "6", "7"],
    )
    group.start()
    result = group.wait(300)
    assert result.status == "succeeded", result.reason
    placed = []
    cpus = len(os.sched_getaffinity(0))
    node_cpus = cpus // 2 or cpus  # each node's half of the cores (one core: not pinned)
    for rank in read_run(run_dir):
        (env,) = rank.by_kind["env"][:1]
        where = ("node_rank", "local_rank", "local_world_size", "cuda_visible_devices")
        placed.append(tuple(env[key] for key in where))
        assert env["cpus_allowed"] == node_cpus  # pinned to its node's share, shared by its ranks
    assert placed == [(0, 0, 2, "4,5"), (0, 1, 2, "4,5"), (1, 0, 2, "6,7"), (1, 1, 2, "6,7")]


@pytest.mark.slow
def test_a_rank_asked_for_one_thread_has_one_in_every_native_thread_pool(tmp_path: Path) -> None:
    """The node starter sets a rank's OMP_NUM_THREADS to its cores; a request of one thread
    a worker wins in every native pool, numpy's OpenBLAS among them, whose idle threads spin
    beside the rank. Without the request each pool has the rank's cores."""
    cores = len(os.sched_getaffinity(0))
    pools = {}
    for asked in ((), ("--threads-per-worker", "1")):
        run_dir = tmp_path / ("one" if asked else "default")
        group = LocalGroup(_worker_args(run_dir, *asked), 1, sink=lambda line: None)
        group.start()
        result = group.wait(300)
        assert result.status == "succeeded", result.reason
        (rank,) = read_run(run_dir)
        pools[asked] = rank.by_kind["env"][0]["thread_pools"]
    assert "openblas" in pools[()], pools  # numpy's BLAS is loaded in every rank
    assert set(pools[()].values()) == {cores}, pools
    assert set(pools[("--threads-per-worker", "1")].values()) == {1}, pools


def test_the_launcher_holds_the_rendezvous_port_from_before_the_ranks_start_until_they_end(
    tmp_path: Path,
) -> None:
    """No other process can take the port between the launcher's choice and rank 0's start
    (two groups side by side once collided there): the launcher listens on it itself, the
    ranks join as clients, and it is free again once the group is over."""
    import socket

    group = LocalGroup(_worker_args(tmp_path / "r", "--timeout", "60"), 2, sink=lambda line: None)
    group.start()
    try:
        port = group.nodes[0].master_port
        with socket.socket() as other, pytest.raises(OSError, match="in use"):
            other.bind(("127.0.0.1", port))
        assert group.nodes[0].env["TORCHELASTIC_USE_AGENT_STORE"] == "True"  # torchrun's name
    finally:
        group.stop()
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))


@pytest.mark.slow
def test_the_node_starter_stops_its_other_ranks_and_names_the_global_rank_that_died(
    tmp_path: Path,
) -> None:
    """``python -m workers.node`` as a pod runs it: node 1 of a 2×2 group (ranks 2 and 3)
    whose rank 3 is killed while both wait for their peers; rank 2 is stopped with it and
    the node exits naming rank 3, in its output and its termination message."""
    env = {
        **os.environ,
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "JOB_COMPLETION_INDEX": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),  # no rank 0 there: the ranks wait for it
    }
    node = subprocess.Popen(
        [sys.executable, "-m", "workers.node", *_worker_args(tmp_path / "r", "--timeout", "60")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        ranks: dict[int, psutil.Process] = {}
        while len(ranks) < 2 and time.monotonic() < deadline:
            for child in psutil.Process(node.pid).children():
                try:
                    ranks[int(child.environ()["RANK"])] = child
                except (psutil.Error, KeyError):
                    continue
            time.sleep(0.2)
        assert sorted(ranks) == [2, 3]
        time.sleep(1.0)  # both started and waiting
        ranks[3].send_signal(signal.SIGKILL)
        out, _ = node.communicate(timeout=60)
    finally:
        if node.poll() is None:
            node.kill()
    assert node.returncode == EXIT_FAILED, out
    assert out.rstrip().splitlines()[-1] == "[node 1] rank 3 exited with signal SIGKILL", out
    assert not ranks[2].is_running() or ranks[2].status() == psutil.STATUS_ZOMBIE


def test_what_a_rank_records_of_its_node_is_read_back_by_ingest(tmp_path: Path) -> None:
    """The environment record's node fields are declared: an impossible one is refused."""
    from workers.records import BadRecord, validate_record

    record = {
        "v": 3,
        "kind": "env",
        "run_id": "r",
        "rank": 0,
        "world_size": 2,
        "t": 0.0,
        "host": "h",
        "node_rank": -1,
    }
    with pytest.raises(BadRecord, match="node_rank"):
        validate_record(json.loads(json.dumps(record)))
