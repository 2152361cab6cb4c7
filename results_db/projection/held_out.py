"""How wrong a projection is where it can be checked.

**Checked by leave-one-out** (:func:`leave_one_out`): every measured (k, link) point is
predicted by the same rules with that point's runs removed from the training sweep, so its
compute, packing, wait and steps come from the other points (the same ``k`` on another link
when there is one, else the nearest ``k``); the all-reduce fit is the Task 0 sweep's, which
the training sweep never fed. The error is (predicted − measured) / measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from results_db.projection.allreduce import RingFit
from results_db.projection.measured import TrainingSweep
from results_db.projection.training import ProjectionRefused, project


@dataclass(frozen=True)
class HeldOut:
    """One measured point predicted from the others: measured and predicted seconds per step,
    communication seconds per step and TTA, with relative errors (predicted − measured) /
    measured (None where the measured value is 0 or missing)."""

    network: str
    world_size: int
    measured_step_s: float
    predicted_step_s: float
    measured_communication_s: float
    predicted_communication_s: float
    measured_tta_s: float | None
    predicted_tta_s: float | None
    basis: str
    contended: int = 0

    @staticmethod
    def _error(predicted: float | None, measured: float | None) -> float | None:
        if predicted is None or measured is None or measured <= 0:
            return None
        return (predicted - measured) / measured

    @property
    def step_error(self) -> float | None:
        return self._error(self.predicted_step_s, self.measured_step_s)

    @property
    def communication_error(self) -> float | None:
        return self._error(self.predicted_communication_s, self.measured_communication_s)

    @property
    def tta_error(self) -> float | None:
        return self._error(self.predicted_tta_s, self.measured_tta_s)


def leave_one_out(
    sweep: TrainingSweep,
    fits: Sequence[RingFit],
    allreduce_sweep: str = "",
    whole_worker_count: bool = False,
) -> list[HeldOut]:
    """Every measured point predicted from the sweep without it (see the module's text); points
    whose link has no fit, or that have no other point to learn from, are left out.

    ``whole_worker_count``: leave out every point of the held-out point's worker count, on
    every link, so that compute, packing and steps must come from another worker count: the
    check of extrapolating in workers, which a projection to unmeasured counts does."""
    held = []
    for point in sorted(sweep.points, key=lambda p: (p.network, p.world_size)):
        others = sweep.without(point.network, point.world_size)
        if whole_worker_count:
            others = replace(
                others, points=tuple(p for p in others.points if p.world_size != point.world_size)
            )
        if not others.points:
            continue
        try:
            (predicted,) = project(
                others,
                fits,
                [point.network],
                [point.world_size],
                allreduce_sweep,
                include_measured=False,
            )
        except ProjectionRefused:
            continue
        held.append(
            HeldOut(
                network=point.network,
                world_size=point.world_size,
                measured_step_s=point.step_s,
                predicted_step_s=predicted.step_s,
                measured_communication_s=point.communication_s,
                predicted_communication_s=predicted.communication_s,
                measured_tta_s=point.time_to_accuracy_s,
                predicted_tta_s=predicted.time_to_accuracy_s,
                basis=predicted.basis,
                contended=point.contended,
            )
        )
    return held


def largest_error(held: Sequence[HeldOut], network: str | None = None) -> float | None:
    """The largest |step error| and |communication error| of the held-out points (of one
    link), for a legend; None when nothing could be checked."""
    errors = [
        abs(e)
        for h in held
        if network is None or h.network == network
        for e in (h.step_error, h.communication_error)
        if e is not None
    ]
    return max(errors) if errors else None
