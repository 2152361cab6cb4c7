"""Which transport a group's traffic took, within its nodes and between them.

A rank of an nccl group writes NCCL's own output (``NCCL_DEBUG=INFO``) to
``nccl-rank-<r>.log`` in its run's folder (:func:`nccl_debug_environment`), not to its
standard error. NCCL
logs each connection it makes as one line, e.g.::

    host:812:830 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
    host:812:833 [0] NCCL INFO Channel 01/0 : 3[3] -> 4[0] [send] via NET/IB/0/GDRDMA
    host:812:833 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0

(older releases say ``Ring 00 : 0[0] -> 1[1] via P2P/IPC``). :func:`parse_nccl_log` reads
the ranks at both ends, puts each connection within a node or between nodes (the group's
shape: rank ``r`` is on node ``r // ranks_per_node``) and names its transport: ``P2P``
(NVLink or PCIe peer to peer), ``SHM`` (host shared memory), ``NET/IB`` (InfiniBand or
RoCE), ``NET/Socket`` (TCP), or a network plugin's own name. A gloo group always talks
over TCP (:data:`GLOO_TCP`).

Pure functions on text: the ingest stores what they find on the run
(``run.transport_within_node``, ``run.transport_between_nodes``) and the Kubernetes
launcher reads them to refuse a group that fell back to sockets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

NCCL_LOG_PATTERN = "nccl-rank-*.log"
GLOO_TCP = "TCP (gloo)"
SOCKETS = "NET/Socket"
MAX_LOG_BYTES = 4 << 20  # a rank's NCCL log read at most this far (bytes): its set-up lines
MAX_NAME = 40  # characters of one transport's name kept (NCCL's are far shorter)
MAX_LABEL = 100  # characters of a label, as run.transport_* store it
_CONNECTION = re.compile(
    r"NCCL INFO (?:Channel|Ring) \d+(?:/\d+)? ?: (\d+)\[[0-9a-fA-Fx]+\] -> (\d+)\[[0-9a-fA-Fx]+\]"
    r"(?: \[(?:send|receive)\])? via (\S[^\n]*)"
)
# What NCCL says when it looks for RDMA devices and finds none, or none usable.
_NO_RDMA = re.compile(r"NCCL INFO (NET/IB ?: [^\n]*(?:No device found|[Ff]ailed)[^\n]*)")


def nccl_log_name(rank: int) -> str:
    """The file rank ``rank`` writes NCCL's debug output to, in its run's folder."""
    return f"nccl-rank-{rank}.log"


def nccl_debug_environment(run_dir: Path, rank: int, env: dict[str, str]) -> dict[str, str]:
    """The variables that make NCCL write its output, connections included, to this rank's
    log in ``run_dir``: level INFO (a quieter level in ``env`` is raised to it, since the
    output goes to the file, not the rank's own; TRACE is kept) and the INIT and NET
    subsystems (subsystems set in ``env`` are kept, with INIT added: the connections are
    logged there)."""
    added = {"NCCL_DEBUG_FILE": str(run_dir / nccl_log_name(rank))}
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        added["NCCL_DEBUG"] = "INFO"
    subsystems = env.get("NCCL_DEBUG_SUBSYS", "")
    if not subsystems:
        added["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
    elif not {"INIT", "ALL"} & {s.strip().upper() for s in subsystems.split(",")}:
        added["NCCL_DEBUG_SUBSYS"] = f"{subsystems},INIT"
    return added


# What NCCL's transport and network names are made of; anything else in a log's "via" (a
# terminal's escape, a carriage return) is dropped, so no stored label can carry it.
_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_.+ -]")


def transport_name(via: str) -> str:
    """``P2P/CUMEM/read`` → ``P2P``; ``NET/IB/0/GDRDMA`` → ``NET/IB``; ``SHM/direct/direct`` →
    ``SHM``: the transport, with the network's name for NET and COLLNET; only letters,
    digits, spaces (``NET/AWS Libfabric``) and ``_.+-`` kept of each (empty where nothing
    is left)."""
    parts = [" ".join(_NAME_CHARACTERS.sub("", p).split()) for p in via.strip().split("/")]
    name = parts[0]
    if parts[0] in ("NET", "COLLNET") and len(parts) > 1 and parts[1]:
        name = f"{parts[0]}/{parts[1]}"
    return name[:MAX_NAME]


@dataclass
class Transports:
    """The transports a group's connections took within its nodes and between them, each
    set sorted when shown; ``no_rdma`` is what NCCL said of the RDMA devices it did not use."""

    within_node: set[str] = field(default_factory=set)
    between_nodes: set[str] = field(default_factory=set)
    no_rdma: list[str] = field(default_factory=list)

    @property
    def within_label(self) -> str:
        """The transports within nodes, comma-separated (at most :data:`MAX_LABEL`)."""
        return _label(self.within_node)

    @property
    def between_label(self) -> str:
        """The transports between nodes, comma-separated (at most :data:`MAX_LABEL`)."""
        return _label(self.between_nodes)

    @property
    def fell_back_to_sockets(self) -> bool:
        """Traffic between nodes went over TCP sockets only."""
        return self.between_nodes == {SOCKETS}

    def add(self, other: Transports) -> None:
        self.within_node |= other.within_node
        self.between_nodes |= other.between_nodes
        self.no_rdma += [line for line in other.no_rdma if line not in self.no_rdma]


def _label(names: set[str]) -> str:
    """``names`` sorted and comma-separated, cut to :data:`MAX_LABEL` characters with an
    ellipsis (a damaged or hostile log can name any number of them)."""
    text = ", ".join(sorted(names))
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def parse_nccl_log(text: str, ranks_per_node: int) -> Transports:
    """The transports of every connection NCCL logged in ``text``, for a group of nodes of
    ``ranks_per_node`` ranks (1: every connection is between nodes)."""
    per_node = max(1, ranks_per_node)
    found = Transports()
    for match in _CONNECTION.finditer(text):
        source, target, via = int(match[1]), int(match[2]), match[3]
        same_node = source // per_node == target // per_node
        name = transport_name(via)
        if name:
            (found.within_node if same_node else found.between_nodes).add(name)
    for match in _NO_RDMA.finditer(text):
        said = " ".join(match[1].split())
        if said not in found.no_rdma:
            found.no_rdma.append(said)
    return found


def group_transports(
    backend: str, world_size: int, ranks_per_node: int, nccl_logs: Iterable[str]
) -> Transports:
    """What a group's traffic took: for nccl, what its ranks' logs say; for gloo, TCP
    wherever two ranks talk (within a node when a node holds several, between nodes when
    there are several); nothing for mpi or a group of one."""
    per_node = min(max(1, ranks_per_node), max(1, world_size))
    nodes = -(-world_size // per_node)
    if backend == "nccl":
        found = Transports()
        for text in nccl_logs:
            found.add(parse_nccl_log(text, per_node))
        return found
    if backend == "gloo":
        return Transports(
            within_node={GLOO_TCP} if per_node > 1 else set(),
            between_nodes={GLOO_TCP} if nodes > 1 else set(),
        )
    return Transports()


def rdma_refusal(found: Transports, nodes: int) -> str:
    """Why a group of ``nodes`` nodes must be failed when RDMA is required (``""``: it need
    not): its traffic between nodes went over TCP sockets, with NCCL's own words on its
    RDMA devices where it said any."""
    if nodes < 2 or not found.fell_back_to_sockets:
        return ""
    why = "; ".join(found.no_rdma) or "NCCL found no RDMA device it could use"
    return (
        f"NCCL's traffic between nodes ran over TCP sockets ({SOCKETS}), not RDMA: {why}. "
        "Check SCALEBENCH_K8S_RDMA_RESOURCE (scalebench cluster check), or unset "
        "SCALEBENCH_K8S_REQUIRE_RDMA to measure sockets"
    )
