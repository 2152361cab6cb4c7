"""A training sweep projected: time per step, time to accuracy and cost at each (link,
worker count), measured points as measured and the others from the nearest measured ones
and the all-reduce fits (:func:`project`).

**Time per step** of a synchronous training configuration at ``k`` workers over a link::

    step(k, link) = compute(k) + gradient_packing(k) + communication(k, link)

- ``compute``: data, forward, loss, backward and optimizer seconds per step and rank. The
  per-worker batch is fixed by the task, so per-step compute does not depend on ``k`` on a
  cluster of one worker per node; an unmeasured ``k`` takes the nearest measured worker
  count's compute (on any link: the link does not change compute), and its basis says so.
- ``gradient_packing``: copying the gradients into and out of the flat buffer; 0 at one
  worker (nothing is packed), else the nearest measured ``k ≥ 2`` on any link.
- ``communication = t(gradient bytes, k) + wait(k)``: the ring model with the α, β of the
  Task 0 fit of the same backend, device and link (the dtype of the gradients, else another
  dtype's fit, said in the basis), at the gradient message's size ((parameters + 1) × the
  bytes of a parameter: the loss rides along as one element, ``workers/sync_sgd.py``), plus
  ``wait``, in seconds per step and rank: the all-reduce is the step's only synchronisation,
  so a rank that arrives first waits in it for the last. It is measured two ways, each
  averaged over a run's steps:

  - *in the collective*: per step, the ranks' mean communication seconds minus the least of
    them (the rank that arrived last waited for nobody). It holds every reason the ranks
    arrived apart, the link's own among them: on a shaped link one rank leaves the collective
    tens of milliseconds before another (light Task 1a at 2 workers over 10mbit: 80–90 ms apart
    per step on average, against 2–3 ms on host), so the next step starts apart too;
  - *for the slowest computation*: per step, the slowest rank's data + forward + loss +
    backward seconds minus the ranks' mean of them. It leaves out when each rank left the
    previous collective, so it is the part of the wait that does not depend on the link.

  A point takes the nearest measured ``k ≥ 2`` (its own link first on a tie): that point's
  wait in the collective when it is on the same link, else its wait for the slowest
  computation (a wait in the collective measured on another link would carry that link's
  departures; on host both measures agreed within 1 ms). The basis names which.
- ``ddp`` runs overlap gradient buckets with backward (their measured backward holds the part
  of the all-reduce that did not overlap); the model adds the whole all-reduce after backward,
  so their projection is an **upper bound**.

**Time to accuracy** = steps to the goal × step + evaluation seconds. Steps to the goal at a
measured ``k`` are the runs' (any link: the link does not change the arithmetic); at an
unmeasured ``k``, the nearest measured ``k``'s epochs to the goal × the steps of an epoch at
``k`` (an epoch's samples over the global batch, k × per-worker batch), and its evaluations'
seconds. The task texts give no epochs to the goal per worker count, so every projected TTA
names the worker count it took them from. **Cost** = k × ($/h of a node + its GPU) × TTA in
hours (:func:`results_db.analytics.cost`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from results_db import analytics
from results_db.projection.allreduce import RingFit
from results_db.projection.measured import MeasuredPoint, TrainingSweep

MAX_PROJECTED_WORKERS = 1024
DEFAULT_PROJECTED_WORKERS = (1, 2, 4, 8, 16, 32, 64)


class ProjectionRefused(ValueError):
    """A projection that cannot be made; the message names what is missing."""


@dataclass(frozen=True)
class Prices:
    """Dollars per hour of one worker, its node's and its GPU's together, regular and
    preemptible."""

    instance: str
    gpu: str | None
    regular_per_hour: float
    preemptible_per_hour: float


@dataclass(frozen=True)
class ProjectedPoint:
    """One (link, worker count) of a projection. Seconds per step and rank, TTA in seconds,
    cost in dollars; ``basis`` says where each part came from ("measured" for a measured
    point); ``upper_bound``: a ddp run's projection (overlap not modelled)."""

    network: str
    world_size: int
    measured: bool
    compute_s: float
    gradient_packing_s: float
    communication_s: float
    step_s: float
    time_to_accuracy_s: float | None
    speedup: float | None
    cost_regular: float | None
    cost_preemptible: float | None
    basis: str
    upper_bound: bool = False

    @property
    def communication_share(self) -> float:
        return self.communication_s / self.step_s if self.step_s > 0 else 0.0


def _nearest(points: Sequence[MeasuredPoint], world_size: int, network: str) -> MeasuredPoint:
    """The point nearest ``world_size`` (in log2 of workers); on a tie the same link first,
    then the larger worker count, then the point other processes disturbed least (the smallest
    contention share: what a link not measured at all gets)."""
    return min(
        points,
        key=lambda p: (
            abs(math.log2(p.world_size) - math.log2(world_size)),
            p.network != network,
            -p.world_size,
            p.contention_share if p.contention_share is not None else 0.0,
        ),
    )


def _where(point: MeasuredPoint) -> str:
    return f"{point.world_size} worker(s) on {point.network}"


