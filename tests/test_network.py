"""The network as a benchmark dimension: profiles, refusals, and emulated links that are real.

The emulation tests build real network namespaces, veth pairs, a bridge and
``tc`` token buckets (they need root, as CI has here) and run real groups on
them; after every test no namespace or link of the launcher is left.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TASK0_QUICK_ARGS, light_rank_args

from cli import main as cli
from operators import shaped_network
from operators.local_launcher import LocalGroup
from operators.shaped_network import ShapedNetwork, leftovers
from results_db.database import make_engine
from results_db.queries.communication import allreduce_curves
from results_db.run_summary import summarise
from scalebench import host
from scalebench.config_hash import configuration_hash
from scalebench.host import shaping_problems
from scalebench.network import BadProfile, NetworkProfile, parse_profile, parse_profiles
from scalebench.sweep import InvalidParameter, plan_groups, validate_request
from workers.records import read_run

ROOT = Path(__file__).resolve().parents[1]
CANNOT_SHAPE = shaping_problems([parse_profile("100mbit")])
needs_shaping = pytest.mark.skipif(
    bool(CANNOT_SHAPE), reason=f"cannot emulate networks here: {'; '.join(CANNOT_SHAPE)}"
)


def launcher_links() -> tuple[list[str], list[str]]:
    """Every namespace and link a scalebench launcher made, whoever made it."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = json.loads(
        subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True).stdout or "[]"
    )
    return (
        [
            line.split()[0]
            for line in namespaces.splitlines()
            if line.startswith(shaped_network.NAMESPACE_PREFIX)
        ],
        [link["ifname"] for link in links if shaped_network._LINK.fullmatch(link["ifname"])],
    )


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    yield
    if not CANNOT_SHAPE:
        assert launcher_links() == ([], []), "a namespace, veth or bridge was left behind"


# -- profiles --------------------------------------------------------------------------------


def test_profiles_are_read_in_every_spelling_and_named_one_way() -> None:
    assert parse_profile("host") == NetworkProfile()
    assert parse_profile(" 100MBit ").name == "100mbit"
    assert parse_profile("1000mbit").name == "1gbit"
    assert parse_profile("1.5gbit").name == "1500mbit"
    assert parse_profile("1gbit+2ms") == NetworkProfile(10**9, 0.002)
    assert parse_profile("1gbit+2ms").name == "1gbit+2ms"
    assert parse_profile("100mbit").rate_bytes_per_s == 12.5e6
    assert [p.token for p in parse_profiles("host,100mbit,1gbit+0.5ms,250kbit")] == [
        "",
        "n100mbit",
        "n1gbit-0p5ms",
        "n250kbit",
    ]
    assert parse_profiles(None) == (NetworkProfile(),)
    one_gbit = parse_profile("1gbit")
    assert parse_profiles(["host", "1gbit", "1000mbit"]) == (NetworkProfile(), one_gbit)
    # Rates are kept to whole kbit/s and delays to microseconds, so every name reads back.
    assert parse_profile("1.0000001gbit").name == "1gbit"
    assert parse_profile("123456.7kbit").name == "123457kbit"
    assert parse_profile("1gbit+0.0004ms").name == "1gbit"  # below a microsecond: none
    assert parse_profile("1gbit+1.2345678ms").name == "1gbit+1.235ms"
    for spelled in ("2.5gbit", "1.0000001gbit+1.0000001ms", "999.9999kbit", "3mbit+0.5ms"):
        profile = parse_profile(spelled)
        assert parse_profile(profile.name) == profile, spelled


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("10mbps", "not a profile"),
        ("fast", "not a profile"),
        ("50kbit", "between 100kbit"),
        ("1tbit", "not a profile"),
        ("1gbit+2s", "not a profile"),
        ("1gbit+5000ms", "at most"),
        ("", "at least one"),
        (7, "a profile is text"),
        ("a,b,c,d,e,f,g", "not a profile"),
        (",".join(f"{r}mbit" for r in range(1, 8)), "at most 6"),
    ],
)
def test_bad_profiles_are_refused_naming_the_field(value: object, problem: str) -> None:
    with pytest.raises(InvalidParameter, match=problem) as refused:
        validate_request(
            task="task0-allreduce", workers="2", light=True, network=value, max_workers=4
        )
    assert refused.value.field == "network"
    with pytest.raises(BadProfile):
        parse_profiles(value)


