"""Which transport a group's traffic took: NCCL's connection lines parsed (within a node,
between nodes), a gloo group's TCP, the columns the ingest stores from the ranks' NCCL logs,
the Run and Scaling pages' words for them, the nightly never judging runs across transports,
and a group that fell back to sockets failed where RDMA is required.

The NCCL lines below are written in the format NCCL 2.18–2.27 prints at ``NCCL_DEBUG=INFO``
(``host:pid:tid [device] NCCL INFO Channel cc/p : src[dev] -> dst[dev] [send] via
TRANSPORT/...``), and its older ``Ring`` form; the logs in ``tests/data/nccl-h200`` are
NCCL 2.28.9's own, written on an H200."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from records_factory import FakeRun, write_training_sweep
from sqlalchemy import select

from dash_app.pages.scaling.figures import transports_line
from dash_app.tables import transports_text
from operators.kubernetes.group import KubernetesGroup
from results_db import service
from results_db.database import make_engine
from results_db.models import Run
from results_db.queries.runs import run_infos
from results_db.regressions.comparable import Comparable
from results_db.regressions.values import metric_values
from scalebench.transports import (
    GLOO_TCP,
    Transports,
    group_transports,
    nccl_debug_environment,
    nccl_log_name,
    parse_nccl_log,
    rdma_refusal,
    transport_name,
)

# Two nodes of two GPUs: ranks 0-1 on node 0, 2-3 on node 1.
TWO_NODES_OVER_SOCKETS = """\
gpu-a:812:812 [0] NCCL INFO Bootstrap : Using eth0:10.8.0.11<0>
gpu-a:812:830 [0] NCCL INFO NET/IB : No device found.
gpu-a:812:830 [0] NCCL INFO NET/Socket : Using [0]eth0:10.8.0.11<0>
gpu-a:812:830 [0] NCCL INFO Using network Socket
gpu-a:812:830 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-a:812:830 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct
gpu-a:812:833 [0] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/Socket/0
gpu-a:812:833 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0
gpu-a:812:830 [0] NCCL INFO Connected all rings
"""
TWO_NODES_OVER_IB = """\
gpu-b:90:101 [1] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB eth0:10.8.0.12<0>
gpu-b:90:101 [1] NCCL INFO Channel 00/1 : 2[1000] -> 3[2000] via P2P/direct pointer/read
gpu-b:90:104 [1] NCCL INFO Channel 00/0 : 3[2000] -> 0[1000] [send] via NET/IB/0/GDRDMA
gpu-b:90:104 [1] NCCL INFO Channel 01/0 : 1[2000] -> 2[1000] [receive] via NET/IB/1/GDRDMA
"""
OLD_RINGS = "h:1:2 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC\n"


def test_each_connection_is_put_within_a_node_or_between_nodes() -> None:
    found = parse_nccl_log(TWO_NODES_OVER_SOCKETS, ranks_per_node=2)
    assert found.within_label == "P2P, SHM" and found.between_label == "NET/Socket"
    assert found.fell_back_to_sockets
    assert found.no_rdma == ["NET/IB : No device found."]
    ib = parse_nccl_log(TWO_NODES_OVER_IB, ranks_per_node=2)
    assert (ib.within_label, ib.between_label) == ("P2P", "NET/IB")
    assert not ib.fell_back_to_sockets and ib.no_rdma == []
    # One rank per node: every connection is between nodes.
    assert parse_nccl_log(OLD_RINGS, ranks_per_node=1).between_nodes == {"P2P"}
    assert parse_nccl_log(OLD_RINGS, ranks_per_node=2).within_node == {"P2P"}
    assert parse_nccl_log("NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n", 2) == Transports()


def test_transport_names_keep_the_network_of_net() -> None:
    assert transport_name("P2P/CUMEM/read") == "P2P"
    assert transport_name("SHM/direct/direct") == "SHM"
    assert transport_name("NET/IB/0/GDRDMA") == "NET/IB"
    assert transport_name("NET/Socket/1") == "NET/Socket"
    assert transport_name("NET/AWS Libfabric/0") == "NET/AWS Libfabric"
    assert transport_name("COLLNET/SHARP/0") == "COLLNET/SHARP"


def test_a_groups_transports_join_its_ranks_logs_and_gloo_is_tcp() -> None:
    both = group_transports("nccl", 4, 2, [TWO_NODES_OVER_SOCKETS, TWO_NODES_OVER_IB])
    assert (both.within_label, both.between_label) == ("P2P, SHM", "NET/IB, NET/Socket")
    assert not both.fell_back_to_sockets  # some traffic took IB
    gloo = group_transports("gloo", 4, 2, [])
    assert (gloo.within_label, gloo.between_label) == (GLOO_TCP, GLOO_TCP)
    assert group_transports("gloo", 2, 1, []).within_label == ""  # one rank per node
    assert group_transports("gloo", 1, 1, []) == Transports()  # alone: no traffic
    assert group_transports("gloo", 4, 8, []).between_label == ""  # one node
    assert group_transports("mpi", 4, 1, []) == Transports()


def test_the_rdma_refusal_names_why_and_what_to_do() -> None:
    found = parse_nccl_log(TWO_NODES_OVER_SOCKETS, ranks_per_node=2)
    said = rdma_refusal(found, nodes=2)
    assert said.startswith("NCCL's traffic between nodes ran over TCP sockets (NET/Socket)")
    assert "NET/IB : No device found." in said and "SCALEBENCH_K8S_RDMA_RESOURCE" in said
    assert rdma_refusal(found, nodes=1) == ""
    assert rdma_refusal(parse_nccl_log(TWO_NODES_OVER_IB, 2), nodes=2) == ""


def test_the_nccl_debug_variables_keep_what_the_user_set(tmp_path: Path) -> None:
    added = nccl_debug_environment(tmp_path, 3, {})
    assert added == {
        "NCCL_DEBUG_FILE": str(tmp_path / "nccl-rank-3.log"),
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
    }
    kept = nccl_debug_environment(tmp_path, 0, {"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "ALL"})
    assert set(kept) == {"NCCL_DEBUG_FILE"}
    raised = nccl_debug_environment(tmp_path, 0, {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "NET"})
    assert (raised["NCCL_DEBUG"], raised["NCCL_DEBUG_SUBSYS"]) == ("INFO", "NET,INIT")


# -- stored, shown, compared ------------------------------------------------------------------


def _sweep_with_logs(root: Path, sweep_id: str, logs: dict[int, str], night: str) -> Path:
    """A scheduled nccl sweep of 1 and 4 workers on nodes of 2, its 4-worker run's ranks
    having left ``logs`` (rank → NCCL log text) beside their records."""
    sweep_dir = write_training_sweep(
        root,
        sweep_id,
        [FakeRun(1), FakeRun(4)],
        trigger="scheduled",
        ranks_per_node=2,
        backend="nccl",
        night=night,
    )
    (four,) = [d for d in sweep_dir.iterdir() if d.is_dir() and "-w4-" in d.name]
    for rank, text in logs.items():
        (four / nccl_log_name(rank)).write_text(text)
    return sweep_dir


def test_the_ingest_stores_the_transports_and_the_nightly_keeps_them_apart(
    tmp_path: Path, database_url: str
) -> None:
    url = database_url
    sockets = _sweep_with_logs(
        tmp_path, "task1a-20261130T020000Z-aaaa", {0: TWO_NODES_OVER_SOCKETS}, "2026-11-30"
    )
    ib = _sweep_with_logs(
        tmp_path, "task1a-20261201T020000Z-bbbb", {2: TWO_NODES_OVER_IB}, "2026-12-01"
    )
    for sweep_dir in (sockets, ib):
        service.ingest(url, str(sweep_dir), say=None)
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            stored = conn.execute(
                select(
                    Run.sweep_id,
                    Run.world_size,
                    Run.transport_within_node,
                    Run.transport_between_nodes,
                ).order_by(Run.sweep_id, Run.world_size)
            ).all()
            runs = run_infos(conn, sweep_id=sockets.name)
            # Tonight over IB: last night's run over sockets is not taken at 4 workers.
            taken = Comparable("host", transports=((4, "P2P", "NET/IB"),))
            compared = metric_values(conn, [sockets.name], "step_s", taken)
            everything = metric_values(conn, [sockets.name], "step_s", Comparable("host"))
    finally:
        engine.dispose()
    assert [tuple(row) for row in stored] == [
        (sockets.name, 1, "", ""),
        (sockets.name, 4, "P2P, SHM", "NET/Socket"),
        (ib.name, 1, "", ""),
        (ib.name, 4, "P2P", "NET/IB"),
    ]
    assert 4 not in compared and 4 in everything
    assert 1 in compared  # one worker: no traffic, nothing recorded, still compared
    four = next(r for r in runs if r.world_size == 4)
    assert transports_text(four) == "within nodes P2P, SHM · between nodes NET/Socket"
    assert transports_line(runs) == (
        "transport: 4 workers within nodes P2P, SHM · between nodes NET/Socket"
    )


def test_a_groups_fall_back_to_sockets_fails_it_where_rdma_is_required(tmp_path: Path) -> None:
    (tmp_path / nccl_log_name(0)).write_text(TWO_NODES_OVER_SOCKETS)
    group = SimpleNamespace(
        settings=SimpleNamespace(require_rdma=True),
        plan=SimpleNamespace(request=SimpleNamespace(backend="nccl"), run_dir=tmp_path),
        world_size=4,
        ranks_per_node=2,
    )
    said = KubernetesGroup.rdma_refusal(group)  # type: ignore[arg-type]
    assert said.startswith("NCCL's traffic between nodes ran over TCP sockets")
    group.settings.require_rdma = False
    assert KubernetesGroup.rdma_refusal(group) == ""  # type: ignore[arg-type]
    group.settings.require_rdma = True
    (tmp_path / nccl_log_name(0)).write_text(TWO_NODES_OVER_IB)
    assert KubernetesGroup.rdma_refusal(group) == ""  # type: ignore[arg-type]
    (tmp_path / nccl_log_name(0)).unlink()
    assert "no rank left an NCCL log" in KubernetesGroup.rdma_refusal(group)  # type: ignore[arg-type]


def test_a_hostile_log_cannot_break_the_stored_labels() -> None:
    """A damaged or crafted log names any number of transports, of any length: each name and
    each label are cut to what the run's columns hold."""
    lines = "".join(
        f"NCCL INFO Channel 00/0 : 0[0] -> 1[1] via {chr(65 + i % 26) * (50 + i)}/x\n"
        for i in range(40)
    )
    found = parse_nccl_log(lines, ranks_per_node=1)
    assert len(found.between_nodes) == 26  # cut to 40 characters, the names of a letter meet
    assert all(len(name) <= 40 for name in found.between_nodes)
    assert len(found.between_label) == 100 and found.between_label.endswith("…")


