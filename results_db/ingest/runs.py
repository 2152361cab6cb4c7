"""Loading one run: its rank files read and checked, its verdict settled with what the
launcher said, and its rows written in place of its earlier ones, all within one
transaction (:func:`load_run`)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import Connection, select

from results_db.ingest.run_checks import (
    cluster_marks,
    extent_of,
    run_problem,
    shared_nodes,
    stored_extent,
)
from results_db.ingest.run_rows import delete_run, write_run
from results_db.models import AllReduceSample, Run, StepTiming
from results_db.rows import BulkLoader, allreduce_columns, step_columns
from results_db.run_summary import RunSummary, summarise
from results_db.schema_limits import check_record
from scalebench import folders
from scalebench.diskspace import NO_SPACE
from scalebench.manifest import GroupEntry
from scalebench.statuses import (
    CANCELLED,
    CLUSTER_VERDICTS,
    FAILED,
    NOT_STARTED,
    SUCCEEDED,
    TIMED_OUT,
)
from scalebench.transports import (
    MAX_LOG_BYTES,
    NCCL_LOG_PATTERN,
    Transports,
    group_transports,
)
from workers.records import (
    InconsistentRun,
    RankRecords,
    UnreadableRankFile,
    check_consistent,
    iter_rank_files,
    rank_of,
)


class RunOfAnotherSweep(ValueError):
    """A manifest lists a run that another sweep stored: refused, with or without
    ``replace``; the stored run stays its first sweep's."""


class KeptStoredRun(Exception):
    """A reading that would lose what is stored of a run; the stored run stays."""

    def __init__(self, reason: str, status: str) -> None:
        super().__init__(reason)
        self.status = status  # the stored run's, which still stands


def load_run(
    conn: Connection,
    fs: Any,
    run_path: str,
    sweep_id: str,
    request: dict[str, Any],
    group: GroupEntry,
    replace: bool = False,
) -> tuple[int, RunSummary, list[RankRecords]]:
    """Replace one run's rows with what its rank files hold, within ``conn``'s transaction.

    Rank files are read one after another; on PostgreSQL each one's bulk rows
    are COPied on a second thread while the next file is read. Raises
    :class:`InconsistentRun` when the files disagree, and :class:`KeptStoredRun`
    when they hold less than the stored run (unless ``replace``); the
    transaction then rolls back and the stored rows stay. Returns the rows
    written, the run's summary and its records.
    """
    run_id = group.run_id
    owner = conn.execute(select(Run.sweep_id).where(Run.id == run_id)).scalar()
    if owner is not None and owner != sweep_id:
        raise RunOfAnotherSweep(
            f"it is stored as a run of sweep {owner}; a run belongs to the sweep that first "
            f"stored it, so sweep {sweep_id} cannot load it (nothing of it was changed)"
        )
    stored = stored_extent(conn, run_id)
    delete_run(conn, run_id)
    rows, ranks, outside, left_out = _read_rank_files(conn, fs, run_path, group)
    try:
        check_consistent(ranks)
    except InconsistentRun as exc:
        if stored is not None and not replace:
            raise KeptStoredRun(f"the rank files now disagree ({exc})", stored.status) from None
        raise
    summary = summarise(ranks, run_id, group.world_size, group.status)
    implausible = run_problem(ranks, group, summary, request)
    if implausible:
        raise InconsistentRun(implausible)
    if group.status in NOT_STARTED and not fs.exists(run_path):
        # Never started (not yet, or the sweep was stopped first): a row with its reason,
        # nothing measured.
        summary.status, summary.reason = group.status, group.reason
    found = run_transports(fs, run_path, request, group.world_size)
    summary.transport_within_node, summary.transport_between_nodes = (
        found.within_label,
        found.between_label,
    )
    shared = _note_shared_nodes(summary, ranks, request)
    _leave_out(summary, outside, group)
    _settle_verdict(summary, group)
    if stored is not None and not replace:
        shortfall = extent_of(summary, ranks).shortfall(stored)
        if shortfall:
            raise KeptStoredRun(shortfall, stored.status)
    rows += write_run(conn, sweep_id, request, group, summary, ranks, shared)
    if left_out:  # said with the run's problems; nothing of them is read
        outside.append(RankRecords(path=PurePosixPath(run_path), problems=left_out))
    return rows, summary, ranks + outside


