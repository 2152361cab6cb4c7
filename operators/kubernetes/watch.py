"""What the looks at a running group say, the same for the blocking wait
(:meth:`~operators.kubernetes.group.KubernetesGroup.wait`, on an Airflow worker)
and the deferred one (:class:`~operators.kubernetes.trigger.GroupTrigger`, in
the triggerer): :class:`GroupWatch` turns the Job and its pods into a verdict
or "keep watching", and the verdict into an :class:`Ending`. Following rank 0's
log lives here too, once: :class:`Rank0Follower` passes on the lines of rank 0's
log not passed on yet (:class:`Rank0Log` keeps track of them) and
:func:`log_tail` reads the end of a rank's log. None of them talks to the API
itself: the caller hands in the function that reads a pod's log. The watch and the
log's place survive being rebuilt from their fields.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from operators.kubernetes.constants import LOG_PHASES, LOG_TAIL_LINES
from operators.kubernetes.names import GroupNames
from operators.kubernetes.pod_status import (
    exit_code,
    get_field,
    image_digest,
    job_verdict,
    log_prefix,
    pending_problem,
    pod_rank,
    qos_class,
)
from scalebench.statuses import FAILED, NOT_ADMITTED, PREEMPTED, RANK_FAILURES, RUNNING, TIMED_OUT

ReadLog = Callable[..., "str | None"]
"""Reads a pod's log: ``read_log(pod_name, **options)`` with the options of the API's log
request (``tail_lines``, ``timestamps``, ``since_seconds``); ``None`` when it could not."""


@dataclass(frozen=True)
class Verdict:
    """How a group ended: ``status`` as the manifest records it, ``reason`` in words,
    and the first rank that failed (its log tail goes with the verdict)."""

    status: str
    reason: str = ""
    first_failed_rank: int | None = None


SETTLE = "settle"  # a rank failed: look once more after SETTLE_S before judging


@dataclass(frozen=True)
class Ending:
    """What the look that gave the verdict saw of an ended group, and all that acting on
    it needs (reading a log tail, recording): the ``verdict``, each rank's exit code
    (``None`` while it ran or where its pod was gone), the pods' QoS class and the image
    their worker containers ran (``repo@sha256:…``, as the kubelet resolved it), the seconds
    from the Job's creation to the verdict, and the names of the pods whose logs go with
    it: ``failed_pod`` ran the first failed rank, ``rank0_pod`` rank 0 (``None`` when
    there was none, or its log could not be read yet), whose phase was ``rank0_phase``.

    The deferred wait sends it in its event (:meth:`to_event`: the fields of a
    :class:`~operators.kubernetes.trigger.GroupEvent`, whose ``ending`` gives it back to the
    resumed task); the blocking wait uses it as it is.
    """

    verdict: Verdict
    exit_codes: list[int | None]
    qos_class: str = ""
    image_digest: str = ""
    seconds: float = 0.0
    failed_pod: str | None = None
    rank0_pod: str | None = None
    rank0_phase: str | None = None

    def to_event(self) -> dict[str, Any]:
        """The fields as a trigger event carries them."""
        return {
            "status": self.verdict.status,
            "reason": self.verdict.reason,
            "first_failed_rank": self.verdict.first_failed_rank,
            "exit_codes": list(self.exit_codes),
            "qos_class": self.qos_class,
            "image_digest": self.image_digest,
            "seconds": self.seconds,
            "failed_pod": self.failed_pod,
            "rank0_pod": self.rank0_pod,
            "rank0_phase": self.rank0_phase,
        }


@dataclass
class GroupWatch:
    """The verdict rules for the Job ``job`` of ``world_size`` ranks in ``namespace``, on
    pods of ``ranks_per_node`` ranks each (one pod per node).

    ``started_s`` is the wall-clock time (``time.time()``, seconds) the Job was
    created; ``timeout_s`` and ``schedule_timeout_s`` count from it, or, for a Job
    of the Kueue queue ``queue_name`` (created suspended), from the look that first
    saw it admitted (``admitted_s``); such a Job still suspended
    ``admission_timeout_s`` seconds after ``started_s`` is ``not_admitted``.
    ``notes`` collects what a person watching should read (waiting for admission,
    admitted), for the caller to pass on; ``qos`` is the pods' QoS class once seen, ``image``
    the images their worker containers ran (:func:`image_digest`), every one seen so far.
    """

    world_size: int
    namespace: str
    job: str
    started_s: float
    timeout_s: float
    schedule_timeout_s: float
    queue_name: str = ""
    admission_timeout_s: float = 3600.0
    admitted_s: float | None = None
    settled: bool = False
    qos: str = ""
    image: str = ""
    notes: list[str] = field(default_factory=list)
    waiting_noted: bool = False
    ranks_per_node: int = 1

    @property
    def pods(self) -> int:
        """How many pods the Job runs: one per node."""
        return self.world_size // self.ranks_per_node

    @property
    def clock_start_s(self) -> float:
        """When the schedule and group timeouts started (wall clock, seconds)."""
        return self.started_s if self.admitted_s is None else self.admitted_s

    def state(self) -> dict[str, Any]:
        """What the looks so far learnt, as plain JSON values: the keyword arguments that
        make a new watch go on where this one is (:data:`WATCH_STATE`)."""
        return {name: getattr(self, name) for name in WATCH_STATE}

    def take_notes(self) -> list[str]:
        """The notes since the last call."""
        notes, self.notes = self.notes, []
        return notes

    def needs_pods(self, job: Any) -> bool:
        """Whether a look must list the Job's pods: not while a queued Job waits for its
        first admission (a suspended Job has none), which halves the calls of that wait."""
        return not (
            self.queue_name and self.admitted_s is None and get_field(job, "spec", "suspend")
        )

    def _admission(self, job: Any, now_s: float) -> Verdict | str | None:
        """For a queued Job: a verdict, ``"waiting"`` while it is suspended, else ``None``."""
        if not get_field(job, "spec", "suspend"):
            if self.admitted_s is None:
                self.admitted_s = now_s
                self.notes.append(
                    f"admitted by queue {self.queue_name} after {now_s - self.started_s:.0f} s"
                )
            return None
        if self.admitted_s is not None:
            return Verdict(
                PREEMPTED,
                f"queue {self.queue_name} suspended the Job again after admitting it "
                "(Kueue preempted or evicted its workload)",
            )
        if not self.waiting_noted:
            self.waiting_noted = True
            self.notes.append(f"waiting for admission in queue {self.queue_name}")
        if now_s - self.started_s > self.admission_timeout_s:
            return Verdict(
                NOT_ADMITTED,
                f"queue {self.queue_name} did not admit the Job within "
                f"{self.admission_timeout_s:g} s (its ClusterQueue's quota is taken; "
                f"kubectl -n {self.namespace} get workloads says why)",
            )
        return "waiting"

    def look(self, job: Any, pods: list[Any], now_s: float) -> Verdict | str | None:
        """The verdict, :data:`SETTLE` (look again shortly), or ``None`` (keep watching)."""
        if self.queue_name:
            admission = self._admission(job, now_s)
            if isinstance(admission, Verdict):
                return admission
            if admission == "waiting":
                return None
        self.qos = qos_class(pods) or self.qos
        self.image = _seen_images(self.image, image_digest(pods))
        verdict = job_verdict(job, pods, self.ranks_per_node)
        if verdict is not None and verdict[0] in RANK_FAILURES and not self.settled:
            # Ranks that stop together (divergence) exit moments apart: let them.
            self.settled = True
            return SETTLE
        if verdict is not None:
            return Verdict(*verdict)
        problem = pending_problem(
            pods, now_s, self.clock_start_s, self.schedule_timeout_s
        ) or self.missing_pods(pods, now_s)
        if problem:
            return Verdict(FAILED, problem)
        if now_s - self.clock_start_s > self.timeout_s:
            return Verdict(TIMED_OUT, f"the group did not finish within {self.timeout_s:g} s")
        return None

    def missing_pods(self, pods: list[Any], now_s: float) -> str | None:
        """Pods the Job controller never created (quota, admission) count as unschedulable."""
        timeout = self.schedule_timeout_s
        if now_s - self.clock_start_s < timeout or len(pods) >= self.pods:
            return None
        return (
            f"only {len(pods)} of {self.pods} pods were created within {timeout:g} s; "
            f"kubectl -n {self.namespace} describe job {self.job} says why "
            "(e.g. a ResourceQuota, or a missing service account)"
        )

    def ending(self, verdict: Verdict, pods: list[Any], now_s: float) -> Ending:
        """The :class:`Ending` of ``verdict``, given by the look at ``pods`` at wall-clock
        time ``now_s`` (seconds)."""
        failed_pod = None
        if verdict.first_failed_rank is not None:
            index = verdict.first_failed_rank // self.ranks_per_node  # the pod that ran it
            pod = next((p for p in pods if pod_rank(p) == index), None)
            failed_pod = None if pod is None else get_field(pod, "metadata", "name")
        rank0 = rank0_pod(pods)
        return Ending(
            verdict,
            self.exit_codes(pods),
            qos_class=self.qos,
            image_digest=self.image,
            seconds=now_s - self.started_s,
            failed_pod=failed_pod,
            rank0_pod=None if rank0 is None else get_field(rank0, "metadata", "name"),
            rank0_phase=None if rank0 is None else get_field(rank0, "status", "phase"),
        )

    def exit_codes(self, pods: list[Any]) -> list[int | None]:
        """Each rank's exit code (``None`` while it runs or where its pod is gone): its pod's,
        which for a pod of several ranks is its node starter's (the failed rank's status)."""
        codes: list[int | None] = [None] * self.world_size
        per_node = self.ranks_per_node
        for pod in pods:
            index = pod_rank(pod)
            if index is not None and 0 <= index < self.pods:
                for rank in range(index * per_node, (index + 1) * per_node):
                    codes[rank] = exit_code(pod)
        return codes


WATCH_STATE = ("admitted_s", "settled", "qos", "image", "waiting_noted")
"""The fields of :class:`GroupWatch` that its looks set (:meth:`GroupWatch.state`)."""


def _seen_images(before: str, now: str) -> str:
    """The images seen by earlier looks (``before``) and this one (``now``), each as
    :func:`image_digest` gives them: every one, sorted, comma-separated (a pod gone since
    still ran its image)."""
    return ",".join(sorted({*before.split(","), *now.split(",")} - {""}))


def rank0_pod(pods: list[Any]) -> Any:
    """Rank 0's pod once its log can be read, else ``None``."""
    return next(
        (p for p in pods if pod_rank(p) == 0 and get_field(p, "status", "phase") in LOG_PHASES),
        None,
    )


