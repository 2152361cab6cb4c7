"""Paired rounds: tonight's stack against a pinned reference stack on the same machines.

A paired nightly runs the two stacks in interleaved rounds, one run of each a round, so that
what the machines do during the night (a neighbour's load, a slower host) touches both runs
of a round alike. Each round gives one ratio tonight / reference of a lower-is-better time
(seconds, or seconds per second of the machine's reference workload): the machines' drift
cancels in the ratio, our software's change does not. The ratios are averaged on a log
scale (a geometric mean), where 2× slower and 2× faster are the same distance from 1.

A sweep of several stacks (``scalebench run --stack … --pairs N``) is compared the same way,
each stack against the sweep's first (:func:`compare_stacks`).

No SQL, no I/O: values already read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean, stdev
from typing import Protocol


def paired_log_ratios(tonight: Sequence[float], reference: Sequence[float]) -> list[float]:
    """Per round, ``log(tonight / reference)`` (natural log, no unit) of a lower-is-better
    quantity in seconds measured once by each arm: > 0 where tonight's stack was slower.

    ``tonight[i]`` and ``reference[i]`` are round ``i``'s two runs, in the same unit. Both
    lists must be as long; every value must be a finite number of seconds above 0 (a ratio
    of 0 or of infinity has no logarithm): otherwise ValueError, naming the arm and the round.
    """
    if len(tonight) != len(reference):
        raise ValueError(
            f"paired rounds: tonight has {len(tonight)} value(s) and the reference "
            f"{len(reference)}; each round needs one of each"
        )
    tonight_logs, reference_logs = _logs("tonight", tonight), _logs("reference", reference)
    # a difference of logarithms: a quotient of a huge and a tiny value would overflow
    return [t - r for t, r in zip(tonight_logs, reference_logs, strict=True)]


def _logs(arm: str, seconds: Sequence[float]) -> list[float]:
    """The natural logarithms of one arm's values, each a finite number of seconds above 0."""
    logs = []
    for i, value in enumerate(seconds):
        try:  # a number, not a text or a truth value that float() would take
            number = math.nan if isinstance(value, str | bytes | bool) else float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not (math.isfinite(number) and number > 0):
            raise ValueError(
                f"{arm}[{i}]: must be a finite number of seconds above 0, got {value!r}"
            )
        logs.append(math.log(number))
    return logs


@dataclass(frozen=True)
class RatioInterval:
    """The geometric-mean ratio tonight / reference over the rounds (no unit: 1.03 = tonight
    3 % slower) and its confidence interval ``[low, high]``, from ``pairs`` rounds."""

    ratio: float
    low: float
    high: float
    pairs: int


def ratio_interval(log_ratios: Sequence[float], confidence: float = 0.95) -> RatioInterval:
    """The geometric-mean ratio ``exp(mean(log_ratios))`` and a Student-t ``confidence``
    interval on the mean log-ratio, brought back to ratios by ``exp``.

    ``log_ratios`` are natural logs of per-round ratios (:func:`paired_log_ratios`). With
    ``n`` rounds the interval is ``exp(mean ± t(n−1) · sd / √n)``, ``t(n−1)`` the two-sided
    quantile of Student's t with n − 1 degrees of freedom and ``sd`` the sample standard
    deviation: the rounds are taken as independent, each round's ratio free of the night's
    drift. ``low ≤ ratio ≤ high`` always, and the interval is asymmetric around the ratio
    (symmetric on the log scale).

    One round says nothing of the spread: its interval is ``low = 0.0``, ``high = inf``
    (every ratio possible; no NaN). No round, a ``confidence`` outside (0, 1), or a
    log-ratio that is not finite: ValueError.
    """
    if not 0 < confidence < 1:  # NaN fails this too
        raise ValueError(f"confidence: must be between 0 and 1, got {confidence!r}")
    values = [float(x) for x in log_ratios]
    if not values:
        raise ValueError("log_ratios: no round to average; a ratio needs at least one")
    for i, value in enumerate(values):
        if not math.isfinite(value):
            raise ValueError(f"log_ratios[{i}]: must be finite, got {value!r}")
    n = len(values)
    mean = fmean(values)
    ratio = _exp(mean)
    if n < 2:
        return RatioInterval(ratio, 0.0, math.inf, n)
    from scipy.stats import t  # imported here: the DAG files import this package

    half = float(t.ppf((1 + confidence) / 2, n - 1)) * stdev(values, mean) / math.sqrt(n)
    low, high = _exp(mean - half), _exp(mean + half)
    # exp rounds: keep the ordering the interval promises
    return RatioInterval(ratio, min(low, ratio), max(high, ratio), n)


def _exp(x: float) -> float:
    """``exp(x)``, infinite where it overflows (a log-ratio above about 709)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


class ArmValues(Protocol):
    """One run of one stack in a paired sweep (``results_db.queries.stacks.ArmRun``)."""

    @property
    def stack(self) -> str: ...
    @property
    def world_size(self) -> int: ...
    @property
    def network(self) -> str: ...
    @property
    def repeat(self) -> int: ...
    @property
    def seconds(self) -> Mapping[str, float]: ...


@dataclass(frozen=True)
class StackComparison:
    """``stack`` against ``against`` (the sweep's first stack) at ``world_size`` workers on
    ``network``: per metric, the ratio stack / against over the rounds both ran, with its
    interval (a metric neither measured in any round is absent)."""

    world_size: int
    network: str
    stack: str
    against: str
    metrics: dict[str, RatioInterval]
    # how the rounds compared ran (scalebench.pairing): "duet", "interleaved", or both
    # comma-separated; empty where the runs do not say
    pairing: str = ""


def compare_stacks(
    arms: Sequence[ArmValues], stacks: Sequence[str], metrics: Sequence[str]
) -> list[StackComparison]:
    """Every stack after the first of ``stacks`` against the first, per worker count and
    link, each of ``metrics`` (seconds, lower is better) as :func:`ratio_interval` of the
    rounds (``repeat``) in which both stacks ran and measured it.

    ``stacks`` in the request's order; a stack no arm ran is left out, and with no run of
    the first there is nothing to compare against (empty list).
    """
    runs = {(a.stack, a.world_size, a.network, a.repeat): a for a in arms}
    if not stacks:
        return []
    first = stacks[0]
    cells = sorted({(a.world_size, a.network) for a in arms})
    found = []
    for world_size, network in cells:
        for stack in stacks[1:]:
            rounds = sorted(
                repeat
                for (name, k, link, repeat) in runs
                if name == stack
                and k == world_size
                and link == network
                and (first, k, link, repeat) in runs
            )
            intervals = {}
            for metric in metrics:
                pairs = [
                    (
                        runs[(stack, world_size, network, r)].seconds.get(metric),
                        runs[(first, world_size, network, r)].seconds.get(metric),
                    )
                    for r in rounds
                ]
                measured = [(t, f) for t, f in pairs if t and f and t > 0 and f > 0]
                if measured:
                    logs = paired_log_ratios([t for t, _ in measured], [f for _, f in measured])
                    intervals[metric] = ratio_interval(logs)
            ways = {
                getattr(runs[(name, world_size, network, r)], "pairing", "")
                for r in rounds
                for name in (first, stack)
            }
            if intervals:
                found.append(
                    StackComparison(
                        world_size,
                        network,
                        stack,
                        first,
                        intervals,
                        ", ".join(sorted(way for way in ways if way)),
                    )
                )
    return found
