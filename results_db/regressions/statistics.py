"""The detector's arithmetic on values already read: no SQL, no I/O.

A change is judged on two samples of one metric (seconds, or seconds per second of the
machine's reference workload; samples/s for a throughput): the latest night's runs against
the baseline's.
"""

from __future__ import annotations

from statistics import fmean

from results_db.regressions.rules import MIN_BASELINE_RUNS, RULE, Rule


def compare(
    baseline: list[float],
    latest: list[float],
    higher_is_better: bool,
    rule: Rule = RULE,
) -> tuple[float, float, bool]:
    """(relative change, p-value, flagged) of ``latest`` against ``baseline``.

    The change is positive when ``latest`` is worse: (latest mean − baseline mean) / baseline
    mean, no unit (0.05 = 5 % worse). The p-value is a one-sided Mann–Whitney U test's that
    ``latest`` is worse; flagged when it is below ``rule.alpha`` and the change is at least
    ``rule.min_change``.
    """
    from scipy.stats import mannwhitneyu  # imported here: the DAG files read RULE

    base_mean, latest_mean = fmean(baseline), fmean(latest)
    change = (latest_mean - base_mean) / base_mean
    if higher_is_better:
        change = -change
    alternative = "less" if higher_is_better else "greater"
    p_value = float(mannwhitneyu(latest, baseline, alternative=alternative).pvalue)
    return change, p_value, p_value < rule.alpha and change >= rule.min_change


def judged_in_seconds(baseline_runs: int, latest_runs: int, latest_runs_in_seconds: int) -> bool:
    """Whether a metric of :data:`~results_db.regressions.rules.PER_REFERENCE` is judged in
    seconds instead, given how many baseline and latest runs timed the machine's reference and
    how many latest runs have the seconds: where the baseline has too few (runs stored before
    the reference was timed, or runs on a GPU, which never time it), or only the latest night's
    runs in seconds exist."""
    return baseline_runs < MIN_BASELINE_RUNS or (latest_runs_in_seconds > 0 and latest_runs == 0)
