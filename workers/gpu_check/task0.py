"""The GPU check's second step: Task 0 on CUDA tensors, a light group of ranks through the real
rank entry point (``workers.run``), with its latency in seconds and bandwidth in GB/s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from workers.gpu_check.context import ChildRun, Context, tail
from workers.gpu_check.report import FAIL, PASS, Check, failed, skipped

TASK0 = "task0-allreduce"
# Emulated nodes on this machine reach each other over the loopback interface.
LOOPBACK = "lo"


def allreduce_group(
    ctx: Context,
    backend: str,
    world_size: int,
    timeout_s: float,
    name: str,
    device: str = "cuda",
    ranks_per_node: int | None = None,
) -> tuple[ChildRun, Path]:
    """A light Task 0 group of ``world_size`` ranks on ``device`` tensors, via ``workers.run``:
    one node of them all, or (``ranks_per_node``) emulated nodes of that many ranks, each
    node a host of its own to NCCL (:func:`scalebench.nodes.nccl_node_environment`)."""
    from scalebench.nodes import NodeShape, nccl_node_environment
    from workers.distributed import free_port

    run_dir = ctx.work_dir / name
    port = free_port()
    shape = NodeShape(world_size, ranks_per_node or world_size)
    children = []
    started = time.monotonic()
    for rank in range(world_size):
        node = shape.node_of(rank)
        env = {
            "NCCL_DEBUG": "WARN",  # nccl's own reason, should it refuse the group
            **os.environ,
            **shape.rank_environment(node, rank % shape.local_world_size, "127.0.0.1", port),
        }
        if ranks_per_node is not None:
            host = f"gpu-check-node-{node}"
            env.update(nccl_node_environment(host, LOOPBACK, shape.local_world_size))
        argv = [ctx.python, "-m", "workers.run", "--task", TASK0, "--results", str(run_dir)]
        argv += ["--light", "--backend", backend, "--device", device, "--timeout", "60"]
        children.append(
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    outputs, codes = [], []
    for child in children:
        try:
            out, _ = child.communicate(timeout=max(1.0, timeout_s - (time.monotonic() - started)))
            codes.append(child.returncode)
        except subprocess.TimeoutExpired:
            child.kill()
            out, _ = child.communicate()
            codes.append(None)
        outputs.append(out.decode(errors="replace"))
    code = None if None in codes else max(codes, key=abs)
    return ChildRun(code, "\n".join(outputs), time.monotonic() - started), run_dir


def run_transports(run_dir: Path, backend: str, world_size: int, ranks_per_node: int) -> Any:
    """What the group's traffic took (:func:`scalebench.transports.group_transports`), from
    the NCCL logs its ranks left in ``run_dir``."""
    from scalebench.transports import MAX_LOG_BYTES, NCCL_LOG_PATTERN, group_transports

    logs = []
    for path in sorted(run_dir.glob(NCCL_LOG_PATTERN)):
        with path.open("rb") as handle:
            logs.append(handle.read(MAX_LOG_BYTES).decode("utf-8", "replace"))
    return group_transports(backend, world_size, ranks_per_node, logs)


def allreduce_curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Rank 0's (bytes, median seconds) per dtype, ascending in bytes."""
    from workers.records import rank_file_name, read_rank_file

    curves: dict[str, list[tuple[int, float]]] = {}
    path = run_dir / rank_file_name(0)
    if not path.exists():
        return curves
    for record in read_rank_file(path).of_kind("allreduce"):
        curves.setdefault(record["dtype"], []).append(
            (int(record["bytes"]), statistics.median(record["seconds"]))
        )
    return {dtype: sorted(points) for dtype, points in curves.items()}


def bus_bandwidth_gb_s(size_bytes: int, seconds: float, world_size: int) -> float:
    """NCCL's bus bandwidth of an all-reduce: algorithm bandwidth × 2(k−1)/k, in GB/s (10⁹ B/s).
    A group of one moves nothing between GPUs: its algorithm bandwidth is given instead."""
    algorithm = size_bytes / seconds / 1e9
    return algorithm if world_size == 1 else algorithm * 2 * (world_size - 1) / world_size


def task0_check(
    ctx: Context, backend: str, world_size: int, shared_gpu: bool, nodes: bool = False
) -> Check:
    """Task 0 (light sizes, fp32 and fp16) on CUDA tensors over ``backend``; with ``nodes``,
    each rank on an emulated node of its own (as the local launcher's nodes with one rank
    each), which NCCL accepts on one GPU: it reaches the other nodes through its sockets."""
    import torch

    gpus = torch.cuda.device_count()
    name = f"task0-{backend}-{world_size}" + ("-nodes" if nodes else "")
    title = f"Task 0, {backend}, {world_size} rank{'s' if world_size > 1 else ''}"
    if nodes:
        title += f" on {world_size} emulated nodes"
    if shared_gpu:
        title += f" on {gpus} GPU"
    if backend == "nccl" and not torch.distributed.is_nccl_available():
        return skipped(name, title, "skipped: this torch has no nccl backend")
    limit_s = 60.0 if shared_gpu else 150.0
    run, run_dir = allreduce_group(
        ctx,
        backend,
        world_size,
        min(limit_s, ctx.seconds_left()),
        name,
        ranks_per_node=1 if nodes else None,
    )
    if run.returncode != 0:
        refused = ("Duplicate GPU", "ncclInvalidUsage")
        if shared_gpu and backend == "nccl" and not nodes and any(w in run.output for w in refused):
            return skipped(
                name,
                title,
                f"skipped: nccl refuses two ranks of one node on one GPU ({gpus} GPU here), "
                "as documented",
            )
        why = "timed out" if run.returncode is None else f"exit status {run.returncode}"
        return failed(
            name,
            title,
            f"{why} after {run.seconds:.0f} s",
            f"the ranks' output ends: {tail(run.output)}; NCCL's own words are in "
            f"{run_dir}/nccl-rank-*.log",
        )
    curves = allreduce_curves(run_dir)
    carried = run_transports(run_dir, backend, world_size, 1 if nodes else world_size)
    details: dict[str, Any] = {
        "curves": curves,
        "world_size": world_size,
        "backend": backend,
        "transport_within_node": carried.within_label,
        "transport_between_nodes": carried.between_label,
    }
    parts = []
    for dtype, points in curves.items():
        small_bytes, small_s = points[0]
        large_bytes, large_s = points[-1]
        bandwidth = bus_bandwidth_gb_s(large_bytes, large_s, world_size)
        kind = "algorithm" if world_size == 1 else "bus"
        parts.append(
            f"{dtype}: {small_s * 1e6:.0f} µs at {small_bytes} B, "
            f"{kind} bandwidth {bandwidth:.1f} GB/s at {large_bytes / 1e6:.1f} MB"
        )
        details[dtype] = {"latency_s": small_s, "bandwidth_gb_s": bandwidth}
    if not curves:
        return failed(name, title, "no all-reduce records", "read the ranks' output", **details)
    if world_size == 1:
        details["note"] = "one GPU: nothing crosses a link, so no link expectation applies"
    carried_text = " · ".join(
        f"{where} {label}"
        for where, label in (
            ("within nodes", carried.within_label),
            ("between nodes", carried.between_label),
        )
        if label
    )
    if carried_text:
        parts.append(f"transport {carried_text}")
    check = Check(name, title, PASS, "; ".join(parts), seconds=run.seconds, details=details)
    if len(curves) < 2:
        check.verdict = FAIL
        check.advice = f"only {', '.join(curves)} was measured: fp16 or fp32 was refused"
    return check
