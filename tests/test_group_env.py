"""Reading rank and rendezvous from the environment; refusing unusable backends."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from workers.distributed import GroupConfigError, check_backend, group_env_from


def test_torchrun_variables() -> None:
    env = {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "10.0.0.5",
        "MASTER_PORT": "29500",
    }
    group = group_env_from(env)
    assert (group.rank, group.world_size, group.local_rank) == (3, 4, 1)
    assert (group.master_addr, group.master_port) == ("10.0.0.5", 29500)


def test_kubernetes_indexed_job_variables() -> None:
    env = {
        "JOB_COMPLETION_INDEX": "2",
        "WORLD_SIZE": "8",
        "MASTER_ADDR": "job-abc-0.svc-abc",
        "MASTER_PORT": "29500",
    }
    group = group_env_from(env)
    assert (group.rank, group.world_size, group.local_rank) == (2, 8, 0)
    assert group.master_addr == "job-abc-0.svc-abc"


def test_nothing_set_means_a_single_worker() -> None:
    group = group_env_from({})
    assert (group.rank, group.world_size, group.master_port) == (0, 1, 0)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK must be an integer"),
        ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, "outside"),
        ({"WORLD_SIZE": "0"}, "at least 1"),
        ({"RANK": "1", "WORLD_SIZE": "2"}, "MASTER_ADDR and MASTER_PORT"),
    ],
)
def test_bad_environment_is_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(GroupConfigError, match=message):
        group_env_from(env)


def test_nccl_without_a_gpu_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(GroupConfigError, match="nccl needs a CUDA GPU"):
        check_backend("nccl")


def test_mpi_without_mpi_torch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist, "is_mpi_available", lambda: False)
    with pytest.raises(GroupConfigError, match="mpi needs a torch build with MPI"):
        check_backend("mpi")


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(GroupConfigError, match="gloo, nccl, mpi"):
        check_backend("carrier-pigeon")
    check_backend("gloo")


def test_the_environment_record_says_which_cpus_the_rank_may_run_on() -> None:
    """On Kubernetes, ``cpus_allowed`` equal to the pod's CPU request (not the node's count)
    shows the static CPU manager policy gave the rank cores of its own."""
    import os

    from workers.distributed import environment

    info = environment("gloo")
    assert info["cpus_allowed"] == len(os.sched_getaffinity(0))
    assert info["cpu_count"] == os.cpu_count() and info["cpus_allowed"] <= info["cpu_count"]
