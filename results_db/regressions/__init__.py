"""Nightly regression detection: did the latest nightly get slower than its baseline?

A paired night (tonight's stack beside a pinned reference stack) is judged by the modules
``shifts``, ``paired_findings`` and ``triage`` listed below; the text that follows is the
unpaired detector's, which judges a night against the runs of earlier nights.

For each worker count of the latest scheduled sweep, its runs are compared
with the runs of the same configuration (task, light, backend, variant,
precision) in up to ``Rule.window`` earlier scheduled sweeps. A configuration
is flagged only when both hold:

- the difference is **significant**: a one-sided Mann–Whitney U test
  (``p < Rule.alpha``) says the latest values are worse, and
- it is **large enough**: the mean moved by at least ``Rule.min_change``
  (0.05 = 5 %) in the bad direction.

:data:`RULE` holds the defaults; the nightly DAG, ``scalebench db regressions``
and the dashboard's Compare page read them from here.

Metrics (:data:`METRICS`, lower is better): time to accuracy and
``steady_step_s``, a training run's steady step after its first
:data:`WARMUP_STEPS` steps (each step's slowest rank: its own work in its quietest stretch
plus the mean of the rest, :func:`~results_db.regressions.values.steady_parts`), both
divided by the run's ``machine_reference_s`` (:data:`PER_REFERENCE`): a fixed workload each
rank times at its start and end (:mod:`workers.machine_reference`), so that a
host that got slower since last week is not taken for slower code. Where the
baseline's runs were stored before the reference was timed, the same metrics
are judged in seconds. For the all-reduce task, ``allreduce_largest_s``: a
run's median over repetitions of the slowest rank's time for its largest
``float32`` message. :data:`MEASURES` adds training throughput in samples/s
(higher is better) and the metrics' other forms, which the nightly does not
judge but the power benchmark can.

Only comparable runs are compared. Runs marked ``contended`` (other processes
took more than the threshold's share of their cores, see
:func:`results_db.analytics.contention_share`) are left out on both sides, and
baseline runs on other hardware than the latest sweep's (a different processor
or GPU) too; baseline runs from before the hardware was recorded are kept.
Each finding says how many runs it left out.

A rank test needs several latest repeats to reach a small p: with one latest
run among 21 baseline runs the smallest possible p is 1/22 ≈ 0.045, so a
single noisy point never raises an alarm at the default ``alpha = 0.01``.

The package, each module resting only on those listed after it (and the models):

- :mod:`~results_db.regressions.detection`: :func:`judge` and :func:`detect`, the detector;
- :mod:`~results_db.regressions.storing`: :func:`record`, the flags stored for the dashboard;
- :mod:`~results_db.regressions.values`: the compared runs' values, read from the database;
- :mod:`~results_db.regressions.triage`: the paired nightly's findings stored, one per change,
  and their triage states;
- :mod:`~results_db.regressions.comparable`: which earlier nights and which of their runs are
  compared (:class:`Comparable`, :data:`NIGHT`);
- :mod:`~results_db.regressions.wording`: the sentences of findings and of what was not judged;
- :mod:`~results_db.regressions.findings`: :class:`Finding`, :class:`NotJudged` and
  :class:`Detection`, plain values;
- :mod:`~results_db.regressions.statistics`: :func:`compare` and :func:`judged_in_seconds`,
  arithmetic on values already read;
- :mod:`~results_db.regressions.paired_findings`: a paired nightly's series, each judged on its
  newest night, grouped into one change per night, attributed to the stack or the platform;
- :mod:`~results_db.regressions.shifts`: :func:`~results_db.regressions.shifts.judge_arm`, the
  test of an arm's newest nights against the level before them;
- :mod:`~results_db.regressions.paired`: a paired nightly's rounds, tonight's stack against a
  pinned reference stack: :func:`paired_log_ratios` and :func:`ratio_interval`;
- :mod:`~results_db.regressions.segments`: :func:`change_points` of a nightly series and
  :func:`min_nights_to_judge`;
- :mod:`~results_db.regressions.rules`: :class:`Rule`, :data:`RULE` and the metrics.

Every name is re-exported here: ``from results_db import regressions`` and
``regressions.RULE`` read the same objects as the modules.
"""

from __future__ import annotations

from results_db.regressions.comparable import NIGHT, Comparable
from results_db.regressions.detection import detect, judge
from results_db.regressions.findings import Detection, Finding, NotJudged
from results_db.regressions.paired import RatioInterval, paired_log_ratios, ratio_interval
from results_db.regressions.rules import (
    MEASURES,
    METRICS,
    MIN_BASELINE_RUNS,
    PER_REFERENCE,
    RULE,
    Rule,
    judged_metrics,
)
from results_db.regressions.segments import Segment, change_points, min_nights_to_judge
from results_db.regressions.statistics import compare, judged_in_seconds
from results_db.regressions.storing import record
from results_db.regressions.values import WARMUP_STEPS, RunValue, metric_values, run_values
from results_db.regressions.wording import left_out_text

__all__ = [
    "MEASURES",
    "METRICS",
    "MIN_BASELINE_RUNS",
    "NIGHT",
    "PER_REFERENCE",
    "RULE",
    "WARMUP_STEPS",
    "Comparable",
    "Detection",
    "Finding",
    "NotJudged",
    "RatioInterval",
    "Rule",
    "RunValue",
    "Segment",
    "change_points",
    "compare",
    "detect",
    "judge",
    "judged_in_seconds",
    "judged_metrics",
    "left_out_text",
    "metric_values",
    "min_nights_to_judge",
    "paired_log_ratios",
    "ratio_interval",
    "record",
    "run_values",
]
