"""A sweep's manifest: what was asked, which groups were planned, what became of each.

Two files sit beside a sweep's run directories:

    <sweep>/sweep.json       the plan, written once (atomically) when the sweep starts
                             and once more, with every verdict folded in, when it finishes
    <sweep>/verdicts.jsonl   one line per verdict, appended as groups end

So recording a verdict costs one appended line, whatever the sweep's size, and
a reader (ingest, the next group's cancellation check) folds the lines into
the plan: the last verdict of a group wins. A group's ``status`` is
``planned`` until a verdict arrives; then the launcher's verdict
(``succeeded``, ``failed``, ``diverged``, ``timed_out``; on Kubernetes also
``preempted`` and ``not_admitted``), ``cancelled`` (it
was running when the sweep was stopped) or ``skipped`` (it never started
because the sweep was stopped). Used by the command line's runner and by the
Airflow operators alike; torch-free.

A full disk must not lose the verdicts: the sweep starts by setting aside
:data:`RESERVE_BYTES` in a file of its own (``.space-reserve``); a verdict or
the final ``sweep.json`` that meets a full filesystem frees it and is written
again. A verdict line is written whole or not at all, and ``sweep.json`` is
replaced atomically, so no reader ever sees half of either.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scalebench import folders
from scalebench.diskspace import no_space
from scalebench.request import MAX_GROUP_TIMEOUT_S
from scalebench.statuses import GROUP_STATUSES

MANIFEST = "sweep.json"  # beside a sweep's run directories

VERDICTS = "verdicts.jsonl"
RESERVE = ".space-reserve"  # freed for the verdicts and sweep.json when the disk fills
RESERVE_BYTES = 32 * 1024  # a few hundred verdict lines, or the final sweep.json of any sweep
LAUNCHER_VANISHED = "launcher vanished: the process running the sweep ended without closing it"

TRIGGERS = ("manual", "scheduled", "cli")  # a person (the form), the nightly run, the CLI


class BadManifest(ValueError):
    """A ``sweep.json`` that cannot be read as a sweep: the message names the file and what
    is wrong with it (not JSON, cut short, not an object, a field missing or of the wrong
    kind, a time that is no ISO 8601 time)."""


@dataclass(frozen=True)
class GroupEntry:
    """One planned group and, once it ended, its verdict (``seconds``: its wall time).

    ``qos_class``: the Kubernetes QoS class its pods ran in (empty for local groups).
    ``attempts``: the earlier attempts of a group that was run again after a
    preemption, oldest first, each ``{"attempt", "status", "reason", "seconds", "job"}``.
    ``owner``: the attempt that runs the group now, when one said so
    (:func:`start_attempt`): its ``attempt`` name with the ``host``, ``pid`` and
    ``started`` ticks of the process running it (:func:`this_process`).
    """

    run_id: str
    world_size: int
    repeat: int
    status: str = "planned"
    reason: str = ""
    seconds: float | None = None
    network: str = "host"  # the link profile the group runs on (scalebench.network)
    qos_class: str = ""
    attempts: tuple[dict[str, Any], ...] = ()
    owner: dict[str, Any] | None = None


@dataclass(frozen=True)
class Manifest:
    """The plan of a sweep with every verdict recorded so far folded in.

    ``trigger`` is ``manual`` (a person, e.g. the Airflow form), ``scheduled``
    (the nightly run) or ``cli``; ``request`` is the validated request's fields
    and ``config_hash`` its hash; times are ISO 8601 in UTC.
    """

    sweep_id: str
    trigger: str
    created_at: str
    code_version: str
    config_hash: str
    request: dict[str, Any]
    groups: tuple[GroupEntry, ...]
    finished_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cancelled(self) -> bool:
        """Whether the sweep was stopped (a group cancelled or skipped)."""
        return any(g.status in ("cancelled", "skipped") for g in self.groups)

    def entry(self, run_id: str) -> GroupEntry:
        """The group ``run_id`` (``KeyError`` when the sweep has none)."""
        for group in self.groups:
            if group.run_id == run_id:
                return group
        raise KeyError(run_id)

    @property
    def planned(self) -> list[GroupEntry]:
        """The groups without a verdict yet."""
        return [g for g in self.groups if g.status == "planned"]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        extra = data.pop("extra")
        data["groups"] = [asdict(g) for g in self.groups]
        return {**data, **extra}

    @classmethod
    def from_json(cls, data: dict[str, Any], verdict_lines: Iterable[str] = ()) -> Manifest:
        """The manifest of ``sweep.json``'s ``data`` with the verdict lines folded in;
        :class:`BadManifest` when ``data`` is not one."""
        if not isinstance(data, dict):
            raise BadManifest(f"not a JSON object but {type(data).__name__}")
        for name, kind in (("sweep_id", str), ("request", dict), ("groups", list)):
            if not isinstance(data.get(name), kind):
                raise BadManifest(f"{name!r} missing or not a {kind.__name__}")
        for name in ("trigger", "created_at", "finished_at", "code_version", "config_hash"):
            if data.get(name) is not None and not isinstance(data[name], str):
                raise BadManifest(f"{name!r} is not text: {data[name]!r}")
        for name in ("created_at", "finished_at"):
            if data.get(name):
                try:
                    moment = datetime.fromisoformat(data[name])
                    if moment.tzinfo is not None:  # one without an offset is taken as UTC
                        moment.astimezone(UTC)
                except ValueError:
                    raise BadManifest(f"{name!r} is not an ISO 8601 time: {data[name]!r}") from None
                except OverflowError:  # its offset carries it before year 1 or past 9999
                    raise BadManifest(
                        f"{name!r} is {data[name]!r}, outside years 1 to 9999 in UTC"
                    ) from None
        if not isinstance(data["request"].get("task"), str):
            raise BadManifest("'request' names no task (its 'task' is missing or not text)")
        known = {
            "sweep_id",
            "trigger",
            "created_at",
            "code_version",
            "config_hash",
            "request",
            "groups",
            "finished_at",
        }
        groups: list[GroupEntry] = []
        for index, raw in enumerate(data["groups"]):
            entry = _group_entry(raw, f"groups[{index}]")
            if any(g.run_id == entry.run_id for g in groups):
                raise BadManifest(f"groups[{index}]: run {entry.run_id!r} is listed twice")
            groups.append(entry)
        verdicts = _verdicts(verdict_lines)
        groups = [_folded(g, verdicts[g.run_id]) if g.run_id in verdicts else g for g in groups]
        return cls(
            sweep_id=data["sweep_id"],
            trigger=data.get("trigger", "cli"),
            created_at=data.get("created_at", ""),
            code_version=data.get("code_version", ""),
            config_hash=data.get("config_hash", ""),
            request=data["request"],
            groups=tuple(groups),
            finished_at=data.get("finished_at"),
            extra={k: v for k, v in data.items() if k not in known},
        )


# The largest group a manifest may plan: the ranks' counters are 32-bit integers.
MAX_WORLD_SIZE = 2**31 - 1


def _group_entry(raw: Any, where: str) -> GroupEntry:
    """One planned group of ``sweep.json`` (``where``: its place, for the message), checked
    field by field: :class:`BadManifest` names the first field no plan can hold."""
    if not isinstance(raw, dict):
        raise BadManifest(f"{where} is not a JSON object but {type(raw).__name__}")
    if not isinstance(raw.get("run_id"), str) or not raw["run_id"]:
        raise BadManifest(f"{where}: 'run_id' missing or not text")
    for name, lowest in (("world_size", 1), ("repeat", 0)):
        value = raw.get(name)
        if type(value) is not int or not lowest <= value <= MAX_WORLD_SIZE:
            raise BadManifest(
                f"{where}: {name!r} must be a whole number from {lowest} to {MAX_WORLD_SIZE}, "
                f"got {value!r}"
            )
    if "network" in raw and not isinstance(raw["network"], str):
        raise BadManifest(f"{where}: 'network' is not text: {raw['network']!r}")
    _check_owner(raw.get("owner"), where)
    _check_verdict(raw, where)
    attempts = raw.get("attempts", [])
    if not isinstance(attempts, list):
        raise BadManifest(f"{where}: 'attempts' is not a list: {attempts!r}")
    for number, attempt in enumerate(attempts):
        if not isinstance(attempt, dict):
            raise BadManifest(f"{where}: attempts[{number}] is not a JSON object")
        _check_verdict(attempt, f"{where}: attempts[{number}]")
    fields = {k: raw[k] for k in raw if k in GroupEntry.__dataclass_fields__}
    fields["attempts"] = tuple(attempts)
    return GroupEntry(**{**fields, "reason": raw.get("reason") or ""})


def _folded(entry: GroupEntry, verdict: dict[str, Any]) -> GroupEntry:
    """``entry`` with its verdict from ``verdicts.jsonl`` folded in: the earlier attempts
    recorded there follow those ``sweep.json`` already holds."""
    fields = {k: v for k, v in verdict.items() if k != "attempts"}
    return replace(entry, **fields, attempts=(*entry.attempts, *verdict.get("attempts", ())))


def _check_owner(owner: Any, where: str) -> None:
    """:class:`BadManifest` for an owner that is not an attempt's (see :func:`start_attempt`)."""
    if owner is None:
        return
    if not isinstance(owner, dict) or not isinstance(owner.get("attempt"), str):
        raise BadManifest(f"{where}: 'owner' is not an attempt (an object with an 'attempt' name)")


