"""Reading one rank file: its lines, each at most :data:`MAX_LINE_BYTES` long
(:func:`bounded_lines`), parsed into :class:`RankRecords`, which keeps the last attempt's
valid records, counts and describes the bad lines, and notes a step clock that went back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from workers.records.parsing import StepRecord, parse_line
from workers.records.schema import KINDS, MAX_LINE_BYTES, BadRecord, UnreadableRankFile


@dataclass
class RankRecords:
    """What one rank file holds: its valid records (in file order, and by kind)
    and how many lines were not valid."""

    path: PurePath
    records: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0
    problems: list[str] = field(default_factory=list)
    by_kind: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {kind: [] for kind in KINDS}
    )

    earlier_attempts: int = 0
    superseded: int = 0  # records of earlier attempts, set aside
    # What each record of this attempt stands for (see _identity) -> its line number.
    seen: dict[tuple[Any, ...], int] = field(default_factory=dict)
    # The time and line of this attempt's latest step, and the first step whose time went
    # back (a clock no run can have: the run's timings cannot be trusted).
    last_step: tuple[float, int] = (0.0, 0)
    clock_problem: str | None = None
    # The epoch and line of this attempt's latest step and latest evaluation, and the first
    # record whose epoch counts down from its kind's latest (no run trains or evaluates an
    # epoch after a later one: the run's epochs, and so its curves, cannot be trusted).
    last_epoch: dict[str, tuple[int, int]] = field(default_factory=dict)
    epoch_problem: str | None = None

    def add(self, record: dict[str, Any] | StepRecord, line: int = 0) -> None:
        """Keep ``record`` (read from line ``line``); :class:`BadRecord` if it repeats one."""
        kind = record["kind"]
        if kind == "env" and self.records:
            # A new attempt of this rank (restarted into the same directory):
            # what the earlier attempts wrote is superseded.
            self.earlier_attempts += 1
            self.superseded += len(self.records)
            self.records.clear()
            self.seen.clear()
            self.last_step = (0.0, 0)
            self.last_epoch.clear()
            for records in self.by_kind.values():
                records.clear()
        identity = _identity(kind, record)
        if identity is not None:
            first = self.seen.setdefault(identity, line)
            if first != line:
                raise BadRecord(f"repeats the {kind} record of line {first}")
        if kind == "step":
            t = record.t if type(record) is StepRecord else record["t"]
            before, before_line = self.last_step
            if t < before and self.clock_problem is None:
                self.clock_problem = (
                    f"{self.path.name}: step times go back, from {before:g} s at line "
                    f"{before_line} to {t:g} s at line {line}"
                )
            elif t == before and before_line and self.clock_problem is None:
                self.clock_problem = (
                    f"{self.path.name}: step times stand still, {t:g} s at lines "
                    f"{before_line} and {line}"
                )
            self.last_step = (max(t, before), line if t >= before else before_line)
            epoch = record.epoch if type(record) is StepRecord else record["epoch"]
            latest = self.last_epoch.get(kind)
            if latest is None or epoch != latest[0]:  # steps change epoch rarely
                self._note_epoch(kind, epoch, line)
        elif kind == "eval":
            self._note_epoch(kind, record["epoch"], line)
        self.records.append(record)
        self.by_kind[kind].append(record)

    def _note_epoch(self, kind: str, epoch: int, line: int) -> None:
        """Note the epoch of a step or evaluation record read from ``line`` (the line kept is
        the first of the epoch); the first that counts down from its kind's latest sets
        :attr:`epoch_problem`."""
        latest, latest_line = self.last_epoch.get(kind, (epoch, line))
        if epoch < latest:
            if self.epoch_problem is None:
                what = "step" if kind == "step" else "evaluation"
                self.epoch_problem = (
                    f"{self.path.name}: {what} epochs count down, from epoch {latest} at line "
                    f"{latest_line} to epoch {epoch} at line {line}"
                )
            return
        self.last_epoch[kind] = (epoch, line)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return self.by_kind[kind]

    def events(self) -> list[str]:
        return [r["event"] for r in self.of_kind("event")]


def _identity(kind: str, record: dict[str, Any] | StepRecord) -> tuple[Any, ...] | None:
    """What a record measures, once per attempt: a step, an epoch's evaluation, a message
    size's timings, an event (each happens once); ``None`` for the environment."""
    if type(record) is StepRecord:
        return (kind, record.epoch, record.step)
    if kind == "eval":
        return (kind, record["epoch"])
    if kind == "allreduce":
        return (kind, record["dtype"], record["elements"])
    if kind == "event":
        return (kind, record["event"])
    return None


RecordCheck = Callable[[dict[str, Any]], None]


def parse_rank_lines(
    path: PurePath, lines: Iterable[str | bytes], check: RecordCheck | None = None
) -> RankRecords:
    """Parse one rank file's lines; unreadable lines are counted and described.

    A truncated last line (a rank killed mid-write) is one bad line; so is a
    record that repeats an earlier one of the same attempt (the first stands),
    one that ``check`` (e.g. the database's column limits) raises
    :class:`BadRecord` for, and a line longer than :data:`MAX_LINE_BYTES`, whatever it
    holds: :func:`bounded_lines` gives it cut, and a cut line may be all white space
    (megabytes of spaces before a record) yet never blank. ``check`` sees every record
    but the steps. Blank lines (of at most the limit) are skipped.
    """
    result = RankRecords(path=path)
    for number, line in enumerate(lines, start=1):
        overlong = len(line) > MAX_LINE_BYTES
        if not overlong and not line.strip():
            continue
        try:
            if overlong:
                raise BadRecord(f"a line longer than {MAX_LINE_BYTES:,} bytes")
            record = parse_line(line)
            if check is not None and type(record) is dict:
                check(record)
            result.add(record, number)
        except BadRecord as exc:
            result.bad_lines += 1
            if len(result.problems) < 20:
                result.problems.append(f"{path.name}:{number}: {exc}")
    if result.earlier_attempts:
        result.problems.append(
            f"{path.name}: {result.earlier_attempts} earlier attempt(s) of this rank "
            "superseded by the last one"
        )
    return result


def read_rank_file(path: Path) -> RankRecords:
    """Read one local rank file (see :func:`parse_rank_lines`)."""
    if not path.is_file():
        raise UnreadableRankFile(f"{path.name} is not a regular file")
    with path.open("rb") as handle:
        return parse_rank_lines(path, bounded_lines(handle))


_CHUNK_BYTES = 2**20


def bounded_lines(handle: Any, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of the binary file ``handle`` (without their line ends), holding at most
    ``limit`` + 1 bytes of any one line: a longer line is given cut to that length (so a
    reader sees it is too long) and the rest of it is skipped unread into memory."""
    head = b""  # the start of the line being read
    overlong = False
    while block := handle.read(_CHUNK_BYTES):
        *complete, rest = block.split(b"\n")
        for part in complete:
            line = head + part if not overlong else head
            yield line[: limit + 1]
            head, overlong = b"", False
        if not overlong:
            head += rest
            if len(head) > limit:
                head, overlong = head[: limit + 1], True
    if head:
        yield head
