"""From paired nights to findings: one per change, not one per series.

A paired series is one task × link × worker count × metric (:class:`SeriesKey`), each night
its rounds (:class:`~results_db.regressions.shifts.PairedNight`). Both of its arms are
judged on the newest night (:func:`~results_db.regressions.shifts.judge_arm`): the ratio
tonight / reference (our software moved) and the reference arm's seconds (the machines
moved). Every series flagged on the same first night makes one :class:`Change`:

- its size is the headline series' (the steady step where it moved, else the most
  significant), with its interval;
- it names the phases of the step that moved, the one that moved most first;
- it is attributed: ``stack`` where only tonight's arm moved (the ratio), ``platform``
  where the reference arm moved too.

No SQL, no I/O: values already read.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from results_db.regressions.paired import ArmValues
from results_db.regressions.shifts import (
    PAIRED_RULE,
    RATIO,
    REFERENCE,
    ArmVerdict,
    PairedNight,
    PairedRule,
    judge_arm,
)

# What a paired series measures, each in seconds, lower is better (a run's medians after
# warm-up, its median evaluation and its time to accuracy), and the phases among them.
PAIRED_METRICS = (
    "steady_step_s",
    "compute_s",
    "communication_s",
    "data_s",
    "eval_s",
    "time_to_accuracy_s",
)
PHASES = {
    "compute_s": "compute",
    "communication_s": "communication",
    "data_s": "data",
    "eval_s": "evaluation",
}
PLATFORM, STACK = "platform", "stack"


@dataclass(frozen=True, order=True)
class SeriesKey:
    """One paired series: a task's metric at a worker count on a link."""

    task: str
    network: str
    world_size: int
    metric: str

    def describe(self) -> str:
        link = "" if self.network == "host" else f" on {self.network}"
        return f"{self.task} {self.world_size} worker(s){link} {self.metric}"

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "network": self.network,
            "world_size": self.world_size,
            "metric": self.metric,
        }


class NightLike(Protocol):
    """One paired night (``results_db.queries.paired_nights.PairedNightRuns``)."""

    @property
    def sweep_id(self) -> str: ...
    @property
    def reference(self) -> Mapping[str, Any]: ...
    @property
    def arms(self) -> Sequence[ArmValues]: ...


def comparable_nights(nights: Sequence[NightLike]) -> list[NightLike]:
    """The newest nights that ran the same reference stack as the newest: a reference pinned
    anew starts its series anew (its ratios are to another stack)."""
    if not nights:
        return []
    kept: list[NightLike] = []
    for night in reversed(nights):
        if night.reference != nights[-1].reference:
            break
        kept.append(night)
    return kept[::-1]


def paired_series(
    task: str, nights: Sequence[NightLike], tonight: str, reference: str
) -> dict[SeriesKey, list[PairedNight]]:
    """Each series of ``task`` over ``nights`` (oldest first, :func:`comparable_nights`):
    per night, the rounds in which both the ``tonight`` and the ``reference`` arm measured
    the metric (a value above 0). A series has a night for every night, empty where no
    round measured it; a series no night measured is absent."""
    cells = sorted({(a.network, a.world_size) for night in nights for a in night.arms})
    series: dict[SeriesKey, list[PairedNight]] = {}
    for network, world_size in cells:
        for metric in PAIRED_METRICS:
            points = []
            for night in nights:
                arms = {
                    (a.stack, a.repeat): a.seconds.get(metric)
                    for a in night.arms
                    if a.network == network and a.world_size == world_size
                }
                ratios, references = [], []
                for (stack, repeat), mine in sorted(arms.items()):
                    theirs = arms.get((reference, repeat))
                    if stack != tonight or not _positive(mine) or not _positive(theirs):
                        continue
                    ratios.append(math.log(mine) - math.log(theirs))  # type: ignore[arg-type]
                    references.append(math.log(theirs))  # type: ignore[arg-type]
                points.append(PairedNight(night.sweep_id, tuple(ratios), tuple(references)))
            if any(p.log_ratios for p in points):
                series[SeriesKey(task, network, world_size, metric)] = points
    return series