def _check_verdict(fields: dict[str, Any], where: str) -> None:
    """:class:`BadManifest` for a status that is no group's or seconds that are no duration."""
    status = fields.get("status", "planned")
    if status not in GROUP_STATUSES:
        raise BadManifest(
            f"{where}: 'status' must be one of {', '.join(GROUP_STATUSES)}, got {status!r}"
        )
    seconds = fields.get("seconds")
    if seconds is not None and (
        type(seconds) not in (int, float) or not 0 <= seconds <= MAX_GROUP_TIMEOUT_S
    ):
        raise BadManifest(
            f"{where}: 'seconds' must be a duration from 0 to {MAX_GROUP_TIMEOUT_S:g} s (the "
            f"longest group time limit) or null, got {seconds!r}"
        )
    if not isinstance(fields.get("reason") or "", str):
        raise BadManifest(f"{where}: 'reason' is not text: {fields['reason']!r}")
    if not isinstance(fields.get("qos_class", ""), str):
        raise BadManifest(f"{where}: 'qos_class' is not text: {fields['qos_class']!r}")


def _verdicts(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The last verdict of each group in ``verdicts.jsonl``'s ``lines`` (status, reason,
    seconds, QoS class) with its earlier attempts under ``attempts``; a line cut short by a
    crash is skipped (that verdict was never complete), any other line that is not a
    verdict raises :class:`BadManifest` naming it.

    A group's verdict belongs to its attempt: a line that starts an attempt
    (:func:`start_attempt`) makes the group ``planned`` again under its new ``owner``, and
    a verdict signed by another attempt than the owner (``by``: a superseded try, still
    stopping after its successor started) is left out. Unsigned verdicts (the command
    line's, a sweep being closed or cancelled) always count."""
    verdicts: dict[str, dict[str, Any]] = {}
    attempts: dict[str, list[dict[str, Any]]] = {}
    owners: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            verdict = json.loads(line)
        except json.JSONDecodeError:
            continue
        where = f"{VERDICTS} line {number}"
        if not isinstance(verdict, dict) or not isinstance(verdict.get("run_id"), str):
            raise BadManifest(f"{where} is not a verdict (a JSON object with a run_id)")
        if "attempt" in verdict:  # an earlier attempt's verdict (record_attempt): kept beside
            attempt = verdict["attempt"]
            if not isinstance(attempt, dict):
                raise BadManifest(f"{where}: 'attempt' is not a JSON object")
            _check_verdict(attempt, where)
            attempts.setdefault(verdict["run_id"], []).append(attempt)
            continue
        run_id = verdict["run_id"]
        if "owner" in verdict:  # an attempt starts: no verdict of its own yet
            _check_owner(verdict["owner"], where)
            owners[run_id] = verdict["owner"]
            verdicts[run_id] = {"status": "planned", "reason": "", "seconds": None}
            verdicts[run_id]["owner"] = verdict["owner"]
            continue
        _check_verdict(verdict, where)
        by = verdict.get("by")
        if by is not None and run_id in owners and by != owners[run_id]["attempt"]:
            continue  # a superseded attempt's: the group is its successor's now
        kept = {k: verdict[k] for k in ("status", "reason", "seconds", "qos_class") if k in verdict}
        if "reason" in kept:
            kept["reason"] = kept["reason"] or ""
        if run_id in owners:
            kept["owner"] = owners[run_id]
        verdicts[run_id] = kept
    for run_id, earlier in attempts.items():
        verdicts.setdefault(run_id, {})["attempts"] = tuple(earlier)
    return verdicts


def create(sweep_dir: Path, manifest: Manifest) -> None:
    """Write a new sweep's plan (the directory is created when missing) and set aside its
    reserve of disk space; a filesystem without room for both raises ``ENOSPC`` naming the
    sweep's folder, and nothing of the sweep is left."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    try:
        _write_atomically(sweep_dir / MANIFEST, manifest.to_json())
        _reserve_space(sweep_dir / RESERVE)
    except OSError as exc:
        if not no_space(exc):
            raise
        (sweep_dir / MANIFEST).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            sweep_dir.rmdir()
        raise OSError(exc.errno, exc.strerror, str(sweep_dir)) from None


def _reserve_space(path: Path) -> None:
    """Write :data:`RESERVE_BYTES` of zeros to ``path`` (real blocks, not a sparse file)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | folders.NO_FOLLOW, 0o666)
        with os.fdopen(fd, "wb") as handle:
            handle.write(bytes(RESERVE_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _making_room(sweep_dir: Path, write: Callable[[], None]) -> None:
    """``write()``; when the filesystem is full, free the sweep's reserve and try once more."""
    try:
        write()
    except OSError as exc:
        reserve = sweep_dir / RESERVE
        if not no_space(exc) or not reserve.exists():
            raise
        reserve.unlink()
        write()


def load(sweep_dir: Path) -> Manifest:
    """The manifest of the sweep at ``sweep_dir`` (a local directory), verdicts folded in;
    :class:`BadManifest` when it cannot be read."""
    path = sweep_dir / MANIFEST
    with _reading(path):
        verdicts = sweep_dir / VERDICTS
        for where in (path, verdicts):
            _regular(where, where.is_file(), os.path.lexists(where))
            _inside(str(sweep_dir), str(where))
        data = parse(path.read_text(encoding="utf-8"))
        lines = verdicts.read_text(encoding="utf-8").splitlines() if verdicts.is_file() else []
        return Manifest.from_json(data, lines)


def parse(text: str) -> Any:
    """``sweep.json``'s text as JSON, refusing what the two results databases would store
    differently or not at all: ``NaN`` and ``Infinity`` (JSON has no such numbers; SQLite keeps
    them, PostgreSQL's JSON refuses them) and the NUL character (PostgreSQL cannot store it)."""

    def no_constant(name: str) -> Any:
        raise BadManifest(f"{name} is no JSON number, and no results database stores it alike")

    data = json.loads(text, parse_constant=no_constant)
    if "\x00" in text or "\\u0000" in text.lower():
        raise BadManifest("it holds a NUL character (\\u0000), which PostgreSQL cannot store")
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BadManifest(
            "it holds half of a UTF-16 surrogate pair (such as \\ud800), which is no text "
            "either database stores"
        ) from None
    return data


def _regular(path: Any, is_file: bool, exists: bool) -> None:
    """Refuse a manifest or verdicts file that is there but no regular file (a device, a pipe,
    a link to one or to nothing): read, it would never end or wait for ever for a writer."""
    if exists and not is_file:
        raise BadManifest(
            f"{str(path).rsplit('/', 1)[-1]} is not a regular file (a folder, a device, a pipe, "
            "or a link to one or to nothing), so the sweep is not read"
        )


@contextlib.contextmanager
def _reading(path: Any) -> Iterator[None]:
    """Turn what a damaged ``sweep.json`` raises into one :class:`BadManifest` naming it."""
    try:
        yield
    except BadManifest as exc:
        raise BadManifest(f"{path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadManifest(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise BadManifest(f"{path}: not UTF-8 text") from None
    except IsADirectoryError:
        raise BadManifest(f"{path}: a directory, not a file") from None
    except RecursionError:  # the json module's parser recurses once per nested list or object
        raise BadManifest(f"{path}: not JSON (nested deeper than it can be read)") from None
    except PermissionError as exc:  # the sweeps beside it are still read
        raise BadManifest(f"{path}: cannot be read ({exc.strerror})") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise BadManifest(f"{path}: not a sweep manifest ({type(exc).__name__}: {exc})") from None


def _inside(sweep_dir: str, path: str, fs: Any = None) -> None:
    """Refuse a manifest or verdicts file that is a link leading out of its sweep's folder."""
    try:
        folders.check_inside(sweep_dir, path, fs)
    except folders.LinkLeaves as exc:
        raise BadManifest(str(exc)) from None


def read(fs: Any, sweep_path: str) -> Manifest:
    """:func:`load` through an fsspec filesystem (any results location ingest reads)."""
    with _reading(f"{sweep_path}/{MANIFEST}"):
        for name in (MANIFEST, VERDICTS):
            where = f"{sweep_path}/{name}"
            _regular(where, fs.isfile(where), folders.lexists(fs, where))
            _inside(sweep_path, where, fs)
        with fs.open(f"{sweep_path}/{MANIFEST}", "r", encoding="utf-8") as handle:
            data = parse(handle.read())
        lines: list[str] = []
        if fs.exists(f"{sweep_path}/{VERDICTS}"):
            with fs.open(f"{sweep_path}/{VERDICTS}", "r", encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        return Manifest.from_json(data, lines)


def this_process() -> dict[str, Any]:
    """Who runs a sweep from here: host, process id and the process's start time (clock
    ticks since boot, so that a process id used again later is not taken for it)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": _start_ticks(os.getpid())}


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, from ``/proc`` (``None``: no such process, one that
    has exited and waits for its parent to collect it, or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # from field 3, after the command's name
    if fields[0] in ("Z", "X"):  # a zombie, or dead: it has ended
        return None
    return int(fields[19])  # field 22


def launcher_gone(launcher: dict[str, Any]) -> bool:
    """Whether the process that ran a sweep (:func:`this_process` then) has ended; a sweep
    run on another host is never judged from here."""
    if launcher.get("host") != socket.gethostname() or not isinstance(launcher.get("pid"), int):
        return False
    if not Path("/proc/self/stat").exists():  # no /proc: whether the id is in use at all
        try:
            os.kill(launcher["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    started = _start_ticks(launcher["pid"])
    return started is None or started != launcher.get("started", started)


def _this_or_gone(owner: dict[str, Any]) -> bool:
    """Whether ``owner``'s process has ended or is this one (``dags test`` runs every task in
    one process: a group it ran is not running beside it)."""
    if owner.get("host") == socket.gethostname() and owner.get("pid") == os.getpid():
        return True
    return launcher_gone(owner)


def close_vanished(root: Path) -> list[Manifest]:
    """Close every unfinished sweep at ``root`` (a sweep directory or a folder of them)
    whose launcher process (its ``runner``, written by the command line) is gone: groups
    left without a verdict become ``cancelled`` (started) or ``skipped``, with
    :data:`LAUNCHER_VANISHED` as the reason. Returns the manifests closed."""
    sweep_dirs = (
        [root]
        if (root / MANIFEST).is_file()
        else sorted(path.parent for path in root.glob(f"*/{MANIFEST}"))
    )
    closed = []
    for sweep_dir in sweep_dirs:
        try:
            sweep = load(sweep_dir)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: ingest says so, with the reason
        runner = sweep.extra.get("runner")
        if sweep.finished_at is None and isinstance(runner, dict) and launcher_gone(runner):
            try:
                closed.append(
                    close(
                        sweep_dir,
                        started_reason=LAUNCHER_VANISHED,
                        unstarted_reason=LAUNCHER_VANISHED,
                        grace_s=15.0,
                    )
                )
            except OSError:
                continue  # not writable (a link in a file's place): left as it is, ingest says
    return closed


def as_closed_if_vanished(sweep: Manifest, sweep_dir: Path) -> Manifest:
    """``sweep`` as :func:`close_vanished` would leave it, without writing anything (for
    commands that only read): when its runner is gone, its groups without a verdict are
    ``cancelled`` (started) or ``skipped``, with :data:`LAUNCHER_VANISHED` as the reason."""
    runner = sweep.extra.get("runner")
    if sweep.finished_at is not None or not isinstance(runner, dict) or not launcher_gone(runner):
        return sweep
    settled = tuple(
        replace(
            group,
            status="cancelled" if (sweep_dir / group.run_id).exists() else "skipped",
            reason=LAUNCHER_VANISHED,
        )
        if group.status == "planned"
        else group
        for group in sweep.groups
    )
    return replace(sweep, groups=settled)


def start_attempt(sweep_dir: Path, run_id: str, attempt: str) -> None:
    """Say that attempt ``attempt`` (e.g. ``try 2`` of an Airflow task) runs group ``run_id``
    from this process: the group is ``planned`` (running) again whatever an earlier attempt
    decided, only verdicts signed ``attempt`` decide it from now on, and :func:`close` waits
    for this process before it settles the group."""
    owner = {**this_process(), "attempt": attempt}
    _append(sweep_dir, [{"run_id": run_id, "status": "planned", "owner": owner}])


def record_verdict(
    sweep_dir: Path,
    run_id: str,
    status: str,
    reason: str = "",
    seconds: float | None = None,
    *,
    qos_class: str = "",
    attempt: str | None = None,
) -> None:
    """Append one group's verdict: one line, whatever the size of the sweep
    (``qos_class``: its pods' Kubernetes QoS class, when known; ``attempt``: the attempt
    deciding it, as :func:`start_attempt` named it; a superseded attempt's verdict is
    kept in the file but decides nothing)."""
    verdict = {"run_id": run_id, "status": status, "reason": reason, "seconds": seconds}
    if qos_class:
        verdict["qos_class"] = qos_class
    if attempt is not None:
        verdict["by"] = attempt
    _append(sweep_dir, [verdict])


def record_attempt(
    sweep_dir: Path,
    run_id: str,
    *,
    attempt: int,
    status: str,
    reason: str,
    seconds: float,
    job: str,
) -> None:
    """Append the verdict of attempt ``attempt`` of a group that is run again (a preempted
    one): it does not decide the group's status, and stays in its ``attempts``."""
    if status not in GROUP_STATUSES:
        raise ValueError(f"unknown group status {status!r}")
    record = {"attempt": attempt, "status": status, "reason": reason, "seconds": seconds}
    _append(sweep_dir, [{"run_id": run_id, "status": "planned", "attempt": {**record, "job": job}}])


def cancel(sweep_dir: Path, running: str | None, reason: str) -> None:
    """The sweep was stopped: ``running`` (if any) is ``cancelled``, the unstarted ``skipped``."""
    planned = [g.run_id for g in load(sweep_dir).planned]
    verdicts = []
    if running is not None:
        verdicts.append({"run_id": running, "status": "cancelled", "reason": reason})
    verdicts += [
        {"run_id": run_id, "status": "skipped", "reason": reason}
        for run_id in planned
        if run_id != running
    ]
    _append(sweep_dir, verdicts)


def close(
    sweep_dir: Path,
    *,
    started_reason: str,
    unstarted_reason: str,
    grace_s: float = 30.0,
    quiet_s: float = 5.0,
) -> Manifest:
    """End a sweep whatever stopped it, then :func:`finish` it; return the result.

    Groups that still have no verdict are settled: one whose run directory
    exists had started, and is ``cancelled``; one without had not, and is
    ``skipped``, each with its reason. While a started group's process is
    alive (its ``owner``, :func:`start_attempt`) or its files still change
    (written within the last ``quiet_s`` seconds), it gets up to ``grace_s``
    seconds for its own verdict, which its launcher records as it stops the
    ranks (Airflow may begin this step while a killed task is still stopping
    them); a group whose ranks died with their task is settled at once. A
    sweep whose every group has a verdict only gets finished.
    """

    def undecided() -> tuple[list[GroupEntry], list[GroupEntry]]:
        planned = load(sweep_dir).planned
        started = [g for g in planned if (sweep_dir / g.run_id).exists()]
        return started, [g for g in planned if g not in started]

    def still_running(groups: list[GroupEntry]) -> bool:
        recent = time.time() - quiet_s
        return any(
            group.owner is not None and not _this_or_gone(group.owner) for group in groups
        ) or any(
            path.stat().st_mtime > recent
            for group in groups
            for path in [sweep_dir / group.run_id, *(sweep_dir / group.run_id).iterdir()]
        )

    deadline = time.monotonic() + grace_s
    started, unstarted = undecided()
    while started and still_running(started) and time.monotonic() < deadline:
        time.sleep(0.5)
        started, unstarted = undecided()
    _append(
        sweep_dir,
        [{"run_id": g.run_id, "status": "cancelled", "reason": started_reason} for g in started]
        + [
            {"run_id": g.run_id, "status": "skipped", "reason": unstarted_reason} for g in unstarted
        ],
    )
    return finish(sweep_dir)


def finish(sweep_dir: Path) -> Manifest:
    """Fold the verdicts into ``sweep.json`` with the finishing time; return the result."""
    done = replace(load(sweep_dir), finished_at=datetime.now(UTC).isoformat())
    _making_room(sweep_dir, lambda: _write_atomically(sweep_dir / MANIFEST, done.to_json()))
    (sweep_dir / VERDICTS).unlink(missing_ok=True)  # folded: reading it again changes nothing
    (sweep_dir / RESERVE).unlink(missing_ok=True)  # nothing more is written
    return done


def _append(sweep_dir: Path, verdicts: list[dict[str, Any]]) -> None:
    if not verdicts:
        return
    for verdict in verdicts:
        if verdict["status"] not in GROUP_STATUSES:
            raise ValueError(f"unknown group status {verdict['status']!r}")
    data = "".join(json.dumps(v) + "\n" for v in verdicts).encode()
    _making_room(sweep_dir, lambda: _append_whole(sweep_dir / VERDICTS, data))


def _append_whole(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` and flush it to disk; on an error (a full disk) cut off
    what part of it was written, so the file ends as it did. A link in ``path``'s place is
    refused (ELOOP), never written through."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | folders.NO_FOLLOW, 0o666)
    try:
        size = os.fstat(fd).st_size
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    """Readers never see half a file, and a crash leaves the old file or the new one: write
    a temporary file of this writer's own beside ``path``, flush it to disk, rename it over."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # Created as any new file is (the umask applies), so others of the group may read it.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=1, default=str) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