def test_each_profile_is_its_own_configuration_and_host_keeps_the_old_identity() -> None:
    request = {
        "task": "task0-allreduce",
        "light": True,
        "backend": "gloo",
        "variant": "sync",
        "precision": "fp32",
    }
    before = configuration_hash(request)  # recorded before profiles existed
    assert configuration_hash({**request, "network": "host"}) == before
    assert configuration_hash({**request, "network": ["host"]}) == before
    assert configuration_hash({**request, "network": "100mbit"}) != before
    assert configuration_hash({**request, "network": "100mbit"}) != configuration_hash(
        {**request, "network": "1gbit"}
    )


def test_every_worker_count_is_planned_on_every_profile(tmp_path: Path) -> None:
    request = validate_request(
        task="task0-allreduce",
        workers="1,2",
        light=True,
        repeats=2,
        network="host,1gbit",
        max_workers=4,
    )
    groups = plan_groups(request, "s", tmp_path)
    assert [(g.run_id, g.network.name) for g in groups] == [
        ("s-w1-r1", "host"),
        ("s-w2-r1", "host"),
        ("s-w1-n1gbit-r1", "1gbit"),
        ("s-w2-n1gbit-r1", "1gbit"),
        ("s-w1-r2", "host"),
        ("s-w2-r2", "host"),
        ("s-w1-n1gbit-r2", "1gbit"),
        ("s-w2-n1gbit-r2", "1gbit"),
    ]
    assert groups[2].worker_argv("R", "D")[-2:] == ["--network", "1gbit"]
    assert "--network" not in groups[0].worker_argv("R", "D")
    with pytest.raises(InvalidParameter, match="× 2 network profiles = 600 groups"):
        validate_request(
            task="task0-allreduce",
            workers="1,2,4",
            light=True,
            repeats=100,
            network="host,1gbit",
            max_workers=4,
        )


def test_every_backend_is_kept_on_the_shaped_interface() -> None:
    """gloo and nccl are told the interface; nccl is also kept off the direct GPU paths
    (peer-to-peer, shared memory, InfiniBand) it takes between ranks of one machine,
    which would go past the emulated link, except between the ranks of one node."""
    network = ShapedNetwork(2, parse_profile("1gbit"))
    env = network.environment(1)
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == shaped_network.INTERFACE
    assert (
        env["NCCL_NET"],
        env["NCCL_P2P_DISABLE"],
        env["NCCL_SHM_DISABLE"],
        env["NCCL_IB_DISABLE"],
    ) == ("Socket", "1", "1", "1")
    # Each node is a host of its own to nccl; the ranks of one node may join their GPUs.
    assert env["NCCL_HOSTID"] == network.namespace(1) != network.environment(0)["NCCL_HOSTID"]
    packed = network.environment(1, ranks_per_node=4)
    assert "NCCL_P2P_DISABLE" not in packed and "NCCL_SHM_DISABLE" not in packed


# -- what this machine cannot do is refused before any worker starts ---------------------------


def test_delay_is_refused_on_kubernetes() -> None:
    with pytest.raises(InvalidParameter, match="not add delay") as refused:
        validate_request(
            task="task0-allreduce",
            workers="2",
            light=True,
            network="1gbit+2ms",
            launcher="kubernetes",
            max_workers=4,
        )
    assert refused.value.field == "network"


def test_without_the_privilege_a_shaped_request_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(host, "_capabilities", lambda: 0)
    host._emulation_problems.cache_clear()
    try:
        with pytest.raises(InvalidParameter, match=r"needs root \(CAP_NET_ADMIN") as refused:
            validate_request(
                task="task0-allreduce",
                workers="2",
                light=True,
                network="host,100mbit",
                max_workers=4,
            )
        assert refused.value.field == "network" and "100mbit cannot be emulated" in str(
            refused.value
        )
        # host alone needs nothing
        assert validate_request(
            task="task0-allreduce", workers="2", light=True, network="host", max_workers=4
        ).network == (parse_profile("host"),)
    finally:
        host._emulation_problems.cache_clear()


def test_missing_tools_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.shutil, "which", lambda tool: None)
    host._emulation_problems.cache_clear()
    try:
        problems = shaping_problems([parse_profile("1gbit")])
        assert any("ip and tc and unshare missing" in p for p in problems)
    finally:
        host._emulation_problems.cache_clear()


@needs_shaping
def test_a_delay_is_refused_exactly_where_the_kernel_has_no_netem() -> None:
    has_netem = host._qdisc_works("netem", "delay", "1ms")
    if has_netem:
        request = validate_request(
            task="task0-allreduce", workers="2", light=True, network="1gbit+2ms", max_workers=4
        )
        assert request.network == (parse_profile("1gbit+2ms"),)
    else:
        with pytest.raises(InvalidParameter, match="no netem queueing discipline"):
            validate_request(
                task="task0-allreduce", workers="2", light=True, network="1gbit+2ms", max_workers=4
            )


