"""An emulated network for one local training group: namespaces, veth pairs, a bridge, ``tc``.

Each node of a shaped group (one rank, or ``ranks_per_node`` of them) runs in
its own network namespace, joined to the others through a veth pair on a bridge
that only this group uses::

    node 0 netns: sbeth0 10.x.y.1 ──veth── sbv<pid>n0 ┐
    node 1 netns: sbeth0 10.x.y.2 ──veth── sbv<pid>n1 ┼─ bridge sbbr<pid>
    ...                                                ┘

The rate is applied on both ends of every node's veth pair with a token
bucket (``tbf``): the namespace end limits what the node sends, the bridge end
what it receives. A delay adds ``netem`` on the namespace end, so each packet
is delayed once on its way. The ranks of one node share its address: what they
send each other stays on the namespace's loopback, unshaped, as between the
GPUs of one server. Node 0's address is ``MASTER_ADDR``; gloo (and nccl) are
told to use ``sbeth0``. The subnet is a private /24 that overlaps
none of the host's addresses and routes.

Where a firewall filters bridged traffic (bridge netfilter on and a FORWARD
policy of DROP, as a running Docker daemon leaves a host), the group adds the
one rule its bridge needs, accepting traffic from the bridge to itself, to
``DOCKER-USER`` where that chain exists, else to ``FORWARD``; the rule carries
the bridge's name in a comment and goes with the group. No policy is changed.

Names carry the launcher's process id: :func:`remove_leftovers` deletes what a
launcher that no longer runs left behind (killed with SIGKILL, say): namespaces,
links, ``/etc/netns`` entries and firewall rules. Every new group calls it
first, and so do ``scalebench run``, ``scalebench ingest`` and
``scalebench network clean``. What this machine lacks to shape at all is
:func:`scalebench.host.shaping_problems`, which validation reads.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from scalebench.network import NetworkProfile
from scalebench.nodes import nccl_node_environment

INTERFACE = "sbeth0"  # every node's end of its veth pair, inside its namespace
NAMESPACE_PREFIX = "scalebench-"
_NAMESPACE = re.compile(rf"{NAMESPACE_PREFIX}(?P<pid>[0-9]+)-[nr][0-9]+")  # r: older names
_LINK = re.compile(r"sb(?:br|v)(?P<pid>[0-9]+)(?:[nr][0-9]+)?")
# A rule of ours as ``iptables -S`` prints it: the bridge is named in its comment.
_RULE = re.compile(
    r'-A (?P<chain>\S+) .*--comment "?scalebench (?P<bridge>sbbr(?P<pid>[0-9]+))(?="|\s|$)'
)
# Chains a rule of ours may be in: Docker's chain for rules of the host's own, then the base one.
FIREWALL_CHAINS = ("DOCKER-USER", "FORWARD")
BRIDGE_FILTER = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
# Where subnets are looked for: 10.128.0.0/9, far from the 10.0.x and 10.96.x that
# containers, clusters and clouds tend to use.
_SUBNET_POOL = ipaddress.ip_network("10.128.0.0/9")
_TBF_LATENCY = "100ms"  # queueing a token bucket allows before it drops
# ``ip netns exec`` mounts /etc/netns/<namespace>/hosts over /etc/hosts: the ranks'
# addresses get names, so that gloo's reverse look-ups of its peers find one.
NETNS_ETC = Path("/etc/netns")


class ShapingError(RuntimeError):
    """The emulated network could not be built (a command failed); the message says which."""


def _run(*command: str, namespace: str | None = None, check: bool = True) -> str:
    """Run an ``ip``/``tc`` command (inside ``namespace``); its output, or ShapingError."""
    argv = ["ip", "netns", "exec", namespace, *command] if namespace else list(command)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:  # missing, or hung past 30 s
        raise ShapingError(f"{' '.join(argv)} failed: {exc}") from None
    if check and done.returncode != 0:
        raise ShapingError(f"{' '.join(argv)} failed: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _used_networks() -> list[ipaddress.IPv4Network]:
    """The host's IPv4 addresses and routes, as networks."""
    used = []
    for command in (
        ("ip", "-j", "-4", "addr", "show"),
        ("ip", "-j", "-4", "route", "show", "table", "all"),
    ):
        try:
            entries = json.loads(_run(*command) or "[]")
        except (ShapingError, ValueError):
            continue
        for entry in entries:
            for info in entry.get("addr_info", [entry]):
                prefix = info.get("local") or info.get("dst")
                length = info.get("prefixlen")
                if not prefix or prefix == "default":
                    continue
                text = prefix if "/" in prefix or length is None else f"{prefix}/{length}"
                try:
                    used.append(ipaddress.ip_network(text, strict=False))
                except ValueError:
                    continue
    return [n for n in used if isinstance(n, ipaddress.IPv4Network)]


def free_subnet() -> ipaddress.IPv4Network:
    """The first /24 of 10.128.0.0/9 that overlaps none of the host's addresses and routes."""
    used = _used_networks()
    for subnet in _SUBNET_POOL.subnets(new_prefix=24):
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise ShapingError("no free /24 left in 10.128.0.0/9 for the group's network")


