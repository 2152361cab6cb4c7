"""Joining the process group from the environment.

Two launchers set the environment differently:

- torchrun and scalebench's local launcher: ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``;
- a Kubernetes Indexed Job: ``JOB_COMPLETION_INDEX`` is the rank, and the
  pod template sets ``WORLD_SIZE``, ``MASTER_ADDR`` (``<job>-0.<service>``)
  and ``MASTER_PORT``.

With none of them set the worker runs alone (rank 0 of 1).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from scalebench.rank import BACKENDS


class GroupConfigError(ValueError):
    """The environment or the options cannot form a process group."""


@dataclass(frozen=True)
class GroupEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def _int_var(env: Mapping[str, str], name: str) -> int:
    raw = env[name]
    try:
        return int(raw)
    except ValueError:
        raise GroupConfigError(f"{name} must be an integer, got {raw!r}") from None


def group_env_from(env: Mapping[str, str]) -> GroupEnv:
    """Read rank, world size and rendezvous address from ``env``."""
    if "RANK" in env:
        rank = _int_var(env, "RANK")
    elif "JOB_COMPLETION_INDEX" in env:
        rank = _int_var(env, "JOB_COMPLETION_INDEX")
    else:
        rank = 0
    world_size = _int_var(env, "WORLD_SIZE") if "WORLD_SIZE" in env else 1
    if world_size < 1:
        raise GroupConfigError(f"WORLD_SIZE must be at least 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise GroupConfigError(f"rank {rank} is outside a group of WORLD_SIZE={world_size}")
    local_rank = _int_var(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0
    if world_size > 1 and ("MASTER_ADDR" not in env or "MASTER_PORT" not in env):
        raise GroupConfigError(
            "a group of more than one worker needs MASTER_ADDR and MASTER_PORT "
            "(the address of rank 0)"
        )
    master_addr = env.get("MASTER_ADDR", "127.0.0.1")
    master_port = _int_var(env, "MASTER_PORT") if "MASTER_PORT" in env else 0
    if "MASTER_PORT" in env and not 1 <= master_port <= 65535:
        raise GroupConfigError(f"MASTER_PORT must be a TCP port (1-65535), got {master_port}")
    return GroupEnv(rank, world_size, local_rank, master_addr, master_port)


def check_backend(backend: str, world_size: int = 1) -> None:
    """Refuse a backend this process cannot use, with the reason.

    ``nccl`` needs a CUDA GPU; ``mpi`` needs a torch build with MPI.
    """
    import torch
    import torch.distributed as dist

    if backend not in BACKENDS:
        raise GroupConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "nccl" and not torch.cuda.is_available():
        raise GroupConfigError("backend nccl needs a CUDA GPU and none is visible here; use gloo")
    if backend == "mpi" and not dist.is_mpi_available():
        raise GroupConfigError(
            "backend mpi needs a torch build with MPI support; this torch has none "
            "(use gloo, or build torch from source against an MPI library)"
        )
    if backend == "gloo" and not dist.is_gloo_available():
        raise GroupConfigError("this torch build has no gloo backend")


def init_group(group: GroupEnv, backend: str, timeout_s: float) -> None:
    """Join the process group; collectives fail after ``timeout_s`` seconds.

    The timeout also bounds the wait for missing peers at start-up, so a worker
    whose peers never come fails instead of hanging.
    """
    import torch
    import torch.distributed as dist

    check_backend(backend, group.world_size)
    if backend == "nccl":
        torch.cuda.set_device(group.local_rank % torch.cuda.device_count())
    timeout = timedelta(seconds=timeout_s)
    if group.world_size == 1 and group.master_port == 0:  # alone, with no rendezvous given
        dist.init_process_group(
            backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout
        )
        return
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{group.master_addr}:{group.master_port}",
        rank=group.rank,
        world_size=group.world_size,
        timeout=timeout,
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _int_or(text: str | None, default: int | None) -> int | None:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _numpy_version() -> str | None:
    try:
        import numpy
    except ImportError:
        return None
    return str(numpy.__version__)


def _stack() -> dict[str, object] | None:
    """The stack of this rank, from its launcher's :data:`~scalebench.stacks.STACK_VARIABLE`."""
    from scalebench.stacks import STACK_VARIABLE

    text = os.environ.get(STACK_VARIABLE)
    if not text:
        return None
    try:
        stack = json.loads(text)
    except ValueError:
        return {"name": "?", "unreadable": text[:200]}
    return stack if isinstance(stack, dict) else {"name": "?", "unreadable": text[:200]}


def _gpu_driver() -> str | None:
    """The NVIDIA driver's version, as its kernel module reports it (None: no such driver)."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as version:
            first = version.readline()
    except OSError:
        return None
    words = first.split()
    found = [w for w in words if w[:1].isdigit() and "." in w]
    return found[0] if found else first.strip() or None


def thread_pools() -> dict[str, int]:
    """The threads of each native thread pool this process has loaded, by its API
    (``openblas``, ``openmp``, ``mkl``; the most where a library is loaded twice)."""
    import numpy  # noqa: F401  (its OpenBLAS, loaded, so that its pool is seen)
    from threadpoolctl import threadpool_info

    pools: dict[str, int] = {}
    for pool in threadpool_info():
        api, threads = str(pool.get("internal_api")), int(pool.get("num_threads") or 0)
        pools[api] = max(pools.get(api, 0), threads)
    return dict(sorted(pools.items()))


def environment(backend: str) -> dict[str, object]:
    """Versions, devices and host of this rank, for the ``env`` record."""
    import platform

    import torch

    from scalebench.host import cpu_model

    info: dict[str, object] = {
        "host": platform.node(),
        # The machine: a pod's node (NODE_NAME, from the pod spec), else this host.
        "node": os.environ.get("NODE_NAME") or platform.node(),
        # Where the rank sits in the group's nodes (scalebench.nodes): its node's index
        # (GROUP_RANK), its rank on that node and the node's ranks; a launcher that sets
        # none of them runs one rank per node.
        "node_rank": _int_or(os.environ.get("GROUP_RANK"), None),
        "local_rank": _int_or(os.environ.get("LOCAL_RANK"), 0),
        "local_world_size": _int_or(os.environ.get("LOCAL_WORLD_SIZE"), 1),
        "python": platform.python_version(),
        "executable": sys.executable,
        "numpy": _numpy_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # e.g. AVX2, AVX512
        "cpu_count": os.cpu_count(),
        # The CPUs this rank may run on: in a Guaranteed pod with whole CPUs on a node whose
        # kubelet has the static CPU manager policy, its own cores (the CPU request);
        # elsewhere the node's shared pool. The policy itself is not readable from a pod.
        "cpus_allowed": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch.get_num_threads(),
        # The threads of each native pool loaded (OpenBLAS, OpenMP, MKL), as threadpoolctl
        # reads them: a rank asked for n threads has n in every pool (workers.run).
        "thread_pools": thread_pools(),
        "backend": backend,
        "gpus": [],
        # The host's GPUs this rank's node owns, as its launcher gave them (None: all the
        # host has); the rank takes the node's cuda:LOCAL_RANK among them.
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nccl": None,
        # The stack the launcher started this rank as (scalebench.stacks): its name and the
        # variables it set; None where the request named no stack.
        "stack": _stack(),
        # The platform beneath: the kernel, the GPU driver (None without one) and the NCCL
        # variables set, so a nightly finding can say which of them changed.
        "kernel": platform.release(),
        "driver": _gpu_driver(),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
    }
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        try:
            info["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            info["nccl"] = None
    return info