# -- the emulation -----------------------------------------------------------------------------


@needs_shaping
def test_the_emulated_link_carries_its_rate_between_namespaces() -> None:
    network = ShapedNetwork(2, parse_profile("100mbit")).create()
    try:
        assert not any(
            network.subnet.overlaps(n)
            for n in shaped_network._used_networks()
            if not n.subnet_of(network.subnet)
        )
        receiver = subprocess.Popen(
            network.command(
                0,
                [
                    sys.executable,
                    "-c",
                    textwrap.dedent("""
            import socket, time
            server = socket.create_server(("0.0.0.0", 5001))
            peer, _ = server.accept()
            received, started = 0, time.perf_counter()
            while chunk := peer.recv(1 << 20):
                received += len(chunk)
            print(received / (time.perf_counter() - started))
        """),
                ],
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)
        send = (
            f"import socket; s = socket.create_connection(('{network.master_addr}', 5001)); "
            "s.sendall(bytes(25_000_000)); s.close()"
        )
        subprocess.run(network.command(1, [sys.executable, "-c", send]), check=True, timeout=30)
        out, _ = receiver.communicate(timeout=30)
    finally:
        network.remove()
    assert 0.85 <= float(out) / 12.5e6 <= 1.05  # bytes/s against 100 Mbit/s


def allreduce_sweep(tmp_path: Path, networks: str) -> list:
    """The all-reduce curves of a light Task 0 sweep at 2 workers on ``networks``, run
    through the command line into a SQLite database under ``tmp_path``: its sizes up to 1,000
    elements, float32, 2 timed repetitions (what crosses the link matters, not how long)."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    code = cli.main(
        [
            "run",
            "task0-allreduce",
            "--light",
            "--workers",
            "2",
            "--repeats",
            "1",
            "--network",
            networks,
            "--device",
            "cpu",
            *TASK0_QUICK_ARGS,
            "--results",
            str(tmp_path / "results"),
            "--database",
            url,
        ]
    )
    assert code == 0
    engine = make_engine(url)
    with engine.connect() as conn:
        (sweep_id,) = [p.name for p in (tmp_path / "results").iterdir()]
        rows = allreduce_curves(conn, sweep_id)
    engine.dispose()
    return rows


# That an emulated link's all-reduce bus bandwidth follows its configured rate is measured by
# benchmarks/network_emulation.py (every profile, 2 and 4 ranks, 1-64 MB).


@dataclass(frozen=True)
class LinkRun:
    """One light Task 3a epoch at 2 workers on a link: its communication ratio, the median
    over steps of the least of the ranks' communication seconds (the collective itself: the
    rank that arrived last waited for nobody), and the bytes of one all-reduce."""

    communication_ratio: float
    collective_s: float
    gradient_bytes: int


def run_light_epoch(run_dir: Path, profile: str) -> LinkRun:
    """One light Task 3a epoch at 2 workers on ``profile``: the cheapest training whose
    gradient (175,057 float32 weights, 0.7 MB) takes tens of milliseconds over 100mbit."""
    args = light_rank_args(
        "task3a-awdlstm-wikitext2",
        run_dir,
        "--max-epochs",
        "1",
        "--compile",
        "off",
        "--network",
        profile,
    )
    group = LocalGroup(
        args, 2, run_dir=run_dir, network=parse_profile(profile), sink=lambda line: None
    )
    group.start()
    result = group.wait(600)
    assert result.status == "succeeded", result.reason
    ranks = read_run(run_dir)
    summary = summarise(ranks, run_dir.name, 2, None)
    assert summary.communication_ratio is not None
    per_step: dict[tuple[int, int], list[float]] = {}
    for rank in ranks:
        for step in rank.by_kind["step"]:
            per_step.setdefault((step["epoch"], step["step"]), []).append(
                step["phases"]["communication"]
            )
    (start,) = [e for e in ranks[0].by_kind["event"] if e["event"] == "start"]
    assert start.get("network", "host") == profile  # host is recorded as no network
    return LinkRun(
        communication_ratio=summary.communication_ratio,
        collective_s=statistics.median(min(seconds) for seconds in per_step.values()),
        gradient_bytes=(start["parameters"] + 1) * 4,  # float32, the loss rides along
    )


@pytest.mark.timing
@needs_shaping
@pytest.mark.slow
def test_a_slow_link_raises_the_communication_ratio(tmp_path: Path) -> None:
    """One epoch at 2 workers on host and on 100mbit.

    The collective is read as the least of the two ranks' communication seconds in each step:
    the rank that arrived last waited for nobody, so other work on the machine (which makes
    the faster rank wait, and decides most of host's ratio) barely touches it. Over 100mbit
    a 2-worker ring all-reduce sends the gradient's bytes once each way, so it cannot take
    much less than bytes / 12.5 MB/s (56 ms for Task 3a's 0.7 MB; the shaper lets a burst of
    125 kB through at once: 49 ms here); on host it takes a few milliseconds (3 ms here, a
    2-core AMD EPYC).
    """
    host = run_light_epoch(tmp_path / "host", "host")
    shaped = run_light_epoch(tmp_path / "100mbit", "100mbit")
    wire_s = shaped.gradient_bytes / 12.5e6
    assert 0.7 * wire_s <= shaped.collective_s <= 2.0 * wire_s, (shaped, wire_s)
    assert host.collective_s <= 0.25 * wire_s, (host, wire_s)
    assert shaped.communication_ratio > host.communication_ratio, (host, shaped)


def allreduce_s(run_dir: Path, shape: tuple[int, int], profile: str) -> float:
    """The median seconds of a 4 MB (10**6 float32) all-reduce of a light Task 0 group of 2
    ranks as ``shape`` (nodes, ranks per node) on ``profile`` between nodes."""
    args = light_rank_args(
        "task0-allreduce", run_dir, "--repetitions", "3", "--dtype", "float32", "--network", profile
    )
    nodes, per_node = shape
    group = LocalGroup(
        args,
        nodes * per_node,
        ranks_per_node=per_node,
        run_dir=run_dir,
        network=parse_profile(profile),
        sink=lambda line: None,
    )
    group.start()
    result = group.wait(300)
    assert result.status == "succeeded", result.reason
    (largest,) = [
        r
        for r in read_run(run_dir)[0].by_kind["allreduce"]
        if r["dtype"] == "float32" and r["elements"] == 10**6
    ]
    return statistics.median(largest["seconds"])


@pytest.mark.timing
@needs_shaping
def test_only_the_links_between_nodes_are_shaped(tmp_path: Path) -> None:
    """Two ranks on one emulated node talk over its loopback; two nodes of one rank over the
    100 Mbit/s link: there the 4 MB all-reduce takes at least the 0.32 s its bytes need on
    the wire (each rank sends 4 MB), and at least 5 times longer than inside the node.
    (On this machine: 10-25 ms inside a node, 0.35 s across; benchmarks/node_boundary.py
    measures it at 10 Mbit/s.)"""
    inside = allreduce_s(tmp_path / "inside", (1, 2), "100mbit")
    across = allreduce_s(tmp_path / "across", (2, 1), "100mbit")
    assert across >= 0.9 * 4e6 / 12.5e6, (inside, across)
    assert across >= 5 * inside, (inside, across)


# -- nothing is left, however a group ends -------------------------------------------------------


@needs_shaping
@pytest.mark.parametrize("ending", ["failure", "timeout", "cancellation"])
def test_the_network_goes_with_the_group_however_it_ends(tmp_path: Path, ending: str) -> None:
    args = [
        "--task",
        "task0-allreduce",
        "--light",
        "--results",
        str(tmp_path),
        "--run-id",
        "r",
        "--device",
        "cpu",
        "--network",
        "1gbit",
    ]
    if ending == "failure":
        args += ["--max-elements", "not-a-number"]  # every rank refuses its arguments
    group = LocalGroup(
        args,
        2,
        run_dir=tmp_path,
        network=parse_profile("1gbit"),
        grace_s=1.0,
        sink=lambda line: None,
    )
    group.start()
    assert len(launcher_links()[0]) == 2  # a namespace per node (here, per rank) while it runs
    if ending == "cancellation":
        time.sleep(1.0)
        group.stop()
        assert all(p.poll() is not None for p in group.procs)
    else:
        result = group.wait(timeout_s=1.0 if ending == "timeout" else 60)
        assert result.status == ("timed_out" if ending == "timeout" else "failed")
    assert launcher_links() == ([], [])


# -- a host firewall that drops forwarded traffic (Docker's) -----------------------------------


def iptables(*arguments: str) -> str:
    return subprocess.run(
        ["iptables", "-w", *arguments], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def dropping_firewall() -> Iterator[None]:
    """The host as a running Docker daemon leaves it: bridge netfilter on, FORWARD's policy
    DROP; restored afterwards."""
    if not shaped_network.BRIDGE_FILTER.exists() and shutil.which("modprobe"):
        subprocess.run(["modprobe", "br_netfilter"], capture_output=True)
    missing = [
        what
        for what, ok in (
            ("iptables", shutil.which("iptables")),
            ("bridge netfilter", shaped_network.BRIDGE_FILTER.exists()),
        )
        if not ok
    ]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} missing: scripts/test.sh installs iptables; "
            "bridge netfilter is the kernel's module br_netfilter "
            "(modprobe br_netfilter)"
        )
    policy = re.search(r"-P FORWARD (\w+)", iptables("-S", "FORWARD"))
    assert policy is not None
    filtered = shaped_network.BRIDGE_FILTER.read_text().strip()
    iptables("-P", "FORWARD", "DROP")
    shaped_network.BRIDGE_FILTER.write_text("1")
    try:
        yield
    finally:
        iptables("-P", "FORWARD", policy[1])
        shaped_network.BRIDGE_FILTER.write_text(filtered)


def our_rules() -> list[str]:
    """Lines of the filter table that a scalebench group added."""
    return [line for line in iptables("-S").splitlines() if "scalebench" in line]


@needs_shaping
def test_a_group_adds_one_rule_for_its_own_bridge_and_takes_it_away(
    dropping_firewall: None,
) -> None:
    network = ShapedNetwork(2, parse_profile("1gbit")).create()
    try:
        chain = shaped_network.firewall_chain()
        assert chain in ("DOCKER-USER", "FORWARD")
        assert our_rules() == [
            f"-A {chain} -i {network.bridge} -o {network.bridge} -m comment "
            f'--comment "scalebench {network.bridge}" -j ACCEPT'
        ]
    finally:
        network.remove()
    assert our_rules() == []
    assert re.search(r"-P FORWARD DROP", iptables("-S", "FORWARD")), "the policy was changed"


@pytest.mark.timing
@needs_shaping
@pytest.mark.slow
def test_a_shaped_group_crosses_a_firewall_that_drops_forwarded_traffic(
    tmp_path: Path, dropping_firewall: None
) -> None:
    """Without its rule every rank times out connecting to rank 0 (what a Docker host did)."""
    rows = allreduce_sweep(tmp_path, "100mbit")
    assert {r.network for r in rows} == {"100mbit"}
    assert our_rules() == []


def killed_builder() -> int:
    """A process that builds a 3-rank shaped network and is then SIGKILLed; its pid."""
    builder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from operators.shaped_network import ShapedNetwork; "
            "from scalebench.network import parse_profile; "
            "ShapedNetwork(3, parse_profile('1gbit')).create(); print('built', flush=True); "
            "import time; time.sleep(60)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert builder.stdout is not None and builder.stdout.readline().strip() == "built"
    os.kill(builder.pid, signal.SIGKILL)  # nothing of its own clean-up runs
    builder.wait()
    return builder.pid


# Alone, with the timing tests: every `scalebench run` or `ingest` that another test process
# starts beside it removes what a killed launcher left, this test's leftovers among them.
@needs_shaping
@pytest.mark.timing
@pytest.mark.parametrize("command", ["network clean", "ingest", "run"])
def test_what_a_killed_launcher_left_is_removed_by_the_next_command(
    tmp_path: Path, dropping_firewall: None, command: str
) -> None:
    pid = killed_builder()
    namespaces, links = launcher_links()
    assert len(namespaces) == 3 and f"sbbr{pid}" in links
    assert len(our_rules()) == 1 and f"sbbr{pid}" in our_rules()[0]
    assert all((shaped_network.NETNS_ETC / n / "hosts").exists() for n in namespaces)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    # ingest and run are refused here (no sweep; no such task): the clean-up ran all the same
    argv, status = {
        "network clean": (["network", "clean"], 0),
        "ingest": (["ingest", str(tmp_path), "--database", url], 2),
        "run": (["run", "no-such-task", "--database", url], 2),
    }[command]
    assert cli.main(argv) == status
    assert launcher_links() == ([], [])
    assert our_rules() == []
    assert not any((shaped_network.NETNS_ETC / n).exists() for n in namespaces)


@needs_shaping
def test_what_a_killed_launcher_left_is_removed_by_the_next_group(tmp_path: Path) -> None:
    pid = killed_builder()
    namespaces, links = launcher_links()
    assert len(namespaces) == 3 and f"sbbr{pid}" in links
    assert leftovers()[0] == namespaces
    network = ShapedNetwork(2, parse_profile("1gbit")).create()  # the next group
    try:
        namespaces, links = launcher_links()
        assert sorted(namespaces) == [network.namespace(0), network.namespace(1)]
        assert not any(str(pid) in link for link in links)
    finally:
        network.remove()
