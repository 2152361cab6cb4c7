"""Did a paired nightly series move in its last nights? The test, night by night.

A paired night (:class:`PairedNight`) holds, per round, tonight's stack against the pinned
reference stack as a log-ratio (our software), and the reference arm's own log-seconds (the
machines). Each of the two is a series of nights of rounds, judged alike by
:func:`judge_arm`: are the last 1, 2 or 3 nights (the recent window) higher than the nights
before them (the baseline)?

**The baseline** is the last segment of the history before the recent window, cut by
:func:`~results_db.regressions.segments.change_points` on the nights' means (so a change
weeks ago does not count as tonight's), at most ``rule.window`` nights and at least
``rule.min_baseline_nights``.

**The test** (:func:`level_shift`) compares the recent nights' rounds with the baseline's as
two levels of a series with two sources of noise: rounds within a night (their spread, from
every night's rounds) and nights (how much more the nights' means spread than their rounds
would make them, a one-way analysis of variance on the baseline). For the ratio the second
is near 0: the machines' drift falls on both arms of a round and cancels, and every round
counts. For the reference arm's seconds it is the machines' drift itself, and the night is
the unit. The difference of the two levels over its standard error is read on Student's t,
one-sided (slower), at ``rule.alpha / 3`` for each of the three windows (Bonferroni), and a
change must also be at least ``rule.min_change``.

**A round gone wrong** (a neighbour's burst of load during one arm: one round 30 % off while
the rest lie within 2 %) would widen the spread of every window it falls in, and hide a
small change for as many nights. Before the test, :func:`pull_in` brings each round that lies
further than ``rule.outlier_sd`` robust standard deviations from its own night's median back
to that bound (winsorizing). The bound is measured from every night's rounds around their
own night's median, so a whole night that moved is never pulled in: only a round that
disagrees with the rest of its night. A night of fewer than 8 rounds is left as it is.

No SQL, no I/O: values already read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean, median, variance

from results_db.regressions.segments import change_points

# The arms of a paired series: the log-ratio tonight / reference, and the reference's seconds.
RATIO, REFERENCE = "ratio", "reference"


@dataclass(frozen=True)
class PairedRule:
    """How a paired nightly series is judged.

    ``alpha``: the false-alarm rate per series and night (split over the recent windows);
    ``min_change``: the smallest relative slowdown flagged (0.02 = 2 %); ``recent_nights``:
    the longest recent window (a change is found within this many nights of its first);
    ``window``: the most baseline nights; ``min_baseline_nights``: the fewest;
    ``min_segment``: the fewest nights of a segment of the history's change points;
    ``outlier_sd``: how many robust standard deviations from its night's median a round may
    lie before it is pulled in (:func:`pull_in`; 0 pulls in nothing).
    """

    alpha: float = 0.01
    min_change: float = 0.02
    recent_nights: int = 3
    window: int = 14
    min_baseline_nights: int = 3
    min_segment: int = 3
    outlier_sd: float = 3.0

    def nights_needed(self) -> int:
        """The fewest nights a series needs before its newest can be judged."""
        return self.min_baseline_nights + 1


PAIRED_RULE = PairedRule()


@dataclass(frozen=True)
class PairedNight:
    """One night of a paired series: its sweep, and per round (both arms ran and measured)
    ``log_ratios`` = log(tonight / reference) and ``reference_logs`` = log(reference seconds)."""

    sweep_id: str
    log_ratios: tuple[float, ...]
    reference_logs: tuple[float, ...]


@dataclass(frozen=True)
class Shift:
    """How far the recent nights' level lies above the baseline's: ``size`` as a ratio (1.03:
    3 % slower), its 95 % interval ``[low, high]``, the one-sided ``p_value`` (slower), the
    nights compared (``recent``, ``baseline``) and the rounds (``recent_rounds``,
    ``baseline_rounds``)."""

    size: float
    low: float
    high: float
    p_value: float
    recent: int
    baseline: int
    recent_rounds: int
    baseline_rounds: int


def level_shift(baseline: Sequence[Sequence[float]], recent: Sequence[Sequence[float]]) -> Shift:
    """The recent nights' mean level (log scale) against the baseline nights', each night a
    list of rounds' values (natural logs). See the module's text for the test.

    Every night must hold at least one round; the baseline at least two nights or, with one,
    two rounds (a spread to judge by). ValueError otherwise.
    """
    base = [list(map(float, night)) for night in baseline if len(night)]
    now = [list(map(float, night)) for night in recent if len(night)]
    if not now or not base:
        raise ValueError("level_shift: needs rounds on both sides")
    rounds = [x for night in base + now for x in night]
    if len(rounds) < 3:
        raise ValueError("level_shift: needs three rounds at least, to measure a spread")
    within, within_df = _within(base + now)
    between = _between(base, within)
    base_rounds, now_rounds = sum(map(len, base)), sum(map(len, now))
    # each night's mean weighs alike: a night is a draw of the machines' state
    base_level = fmean(fmean(night) for night in base)
    now_level = fmean(fmean(night) for night in now)
    var_base = within / base_rounds + between / len(base)
    var_now = within / now_rounds + between / len(now)
    se = math.sqrt(var_base + var_now)
    # the nights are the unit where they spread more than their rounds say, else the rounds
    freedom = (
        float(max(len(base) + len(now) - 2, 1))
        if between > within / max(min(map(len, base)), 1)
        else float(max(within_df, 1))
    )
    shift = now_level - base_level
    p_value = _upper_tail(shift, se, freedom)
    half = _t_quantile(0.975, freedom) * se
    return Shift(
        _exp(shift),
        _exp(shift - half),
        _exp(shift + half),
        p_value,
        len(now),
        len(base),
        now_rounds,
        base_rounds,
    )


# A night needs this many rounds for its median, and the rounds' distances from it, to say
# where its rounds lie: with 5 a night (light Task 1a in 900 s on 2 cores), pulling in flagged
# more A/A series (7 of 330 series-nights against 4) and blamed 3 of 6 found 3 % slowdowns on
# the platform (the reference arm's series moved).
PULL_IN_ROUNDS = 8
# The median absolute deviation times this is the standard deviation, for normal noise.
_MAD_TO_SD = 1.4826


# A robust spread this small (natural log) is none: it is what floating-point rounding leaves of
# rounds that agree, and a bound drawn from it would pull every other round onto the median.
NO_SPREAD = 1e-9


def pull_in(nights: Sequence[Sequence[float]], outlier_sd: float) -> list[list[float]]:
    """``nights`` (each a list of its rounds' values, natural logs) with every round further
    than ``outlier_sd`` robust standard deviations from its night's median brought back to
    that distance (winsorized); the others unchanged, the nights and their rounds in order.

    The robust standard deviation is 1.4826 times the median of every round's distance from
    its own night's median, over the nights of at least :data:`PULL_IN_ROUNDS` rounds (a
    night of fewer is left as it is). With fewer than 5 such rounds, a spread of 0 (at most
    :data:`NO_SPREAD`), or ``outlier_sd`` ≤ 0, nothing is pulled in.
    """
    rounds = [list(map(float, night)) for night in nights]
    if outlier_sd <= 0:
        return rounds
    centres = [median(night) if len(night) >= PULL_IN_ROUNDS else None for night in rounds]
    distances = [
        abs(x - centre)
        for night, centre in zip(rounds, centres, strict=True)
        if centre is not None
        for x in night
    ]
    if len(distances) < 5:
        return rounds
    spread = _MAD_TO_SD * median(distances)
    if spread <= NO_SPREAD:
        return rounds
    bound = outlier_sd * spread
    return [
        night if centre is None else [min(max(x, centre - bound), centre + bound) for x in night]
        for night, centre in zip(rounds, centres, strict=True)
    ]


def _within(nights: list[list[float]]) -> tuple[float, int]:
    """The rounds' pooled variance within nights, and its degrees of freedom."""
    squares = sum(sum((x - fmean(night)) ** 2 for x in night) for night in nights)
    freedom = sum(len(night) - 1 for night in nights)
    if freedom <= 0:  # one round a night: the nights' spread is all there is
        means = [fmean(night) for night in nights]
        return (variance(means) if len(means) > 1 else 0.0), len(means) - 1
    return squares / freedom, freedom


