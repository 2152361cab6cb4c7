"""The run's metrics that every rank measures and the run keeps one value of, declared once.

A run metric is a number each rank puts in its final event (``finished``, ``failed`` or
``diverged``) under the metric's name, whose unit the name ends with (``_s``, ``_bytes``);
the run's value is the ranks' values reduced (the largest, the median, ...), ``None`` when
no rank measured it (records from before it was measured). Each is declared here, as a
:class:`RunMetric` of :data:`RUN_METRICS`, with its :class:`~scalebench.quantities.Quantity`
(unit and valid range), and these read the declaration:

- the records' check of a final event's field, its type and its range
  (``workers.records``);
- ``RunSummary.metrics``, the ranks' values reduced (``results_db.run_summary``);
- the run row written at ingest (``results_db.ingest.run_rows``);
- ``RunInfo.metrics``, read from the ``run`` table's columns (``results_db.queries.runs``);
- the Run page's facts and the runs table's columns (``dash_app.tables``,
  ``dash_app.pages.runs``).

What stays written out: the rank's measurement (``workers.tracker``), the ``run`` table's
column (``results_db.models``, held to the declaration by a test) and its migration.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scalebench import units
from scalebench.quantities import Quantity
from scalebench.request import MAX_GROUP_TIMEOUT_S

# How the ranks' values become the run's.
Reduction = Literal["max", "min", "mean", "median"]
REDUCTIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "max": max,
    "min": min,
    "mean": statistics.fmean,
    "median": statistics.median,
}
# Where the dashboard shows a run's value: the facts of its Run page, a column of the runs
# table.
Place = Literal["run_page", "runs_table"]
BIGINT_MAX = 2**63 - 1  # an ``int`` metric's column is a 64-bit integer


@dataclass(frozen=True)
class RunMetric:
    """One run metric: ``quantity`` names it (its unit at the end of the name) and gives its
    unit and valid range; ``kind`` is the Python type of its column (``float``: a double,
    ``int``: a 64-bit integer), ``reduce`` how the ranks' values make the run's, ``label``
    and ``shown`` where and under what name the dashboard shows it, ``text`` the value
    written out with its unit."""

    quantity: Quantity
    kind: type[int] | type[float]
    reduce: Reduction
    label: str
    shown: tuple[Place, ...] = ()
    text: Callable[[float | None], str] = units.number

    @property
    def name(self) -> str:
        """The field of the final event, the column of ``run`` and the key of the metrics."""
        return self.quantity.name

    @property
    def record_types(self) -> tuple[type, ...]:
        """The JSON types a final event may hold it as (a ``float`` accepts an integer)."""
        return (int,) if self.kind is int else (int, float)

    def of_ranks(self, values: Iterable[Any]) -> int | float | None:
        """The run's value from its ranks' (absent ones and any outside the quantity's range
        left out); ``None`` when no rank measured it."""
        measured = [v for v in values if v is not None and self.quantity.problem(v) is None]
        if not measured:
            return None
        value = REDUCTIONS[self.reduce](measured)
        return round(value) if self.kind is int else float(value)


RUN_METRICS: tuple[RunMetric, ...] = (
    RunMetric(
        Quantity(
            "machine_reference_s",
            "s",
            0.0,
            MAX_GROUP_TIMEOUT_S,
            "the machine's reference workload's seconds per sample",
        ),
        kind=float,
        reduce="median",  # workers.machine_reference: the nightly divides by it
        label="machine reference (median rank)",
    ),
    RunMetric(
        Quantity("peak_memory_bytes", "bytes", 0, BIGINT_MAX, "a rank's peak memory"),
        kind=int,
        reduce="max",  # the rank that needed the most: what a machine must hold
        label="peak memory (largest rank)",
        shown=("run_page", "runs_table"),
        text=units.byte_size,
    ),
)
BY_NAME: dict[str, RunMetric] = {metric.name: metric for metric in RUN_METRICS}


def shown_on(place: Place) -> tuple[RunMetric, ...]:
    """The metrics the dashboard shows at ``place``, in their declared order."""
    return tuple(metric for metric in RUN_METRICS if place in metric.shown)
