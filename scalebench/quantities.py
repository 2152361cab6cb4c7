"""Every measured quantity a run stores: its unit and the values it can take.

Declared once, here, beside the metrics' names, and applied wherever records are
loaded (``results_db.schema_limits.check_record``): a record holding a value outside
its quantity's range (an accuracy of 150 %, a negative loss or learning rate, a machine
with no CPU) is not a measurement but damage, and is quarantined with the reason instead
of being stored. Durations in seconds are bounded by the records' own clock limit
(``workers.records.MAX_RECORD_S``), byte and element counts by their columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# The largest group a sweep can plan or store: far beyond any cluster these benchmarks
# describe (the seeds' largest is 64 GPUs), small enough that a per-rank message stays short.
MAX_WORLD_SIZE = 4096
# The most CPUs (logical processors) one machine or one rank can have: twice the most a
# Linux kernel is built for (8,192 with CONFIG_MAXSMP on x86-64; the largest machines have a
# few thousand). A count beyond it is damage, and the contention analytics divide by it.
MAX_CPUS = 16_384


@dataclass(frozen=True)
class Quantity:
    """One stored quantity: its unit (``%`` for a 0-to-100 score, ``1`` for a plain number)
    and its valid closed range; ``None`` bounds are open, NaN and infinity never valid."""

    name: str
    unit: str
    low: float | None
    high: float | None
    meaning: str

    def problem(self, value: Any) -> str | None:
        """Why ``value`` cannot be this quantity (``None``: it can, or it is absent)."""
        if value is None:
            return None
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if (
            not number
            or not math.isfinite(value)
            or (self.low is not None and value < self.low)
            or (self.high is not None and value > self.high)
        ):
            return f"{self.name} is {_shown(value)}: {self.meaning} lies {self.bounds()}"
        return None

    def bounds(self) -> str:
        """The range in words, with the unit."""
        unit = "" if self.unit == "1" else f" {self.unit}"
        if self.low is None and self.high is None:
            return "as a finite number"
        if self.high is None:
            return f"at or above {self.low:g}{unit}"
        if self.low is None:
            return f"at or below {self.high:g}{unit}"
        return f"from {self.low:g} to {self.high:g}{unit}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _score(name: str, meaning: str) -> Quantity:
    return Quantity(name, "%", 0.0, 100.0, meaning)


# Evaluation metrics (an eval record's ``metrics``; a goal's ``metric``), by name.
METRICS: dict[str, Quantity] = {
    q.name: q
    for q in (
        _score("top1_accuracy", "a top-1 accuracy"),
        _score("accuracy", "an accuracy"),
        _score("bleu", "a BLEU score"),
        Quantity("perplexity", "1", 1.0, None, "a perplexity"),
        Quantity("loss", "1", 0.0, None, "a loss (cross-entropy or logistic)"),
    )
}

# Other quantities of the records, by record kind and field.
FIELDS: dict[tuple[str, str], Quantity] = {
    ("step", "loss"): Quantity("loss", "1", 0.0, None, "a training loss"),
    ("step", "lr"): Quantity("lr", "1", 0.0, None, "a learning rate"),
    ("env", "cpu_count"): Quantity("cpu_count", "CPUs", 1, MAX_CPUS, "a machine's CPU count"),
    ("env", "cpus_allowed"): Quantity("cpus_allowed", "CPUs", 1, MAX_CPUS, "a rank's CPU count"),
    ("env", "torch_threads"): Quantity("torch_threads", "threads", 1, MAX_CPUS, "a thread count"),
    ("env", "node_rank"): Quantity("node_rank", "index", 0, MAX_WORLD_SIZE - 1, "a node index"),
    ("env", "local_rank"): Quantity("local_rank", "index", 0, MAX_WORLD_SIZE - 1, "a local rank"),
    ("env", "local_world_size"): Quantity(
        "local_world_size", "ranks", 1, MAX_WORLD_SIZE, "a node's rank count"
    ),
    ("event:finished", "recompilations"): Quantity(
        "recompilations", "1", 0, None, "a count of recompilations"
    ),
    ("any", "world_size"): Quantity("world_size", "ranks", 1, MAX_WORLD_SIZE, "a group's size"),
}


def metric_problem(metric: str, value: Any, what: str = "") -> str | None:
    """Why ``value`` cannot be metric ``metric`` (a metric of no declared range: only a
    finite number or ``None`` is asked); ``what`` names it in the reason (default: the
    metric's name)."""
    declared = METRICS.get(metric) or Quantity(metric, "1", None, None, "a metric")
    problem = declared.problem(value)
    if problem is not None and what:
        problem = problem.replace(metric, what, 1)
    return problem