@dataclass
class Rank0Log:
    """Which lines of rank 0's log were passed on: ``lines`` of pod ``pod``, the newest of
    them stamped ``since`` (the kubelet's time of the line as (seconds since the epoch,
    nanoseconds), see :func:`stamp_key`), ``at_since`` of them
    with that very stamp.

    A look asks for the lines of the last minute or so only (:meth:`options`: every
    line stamped, from a little before the newest one passed on), not the whole log
    again: rank 0 prints a progress line every 10 s, so a week-long run's log grows to
    megabytes that each look would otherwise fetch. The overlap is passed over by stamp.
    """

    pod: str | None = None
    lines: int = 0
    since: tuple[int, int] | None = None
    at_since: int = 0

    def __post_init__(self) -> None:
        if self.since is not None:  # JSON brings the stamp back as a list
            self.since = (int(self.since[0]), int(self.since[1]))

    def position(self) -> dict[str, Any]:
        """Where the log was passed on up to, as plain JSON values (``Rank0Log(**position)``
        goes on from there): what a deferred wait carries from one resume to the next."""
        return {
            "pod": self.pod,
            "lines": self.lines,
            "since": None if self.since is None else list(self.since),
            "at_since": self.at_since,
        }

    def options(self, pod: Any, now_s: float) -> dict[str, Any]:
        """The log request's options at wall-clock time ``now_s`` (seconds): stamps on every
        line and, once a line was passed on, the seconds back to it plus
        :data:`LOG_OVERLAP_S` (the node's clock may run ahead of this one)."""
        if get_field(pod, "metadata", "name") != self.pod or self.since is None:
            return {"timestamps": True}
        back_s = max(0, math.ceil(now_s - self.since[0])) + LOG_OVERLAP_S
        return {"timestamps": True, "since_seconds": back_s}

    def new_lines(self, pod: Any, text: str) -> list[str]:
        """The complete lines of ``text`` (pod ``pod``'s log, lines stamped as
        :meth:`options` asks) not passed on yet, without their stamps."""
        name = get_field(pod, "metadata", "name")
        if name != self.pod:
            self.pod, self.lines, self.since, self.at_since = name, 0, None, 0
        # Lines end at "\n" only: a progress bar's "\r" stays inside its line.
        entries = text.split("\n")
        if entries[-1] == "" or get_field(pod, "status", "phase") == "Running":
            entries.pop()  # after the last newline: nothing, or a line still being written
        stamped = [
            (stamp_key(stamp), line)
            for stamp, _, line in (entry.partition(" ") for entry in entries)
        ]
        if stamped and all(key is None for key, _ in stamped):  # an unstamped whole log
            new = entries[self.lines :]
            self.lines = max(self.lines, len(entries))
            return new
        newest = self.since
        new, repeated, largest = [], 0, newest
        for key, line in stamped:
            if key is None:
                continue  # not a line of this read's (a stray fragment): nothing to pass on
            if newest is not None and key < newest:
                continue  # passed on before
            if key == newest:
                repeated += 1
                if repeated <= self.at_since:
                    continue
            new.append(line)
            largest = key if largest is None else max(largest, key)
        if largest is not None:  # every line with the largest stamp was passed on by now
            self.since = largest
            self.at_since = sum(key == largest for key, _ in stamped)
        self.lines += len(new)
        return new


