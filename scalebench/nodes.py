"""How a group's ranks sit on nodes: ``nodes × ranks per node``, and what each rank is told.

A group of ``k`` workers asked with ``ranks_per_node = p`` runs on ``ceil(k / p)``
nodes: one node of ``k`` ranks when ``k <= p``, else ``k / p`` nodes of ``p``
ranks each (a group larger than one node must fill its nodes). Global rank
``r`` is local rank ``r % p`` of node ``r // p``, as torchrun numbers them. A
node is one machine: on a cluster one pod (one GPU per rank), on this machine an
emulated node (its own network namespace when the link between nodes is shaped).
Ranks of one node talk through its memory (shared memory, NVLink); nodes talk
over the network, which is what makes the shape part of a measurement.

Torch-free: validation, the plan and the records' readers use it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The most ranks one node may hold: far above any server's GPUs, and a CPU node's cores
# shared among more ranks than this measure the scheduler, not the group.
MAX_RANKS_PER_NODE = 128


def shape_problem(world_size: int, ranks_per_node: int) -> str:
    """Why ``world_size`` ranks cannot be laid out on nodes of ``ranks_per_node`` ("" when
    they can): a group larger than one node must fill every node."""
    if world_size > ranks_per_node and world_size % ranks_per_node:
        return (
            f"{world_size} workers do not fill nodes of {ranks_per_node} ranks "
            f"(ranks_per_node {ranks_per_node}): a group larger than one node needs a "
            f"multiple of {ranks_per_node}"
        )
    return ""


@dataclass(frozen=True)
class NodeShape:
    """``world_size`` ranks on nodes of ``ranks_per_node`` (as asked: a smaller group
    fits on one node and holds fewer)."""

    world_size: int
    ranks_per_node: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1 or self.ranks_per_node < 1:
            raise ValueError(
                f"a group needs at least one rank and one rank per node, got "
                f"{self.world_size} ranks on nodes of {self.ranks_per_node}"
            )
        problem = shape_problem(self.world_size, self.ranks_per_node)
        if problem:
            raise ValueError(problem)

    @property
    def local_world_size(self) -> int:
        """Ranks on each node (``LOCAL_WORLD_SIZE``)."""
        return min(self.world_size, self.ranks_per_node)

    @property
    def nodes(self) -> int:
        """How many nodes the group runs on."""
        return self.world_size // self.local_world_size

    @property
    def label(self) -> str:
        """``nodes×ranks`` as figures and tables show it, e.g. ``2×4``."""
        return f"{self.nodes}×{self.local_world_size}"

    def node_of(self, rank: int) -> int:
        """The node (``GROUP_RANK``) global rank ``rank`` runs on."""
        return rank // self.local_world_size

    def global_rank(self, node: int, local_rank: int) -> int:
        """The global rank of ``local_rank`` on ``node``."""
        return node * self.local_world_size + local_rank

    def ranks_of(self, node: int) -> range:
        """The global ranks of ``node``, in order."""
        start = node * self.local_world_size
        return range(start, start + self.local_world_size)

    def rank_environment(
        self, node: int, local_rank: int, master_addr: str, master_port: int
    ) -> dict[str, str]:
        """The variables torchrun gives local rank ``local_rank`` of ``node``: ``RANK``,
        ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node),
        ``GROUP_WORLD_SIZE`` (the nodes), ``MASTER_ADDR``, ``MASTER_PORT``."""
        if not 0 <= node < self.nodes or not 0 <= local_rank < self.local_world_size:
            raise ValueError(
                f"local rank {local_rank} of node {node} is outside a group of {self.label}"
            )
        return {
            "RANK": str(self.global_rank(node, local_rank)),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(node),
            "GROUP_WORLD_SIZE": str(self.nodes),
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
        }


def nccl_node_environment(host_id: str, interface: str, ranks_per_node: int) -> dict[str, str]:
    """What a rank's environment adds so that NCCL takes its node for a machine of its own,
    named ``host_id``, reached through the network ``interface`` (an emulated node).

    NCCL joins the GPUs of ranks that share a host id directly (peer-to-peer, NVLink, shared
    memory), past any network; ranks of other host ids it reaches through its socket
    transport over ``interface``. With one rank per node the direct paths are turned off
    too, as every rank is then its own machine.
    """
    env = {
        "GLOO_SOCKET_IFNAME": interface,
        "NCCL_SOCKET_IFNAME": interface,
        "TP_SOCKET_IFNAME": interface,
        "NCCL_NET": "Socket",
        "NCCL_IB_DISABLE": "1",
        "NCCL_HOSTID": host_id,
    }
    if ranks_per_node == 1:
        env.update(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1")
    return env


def shape_label(world_size: int, ranks_per_node: int) -> str:
    """``nodes×ranks`` of a stored run (``ranks_per_node`` as asked, 1 for runs stored before
    it could be asked); ``"?"`` for a combination no validated request holds."""
    try:
        return NodeShape(world_size, ranks_per_node).label
    except ValueError:
        return "?"