def choose_fit(
    fits: Sequence[RingFit],
    backend: str,
    device: str,
    dtype: str,
    network: str,
    world_size: int,
    ranks_per_node: int = 1,
) -> RingFit | None:
    """The fit for a collective of ``dtype`` at ``world_size`` on ``network`` with
    ``ranks_per_node``: same backend, device and link; a fit of a group on the same side of
    the node boundary first (inside one node, or across nodes), then the gradient's dtype,
    then the nearest fitted worker count."""
    across = world_size > ranks_per_node
    kind = device.split(":")[0]
    matching = [
        f
        for f in fits
        if f.backend == backend and f.device.split(":")[0] == kind and f.network == network
    ]
    if not matching:
        return None
    return min(
        matching,
        key=lambda f: (
            f.across_nodes != across,
            f.dtype != dtype,
            abs(math.log2(f.world_size) - math.log2(max(world_size, 2))),
            -f.world_size,
        ),
    )


def _boundary_note(fit: RingFit, across: bool, ranks_per_node: int) -> str:
    """What a basis says of the node boundary: nothing while every group is one rank per node
    on both sides, else the fit's shape and, where it is on the other side of the boundary
    than the point, that it stands in for a missing one."""
    if fit.ranks_per_node == 1 and ranks_per_node == 1:
        return ""
    where = "across nodes" if fit.across_nodes else "inside one node"
    if fit.across_nodes != across:
        wanted = "across nodes" if across else "inside one node"
        return f" ({fit.shape}, {where}; no fit {wanted} to take)"
    return f" ({fit.shape}, {where})"


def missing_fit_message(sweep: TrainingSweep, network: str, allreduce_sweep: str) -> str:
    """The one sentence refusing a link that the Task 0 sweep has no fit for."""
    return (
        f"no all-reduce fit for {sweep.backend} on {sweep.device.split(':')[0]} over {network} "
        f"in sweep {allreduce_sweep}; a Task 0 sweep provides it: scalebench run "
        f"task0-allreduce --backend {sweep.backend} --device {sweep.device.split(':')[0]} "
        f"--network {network} --workers 2"
    )


def project_point(
    sweep: TrainingSweep,
    fits: Sequence[RingFit],
    network: str,
    world_size: int,
    allreduce_sweep: str = "",
) -> ProjectedPoint:
    """Project one (link, worker count) from the sweep's measured points (none of them at
    this point: pass a sweep without it) and the Task 0 fits. TTA, speedup and cost are
    filled by :func:`project`."""
    if not sweep.points:
        raise ProjectionRefused(f"sweep {sweep.sweep_id} has no successful run to project from")
    k = world_size
    source = _nearest(sweep.points, k, network)
    basis = [f"compute from {_where(source)}"]
    compute_s = source.compute_s
    packing_s = wait_s = 0.0
    if k > 1:
        several = [p for p in sweep.points if p.world_size > 1]
        # The wait in the collective differs across the node link: the same side first.
        side = [p for p in several if sweep.across_nodes(p.world_size) == sweep.across_nodes(k)]
        if several:
            packer = _nearest(side or several, k, network)
            packing_s, wait_s = packer.gradient_packing_s, packer.wait_s
            if packer.network == network and packer.collective_wait_s is not None:
                wait_s = packer.collective_wait_s
                basis.append(f"packing and wait in the collective from {_where(packer)}")
            else:
                basis.append(f"packing and wait for the slowest computation from {_where(packer)}")
        else:
            basis.append("packing and wait not measured (no run above 1 worker): 0 s")
    communication_s = 0.0
    if k > 1:
        fit = choose_fit(
            fits,
            sweep.backend,
            sweep.device,
            sweep.gradient_dtype,
            network,
            k,
            sweep.ranks_per_node,
        )
        if fit is None:
            raise ProjectionRefused(missing_fit_message(sweep, network, allreduce_sweep))
        communication_s = fit.seconds(source.gradient_bytes, k) + wait_s
        dtype = "" if fit.dtype == sweep.gradient_dtype else f" {fit.dtype}"
        basis.append(
            f"all-reduce from the{dtype} fit at {fit.world_size} worker(s) on {network}"
            + _boundary_note(fit, sweep.across_nodes(k), sweep.ranks_per_node)
        )
    step_s = compute_s + packing_s + communication_s
    return ProjectedPoint(
        network=network,
        world_size=k,
        measured=False,
        compute_s=compute_s,
        gradient_packing_s=packing_s,
        communication_s=communication_s,
        step_s=step_s,
        time_to_accuracy_s=None,
        speedup=None,
        cost_regular=None,
        cost_preemptible=None,
        basis="projected: " + "; ".join(basis),
        upper_bound=sweep.variant == "ddp",
    )


