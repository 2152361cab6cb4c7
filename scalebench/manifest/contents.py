"""What a sweep's manifest holds, and how ``sweep.json`` and ``verdicts.jsonl`` read into it.

A :class:`Manifest` is the plan of a sweep (its request, its :class:`GroupEntry` per
planned group) with every verdict recorded so far folded in. :meth:`Manifest.from_json`
checks ``sweep.json``'s data field by field and folds in the verdict lines (the last
verdict of a group wins, within its current attempt); what cannot be read as a sweep
raises :class:`BadManifest` naming what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from scalebench.request import MAX_GROUP_TIMEOUT_S
from scalebench.statuses import GROUP_STATUSES, PLANNED, STOPPED

MANIFEST = "sweep.json"  # beside a sweep's run directories

VERDICTS = "verdicts.jsonl"

TRIGGERS = ("manual", "scheduled", "cli")  # a person (the form), the nightly run, the CLI
# What a verdict line says of its group (the rest: who wrote it, for which attempt).
VERDICT_FIELDS = ("status", "reason", "seconds", "qos_class", "image_digest")


class BadManifest(ValueError):
    """A ``sweep.json`` that cannot be read as a sweep: the message names the file and what
    is wrong with it (not JSON, cut short, not an object, a field missing or of the wrong
    kind, a time that is no ISO 8601 time)."""


@dataclass(frozen=True)
class GroupEntry:
    """One planned group and, once it ended, its verdict (``seconds``: its wall time).

    ``qos_class``: the Kubernetes QoS class its pods ran in, ``image_digest`` the image
    they ran as the kubelet resolved it (``repo/worker@sha256:…``; several, sorted and
    comma-separated, where pods ran different ones); both empty for local groups.
    ``attempts``: the earlier attempts of a group that was run again after a
    preemption, oldest first, each ``{"attempt", "status", "reason", "seconds", "job"}``.
    ``owner``: the attempt that runs the group now, when one said so
    (:func:`~scalebench.manifest.recording.start_attempt`): its ``attempt`` name
    with the ``host``, ``pid`` and ``started`` ticks of the process running it
    (:func:`~scalebench.manifest.processes.this_process`).
    """

    run_id: str
    world_size: int
    repeat: int
    status: str = PLANNED
    reason: str = ""
    seconds: float | None = None
    network: str = "host"  # the link profile the group runs on (scalebench.network)
    stack: str = ""  # the stack it runs (scalebench.stacks); empty: the launcher's own
    # how the arms of its round ran (scalebench.pairing): "duet" (at once, on cores of their
    # own) or "interleaved"; empty where the sweep names no stacks
    pairing: str = ""
    qos_class: str = ""
    image_digest: str = ""
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
    night: str | None = None  # a scheduled sweep's Airflow logical date (ISO 8601)
    extra: dict[str, Any] = field(default_factory=dict)
    # Finished before finishing times were written: no ``finished_at``, every group decided
    # in sweep.json itself (read, never written).
    closed_untimed: bool = False

    @property
    def closed(self) -> bool:
        """Whether the sweep has ended: its record was closed (``finished_at``), or it is a
        record from before finishing times whose groups were all decided in it."""
        return self.finished_at is not None or self.closed_untimed

    @property
    def cancelled(self) -> bool:
        """Whether the sweep was stopped (a group cancelled or skipped)."""
        return any(g.status in STOPPED for g in self.groups)

    def entry(self, run_id: str) -> GroupEntry:
        """The group ``run_id`` (``KeyError`` when the sweep has none)."""
        for group in self.groups:
            if group.run_id == run_id:
                return group
        raise KeyError(run_id)

    @property
    def planned(self) -> list[GroupEntry]:
        """The groups without a verdict yet."""
        return [g for g in self.groups if g.status == PLANNED]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        extra = data.pop("extra")
        del data["closed_untimed"]
        if data["night"] is None:  # only a scheduled sweep has one
            del data["night"]
        data["groups"] = [asdict(g) for g in self.groups]
        return {**data, **extra}

    @classmethod
    def from_json(cls, data: dict[str, Any], verdict_lines: Iterable[str] = ()) -> Manifest:
        """The manifest of ``sweep.json``'s ``data`` with the verdict lines folded in;
        :class:`BadManifest` when ``data`` is not one."""
        _check_sweep_fields(data)
        known = {
            "sweep_id",
            "trigger",
            "created_at",
            "code_version",
            "config_hash",
            "request",
            "groups",
            "finished_at",
            "night",
        }
        groups: list[GroupEntry] = []
        for index, raw in enumerate(data["groups"]):
            entry = _group_entry(raw, f"groups[{index}]")
            if any(g.run_id == entry.run_id for g in groups):
                raise BadManifest(f"groups[{index}]: run {entry.run_id!r} is listed twice")
            groups.append(entry)
        verdicts = _verdicts(verdict_lines)
        # Every group decided in sweep.json itself, no verdict line, no finishing time: a
        # record finished before finishing times were written (finish folds the verdicts
        # in; a sweep that runs plans every group and appends its verdicts).
        decided = not verdicts and all(g.status != PLANNED for g in groups)
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
            night=data.get("night"),
            extra={k: v for k, v in data.items() if k not in known},
            closed_untimed=decided and not data.get("finished_at"),
        )


def _check_sweep_fields(data: Any) -> None:
    """:class:`BadManifest` for ``sweep.json``'s data when it is no JSON object, when one of
    the sweep's own fields is missing or of the wrong kind (its id, request and groups must
    be there; its trigger, times, code version and hash are text where given, its times ISO
    8601 ones), or when its request names no task."""
    if not isinstance(data, dict):
        raise BadManifest(f"not a JSON object but {type(data).__name__}")
    for name, kind in (("sweep_id", str), ("request", dict), ("groups", list)):
        if not isinstance(data.get(name), kind):
            raise BadManifest(f"{name!r} missing or not a {kind.__name__}")
    for name in ("trigger", "created_at", "finished_at", "night", "code_version", "config_hash"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise BadManifest(f"{name!r} is not text: {data[name]!r}")
    for name in ("created_at", "finished_at", "night"):
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


# How a group's round ran (GroupEntry.pairing): no stacks, or scalebench.pairing's two ways.
PAIRED_AS = ("", "interleaved", "duet")

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
    for name in ("network", "stack"):
        if name in raw and not isinstance(raw[name], str):
            raise BadManifest(f"{where}: {name!r} is not text: {raw[name]!r}")
    if raw.get("pairing", "") not in PAIRED_AS:
        raise BadManifest(
            f"{where}: 'pairing' must be one of {', '.join(map(repr, PAIRED_AS))}, "
            f"got {raw['pairing']!r}"[:300]
        )
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
    """:class:`BadManifest` for an owner that is not an attempt's (see
    :func:`~scalebench.manifest.recording.start_attempt`)."""
    if owner is None:
        return
    if not isinstance(owner, dict) or not isinstance(owner.get("attempt"), str):
        raise BadManifest(f"{where}: 'owner' is not an attempt (an object with an 'attempt' name)")


def _check_verdict(fields: dict[str, Any], where: str) -> None:
    """:class:`BadManifest` for a status that is no group's or seconds that are no duration."""
    status = fields.get("status", PLANNED)
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
    for name in ("qos_class", "image_digest"):
        if not isinstance(fields.get(name, ""), str):
            raise BadManifest(f"{where}: {name!r} is not text: {fields[name]!r}")