def run_transports(fs: Any, run_path: str, request: dict[str, Any], world_size: int) -> Transports:
    """The transports the run's traffic took (:func:`scalebench.transports.group_transports`),
    from the NCCL logs its ranks wrote beside their records (regular files only, each read
    to :data:`~scalebench.transports.MAX_LOG_BYTES`; one that cannot be read is left out)."""
    backend = str(request.get("backend", "gloo"))
    logs: list[str] = []
    if backend == "nccl" and fs.exists(run_path) and fs.isdir(run_path):
        for path in sorted(fs.glob(f"{run_path}/{NCCL_LOG_PATTERN}")):
            try:  # a regular file of the run's own: not a link to elsewhere
                if not fs.isfile(path) or getattr(fs, "islink", lambda _: False)(path):
                    continue
                with fs.open(path, "rb") as handle:
                    logs.append(handle.read(MAX_LOG_BYTES).decode("utf-8", "replace"))
            except OSError:
                continue
    ranks_per_node = request.get("ranks_per_node", 1)
    per_node = ranks_per_node if isinstance(ranks_per_node, int) else 1
    return group_transports(backend, world_size, per_node, logs)


def _read_rank_files(
    conn: Connection, fs: Any, run_path: str, group: GroupEntry
) -> tuple[int, list[RankRecords], list[RankRecords], list[str]]:
    """Read the run's rank files, loading each one's step timings and all-reduce samples
    as it is read. Returns the bulk rows written, the ranks of the group, the ranks outside
    it (not loaded) and the files named like rank files that are not (never read)."""
    run_id = group.run_id
    ranks: list[RankRecords] = []
    outside: list[RankRecords] = []  # files of ranks the group does not have
    left_out: list[str] = []  # files named like rank files that are not
    rows = 0
    loader = BulkLoader(conn)
    sweep_path = run_path.rsplit("/", 1)[0]
    try:
        try:
            folders.check_inside(sweep_path, run_path, fs)
        except folders.LinkLeaves as exc:
            raise UnreadableRankFile(str(exc)) from None
        if fs.exists(run_path) and not fs.isdir(run_path):
            raise UnreadableRankFile(
                f"the run's folder {group.run_id} is not a folder (a file, a pipe or a "
                "device), so the run is not read"
            )
        if fs.exists(run_path):
            for rank in iter_rank_files(run_path, fs, check_record, left_out, sweep_path):
                if rank_of(rank.path) >= group.world_size:
                    outside.append(rank)
                    continue
                ranks.append(rank)
                rows += loader.load(StepTiming.__table__, step_columns(run_id, [rank]))
                rows += loader.load(AllReduceSample.__table__, allreduce_columns(run_id, [rank]))
    except BaseException as exc:
        loader.abandon(stopping=not isinstance(exc, Exception))  # the error in hand is reported
        raise
    loader.finish()
    return rows, ranks, outside, left_out


def _note_shared_nodes(
    summary: RunSummary, ranks: list[RankRecords], request: dict[str, Any]
) -> bool:
    """Add to the run's reason the machines that held more than one of its nodes when
    its request spread them one per machine; whether any did."""
    shared = shared_nodes(ranks) if request.get("placement") == "spread" else {}
    if shared:
        # One rank per node: each rank is a node of its own; else the group's nodes are pods.
        unit = "rank" if request.get("ranks_per_node", 1) == 1 else "node"
        where = "; ".join(
            f"{unit}s {', '.join(map(str, n))} on {machine}" for machine, n in shared.items()
        )
        asked = "one rank per node" if unit == "rank" else "one pod per machine"
        summary.reason = "; ".join(
            filter(None, [summary.reason, f"placement: {asked} was asked, but {where}"])
        )
    return bool(shared)


def _leave_out(summary: RunSummary, outside: list[RankRecords], group: GroupEntry) -> None:
    """Count the lines of the rank files outside the group into the run's quarantined lines,
    each file's problem saying why."""
    for rank in outside:
        lines = len(rank.records) + rank.bad_lines
        summary.bad_lines += lines
        rank.problems = [
            f"{rank.path.name}: rank {rank_of(rank.path)} is outside the group of "
            f"{group.world_size}; its {lines} line(s) are left out"
        ]


def _settle_verdict(summary: RunSummary, group: GroupEntry) -> None:
    """The run's status and reason from its records and what its launcher said of it,
    with what the cluster did to it (:func:`cluster_marks`) at the end."""
    launcher_reason = group.reason
    if group.status == FAILED and launcher_reason.removeprefix("not started: ").startswith(
        NO_SPACE
    ):
        # A full disk: what the ranks could not write (no final record) is not news.
        summary.status, summary.reason = FAILED, launcher_reason
    elif summary.status in (CANCELLED, TIMED_OUT, *CLUSTER_VERDICTS) and launcher_reason:
        summary.reason = launcher_reason  # who stopped it, and when, is the launcher's to say
    elif group.status == FAILED and summary.status == SUCCEEDED:
        summary.status, summary.reason = FAILED, launcher_reason
    elif summary.status == FAILED and launcher_reason and launcher_reason not in summary.reason:
        # What the launcher saw (a pod that was never scheduled, a rank killed
        # by a signal) comes first; the ranks' own records add the detail.
        summary.reason = "; ".join(filter(None, [launcher_reason, summary.reason]))
    summary.reason = "; ".join(filter(None, [summary.reason, *cluster_marks(group)]))