def _positive(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class SeriesJudgement:
    """A series judged on its newest night: both arms' verdicts."""

    key: SeriesKey
    nights: list[PairedNight]
    ratio: ArmVerdict
    reference: ArmVerdict

    @property
    def flagged(self) -> list[ArmVerdict]:
        return [arm for arm in (self.ratio, self.reference) if arm.flagged]


def judge_series(
    series: Mapping[SeriesKey, list[PairedNight]], rule: PairedRule = PAIRED_RULE
) -> list[SeriesJudgement]:
    """Every series' two arms judged on its newest night (:func:`judge_arm`)."""
    return [
        SeriesJudgement(
            key,
            nights,
            judge_arm([n.log_ratios for n in nights], RATIO, rule),
            judge_arm([n.reference_logs for n in nights], REFERENCE, rule),
        )
        for key, nights in sorted(series.items())
    ]


@dataclass(frozen=True)
class MovedSeries:
    """One series that moved in a change: which arm, by how much (a ratio after / before,
    with its 95 % interval), how sure (one-sided p) and over how many nights and rounds."""

    key: SeriesKey
    arm: str
    size: float
    low: float
    high: float
    p_value: float
    nights: int
    rounds: int

    def to_json(self) -> dict[str, Any]:
        return {
            **self.key.to_json(),
            "arm": self.arm,
            "size": self.size,
            "low": self.low,
            "high": self.high,
            "p_value": self.p_value,
            "nights": self.nights,
            "rounds": self.rounds,
        }


@dataclass(frozen=True)
class Change:
    """One change: the sweep of its first night, its attribution (:data:`STACK` or
    :data:`PLATFORM`), the headline series' size and interval, every series that moved,
    and the phases that moved, the surest first: those flagged in the arm that tells
    (the ratio for the stack, the reference arm for the platform), else those flagged in the
    other arm, else, where no phase's series passed the test, those that rose from that
    night on in the telling arm at the same worker counts, else the step's phases that rose
    there at all, the most seconds added first (:func:`_rising_phases`)."""

    first_sweep_id: str
    attribution: str
    headline: MovedSeries
    moved: list[MovedSeries]
    phases: list[str]


def changes(judgements: Sequence[SeriesJudgement]) -> list[Change]:
    """The judgements' flagged arms grouped by the first night of their new level: one
    :class:`Change` per night, oldest first."""
    by_night: dict[str, list[MovedSeries]] = {}
    for judged in judgements:
        for arm in judged.flagged:
            assert arm.first_night is not None and arm.shift is not None
            shift = arm.shift
            moved = MovedSeries(
                judged.key,
                arm.arm,
                shift.size,
                shift.low,
                shift.high,
                shift.p_value,
                shift.recent,
                shift.recent_rounds,
            )
            by_night.setdefault(judged.nights[arm.first_night].sweep_id, []).append(moved)
    order = {night.sweep_id: i for judged in judgements for i, night in enumerate(judged.nights)}
    found = []
    for sweep_id, moved in sorted(by_night.items(), key=lambda item: order[item[0]]):
        attribution = PLATFORM if any(m.arm == REFERENCE for m in moved) else STACK
        # the arm that says what moved: the reference's seconds for the platform
        telling = [m for m in moved if m.arm == (REFERENCE if attribution == PLATFORM else RATIO)]
        steps = [m for m in telling if m.key.metric == "steady_step_s"]
        headline = min(steps or telling, key=lambda m: (m.p_value, -m.size))
        named = _named_phases(telling) or _named_phases(moved)
        if not named:  # no phase's series passed the test: those that rose most surely
            arm = REFERENCE if attribution == PLATFORM else RATIO
            places = {(m.key.network, m.key.world_size) for m in telling}
            named = _leaning_phases(judgements, sweep_id, arm, places)
            named = named or _rising_phases(judgements, arm, places)
        found.append(Change(sweep_id, attribution, headline, moved, named))
    return found


def _named_phases(moved: Sequence[MovedSeries]) -> list[str]:
    """The phases among ``moved``, the surest first (smallest p, then the largest size)."""
    phases = sorted(
        (m for m in moved if m.key.metric in PHASES), key=lambda m: (m.p_value, -m.size)
    )
    return list(dict.fromkeys(PHASES[m.key.metric] for m in phases))


def _leaning_phases(
    judgements: Sequence[SeriesJudgement], sweep_id: str, arm: str, places: set[tuple[str, int]]
) -> list[str]:
    """The phases whose series, in ``arm`` and at the ``places`` (link, worker count) that
    moved, rose from the night ``sweep_id`` on without passing the test on their own: their
    most significant recent window starts on that night and its size is above 1. The surest
    first."""
    leaning = []
    for judged in judgements:
        key = judged.key
        if key.metric not in PHASES or (key.network, key.world_size) not in places:
            continue
        verdict = judged.ratio if arm == RATIO else judged.reference
        shift = verdict.shift
        if shift is None or shift.size <= 1:
            continue
        judged_nights = [
            n.sweep_id
            for n in judged.nights
            if (n.log_ratios if arm == RATIO else n.reference_logs)
        ]
        if len(judged_nights) >= shift.recent and judged_nights[-shift.recent] == sweep_id:
            leaning.append((shift.p_value, -shift.size, PHASES[key.metric]))
    return list(dict.fromkeys(phase for *_, phase in sorted(leaning)))


# The phases a step is made of (its other laps are small): evaluation is not among them.
STEP_PHASES = ("compute_s", "communication_s", "data_s")


def _rising_phases(
    judgements: Sequence[SeriesJudgement], arm: str, places: set[tuple[str, int]]
) -> list[str]:
    """The step's phases (:data:`STEP_PHASES`) whose series, in ``arm`` and at the
    ``places`` that moved, lie above their baseline in their most significant recent window,
    whichever night it starts on: the most seconds added to a step first (the phase's
    seconds, the median of the reference arm's rounds over the series' nights, times the
    size − 1). For a change no phase's series explains, such as a time to accuracy that
    moved alone: a compute phase of 0.45 s that rose 3 % added 13 ms to a step, a data phase
    of 3.5 ms that rose 10 % added 0.35 ms."""
    rising = []
    for judged in judgements:
        key = judged.key
        if key.metric not in STEP_PHASES or (key.network, key.world_size) not in places:
            continue
        shift = (judged.ratio if arm == RATIO else judged.reference).shift
        logs = [x for night in judged.nights for x in night.reference_logs]
        if shift is None or shift.size <= 1 or not logs:
            continue
        added_s = math.exp(statistics.median(logs)) * (shift.size - 1)
        rising.append((-added_s, PHASES[key.metric]))
    return list(dict.fromkeys(phase for _, phase in sorted(rising)))


def identity_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Every key whose value differs between two identities (a stack's, a platform's), as
    ``{key: [before, after]}`` (a key one side lacks is None there), keys in order."""
    keys = sorted(set(before) | set(after))
    return {
        key: [before.get(key), after.get(key)] for key in keys if before.get(key) != after.get(key)
    }


def is_aa_night(stacks: Mapping[str, Any], tonight: str, reference: str) -> bool:
    """Whether a night ran the same stack in both arms (an A/A night: every flag on it is a
    false alarm): the request's two stacks are alike."""
    return tonight in stacks and stacks.get(tonight) == stacks.get(reference)
