"""What the nightly judges and when a change counts: the metrics, the rule and its defaults.

Nothing here reads the database: the DAG files read :data:`RULE` while Airflow parses them.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalebench.tasks import TASKS, AllReduceSpec

# Every metric the detector can compute -> True when a larger value is better.
MEASURES = {
    "time_to_accuracy_s": False,
    "samples_per_s": True,
    "steady_step_s": False,
    "allreduce_largest_s": False,
    "time_to_accuracy_per_reference": False,
    "steady_step_per_reference": False,
    "allreduce_largest_per_reference": False,
}
# Metrics relative to the machine's speed: the metric in seconds divided by the run's
# ``machine_reference_s`` (both in seconds, so the ratio has no unit), for runs that timed it.
PER_REFERENCE = {
    "time_to_accuracy_per_reference": "time_to_accuracy_s",
    "steady_step_per_reference": "steady_step_s",
    "allreduce_largest_per_reference": "allreduce_largest_s",
}
# Fewer baseline runs than this at a worker count: nothing is judged there.
MIN_BASELINE_RUNS = 3
# The metrics the nightly judges, a subset of MEASURES.
# Time to accuracy and the steady step time are judged relative to the machine's reference
# workload: a virtual machine's speed drifts by a third within the hour, which drowns a 10 %
# change of the code in seconds (docs/benchmarks.md, "How sensitive the nightly is"). Where
# the baseline has fewer than MIN_BASELINE_RUNS runs that timed the reference (runs stored
# before it was timed), the same metric is judged in seconds instead.
# Whole-run samples/s is not among them: it counts the warm-up, evaluation and the time between
# steps, spreads more from run to run, and on the same measured nights flagged none of those 10 %
# slower that steady_step_s flagged.
METRICS = {
    "time_to_accuracy_per_reference": False,
    "steady_step_per_reference": False,
    "allreduce_largest_s": False,
}


@dataclass(frozen=True)
class Rule:
    """When a sweep counts as a regression of its baseline."""

    window: int = 7  # earlier scheduled sweeps of the configuration compared
    alpha: float = 0.01  # significance level of the one-sided Mann–Whitney U test
    min_change: float = 0.05  # relative worsening of the mean (0.05 = 5 %)
    min_baseline_sweeps: int = 2  # fewer earlier sweeps: nothing to compare with

    def describe(self) -> str:
        """The rule in words, e.g. for the nightly DAG's documentation."""
        return (
            f"a one-sided Mann–Whitney U test gives p < {self.alpha:g} and the mean is at "
            f"least {self.min_change * 100:g} % worse than over the last {self.window} "
            "scheduled sweeps of the same configuration (contended runs, and earlier runs on "
            "other hardware, left out)"
        )


RULE = Rule()


def judged_metrics(task: str) -> dict[str, bool]:
    """The metrics of :data:`METRICS` that a sweep of ``task`` measures: the all-reduce's for
    the all-reduce task, the training ones for a training task (all, for a task not known)."""
    spec = TASKS.get(task)
    if spec is None:
        return METRICS
    allreduce = isinstance(spec, AllReduceSpec)
    return {m: b for m, b in METRICS.items() if (m == "allreduce_largest_s") == allreduce}