def _between(base: list[list[float]], within: float) -> float:
    """The nights' own variance beyond their rounds' (≥ 0), from the baseline's night means."""
    if len(base) < 2:
        return 0.0
    means = [fmean(night) for night in base]
    expected = fmean(within / len(night) for night in base)
    return max(variance(means) - expected, 0.0)


def _upper_tail(shift: float, se: float, freedom: float) -> float:
    """One-sided p that a level ``shift`` this high or higher comes from noise of ``se``."""
    if se == 0:
        return 0.0 if shift > 0 else 1.0
    from scipy.special import stdtr  # imported here: the DAG files import this package

    return float(stdtr(freedom, -shift / se))


def _t_quantile(q: float, freedom: float) -> float:
    from scipy.special import stdtrit  # imported here: the DAG files import this package

    return float(stdtrit(freedom, q))


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


@dataclass(frozen=True)
class ArmVerdict:
    """One arm of a series judged on its newest night: ``shift`` of the recent window that
    judged it (the most significant; None where the series is too short), whether it is
    ``flagged``, the index of the ``first_night`` of the new level (flagged only), and the
    series cut into segments over its whole history (``segment_starts``, night indices)."""

    arm: str
    shift: Shift | None
    flagged: bool
    first_night: int | None
    segment_starts: tuple[int, ...]