def test_a_logs_terminal_escapes_never_reach_a_label() -> None:
    lines = (
        "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via NET/\x1b[31mIB\x1b[0m\r\x07/0\n"
        "NCCL INFO Channel 00/0 : 1[0] -> 0[1] via \x1b\x07\r/x\n"
    )
    found = parse_nccl_log(lines, ranks_per_node=1)
    assert found.between_nodes == {"NET/31mIB0m"}
    assert found.between_label.isprintable()


RECORDED = Path(__file__).resolve().parent / "data" / "nccl-h200"


def _recorded(*names: str) -> list[str]:
    return [(RECORDED / name).read_text() for name in names]


def test_logs_recorded_on_a_gpu_give_the_emulated_nodes_sockets_between_nodes() -> None:
    """NCCL 2.28's own lines (tests/data/nccl-h200): two emulated nodes of one rank each
    on one H200 were joined over TCP sockets, so RDMA, where required, refuses them."""
    logs = _recorded("two-nodes-rank-0.log", "two-nodes-rank-1.log")
    found = group_transports("nccl", 2, 1, logs)
    assert found.between_nodes == {"NET/Socket"} and found.within_node == set()
    assert found.fell_back_to_sockets
    assert "over TCP sockets (NET/Socket)" in rdma_refusal(found, 2)
    # the same connections, were both ranks one node's, are within it
    as_one_node = group_transports("nccl", 2, 2, logs)
    assert as_one_node.within_node == {"NET/Socket"} and as_one_node.between_nodes == set()


def test_logs_recorded_on_a_gpu_without_connections_give_no_transport() -> None:
    """A group of one connects nothing, nor does a group NCCL refused ("Duplicate GPU"):
    no transport is stored for either, and what NCCL said of InfiniBand is kept."""
    for name in ("one-rank.log", "one-gpu-two-ranks-rank-0.log"):
        found = parse_nccl_log(_recorded(name)[0], 1)
        assert (found.within_node, found.between_nodes) == (set(), set()), name
        assert found.no_rdma == ["NET/IB : No device found."], name


def test_the_gpu_checks_report_reads_the_transport_from_a_runs_logs(tmp_path: Path) -> None:
    """The GPU check's Task 0 line names the transport from the ranks' logs in its run's
    folder, as it did on the H200 where these logs were written."""
    from workers.gpu_check.task0 import run_transports

    for rank, name in enumerate(("two-nodes-rank-0.log", "two-nodes-rank-1.log")):
        (tmp_path / nccl_log_name(rank)).write_text(_recorded(name)[0])
    found = run_transports(tmp_path, "nccl", 2, 1)
    assert (found.within_label, found.between_label) == ("", "NET/Socket")