@dataclass
class Rank0Follower:
    """Passes rank 0's new complete lines on, each prefixed as :func:`log_prefix` says for
    pods of ``ranks_per_node`` ranks, and keeps the last ``2 * LOG_TAIL_LINES`` of them
    (``seen``: the log tail of a verdict that names no failed rank)."""

    ranks_per_node: int = 1
    log: Rank0Log = field(default_factory=Rank0Log)
    seen: list[str] = field(default_factory=list)

    @property
    def covers_tail(self) -> bool:
        """Whether ``seen`` holds rank 0's last ``LOG_TAIL_LINES`` lines: it does unless
        lines were passed on before this follower's log place was carried over to it."""
        return len(self.seen) >= LOG_TAIL_LINES or self.log.lines <= len(self.seen)

    def follow(
        self, pods: list[Any], now_s: float, read_log: ReadLog, sink: Callable[[str], Any]
    ) -> None:
        """Read rank 0's log among ``pods`` at wall-clock time ``now_s`` (seconds) with
        ``read_log`` and pass its new lines to ``sink``."""
        pod = rank0_pod(pods)
        if pod is not None:
            self.follow_pod(pod, now_s, read_log, sink)

    def follow_pod(
        self, pod: Any, now_s: float, read_log: ReadLog, sink: Callable[[str], Any]
    ) -> None:
        """Read the log of rank 0's pod ``pod`` (its ``metadata.name`` and ``status.phase``
        are all it needs) at wall-clock time ``now_s`` (seconds) with ``read_log`` and pass
        its new lines to ``sink``."""
        text = read_log(get_field(pod, "metadata", "name"), **self.log.options(pod, now_s))
        if text is None:
            return
        prefix = log_prefix(0, self.ranks_per_node)
        for line in self.log.new_lines(pod, text):
            entry = f"{prefix}{line}"
            sink(entry)
            self.seen.append(entry)
        del self.seen[: -LOG_TAIL_LINES * 2]


