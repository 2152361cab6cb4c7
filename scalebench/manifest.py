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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scalebench.rank import DEFAULT_PRECISION
from scalebench.request import ALWAYS, FIELDS

MANIFEST = "sweep.json"  # beside a sweep's run directories

VERDICTS = "verdicts.jsonl"
LAUNCHER_VANISHED = "launcher vanished: the process running the sweep ended without closing it"
GROUP_STATUSES = (
    "planned",
    "succeeded",
    "failed",
    "diverged",
    "timed_out",
    "cancelled",
    "skipped",
    "preempted",  # Kubernetes: a pod was preempted, evicted or drained
    "not_admitted",  # Kubernetes: the Kueue queue never admitted the Job
)


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
        for name in ("created_at", "finished_at"):
            if data.get(name):
                try:
                    datetime.fromisoformat(str(data[name]))
                except ValueError:
                    raise BadManifest(f"{name!r} is not an ISO 8601 time: {data[name]!r}") from None
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
        verdicts: dict[str, dict[str, Any]] = {}
        attempts: dict[str, list[dict[str, Any]]] = {}
        for line in verdict_lines:
            if line.strip():
                try:
                    verdict = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a crash: that verdict was never complete
                if "attempt" in verdict:  # an earlier attempt's verdict, kept beside
                    attempts.setdefault(verdict["run_id"], []).append(verdict["attempt"])
                    continue
                verdicts[verdict.pop("run_id")] = verdict
        groups = []
        for raw in data["groups"]:
            entry = GroupEntry(**{k: raw[k] for k in raw if k in GroupEntry.__dataclass_fields__})
            entry = replace(entry, attempts=tuple(entry.attempts))
            if entry.run_id in verdicts:
                entry = replace(entry, **verdicts[entry.run_id])
            if entry.run_id in attempts:
                entry = replace(entry, attempts=(*entry.attempts, *attempts[entry.run_id]))
            groups.append(entry)
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


def create(sweep_dir: Path, manifest: Manifest) -> None:
    """Write a new sweep's plan (the directory is created when missing)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    _write_atomically(sweep_dir / MANIFEST, manifest.to_json())


def load(sweep_dir: Path) -> Manifest:
    """The manifest of the sweep at ``sweep_dir`` (a local directory), verdicts folded in;
    :class:`BadManifest` when it cannot be read."""
    path = sweep_dir / MANIFEST
    with _reading(path):
        data = json.loads(path.read_text(encoding="utf-8"))
        verdicts = sweep_dir / VERDICTS
        lines = verdicts.read_text(encoding="utf-8").splitlines() if verdicts.is_file() else []
        return Manifest.from_json(data, lines)


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
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise BadManifest(f"{path}: not a sweep manifest ({type(exc).__name__}: {exc})") from None


def read(fs: Any, sweep_path: str) -> Manifest:
    """:func:`load` through an fsspec filesystem (any results location ingest reads)."""
    with _reading(f"{sweep_path}/{MANIFEST}"):
        with fs.open(f"{sweep_path}/{MANIFEST}", "r", encoding="utf-8") as handle:
            data = json.load(handle)
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
    """When process ``pid`` started, from ``/proc`` (``None``: no such process, or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[-1].split()[19])  # field 22, after the command's name


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
            closed.append(
                close(
                    sweep_dir,
                    started_reason=LAUNCHER_VANISHED,
                    unstarted_reason=LAUNCHER_VANISHED,
                    grace_s=15.0,
                )
            )
    return closed


def record_verdict(
    sweep_dir: Path,
    run_id: str,
    status: str,
    reason: str = "",
    seconds: float | None = None,
    *,
    qos_class: str = "",
) -> None:
    """Append one group's verdict: one line, whatever the size of the sweep
    (``qos_class``: its pods' Kubernetes QoS class, when known)."""
    verdict = {"run_id": run_id, "status": status, "reason": reason, "seconds": seconds}
    if qos_class:
        verdict["qos_class"] = qos_class
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
    ``skipped``, each with its reason. While a started group's files still
    change (written within the last ``quiet_s`` seconds), it gets up to
    ``grace_s`` seconds for its own verdict, which its launcher records as it
    stops the ranks (Airflow may begin this step while a killed task is still
    stopping them); a group whose ranks died with their task is settled at
    once. A sweep whose every group has a verdict only gets finished.
    """

    def undecided() -> tuple[list[str], list[str]]:
        planned = [g.run_id for g in load(sweep_dir).planned]
        started = [run_id for run_id in planned if (sweep_dir / run_id).exists()]
        return started, [run_id for run_id in planned if run_id not in started]

    def still_writing(run_ids: list[str]) -> bool:
        recent = time.time() - quiet_s
        return any(
            path.stat().st_mtime > recent
            for run_id in run_ids
            for path in [sweep_dir / run_id, *(sweep_dir / run_id).iterdir()]
        )

    deadline = time.monotonic() + grace_s
    started, unstarted = undecided()
    while started and still_writing(started) and time.monotonic() < deadline:
        time.sleep(0.5)
        started, unstarted = undecided()
    _append(
        sweep_dir,
        [{"run_id": run_id, "status": "cancelled", "reason": started_reason} for run_id in started]
        + [
            {"run_id": run_id, "status": "skipped", "reason": unstarted_reason}
            for run_id in unstarted
        ],
    )
    return finish(sweep_dir)


def finish(sweep_dir: Path) -> Manifest:
    """Fold the verdicts into ``sweep.json`` with the finishing time; return the result."""
    done = replace(load(sweep_dir), finished_at=datetime.now(UTC).isoformat())
    _write_atomically(sweep_dir / MANIFEST, done.to_json())
    (sweep_dir / VERDICTS).unlink(missing_ok=True)  # folded: reading it again changes nothing
    return done


def _append(sweep_dir: Path, verdicts: list[dict[str, Any]]) -> None:
    if not verdicts:
        return
    for verdict in verdicts:
        if verdict["status"] not in GROUP_STATUSES:
            raise ValueError(f"unknown group status {verdict['status']!r}")
    text = "".join(json.dumps(v) + "\n" for v in verdicts)
    with open(sweep_dir / VERDICTS, "a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


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


def configuration_hash(config: dict) -> str:
    """Identity of a configuration whose runs may be compared across sweeps.

    The task and the request fields declared ``compared``
    (:class:`~scalebench.request.RequestField`) count: what changes what is
    measured (light, backend, variant, precision, compile, device, placement,
    threads, network profile); worker counts, repeats and seeds do not. A
    field with a ``usual`` value (compile ``off``, device ``auto``, ...) counts
    only off it, so configurations recorded before the field existed keep
    their identity. ``config`` is a request's fields (a run's profile under
    ``network``, or a sweep's list of them).
    """
    key: dict[str, Any] = {"task": config.get("task")}
    for declared in FIELDS:
        if not declared.compared:
            continue
        if declared.usual == ALWAYS:
            key[declared.name] = config.get(declared.name)
            continue
        value = config.get(declared.name, declared.usual)
        value = list(value) if isinstance(value, list | tuple) else value
        if value not in (declared.usual, [declared.usual]):
            key[declared.name] = value
    key["precision"] = key["precision"] or DEFAULT_PRECISION  # recorded before it was a field
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