def _verdicts(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The last verdict of each group in ``verdicts.jsonl``'s ``lines`` (status, reason,
    seconds, QoS class, image digest) with its earlier attempts under ``attempts``; a line
    cut short by a crash is skipped (that verdict was never complete), any other line that
    is not a verdict raises :class:`BadManifest` naming it.

    A group's verdict belongs to its attempt: a line that starts an attempt
    (:func:`~scalebench.manifest.recording.start_attempt`) makes the group ``planned``
    again under its new ``owner``, and a verdict signed by another attempt than the owner
    (``by``: a superseded try, still stopping after its successor started) is left out.
    Unsigned verdicts (the command line's, a sweep being closed or cancelled) always count."""
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
            verdicts[run_id] = {"status": PLANNED, "reason": "", "seconds": None}
            verdicts[run_id]["owner"] = verdict["owner"]
            continue
        _check_verdict(verdict, where)
        by = verdict.get("by")
        if by is not None and run_id in owners and by != owners[run_id]["attempt"]:
            continue  # a superseded attempt's: the group is its successor's now
        kept = {k: verdict[k] for k in VERDICT_FIELDS if k in verdict}
        if "reason" in kept:
            kept["reason"] = kept["reason"] or ""
        if run_id in owners:
            kept["owner"] = owners[run_id]
        verdicts[run_id] = kept
    for run_id, earlier in attempts.items():
        verdicts.setdefault(run_id, {})["attempts"] = tuple(earlier)
    return verdicts
