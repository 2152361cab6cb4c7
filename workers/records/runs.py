"""Reading a run: every rank file of its folder, local or remote, in rank order
(:func:`iter_rank_files`, :func:`read_run`), and whether they describe one run
(:func:`check_consistent`).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from operator import attrgetter, itemgetter
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

from scalebench import folders
from workers.records.rank_files import (
    RankRecords,
    RecordCheck,
    bounded_lines,
    parse_rank_lines,
)
from workers.records.schema import RANK_FILE, InconsistentRun, UnreadableRankFile, rank_of


def read_run(run_dir: Path | str, fs: Any = None) -> list[RankRecords]:
    """Read every rank file of a run, checking they describe one run.

    ``fs`` is an fsspec file system for remote locations (default: local
    files). Raises :class:`InconsistentRun` when files disagree on ``run_id``
    or ``world_size``, or when a rank number does not match its file name.
    """
    ranks = list(iter_rank_files(run_dir, fs))
    check_consistent(ranks)
    return ranks


def iter_rank_files(
    run_dir: Path | str,
    fs: Any = None,
    check: RecordCheck | None = None,
    left_out: list[str] | None = None,
    inside: str | None = None,
) -> Iterator[RankRecords]:
    """Each rank file of a run, parsed, in rank order (one file in memory at a time
    until the caller keeps them). Consistency is the caller's to check; ``check``
    as in :func:`parse_rank_lines`. A file named like a rank file but not one
    (``rank--1.jsonl``, ``rank-0 (1).jsonl``) is not read, and said in ``left_out``;
    one that is not a regular file, or (``inside``: the sweep's folder) a link that
    leads out of ``inside``, raises :class:`UnreadableRankFile`. The run's folder is
    listed, never globbed: its path is a path, not a pattern."""
    if fs is None:
        folder = Path(run_dir)
        listed = sorted(os.listdir(folder)) if folder.is_dir() else []
        paths: list[PurePath] = [folder / name for name in listed]
        opener, is_file = open, os.path.isfile
    else:
        base = str(run_dir).rstrip("/")
        paths = [PurePosixPath(f"{base}/{name}") for name in folders.names(fs, base)]
        opener, is_file = fs.open, fs.isfile
    paths = [p for p in paths if p.name.startswith("rank-") and p.name.endswith(".jsonl")]
    for path in sorted(p for p in paths if not RANK_FILE.fullmatch(p.name)):
        if left_out is not None:
            left_out.append(f"{path.name}: not a rank file name (rank-<r>.jsonl); not read")
    paths = [p for p in paths if RANK_FILE.fullmatch(p.name)]
    for path in sorted(paths, key=rank_of):
        if not is_file(str(path)):
            raise UnreadableRankFile(
                f"{path.name} is not a regular file (a folder, a device, a pipe or a link "
                "to one), so the run is not read"
            )
        if inside is not None:
            try:
                folders.check_inside(inside, str(path), fs)
            except folders.LinkLeaves as exc:
                raise UnreadableRankFile(str(exc)) from None
        with gc_paused(), opener(str(path), "rb") as handle:
            rank = parse_rank_lines(path, bounded_lines(handle), check)
        yield rank


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of records.

    Records are small dicts with no cycles among them: the collector would
    only rescan them over and over (about a third of the read time, measured).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _identities(rank: RankRecords) -> set[tuple[str, int, int]]:
    """Distinct (run id, world size, rank) that a rank file's records name."""
    fields = ("run_id", "world_size", "rank")
    found = set(map(attrgetter(*fields), rank.by_kind["step"]))
    for kind, records in rank.by_kind.items():
        if kind != "step":
            found.update(map(itemgetter(*fields), records))
    return found


def check_consistent(ranks: Iterable[RankRecords]) -> None:
    """Raise :class:`InconsistentRun` unless the rank files describe one run."""
    run_ids: set[str] = set()
    world_sizes: set[int] = set()
    for rank in ranks:
        if rank.clock_problem:
            raise InconsistentRun(f"{rank.clock_problem}; the run's timings cannot be trusted")
        if rank.epoch_problem:
            raise InconsistentRun(f"{rank.epoch_problem}; the run's epochs cannot be trusted")
        identities = _identities(rank)
        run_ids.update(i[0] for i in identities)
        world_sizes.update(i[1] for i in identities)
        others = {i[2] for i in identities} - {rank_of(rank.path)}
        if others:
            raise InconsistentRun(f"{rank.path.name} holds a record of rank {min(others)}")
    if len(run_ids) > 1:
        raise InconsistentRun(f"rank files name different runs: {sorted(run_ids)}")
    if len(world_sizes) > 1:
        raise InconsistentRun(f"rank files name different world sizes: {sorted(world_sizes)}")