def judge_arm(
    nights: Sequence[Sequence[float]], arm: str, rule: PairedRule = PAIRED_RULE
) -> ArmVerdict:
    """Judge the newest night of one arm's series (``nights`` oldest first, each a list of
    its rounds' natural logs): for each recent window of the last 1 to ``rule.recent_nights``
    nights, :func:`level_shift` against the baseline before it; flagged where any window's
    ``p < rule.alpha / rule.recent_nights`` and its size is at least ``1 + rule.min_change``.
    The first night of the new level is the start of the flagged window with the smallest
    p. Nights without rounds are left out of the judgement (they stay in the indices). Each
    night's rounds far from the rest of that night are pulled in first (:func:`pull_in`)."""
    nights = pull_in(nights, rule.outlier_sd)
    kept = [i for i, night in enumerate(nights) if len(night)]
    means = [fmean(nights[i]) for i in kept]
    segments = change_points(means, min_segment=rule.min_segment) if means else []
    starts = tuple(kept[s.start] for s in segments)
    best: tuple[float, int, Shift] | None = None
    flagged_best: tuple[float, int, Shift] | None = None
    for k in range(1, rule.recent_nights + 1):
        if len(kept) < k + rule.min_baseline_nights:
            break
        earlier = means[:-k]
        cuts = change_points(earlier, min_segment=rule.min_segment) if earlier else []
        begin = max(cuts[-1].start if cuts else 0, len(earlier) - rule.window)
        if len(earlier) - begin < rule.min_baseline_nights:
            begin = max(len(earlier) - rule.min_baseline_nights, 0)
        base = [nights[i] for i in kept[begin : len(earlier)]]
        recent = [nights[i] for i in kept[-k:]]
        try:
            shift = level_shift(base, recent)
        except ValueError:
            continue
        candidate = (shift.p_value, k, shift)
        if best is None or candidate[0] < best[0]:
            best = candidate
        if (
            shift.p_value < rule.alpha / rule.recent_nights
            and shift.size >= 1 + rule.min_change
            and (flagged_best is None or shift.p_value < flagged_best[0])
        ):
            flagged_best = candidate
    if flagged_best is not None:
        _, k, shift = flagged_best
        return ArmVerdict(arm, shift, True, kept[-k], starts)
    return ArmVerdict(arm, best[2] if best else None, False, None, starts)