def _iptables(*arguments: str, check: bool = True) -> str:
    """Run ``iptables -w 5`` (waiting up to 5 s for the table's lock, as Docker may hold it)."""
    return _run("iptables", "-w", "5", *arguments, check=check)


def _bridges_filtered() -> bool:
    """Whether iptables sees traffic between the ports of a bridge (bridge netfilter on)."""
    try:
        return BRIDGE_FILTER.read_text(encoding="ascii").strip() == "1"
    except OSError:
        return False


def firewall_chain() -> str | None:
    """Where a group's accept rule goes: ``DOCKER-USER`` where it exists, else ``FORWARD``;
    None where there is no ``iptables`` to ask."""
    if shutil.which("iptables") is None:
        return None
    try:
        _iptables("-S", "DOCKER-USER")
    except ShapingError:
        return "FORWARD"
    return "DOCKER-USER"


class FirewallRule(NamedTuple):
    """A scalebench group's rule in the filter table."""

    chain: str
    line: str  # as ``iptables -S`` prints it: ``-A <chain> ...``
    bridge: str  # the group's bridge, ``sbbr<pid>``
    pid: int  # of the launcher that added it


def firewall_rules() -> list[FirewallRule]:
    """The rules of scalebench groups in the filter table."""
    if shutil.which("iptables") is None:
        return []
    rules = []
    for chain in FIREWALL_CHAINS:
        try:
            listing = _iptables("-S", chain)
        except ShapingError:  # no such chain
            continue
        for line in listing.splitlines():
            if (found := _RULE.match(line)) and found["chain"] == chain:
                rules.append(FirewallRule(chain, line, found["bridge"], int(found["pid"])))
    return rules


def _accept_rule(bridge: str) -> list[str]:
    return [
        "-i",
        bridge,
        "-o",
        bridge,
        "-m",
        "comment",
        "--comment",
        f"scalebench {bridge}",
        "-j",
        "ACCEPT",
    ]


def _delete_rule(rule: FirewallRule) -> None:
    _iptables("-D", *shlex.split(rule.line)[1:], check=False)


def _gone(pid: int | str) -> bool:
    """Whether the launcher ``pid`` no longer runs (this process counts as gone: it runs
    one shaped group at a time, so whatever it left is left over)."""
    return not os.path.exists(f"/proc/{pid}") or int(pid) == os.getpid()


def leftovers() -> tuple[list[str], list[str]]:
    """(namespaces, links) of scalebench launchers that no longer run."""
    namespaces = [line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line]
    stale_ns = [n for n in namespaces if (m := _NAMESPACE.fullmatch(n)) and _gone(m["pid"])]
    try:
        links = [entry["ifname"] for entry in json.loads(_run("ip", "-j", "link", "show") or "[]")]
    except (ValueError, KeyError, TypeError) as exc:
        raise ShapingError(f"ip -j link show: unreadable output ({exc})") from None
    stale_links = [name for name in links if (m := _LINK.fullmatch(name)) and _gone(m["pid"])]
    return stale_ns, stale_links


def remove_leftovers() -> list[str]:
    """Delete the namespaces, links, ``/etc/netns`` entries and firewall rules of launchers
    that no longer run (and this process's own, which runs one shaped group at a time);
    what was deleted, by name."""
    rules = [rule for rule in firewall_rules() if _gone(rule.pid)]
    for rule in rules:
        _delete_rule(rule)
    etc = [
        entry.name
        for entry in (NETNS_ETC.iterdir() if NETNS_ETC.is_dir() else ())
        if (m := _NAMESPACE.fullmatch(entry.name)) and _gone(m["pid"])
    ]
    namespaces, links = leftovers()
    for namespace in namespaces:
        _run("ip", "netns", "delete", namespace, check=False)
        shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)
    for name in etc:  # entries whose namespace is already gone
        shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
    _, links = leftovers()  # deleting a namespace deletes its veth pairs
    for link in links:
        _run("ip", "link", "delete", link, check=False)
    return sorted({*namespaces, *etc}) + links + [f"{r.chain} rule of {r.bridge}" for r in rules]