def log_tail(read_log: ReadLog, pod_name: str | None, rank: int, ranks_per_node: int) -> list[str]:
    """The last ``LOG_TAIL_LINES`` lines of the log of pod ``pod_name`` (which ran rank
    ``rank``, on pods of ``ranks_per_node`` ranks), prefixed; none without a pod."""
    if pod_name is None:
        return []
    text = read_log(pod_name, tail_lines=LOG_TAIL_LINES)
    prefix = log_prefix(rank, ranks_per_node)
    return [f"{prefix}{line}" for line in (text or "").splitlines()]


LOG_OVERLAP_S = 60  # seconds of log a look reads again, for clock differences


def stamp_key(stamp: str) -> tuple[int, int] | None:
    """An RFC 3339 stamp as (whole seconds since the epoch, nanoseconds); None if it is not
    one (e.g. ``2026-11-25T02:10:00.123456789Z`` → (1795572600, 123456789))."""
    match = _STAMP.fullmatch(stamp)
    if match is None:
        return None
    whole = datetime.fromisoformat(match["whole"] + match["zone"].replace("Z", "+00:00"))
    return int(whole.timestamp()), int((match["fraction"] or "").ljust(9, "0"))


_STAMP = re.compile(
    r"(?P<whole>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<fraction>\d{1,9}))?"
    r"(?P<zone>Z|[+-]\d\d:\d\d)"
)


