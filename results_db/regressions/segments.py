"""Change points of a nightly series: the nights where its level moved, and how sure that is.

The series is one value a night, in the order of the nights: the paired nightly's mean
log-ratio tonight / reference (:func:`~results_db.regressions.paired.paired_log_ratios`, no
unit: our software moved), or the reference arm's own time in seconds (the machines moved).
:func:`change_points` cuts it into segments of one level each (:class:`Segment`).

The search: ruptures' ``KernelCPD`` with the linear kernel, whose cost is the ``l2`` cost
(the sum of squared deviations from each segment's mean: a change of the mean under noise of
one spread, what a step of the software or of the machines does to a nightly time), searched
with a penalty by PELT (the exact penalized optimum, pruned) in ruptures' compiled code: the
same cuts as ``Pelt(model="l2", jump=1)``, a thousand times faster. Every change must pay
``penalty``, in the series' unit squared like the cost; by default :func:`default_penalty`,
``PENALTY_FACTOR · σ² · ln n`` with σ the noise estimated robustly from the night-to-night
differences (a step moves one difference, so it does not inflate σ). BIC's price for a change
(a new mean and its place) is ``2 · σ² · ln n``; the factor 4 doubles it, as σ from 20 to 30
nights is itself uncertain: at 2 a flat series of 1 % noise shows a false change in 5 to 9 %
of seeds, at 4 in 0.7 to 3.4 % (20 to 60 nights, segments of 3 to 5 nights at least, 2,000
seeds each), while a 3 % step at mid-series is placed within a night about as often (94 to
97 % of 1,000 seeds at 4, 94 to 97 % at 2).

The test: each change the search keeps is tested with Welch's t-test (unequal variances) of
the segment after it against the one before; while the least significant has ``p ≥ alpha``
it is dropped and its two segments merged, so that every change returned is significant at
``alpha``. The p-values come from the same nights that placed the change, so they are
optimistic as tests: the penalty keeps a flat series' false changes rare, the test drops the
small ones the penalty lets through (and a change too close to an end to be sure of: Welch's
test of 5 nights has 4 degrees of freedom at most).

No SQL, no I/O: values already read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from statistics import fmean, median, stdev, variance

# A robust spread from the median absolute deviation: σ = MAD / 0.6745 for normal noise.
_MAD_TO_SIGMA = 0.6744897501960817
# The default penalty's factor, in PENALTY_FACTOR · σ² · ln n: twice BIC's 2 (see above).
PENALTY_FACTOR = 4.0


@dataclass(frozen=True)
class Segment:
    """Nights ``start`` to ``end`` (``range(start, end)``: ``end`` is the first night after)
    of one level: ``mean`` in the series' unit, and ``p_value``, Welch's two-sided test of
    this segment against the one before (None for the first segment)."""

    start: int
    end: int
    mean: float
    p_value: float | None


def min_nights_to_judge(min_segment: int) -> int:
    """How many nights a series needs before a change can be judged: ``min_segment`` nights
    before the change and as many after it."""
    _check_min_segment(min_segment)
    return 2 * min_segment


def noise_sigma(series: Sequence[float]) -> float:
    """The series' noise, as a standard deviation in its unit: the median absolute deviation
    of the night-to-night differences, / 0.6745 (normal noise) and / √2 (a difference holds
    two nights' noise). A few steps move few differences, so they do not inflate it. Where
    more than half the differences are equal (MAD 0), their standard deviation / √2; 0 for
    a constant series."""
    values = _finite(series)
    diffs = [b - a for a, b in pairwise(values)]
    if not diffs:
        return 0.0
    centre = median(diffs)
    mad = median(abs(d - centre) for d in diffs)
    if mad > 0:
        return mad / _MAD_TO_SIGMA / math.sqrt(2)
    return stdev(diffs) / math.sqrt(2) if len(diffs) > 1 else 0.0


def default_penalty(series: Sequence[float]) -> float:
    """The price of one change when none is given: ``PENALTY_FACTOR · σ² · ln n``, with σ the
    :func:`noise_sigma` and n the nights, in the series' unit squared (the l2 cost's unit)."""
    values = _finite(series)
    return PENALTY_FACTOR * noise_sigma(values) ** 2 * math.log(max(len(values), 2))


def change_points(
    series: Sequence[float],
    *,
    min_segment: int,
    penalty: float | None = None,
    alpha: float = 0.01,
) -> list[Segment]:
    """The series cut into segments of one level each, in order, covering every night: one
    segment where no change is found; none for an empty series.

    ``min_segment`` (≥ 2: Welch's test needs a spread on each side) is the fewest nights a
    segment may hold; a series shorter than :func:`min_nights_to_judge` is one segment.
    ``penalty`` is the price of a change in the series' unit squared (None:
    :func:`default_penalty`); a change is kept only where Welch's test gives ``p < alpha``.
    A value that is not finite, a ``min_segment`` below 2, a ``penalty`` not above 0 or
    not finite or an ``alpha`` outside (0, 1): ValueError.
    """
    _check_min_segment(min_segment)
    if not 0 < alpha < 1:  # NaN fails this too
        raise ValueError(f"alpha: must be a significance level between 0 and 1, got {alpha!r}")
    if penalty is not None and not 0 < penalty < math.inf:
        raise ValueError(f"penalty: must be a finite price above 0, got {penalty!r}")
    values = _finite(series)
    if not values:
        return []
    cuts = [len(values)]
    if len(values) >= min_nights_to_judge(min_segment) and noise_sigma(values) > 0:
        price = default_penalty(values) if penalty is None else penalty
        cuts = _pelt(values, min_segment, max(price, math.ulp(0.0)))  # above 0, as PELT needs
    starts = [0, *cuts[:-1]]
    while True:
        spans = list(zip(starts, cuts, strict=True))
        p_values = [_welch(values[a:b], values[c:d]) for (a, b), (c, d) in pairwise(spans)]
        if not p_values or max(p_values) < alpha:
            break
        weakest = p_values.index(max(p_values))  # merge the segments on either side of it
        del cuts[weakest]
        del starts[weakest + 1]
    return [
        Segment(start, end, fmean(values[start:end]), None if i == 0 else p_values[i - 1])
        for i, (start, end) in enumerate(zip(starts, cuts, strict=True))
    ]


def _pelt(values: list[float], min_segment: int, penalty: float) -> list[int]:
    """PELT's cuts: the end (exclusive) of each segment, the last one ``len(values)``."""
    import numpy as np  # imported here: the DAG files import this package
    import ruptures

    signal = np.asarray(values) - fmean(values)  # the same costs, sums of smaller squares
    search = ruptures.KernelCPD(kernel="linear", min_size=min_segment, jump=1)
    return [int(cut) for cut in search.fit(signal).predict(pen=penalty)]