def _tbf(profile: NetworkProfile, device: str, parent: str = "root") -> list[str]:
    rate = profile.rate_bit_per_s or 0
    # A burst of at least 10 ms of traffic: timer granularity must not cap the rate.
    burst = max(64 * 1024, rate // 8 // 100)
    where = ["parent", parent] if parent != "root" else ["root"]
    return [
        "tc",
        "qdisc",
        "add",
        "dev",
        device,
        *where,
        "handle",
        "20:",
        "tbf",
        "rate",
        f"{rate}bit",
        "burst",
        str(burst),
        "latency",
        _TBF_LATENCY,
    ]


@dataclass
class ShapedNetwork:
    """The emulated network of one group of ``nodes`` nodes on ``profile``.

    :meth:`create` builds it, :meth:`command` and :meth:`environment` say how a
    node's ranks run in it, :meth:`remove` takes it down (safe to call twice, and
    after a failed :meth:`create`).
    """

    nodes: int
    profile: NetworkProfile
    owner: int = field(default_factory=os.getpid)
    subnet: ipaddress.IPv4Network | None = None
    created: bool = False

    @property
    def bridge(self) -> str:
        return f"sbbr{self.owner}"

    def namespace(self, node: int) -> str:
        return f"{NAMESPACE_PREFIX}{self.owner}-n{node}"

    def host_end(self, node: int) -> str:
        return f"sbv{self.owner}n{node}"

    def address(self, node: int) -> str:
        assert self.subnet is not None, "create() first"
        return str(self.subnet.network_address + node + 1)

    @property
    def master_addr(self) -> str:
        return self.address(0)

    def create(self) -> ShapedNetwork:
        """Build the bridge, one namespace and veth pair per node, and the shaping."""
        remove_leftovers()
        self.subnet = free_subnet()
        self.created = True
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            self._accept_bridged_traffic()
            _run("ip", "link", "set", self.bridge, "up")
            for node in range(self.nodes):
                self._add_node(node)
        except BaseException:
            self.remove()
            raise
        return self

    def _accept_bridged_traffic(self) -> None:
        """Let the bridge forward between its own ports past a FORWARD policy of DROP
        (Docker's), with one rule scoped to this bridge; where the firewall does not see
        bridged traffic, a rule that cannot be added is no loss."""
        chain = firewall_chain()
        if chain is None:
            if _bridges_filtered():
                raise ShapingError(
                    "bridged traffic is filtered by iptables (bridge netfilter is on) but there "
                    "is no iptables command to let the group's bridge through; install iptables"
                )
            return
        try:
            _iptables("-I", chain, "1", *_accept_rule(self.bridge))
        except ShapingError:
            if _bridges_filtered():
                raise

    def _add_node(self, node: int) -> None:
        namespace, host_end = self.namespace(node), self.host_end(node)
        _run("ip", "netns", "add", namespace)
        (NETNS_ETC / namespace).mkdir(parents=True, exist_ok=True)
        names = "".join(
            f"{self.address(n)} scalebench-node-{n}\n::ffff:{self.address(n)} scalebench-node-{n}\n"
            for n in range(self.nodes)
        )
        (NETNS_ETC / namespace / "hosts").write_text(f"127.0.0.1 localhost\n{names}")
        _run(
            "ip",
            "link",
            "add",
            host_end,
            "type",
            "veth",
            "peer",
            "name",
            INTERFACE,
            "netns",
            namespace,
        )
        _run("ip", "link", "set", host_end, "master", self.bridge, "up")
        assert self.subnet is not None
        inside = (
            ("ip", "link", "set", "lo", "up"),
            (
                "ip",
                "addr",
                "add",
                f"{self.address(node)}/{self.subnet.prefixlen}",
                "dev",
                INTERFACE,
            ),
            ("ip", "link", "set", INTERFACE, "up"),
        )
        for command in inside:
            _run(*command, namespace=namespace)
        # What the node receives: the bridge's end of its pair.
        _run(*_tbf(self.profile, host_end))
        # What it sends: its own end, after the delay where one is asked.
        if self.profile.delay_s:
            _run(
                "tc",
                "qdisc",
                "add",
                "dev",
                INTERFACE,
                "root",
                "handle",
                "10:",
                "netem",
                "delay",
                f"{self.profile.delay_s * 1000:g}ms",
                namespace=namespace,
            )
            _run(*_tbf(self.profile, INTERFACE, parent="10:1"), namespace=namespace)
        else:
            _run(*_tbf(self.profile, INTERFACE), namespace=namespace)

    def command(self, node: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside node ``node``'s namespace (``ip netns exec`` replaces itself
        with the command: the process id is the rank's)."""
        return ["ip", "netns", "exec", self.namespace(node), *argv]

    def environment(self, node: int = 0, ranks_per_node: int = 1) -> dict[str, str]:
        """What the environment of node ``node``'s ranks adds: the interface the backends
        must use, and for NCCL the node as a host of its own, named after its namespace
        (:func:`scalebench.nodes.nccl_node_environment`), so that only the ranks of one
        node are joined directly and nodes talk over the shaped link."""
        return nccl_node_environment(self.namespace(node), INTERFACE, ranks_per_node)

    def remove(self) -> None:
        """Delete the namespaces (and with them the veth pairs) and the bridge."""
        if not self.created:
            return
        for node in range(self.nodes):
            _run("ip", "netns", "delete", self.namespace(node), check=False)
            shutil.rmtree(NETNS_ETC / self.namespace(node), ignore_errors=True)
            _run("ip", "link", "delete", self.host_end(node), check=False)
        _run("ip", "link", "delete", self.bridge, check=False)
        for rule in firewall_rules():
            if rule.bridge == self.bridge:
                _delete_rule(rule)
        self.created = False