def steps_to_goal(
    points: Sequence[MeasuredPoint], world_size: int, network: str
) -> tuple[float, float, str] | None:
    """Steps to the goal at ``world_size``, the evaluation seconds on the way, and the basis:
    the runs at that worker count (any link), else the nearest worker count's epochs to the
    goal × the steps of an epoch at ``world_size``. None when no run reached the goal."""
    reached = [p for p in points if p.time_to_accuracy_s is not None and p.epochs > 0]
    if not reached:
        return None
    same = [p for p in reached if p.world_size == world_size]
    if same:
        source = min(same, key=lambda p: p.network != network)
        return source.steps, source.eval_s, f"steps to the goal from {_where(source)}"
    source = _nearest(reached, world_size, network)
    per_epoch_there = source.steps / source.epochs
    # An epoch's samples are fixed; the global batch is k × the per-worker batch.
    per_epoch = math.ceil(per_epoch_there * source.world_size / world_size)
    return (
        source.epochs * per_epoch,
        source.eval_s,
        f"{source.epochs:g} epochs to the goal from {_where(source)} (the task text gives "
        "none per worker count)",
    )


def project(
    sweep: TrainingSweep,
    fits: Sequence[RingFit],
    networks: Sequence[str],
    world_sizes: Sequence[int],
    allreduce_sweep: str = "",
    prices: Prices | None = None,
    include_measured: bool = True,
) -> list[ProjectedPoint]:
    """Step time, communication share, TTA, speedup and cost at every (link, worker count):
    measured points as measured (``include_measured``), the others projected."""
    if not sweep.points:
        raise ProjectionRefused(f"sweep {sweep.sweep_id} has no successful run to project from")
    too_many = [k for k in world_sizes if k > MAX_PROJECTED_WORKERS]
    if too_many:
        raise ProjectionRefused(
            f"workers: a projection beyond {MAX_PROJECTED_WORKERS:,} workers is refused "
            f"(asked {max(too_many):,}): the model knows no topology beyond one switch"
        )
    if any(k < 1 for k in world_sizes):
        raise ProjectionRefused("workers: worker counts must be 1 or more")
    measured = {(p.network, p.world_size): p for p in sweep.points}
    out: list[ProjectedPoint] = []
    for network in networks:
        row: list[ProjectedPoint] = []
        for k in sorted(set(world_sizes)):
            point = measured.get((network, k)) if include_measured else None
            if point is not None:
                row.append(_as_measured(point))
            else:
                row.append(_projected_to_goal(sweep, fits, network, k, allreduce_sweep))
        one = measured.get((network, 1))
        base_tta = _one_worker_tta(sweep, fits, network, row, one, allreduce_sweep)
        out.extend(_priced(p, base_tta, prices) for p in row)
    return out


def _as_measured(point: MeasuredPoint) -> ProjectedPoint:
    """A measured point as one of a projection (speedup and cost to be filled)."""
    return ProjectedPoint(
        network=point.network,
        world_size=point.world_size,
        measured=True,
        compute_s=point.compute_s,
        gradient_packing_s=point.gradient_packing_s,
        communication_s=point.communication_s,
        step_s=point.step_s,
        time_to_accuracy_s=point.time_to_accuracy_s,
        speedup=None,
        cost_regular=None,
        cost_preemptible=None,
        basis="measured",
    )


def _projected_to_goal(
    sweep: TrainingSweep,
    fits: Sequence[RingFit],
    network: str,
    world_size: int,
    allreduce_sweep: str,
) -> ProjectedPoint:
    """:func:`project_point` with its time to accuracy, where a run reached the goal."""
    projected = project_point(sweep, fits, network, world_size, allreduce_sweep)
    goal = steps_to_goal(sweep.points, world_size, network)
    if goal is None:
        return projected
    steps, eval_s, goal_basis = goal
    return replace(
        projected,
        time_to_accuracy_s=steps * projected.step_s + eval_s,
        basis=f"{projected.basis}; {goal_basis}",
    )


def _one_worker_tta(
    sweep: TrainingSweep,
    fits: Sequence[RingFit],
    network: str,
    row: Sequence[ProjectedPoint],
    one: MeasuredPoint | None,
    allreduce_sweep: str,
) -> float | None:
    """The TTA at one worker on ``network`` that speedups are against: the row's, else the
    measured one (``one``), else projected (speedup needs it even where it was not asked)."""
    base = next((p for p in row if p.world_size == 1), None)
    if base is not None:
        return base.time_to_accuracy_s
    base_tta = one.time_to_accuracy_s if one else None
    if base_tta is None:
        goal = steps_to_goal(sweep.points, 1, network)
        if goal is not None:
            single = project_point(sweep, fits, network, 1, allreduce_sweep)
            base_tta = goal[0] * single.step_s + goal[1]
    return base_tta


def _priced(point: ProjectedPoint, base_tta: float | None, prices: Prices | None) -> ProjectedPoint:
    """``point`` with its speedup against ``base_tta`` and its cost at ``prices``."""
    tta = point.time_to_accuracy_s
    speed = base_tta / tta if base_tta and tta else None
    cost_regular = cost_preemptible = None
    if prices is not None and tta is not None:
        cost_regular = analytics.cost(point.world_size, prices.regular_per_hour, 0.0, tta)
        cost_preemptible = analytics.cost(point.world_size, prices.preemptible_per_hour, 0.0, tta)
    return replace(
        point,
        speedup=speed,
        cost_regular=cost_regular,
        cost_preemptible=cost_preemptible,
    )
