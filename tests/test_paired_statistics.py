"""The paired nightly's statistics: per-round log-ratios of tonight's stack to a pinned
reference stack with their geometric-mean ratio and interval (results_db.regressions.paired),
and the change points of a series of nights (results_db.regressions.segments).

Pure functions on numbers, no database. Properties are checked with Hypothesis on fixed
examples; the detection rates are measured on fixed seeds of numpy's generator, and the rate
each test holds to is stated in its docstring with the rate it measured.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import ttest_ind

from results_db import regressions
from results_db.regressions import (
    RatioInterval,
    Segment,
    change_points,
    min_nights_to_judge,
    paired_log_ratios,
    ratio_interval,
)
from results_db.regressions.segments import _welch, default_penalty, noise_sigma


def examples(count: int) -> settings:
    """``count`` examples, the same ones on every run (CI must not turn flaky), no deadline
    (2 cores shared with other tests), nothing written into the checkout."""
    return settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# Seconds a run may take: from a millisecond's fraction to days.
SECONDS = st.floats(min_value=1e-4, max_value=1e6, allow_nan=False, allow_infinity=False)
# Per-round multiplicative noise, as a log: within ±0.1 %.
SMALL_NOISE = st.floats(min_value=-1e-3, max_value=1e-3, allow_nan=False)


# paired_log_ratios


def test_a_log_ratio_is_positive_where_tonight_was_slower() -> None:
    ratios = paired_log_ratios([2.0, 1.0, 3.0], [1.0, 2.0, 3.0])
    assert ratios == pytest.approx([math.log(2), -math.log(2), 0.0])


@pytest.mark.parametrize(
    ("tonight", "reference", "named"),
    [
        ([1.0, 0.0], [1.0, 1.0], "tonight[1]"),
        ([1.0, -2.0], [1.0, 1.0], "tonight[1]"),
        ([math.nan], [1.0], "tonight[0]"),
        ([1.0], [math.inf], "reference[0]"),
        ([1.0, 2.0], [1.0, "2"], "reference[1]"),
        ([True], [1.0], "tonight[0]"),
        ([1.0], [None], "reference[0]"),
    ],
)
def test_a_value_that_is_not_a_positive_finite_time_is_refused_naming_it(
    tonight: list, reference: list, named: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{re.escape(named)}: must be a finite number"):
        paired_log_ratios(tonight, reference)


def test_arms_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match=r"tonight has 2 value.* the reference 1"):
        paired_log_ratios([1.0, 2.0], [1.0])


ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -1.0])


@examples(300)
@given(rounds=st.lists(st.tuples(ANY_FLOAT, ANY_FLOAT), max_size=8))
def test_any_arms_give_finite_log_ratios_or_a_refusal_naming_the_first_bad_value(
    rounds: list[tuple[float, float]],
) -> None:
    tonight = [t for t, _ in rounds]
    reference = [r for _, r in rounds]
    bad = [
        f"{arm}[{i}]"
        for arm, values in (("tonight", tonight), ("reference", reference))
        for i, value in enumerate(values)
        if not (math.isfinite(value) and value > 0)
    ]
    if not bad:
        ratios = paired_log_ratios(tonight, reference)
        assert len(ratios) == len(rounds)
        assert all(math.isfinite(x) for x in ratios)
    else:
        with pytest.raises(ValueError, match=re.escape(bad[0])):
            paired_log_ratios(tonight, reference)


# ratio_interval


@examples(200)
@given(reference=st.lists(SECONDS, min_size=1, max_size=30))
def test_identical_arms_give_a_ratio_of_1_inside_its_interval(reference: list[float]) -> None:
    interval = ratio_interval(paired_log_ratios(reference, reference))
    assert interval.ratio == 1.0
    assert interval.low <= 1.0 <= interval.high
    assert interval.pairs == len(reference)


@examples(200)
@given(
    rounds=st.lists(st.tuples(SECONDS, SMALL_NOISE), min_size=1, max_size=30),
    factor=st.floats(min_value=0.2, max_value=5.0),
)
def test_tonight_a_constant_factor_slower_gives_that_factor(
    rounds: list[tuple[float, float]], factor: float
) -> None:
    """Each round's tonight = reference × factor × e^noise, |noise| ≤ 0.001: the ratio is the
    factor within the noise."""
    reference = [seconds for seconds, _ in rounds]
    tonight = [seconds * factor * math.exp(noise) for seconds, noise in rounds]
    interval = ratio_interval(paired_log_ratios(tonight, reference))
    assert abs(math.log(interval.ratio) - math.log(factor)) <= 1e-3 + 1e-9
    assert interval.low <= interval.ratio <= interval.high


@examples(200)
@given(
    rounds=st.lists(st.tuples(SECONDS, SECONDS), min_size=1, max_size=30),
    scale=st.floats(min_value=1e-6, max_value=1e6),
)
def test_scaling_both_arms_by_one_factor_changes_nothing(
    rounds: list[tuple[float, float]], scale: float
) -> None:
    """The same rounds in another unit (milliseconds, minutes, per reference workload) give the
    same ratio and interval, up to rounding (1e-9 on the log scale)."""
    tonight = [t for t, _ in rounds]
    reference = [r for _, r in rounds]
    plain = ratio_interval(paired_log_ratios(tonight, reference))
    scaled = ratio_interval(
        paired_log_ratios([t * scale for t in tonight], [r * scale for r in reference])
    )
    assert scaled.pairs == plain.pairs
    for a, b in ((plain.ratio, scaled.ratio), (plain.low, scaled.low), (plain.high, scaled.high)):
        if a in (0.0, math.inf):
            assert b == a
        else:
            assert math.log(b) == pytest.approx(math.log(a), abs=1e-9)


@examples(300)
@given(
    log_ratios=st.lists(st.floats(min_value=-800, max_value=800), min_size=1, max_size=40),
    confidence=st.floats(min_value=0.5, max_value=0.999),
)
def test_the_interval_holds_its_ratio(log_ratios: list[float], confidence: float) -> None:
    interval = ratio_interval(log_ratios, confidence)
    assert 0.0 <= interval.low <= interval.ratio <= interval.high
    assert not any(math.isnan(x) for x in (interval.ratio, interval.low, interval.high))
    assert interval.pairs == len(log_ratios)


def test_one_round_has_an_interval_from_0_to_infinity() -> None:
    assert ratio_interval([math.log(1.1)]) == RatioInterval(pytest.approx(1.1), 0.0, math.inf, 1)


@pytest.mark.parametrize(
    ("log_ratios", "confidence", "named"),
    [
        ([], 0.95, "log_ratios: no round"),
        ([0.1, math.nan], 0.95, r"log_ratios\[1\]"),
        ([0.1, math.inf], 0.95, r"log_ratios\[1\]"),
        ([0.1, 0.2], 1.0, "confidence"),
        ([0.1, 0.2], 0.0, "confidence"),
        ([0.1, 0.2], math.nan, "confidence"),
    ],
)
def test_no_round_a_bad_log_ratio_or_confidence_is_refused(
    log_ratios: list[float], confidence: float, named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        ratio_interval(log_ratios, confidence)


def test_the_95_percent_interval_covers_the_true_ratio_in_95_percent_of_nights() -> None:
    """1,000 nights of 8 rounds, each round's log-ratio drawn from a normal law around
    log 1.02 with a spread of 1 %: the interval holds 1.02 in 95.1 % of them (measured; 95.2 %
    over 4,000 nights), as a Student-t interval of independent rounds should."""
    covered = 0
    for seed in range(1000):
        logs = np.random.default_rng(seed).normal(math.log(1.02), 0.01, 8)
        interval = ratio_interval(logs.tolist())
        covered += interval.low <= 1.02 <= interval.high
    assert 0.93 <= covered / 1000 <= 0.97


# change points

MIN_SEGMENT = 4


def nightly_series(seed: int, step: bool, seconds: bool) -> tuple[list[float], int | None]:
    """20 to 60 nights (by seed) of 1 % noise, with a 3 % step at a night drawn among those
    that leave ``MIN_SEGMENT`` + 2 nights before it and + 1 after it: as log-ratios (no
    unit), or as a reference arm's times of about 250 s. Returns the series and the step's
    first night."""
    rng = np.random.default_rng(seed)
    nights = 20 + seed % 41
    first = int(rng.integers(MIN_SEGMENT + 2, nights - MIN_SEGMENT - 1)) if step else None
    logs = rng.normal(0.0, 0.01, nights)
    if first is not None:
        logs[first:] += math.log(1.03)
    return (250.0 * np.exp(logs) if seconds else logs).tolist(), first


@pytest.mark.parametrize("seconds", [False, True], ids=["log-ratios", "seconds"])
def test_a_3_percent_step_in_1_percent_noise_is_found_at_its_night(seconds: bool) -> None:
    """300 series of 20 to 60 nights, each with one 3 % step (a log-ratio series, or a
    reference arm's seconds): measured, a change is placed within a night of the step in
    94.7 % of them (both forms; 95.8 % of 1,000 seeds), within two nights in 98.0 and 98.3 %
    (98.9 and 99.0 % of 1,000), a change anywhere in 98.7 and 99.0 %, and a second, false
    change in 1.3 %. A step of 3σ cannot be placed much closer: the night next to it fits
    nearly as well in a few % of seeds, whatever the method."""
    within_one = within_two = more_than_one = 0
    for seed in range(300):
        series, first = nightly_series(seed, step=True, seconds=seconds)
        starts = [segment.start for segment in change_points(series, min_segment=MIN_SEGMENT)]
        assert first is not None and starts[0] == 0
        within_one += any(abs(start - first) <= 1 for start in starts[1:])
        within_two += any(abs(start - first) <= 2 for start in starts[1:])
        more_than_one += len(starts) > 2
    assert within_one / 300 >= 0.93
    assert within_two / 300 >= 0.97
    assert more_than_one / 300 <= 0.03


@pytest.mark.parametrize("seconds", [False, True], ids=["log-ratios", "seconds"])
def test_a_flat_noisy_series_shows_no_change_in_95_percent_of_seeds(seconds: bool) -> None:
    """600 flat series of 20 to 60 nights of 1 % noise: measured, no change in 97.8 %
    (log-ratios) and 97.7 % (seconds) of them (98.65 % and 98.55 % of 2,000 seeds)."""
    flat = sum(
        len(change_points(nightly_series(seed, step=False, seconds=seconds)[0], min_segment=4)) == 1
        for seed in range(600)
    )
    assert flat / 600 >= 0.95


def test_a_series_is_judged_from_a_segment_on_each_side() -> None:
    assert [min_nights_to_judge(n) for n in (2, 4, 7)] == [4, 8, 14]
    step = [1.0, 1.01, 0.99, 1.0, 2.0, 2.01, 1.99, 2.0]
    assert [s.start for s in change_points(step, min_segment=4)] == [0, 4]
    short = step[1:]  # one night short: a segment of 3 cannot stand before the change
    assert change_points(short, min_segment=4) == [Segment(0, 7, pytest.approx(11 / 7), None)]


def test_each_segment_says_its_nights_its_level_and_its_significance() -> None:
    series = [1.0, 1.02, 0.98, 1.01, 0.99, 1.5, 1.52, 1.48, 1.51, 1.49]
    first, second = change_points(series, min_segment=3)
    assert (first.start, first.end, second.start, second.end) == (0, 5, 5, 10)
    assert (first.mean, second.mean) == (pytest.approx(1.0), pytest.approx(1.5))
    assert first.p_value is None
    assert second.p_value == pytest.approx(
        float(ttest_ind(series[5:], series[:5], equal_var=False).pvalue)
    )


def test_constant_and_noiseless_series() -> None:
    assert change_points([], min_segment=2) == []
    assert change_points([3.0] * 10, min_segment=2) == [Segment(0, 10, 3.0, None)]
    assert change_points([1.0] * 6 + [2.0] * 6, min_segment=3) == [
        Segment(0, 6, 1.0, None),
        Segment(6, 12, 2.0, 0.0),
    ]


def test_the_penalty_sets_the_price_of_a_change() -> None:
    series, _ = nightly_series(3, step=True, seconds=False)
    assert len(change_points(series, min_segment=4)) == 2
    assert len(change_points(series, min_segment=4, penalty=1.0)) == 1  # 1 log-unit²: huge
    price = 4 * noise_sigma(series) ** 2 * math.log(len(series))
    assert default_penalty(series) == pytest.approx(price)
    assert noise_sigma(series) == pytest.approx(0.01, rel=0.35)


@pytest.mark.parametrize(
    ("series", "options", "named"),
    [
        ([1.0, math.nan], {"min_segment": 2}, r"series\[1\]"),
        ([1.0, 2.0], {"min_segment": 1}, "min_segment"),
        ([1.0, 2.0], {"min_segment": 2.5}, "min_segment"),
        ([1.0, 2.0], {"min_segment": 2, "penalty": 0.0}, "penalty"),
        ([1.0, 2.0], {"min_segment": 2, "penalty": math.inf}, "penalty"),
        ([1.0, 2.0], {"min_segment": 2, "alpha": 1.0}, "alpha"),
    ],
)
def test_a_bad_series_or_setting_is_refused_naming_it(
    series: list[float], options: dict, named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        change_points(series, **options)


VALUES = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@examples(300)
@given(
    series=st.lists(VALUES, max_size=60) | st.lists(st.sampled_from([0.0, 1.0, 2.0]), max_size=40),
    min_segment=st.integers(2, 6),
    alpha=st.sampled_from([0.001, 0.01, 0.05]),
)
def test_the_segments_tile_the_series_each_long_enough_and_significant(
    series: list[float], min_segment: int, alpha: float
) -> None:
    segments = change_points(series, min_segment=min_segment, alpha=alpha)
    if not series:
        assert segments == []
        return
    assert segments[0].start == 0 and segments[-1].end == len(series)
    assert all(a.end == b.start for a, b in pairwise(segments))
    assert segments[0].p_value is None
    for segment in segments:
        assert segment.end - segment.start >= (min_segment if len(segments) > 1 else 1)
        assert segment.mean == pytest.approx(
            float(np.mean(series[segment.start : segment.end])), rel=1e-9, abs=1e-6
        )
    assert all(s.p_value is not None and 0 <= s.p_value < alpha for s in segments[1:])


@examples(100)
@given(
    seed=st.integers(0, 10_000),
    steps=st.lists(st.floats(min_value=-0.1, max_value=0.1), max_size=3),
    power=st.integers(-30, 30),
    negate=st.booleans(),
)
def test_the_segments_do_not_depend_on_the_unit(
    seed: int, steps: list[float], power: int, negate: bool
) -> None:
    """The series times a power of two (a change of unit that rounds almost nothing), or
    negated (the ratio reference / tonight), gives the same nights, and p-values equal but
    for rounding."""
    rng = np.random.default_rng(seed)
    series = rng.normal(0.0, 0.01, 36)
    for i, step in enumerate(steps):
        series[(i + 1) * 9 :] += step
    factor = (-1.0 if negate else 1.0) * 2.0**power
    plain = change_points(series.tolist(), min_segment=3)
    scaled = change_points((series * factor).tolist(), min_segment=3)
    assert [(s.start, s.end) for s in scaled] == [(s.start, s.end) for s in plain]
    assert scaled[0].p_value is None
    assert [s.p_value for s in scaled[1:]] == pytest.approx([s.p_value for s in plain[1:]])
    assert [s.mean for s in scaled] == pytest.approx([s.mean * factor for s in plain])


def test_welch_is_scipys_welch_t_test() -> None:
    for seed in range(200):
        rng = np.random.default_rng(seed)
        before = rng.normal(0.0, 1 + seed % 3, 2 + seed % 9).tolist()
        after = rng.normal(rng.normal(), 1.0, 2 + seed % 13).tolist()
        expected = float(ttest_ind(after, before, equal_var=False).pvalue)
        assert _welch(before, after) == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_the_detector_package_loads_no_numpy_scipy_or_ruptures() -> None:
    """The DAG files and the dashboard import results_db.regressions: its statistics load
    scipy and ruptures when first called, not when imported."""
    code = (
        "import sys\n"
        "import results_db.regressions\n"
        "print(','.join(m for m in ('numpy', 'scipy', 'ruptures') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
    assert {"change_points", "ratio_interval", "paired_log_ratios"} <= set(regressions.__all__)
