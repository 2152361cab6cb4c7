"""A scaling projection: time per step, time to accuracy and cost at worker counts and links
that were not measured, from those that were, and how wrong it is where it can be checked.

Pure functions on plain numbers and small typed rows; the database reads are in
:mod:`results_db.queries.projection`, the stored fits are written by :mod:`results_db.fits`.
One module per subject, each saying how its part of the model works:

- :mod:`results_db.projection.allreduce`: the all-reduce's ring model, fitted to a Task 0
  curve, and the models across nodes (:func:`fit_ring`, :class:`RingFit`);
- :mod:`results_db.projection.measured`: what was measured of a training sweep
  (:class:`TrainingSweep`, :class:`MeasuredPoint`);
- :mod:`results_db.projection.training`: the sweep projected to each (link, worker count):
  step time, time to accuracy and cost (:func:`project`);
- :mod:`results_db.projection.held_out`: each measured point predicted from the others
  (:func:`leave_one_out`).

Every public name is importable from this package.
"""

from __future__ import annotations

from results_db.projection.allreduce import (
    RingFit,
    SizeTime,
    fit_ring,
    hierarchical_seconds,
    node_model_errors,
    node_models,
    ring_seconds,
)
from results_db.projection.held_out import HeldOut, largest_error, leave_one_out
from results_db.projection.measured import (
    DTYPE_BYTES,
    PRECISION_DTYPE,
    MeasuredPoint,
    TrainingSweep,
    gradient_bytes,
)
from results_db.projection.training import (
    DEFAULT_PROJECTED_WORKERS,
    MAX_PROJECTED_WORKERS,
    Prices,
    ProjectedPoint,
    ProjectionRefused,
    choose_fit,
    missing_fit_message,
    project,
    project_point,
    steps_to_goal,
)

__all__ = [
    "DEFAULT_PROJECTED_WORKERS",
    "DTYPE_BYTES",
    "MAX_PROJECTED_WORKERS",
    "PRECISION_DTYPE",
    "HeldOut",
    "MeasuredPoint",
    "Prices",
    "ProjectedPoint",
    "ProjectionRefused",
    "RingFit",
    "SizeTime",
    "TrainingSweep",
    "choose_fit",
    "fit_ring",
    "gradient_bytes",
    "hierarchical_seconds",
    "largest_error",
    "leave_one_out",
    "missing_fit_message",
    "node_model_errors",
    "node_models",
    "project",
    "project_point",
    "ring_seconds",
    "steps_to_goal",
]
