"""What a cluster's nodes can hold, and the two request fields taken from them.

A sweep on Kubernetes puts each node's ranks in one pod, and each rank asks for
``gpus_per_worker`` GPUs. :class:`ClusterNodes` is what a reading of the cluster
(:func:`operators.kubernetes.cluster.read_nodes`) found: the nodes the pods may
run on (matching the node selector, their taints tolerated, schedulable) with
the GPUs each can give. From it:

- :func:`auto_ranks_per_node`: what ``ranks_per_node: auto`` becomes, the GPUs of
  one such node (where the nodes differ, the count most of them have; ties: the
  larger) divided by the GPUs each rank asks;
- :func:`fit_problem`: why a group cannot be placed (``""`` when it can):
  ``k`` ranks on pods of ``p`` ranks need ``k / p`` nodes of ``p × g`` free GPUs,
  one pod to a node with placement ``spread``, as many as fit with ``pack``.

Pure functions on plain values: validation calls them, nothing here talks to a
cluster.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from scalebench.nodes import NodeShape


@dataclass(frozen=True)
class ClusterNode:
    """One node a worker pod may run on: its name, the GPUs it can give
    (``nvidia.com/gpu`` allocatable, 0 for a node without) and their product
    (the ``nvidia.com/gpu.product`` label, ``""`` where unlabelled)."""

    name: str
    gpus: int = 0
    gpu_product: str = ""


@dataclass(frozen=True)
class ClusterNodes:
    """The nodes a sweep's pods may run on, as read from the cluster, and how they were
    chosen (``selector``: the node selector in words, for messages)."""

    nodes: tuple[ClusterNode, ...]
    selector: str = "every schedulable node"

    @property
    def gpu_nodes(self) -> tuple[ClusterNode, ...]:
        """The nodes that can give at least one GPU."""
        return tuple(node for node in self.nodes if node.gpus > 0)

    def typical_gpus(self) -> int:
        """The GPUs per node most of the GPU nodes have (ties: the larger); 0 without any."""
        counts = Counter(node.gpus for node in self.gpu_nodes)
        if not counts:
            return 0
        return max(counts, key=lambda gpus: (counts[gpus], gpus))

    def products(self) -> list[str]:
        """The GPU products of the GPU nodes, each once, in name order."""
        return sorted({node.gpu_product for node in self.gpu_nodes if node.gpu_product})


def auto_ranks_per_node(cluster: ClusterNodes, gpus_per_worker: int) -> int:
    """What ``ranks_per_node: auto`` becomes: the ranks one typical GPU node holds at
    ``gpus_per_worker`` GPUs each; 1 for ranks without GPUs or a cluster without GPU nodes
    (:func:`fit_problem` says why such a group cannot run)."""
    if gpus_per_worker <= 0:
        return 1
    return max(1, cluster.typical_gpus() // gpus_per_worker)


def fit_problem(
    cluster: ClusterNodes,
    world_size: int,
    ranks_per_node: int,
    gpus_per_worker: int,
    placement: str,
) -> str:
    """Why a group of ``world_size`` ranks, ``ranks_per_node`` to a pod, each asking
    ``gpus_per_worker`` GPUs, cannot be placed on ``cluster`` (``""`` when it can, and
    always for ranks without GPUs). ``placement`` ``spread`` puts one pod on a node,
    ``pack`` as many as a node's GPUs hold."""
    if gpus_per_worker <= 0:
        return ""
    shape = NodeShape(world_size, ranks_per_node)
    per_pod = shape.local_world_size * gpus_per_worker
    if not cluster.gpu_nodes:
        return (
            f"{world_size} ranks ask {gpus_per_worker} GPU(s) each, and no node the pods may "
            f"run on ({cluster.selector}) advertises nvidia.com/gpu: check the node selector "
            "and tolerations (scalebench cluster check), or ask gpus_per_worker 0"
        )
    if placement == "spread":
        room = sum(1 for node in cluster.gpu_nodes if node.gpus >= per_pod)
    else:
        room = sum(node.gpus // per_pod for node in cluster.gpu_nodes)
    if room >= shape.nodes:
        return ""
    most = max(node.gpus for node in cluster.gpu_nodes)
    counts = ", ".join(
        f"{n} of {gpus}" for gpus, n in sorted(Counter(x.gpus for x in cluster.gpu_nodes).items())
    )
    if per_pod > most:
        hint = f"a node holds at most {most // gpus_per_worker}: ask that ranks_per_node"
    else:
        fit = room * shape.local_world_size
        hint = f"at most {fit} workers fit at ranks_per_node {ranks_per_node}"
    has = (
        f"the cluster has {room}"
        if placement == "spread"
        else f"the cluster's GPU nodes hold {room} such pods"
    )
    return (
        f"{world_size} ranks need {shape.nodes} {_plural(shape.nodes, 'node')} of {per_pod} "
        f"GPUs each ({shape.local_world_size} {_plural(shape.local_world_size, 'rank')} × "
        f"{gpus_per_worker} {_plural(gpus_per_worker, 'GPU')}), and {has} (GPU nodes the pods may "
        f"run on, {cluster.selector}: {counts} GPUs); {hint}"
    )


def _plural(count: int, word: str) -> str:
    return word if count == 1 else word + "s"