def _welch(before: list[float], after: list[float]) -> float:
    """Welch's two-sided p-value that ``after`` and ``before`` have the same mean (Student's t
    with the Welch–Satterthwaite degrees of freedom, as ``scipy.stats.ttest_ind(after, before,
    equal_var=False)`` gives, without its overhead); where both are constant, 0 if their
    levels differ and 1 if not."""
    from scipy.special import stdtr  # imported here: the DAG files import this package

    shift = fmean(after) - fmean(before)
    spread_before, spread_after = variance(before) / len(before), variance(after) / len(after)
    spread = spread_before + spread_after
    if spread == 0:
        return 0.0 if shift != 0 else 1.0
    freedom = spread**2 / (
        spread_before**2 / (len(before) - 1) + spread_after**2 / (len(after) - 1)
    )
    if not math.isfinite(freedom):  # the squares underflowed or overflowed
        freedom = float(len(before) + len(after) - 2)
    p_value = float(2 * stdtr(freedom, -abs(shift) / math.sqrt(spread)))
    return 1.0 if math.isnan(p_value) else min(p_value, 1.0)


def _finite(series: Sequence[float]) -> list[float]:
    """The series as floats; ValueError naming the first night whose value is not finite."""
    values = [float(x) for x in series]
    for i, value in enumerate(values):
        if not math.isfinite(value):
            raise ValueError(f"series[{i}]: must be finite, got {value!r}")
    return values


def _check_min_segment(min_segment: int) -> None:
    if isinstance(min_segment, bool) or not isinstance(min_segment, int) or min_segment < 2:
        raise ValueError(
            f"min_segment: must be a whole number of nights of 2 or more, got {min_segment!r}"
        )