@dataclass(frozen=True)
class PodEvent:
    """One :class:`~operators.kubernetes.pod_group.GroupPodTrigger` event, typed: the
    provider's pod-trigger event (``status``: ``running`` for a live load, else the pod's
    ending as the provider says it, ``success``, ``failed``, ``timeout``, ``error``; the pod's
    ``name`` and ``namespace``; where its log was read up to, ``last_log_time``) with what
    scalebench carries in it (``trigger_kwargs``): the group's ``job`` name, its ``attempt``
    and when it started (``started_s``, wall-clock seconds). ``payload`` is the event as the
    trigger fired it: the provider's own ``trigger_reentry`` is given that."""

    status: str
    job: str
    started_s: float
    attempt: int = 1
    name: str = ""
    namespace: str = ""
    last_log_time: Any = None
    payload: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def running(self) -> bool:
        """A live load's event: the pod still runs."""
        return self.status == RUNNING

    @classmethod
    def of(cls, event: PodEvent | Mapping[str, Any]) -> PodEvent:
        """``event`` typed, whether given typed or as the trigger's payload."""
        if isinstance(event, PodEvent):
            return event
        return cls(
            status=str(event["status"]),
            job=str(event["job"]),
            started_s=float(event["started_s"]),
            attempt=int(event.get("attempt", 1)),
            name=str(event.get("name") or ""),
            namespace=str(event.get("namespace") or ""),
            last_log_time=event.get("last_log_time"),
            payload=dict(event),
        )


@dataclass(frozen=True)
class GroupEvent:
    """One :class:`~operators.kubernetes.trigger.GroupTrigger` event, typed: how the group ended (an
    :class:`~operators.kubernetes.watch.Ending`'s fields: ``status``, ``reason``, the first
    failed rank, each rank's exit code, the pods' QoS class and resolved image, the seconds
    since the Job was created, the pods whose logs go with the verdict), or that it runs
    (``status`` ``running``, with ``watch``: what the looks learnt), or ``error`` (the
    cluster could not be read; ``reason`` says why); which Job and Service of which
    attempt it is about, created at ``started_s`` (wall-clock seconds); and rank 0's log
    place as the trigger got it. Airflow carries it as JSON (:meth:`to_payload`,
    :meth:`from_payload`)."""

    status: str
    job: str
    service: str
    started_s: float
    reason: str = ""
    attempt: int = 1
    rank0_log: dict[str, Any] | None = None
    watch: dict[str, Any] | None = None
    rank0_pod: str | None = None
    rank0_phase: str | None = None
    first_failed_rank: int | None = None
    exit_codes: tuple[int | None, ...] = ()
    qos_class: str = ""
    image_digest: str = ""
    seconds: float = 0.0
    failed_pod: str | None = None

    @property
    def names(self) -> GroupNames:
        """The Job's and the Service's names."""
        return GroupNames(job=self.job, service=self.service)

    def to_payload(self) -> dict[str, Any]:
        """The event as a trigger fires it: plain JSON values."""
        payload = dataclasses.asdict(self)
        payload["exit_codes"] = list(self.exit_codes)
        return payload

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> GroupEvent:
        """The event a resumed task was given (:meth:`to_payload`); keys it does not know are
        left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in payload.items() if key in known}
        values["exit_codes"] = tuple(values.get("exit_codes") or ())
        return cls(**values)

    @classmethod
    def of(cls, event: GroupEvent | Mapping[str, Any]) -> GroupEvent:
        """``event`` typed, whether given typed or as its payload."""
        return event if isinstance(event, GroupEvent) else cls.from_payload(event)

    def ending(self) -> Ending:
        """How the group ended, as the blocking wait has it."""
        return Ending(
            Verdict(self.status, self.reason, self.first_failed_rank),
            list(self.exit_codes),
            qos_class=self.qos_class,
            image_digest=self.image_digest,
            seconds=self.seconds,
            failed_pod=self.failed_pod,
            rank0_pod=self.rank0_pod,
            rank0_phase=self.rank0_phase,
        )
