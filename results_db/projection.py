"""A scaling projection: time per step, time to accuracy and cost at worker counts and links
that were not measured, from those that were, and how wrong it is where it can be checked.

Pure functions on plain numbers and small typed rows; the database reads are in
:mod:`results_db.queries.projection`, the stored fits are written by :mod:`results_db.fits`.

**All-reduce (Task 0).** Each configuration (backend, device, dtype, link, worker count) is
fitted with the ring model of an all-reduce of ``n`` bytes over ``k`` workers::

    t(n, k) = 2(k − 1)·α + 2(k − 1)/k · n/β

``α`` (seconds) is the latency of one of the ring's 2(k − 1) steps, ``β`` (bytes per second)
the bandwidth of one worker's link. It is fitted to the median seconds of each message size
in *relative* error, each size weighing the same whether it takes 50 µs or 5 s: least
absolute log error, robust to the few sizes the model cannot describe (:func:`fit_ring` says
why not least squares); its residual is the root mean square of the relative errors over
the sizes, shown with their median and largest.

Which algorithm the backends run, and where the ring model is the wrong one:

- **gloo** (CPU tensors): torch's ``ProcessGroupGloo`` all-reduces with gloo's ring
  (reduce-scatter then all-gather, 2(k − 1) steps of n/k bytes); gloo also has
  halving-doubling and bcube, which send the same bytes in 2·log2(k) steps. At k = 2 every
  one of them is the ring. Beyond, a halving-doubling run has a latency term of
  2·log2(k)·α, not 2(k − 1)·α: for small messages at many workers the ring model then
  overestimates.
- **nccl** (GPU tensors): a ring for large messages; a (double binary) tree for small messages
  across many nodes, whose time is about 2·log2(k)·α + n/β. The ring model overestimates the
  latency of small messages at many nodes, and its β is the slowest link the ring crosses.
- Emulated links shape each worker's own link (a token bucket per veth end), one switch (the
  bridge) between them: β is that link's rate, and the model knows no topology beyond it.

**Nodes.** A group of ``k`` ranks with ``p`` ranks per node (``scalebench.nodes``) spans
``k / p`` nodes once ``k > p``. A fit is of one side of the node boundary: inside one node
(``1×k``: the node's own links, memory or NVLink) or across nodes (its ring crossed the node
link). A point takes a fit of its own side first, and its basis names the fit's shape; across
nodes the model is the plain ring over every rank at the node link's α and β, as gloo and
nccl's rings run it: the node link is the ring's slowest and sets its pace. The hierarchical
alternative (reduce-scatter inside the nodes, a ring of the 1/p shares across them, all-gather
inside: :func:`hierarchical_seconds`) moves p times fewer bytes over the node link; measured on
real groups across emulated nodes, ``benchmarks/node_boundary.py`` compares both
(:func:`node_model_errors`) and the ring is the one that describes gloo.

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

**Checked by leave-one-out** (:func:`leave_one_out`): every measured (k, link) point is
predicted by the same rules with that point's runs removed from the training sweep, so its
compute, packing, wait and steps come from the other points (the same ``k`` on another link
when there is one, else the nearest ``k``); the all-reduce fit is the Task 0 sweep's, which
the training sweep never fed. The error is (predicted − measured) / measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from results_db import analytics
from scalebench.nodes import shape_label

MAX_PROJECTED_WORKERS = 1024
DEFAULT_PROJECTED_WORKERS = (1, 2, 4, 8, 16, 32, 64)

# bytes of one element of the gradient buffer, per run precision (the parameters' dtype:
# fp16 runs keep half-precision parameters, bf16 autocast keeps float32 ones)
PRECISION_DTYPE = {"fp16": "float16"}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


class ProjectionRefused(ValueError):
    """A projection that cannot be made; the message names what is missing."""


# -- the all-reduce model ------------------------------------------------------------------


def ring_seconds(nbytes: float, world_size: int, alpha_s: float, beta_bytes_per_s: float) -> float:
    """Seconds of a ring all-reduce of ``nbytes`` over ``world_size`` workers:
    2(k − 1)·α + 2(k − 1)/k · n/β; 0 for one worker (no collective runs)."""
    k = world_size
    if k <= 1:
        return 0.0
    return 2 * (k - 1) * alpha_s + 2 * (k - 1) / k * nbytes / beta_bytes_per_s


def hierarchical_seconds(
    nbytes: float,
    nodes: int,
    ranks_per_node: int,
    inside: tuple[float, float],
    across: tuple[float, float],
) -> float:
    """Seconds of a hierarchical all-reduce of ``nbytes`` over ``nodes`` nodes of
    ``ranks_per_node`` ranks: a ring reduce-scatter inside each node, a ring all-reduce of
    each rank's 1/p share across the nodes, a ring all-gather inside each node::

        2(p − 1)·α_in + 2(p − 1)/p · n/β_in + 2(N − 1)·α_out + 2(N − 1)/N · (n/p)/β_out

    ``inside`` and ``across`` are (α seconds, β bytes/s) of the links inside a node and
    between nodes."""
    p, n_nodes = ranks_per_node, nodes
    alpha_in, beta_in = inside
    alpha_out, beta_out = across
    return ring_seconds(nbytes, p, alpha_in, beta_in) + ring_seconds(
        nbytes / p, n_nodes, alpha_out, beta_out
    )


def node_models(
    nodes: int, ranks_per_node: int, inside: tuple[float, float], across: tuple[float, float]
) -> dict[str, Callable[[float], float]]:
    """The all-reduce models across ``nodes`` nodes of ``ranks_per_node`` ranks, each seconds
    for a message of ``n`` bytes, from the fits inside one node (``inside``) and across nodes
    (``across``; each (α seconds, β bytes/s)): ``ring`` (one ring over every rank: the node
    link is its slowest and sets the pace) and ``hierarchical`` (:func:`hierarchical_seconds`)."""
    k = nodes * ranks_per_node
    return {
        "ring": lambda n: ring_seconds(n, k, *across),
        "hierarchical": lambda n: hierarchical_seconds(n, nodes, ranks_per_node, inside, across),
    }


def node_model_errors(
    measured: Sequence[SizeTime],
    nodes: int,
    ranks_per_node: int,
    inside: tuple[float, float],
    across: tuple[float, float],
    min_bytes: int = 0,
) -> dict[str, float]:
    """How well each of :func:`node_models` describes a measured curve of ``nodes`` ×
    ``ranks_per_node`` ranks: the median |relative error| over its sizes of at least
    ``min_bytes`` bytes."""
    errors = {}
    for name, model in node_models(nodes, ranks_per_node, inside, across).items():
        relative = sorted(
            abs(model(p.bytes) - p.seconds) / p.seconds for p in measured if p.bytes >= min_bytes
        )
        if not relative:
            raise ValueError(f"no measured size of {min_bytes} bytes or more to judge")
        middle = len(relative) // 2
        errors[name] = (
            relative[middle] if len(relative) % 2 else (relative[middle - 1] + relative[middle]) / 2
        )
    return errors


@dataclass(frozen=True)
class SizeTime:
    """One message size of a Task 0 curve: bytes, and the median seconds of its repetitions."""

    bytes: int
    seconds: float


@dataclass(frozen=True)
class RingFit:
    """The ring model fitted to one Task 0 configuration.

    ``alpha_s``: seconds per ring step; ``beta_bytes_per_s``: a link's bytes per second;
    ``residual``: root mean square of the relative errors over the ``sizes`` message sizes
    (0.1: 10 %), ``median_error`` and ``max_error``: the median and the largest of them;
    ``min_bytes``/``max_bytes``: the sizes it was fitted on.
    """

    sweep_id: str
    backend: str
    device: str
    dtype: str
    network: str
    world_size: int
    alpha_s: float
    beta_bytes_per_s: float
    residual: float
    median_error: float
    max_error: float
    sizes: int
    min_bytes: int
    max_bytes: int
    ranks_per_node: int = 1  # the Task 0 sweep's: its groups' shape (scalebench.nodes)

    @property
    def across_nodes(self) -> bool:
        """Whether the fitted group spanned several nodes (its ring crossed the node link)."""
        return self.world_size > self.ranks_per_node

    @property
    def shape(self) -> str:
        """The fitted group's ``nodes×ranks``."""
        return shape_label(self.world_size, self.ranks_per_node)

    def seconds(self, nbytes: float, world_size: int | None = None) -> float:
        """The model's seconds for ``nbytes`` at ``world_size`` (default: the fitted one)."""
        k = self.world_size if world_size is None else world_size
        return ring_seconds(nbytes, k, self.alpha_s, self.beta_bytes_per_s)


def fit_ring(
    points: Sequence[SizeTime], world_size: int
) -> tuple[float, float, float, float, float]:
    """α (s) and β (bytes/s) of the ring model fitted to ``points`` at ``world_size`` workers;
    returns (α, β, RMS relative error, median relative error, largest relative error), each
    relative error being (model − measured) / measured of one size.

    The fit minimises Σ |ln t_model − ln t_measured| over the sizes: a relative error, so a
    50 µs size weighs as much as a 5 s one; symmetric, so twice too slow counts as twice too
    fast (a plain relative error lets a tenfold overestimate cost nine and any underestimate
    at most one, and drags the fit low); and least *absolute*, so the few sizes the model
    cannot describe do not drag α and β: sub-millisecond sizes whose median holds the
    scheduler's noise on a shared machine, and, on an emulated link, sizes that pass inside
    the token bucket's burst. Measured on a 2-core AMD EPYC, light Task 0 at 2 workers over
    10mbit: least squares of the relative error gave β = 2.2 MB/s, this fit 1.19 MB/s,
    against 1.25 MB/s for the link's rate and 1.18 MB/s measured at 400 kB.

    Raises ``ValueError`` for fewer than two sizes or one worker.
    """
    import numpy as np
    from scipy.optimize import minimize

    k = world_size
    usable = [p for p in points if p.seconds > 0 and p.bytes > 0]
    if k < 2:
        raise ValueError("an all-reduce of one worker moves nothing: no model to fit")
    if len({p.bytes for p in usable}) < 2:
        raise ValueError("at least two message sizes are needed to fit latency and bandwidth")
    steps = 2.0 * (k - 1)
    moved = np.array([2.0 * (k - 1) / k * p.bytes for p in usable])  # bytes a link carries
    measured = np.array([p.seconds for p in usable])
    log_measured = np.log(measured)

    def loss(x: np.ndarray) -> float:
        model = steps * np.exp(x[0]) + moved * np.exp(-x[1])
        return float(np.sum(np.abs(np.log(model) - log_measured)))

    # Starting points around the smallest size's latency and the largest size's bandwidth.
    alpha0 = float(measured.min()) / steps
    beta0 = float(moved.max() / measured[moved.argmax()])
    starts = [
        np.array([math.log(alpha0 * fa), math.log(beta0 * fb)])
        for fa in (0.1, 1.0, 10.0)
        for fb in (0.1, 1.0, 10.0)
    ]
    options = {"xatol": 1e-9, "fatol": 1e-12, "maxiter": 4000}
    best = min(
        (minimize(loss, x0, method="Nelder-Mead", options=options) for x0 in starts),
        key=lambda result: result.fun,
    )
    best = minimize(loss, best.x, method="Nelder-Mead", options=options)  # restart: polish
    alpha, beta = math.exp(best.x[0]), math.exp(best.x[1])
    errors = sorted(
        abs(ring_seconds(p.bytes, k, alpha, beta) - p.seconds) / p.seconds for p in usable
    )
    rms = math.sqrt(math.fsum(e * e for e in errors) / len(errors))
    middle = len(errors) // 2
    median = errors[middle] if len(errors) % 2 else (errors[middle - 1] + errors[middle]) / 2
    return alpha, beta, rms, median, errors[-1]


# -- what was measured of a training sweep -------------------------------------------------


@dataclass(frozen=True)
class MeasuredPoint:
    """The successful runs of a training sweep at one (link, worker count), averaged.

    Seconds per step and rank: ``compute_s`` (data, forward, loss, backward, optimizer),
    ``gradient_packing_s``, ``communication_s``, ``step_s`` (their sum). Of the
    communication, ``wait_s``: the mean over ranks of the wait for the slowest rank's data to
    backward; ``collective_wait_s``: the mean over ranks of the seconds beyond the least any
    rank spent in the collective, whatever made the ranks arrive apart (None: not read); both
    0 at one worker. ``steps``: steps to the end (to the goal where it was reached);
    ``epochs``: evaluations; ``eval_s``: evaluation seconds in all; ``time_to_accuracy_s``
    (None: not reached). ``gradient_bytes``: one all-reduce message.
    """

    network: str
    world_size: int
    runs: int
    compute_s: float
    gradient_packing_s: float
    communication_s: float
    wait_s: float
    step_s: float
    steps: float
    epochs: float
    eval_s: float
    time_to_accuracy_s: float | None
    gradient_bytes: int
    contended: int = 0  # runs measured while other processes took their cores
    # the largest share of its cores other processes took from one of its runs (None: unknown)
    contention_share: float | None = None
    collective_wait_s: float | None = None


@dataclass(frozen=True)
class TrainingSweep:
    """What a projection needs of a training sweep: its configuration and measured points."""

    sweep_id: str
    task: str
    backend: str
    device: str
    precision: str
    variant: str
    points: tuple[MeasuredPoint, ...]
    ranks_per_node: int = 1  # its groups' ranks per node (scalebench.nodes)

    def across_nodes(self, world_size: int) -> bool:
        """Whether a group of ``world_size`` of this configuration spans several nodes."""
        return world_size > self.ranks_per_node

    @property
    def gradient_dtype(self) -> str:
        return PRECISION_DTYPE.get(self.precision, "float32")

    def without(self, network: str, world_size: int) -> TrainingSweep:
        """The sweep with one point's runs removed (leave-one-out)."""
        kept = tuple(p for p in self.points if (p.network, p.world_size) != (network, world_size))
        return replace(self, points=kept)


def gradient_bytes(parameters: int, precision: str) -> int:
    """Bytes of the synchronous all-reduce message: the parameters and the loss, one element
    each, in the parameters' dtype (``workers/sync_sgd.py``)."""
    return (parameters + 1) * DTYPE_BYTES[PRECISION_DTYPE.get(precision, "float32")]


# -- the projection --------------------------------------------------------------------------


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
                projected = ProjectedPoint(
                    network=network,
                    world_size=k,
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
            else:
                projected = project_point(sweep, fits, network, k, allreduce_sweep)
                goal = steps_to_goal(sweep.points, k, network)
                if goal is not None:
                    steps, eval_s, goal_basis = goal
                    projected = replace(
                        projected,
                        time_to_accuracy_s=steps * projected.step_s + eval_s,
                        basis=f"{projected.basis}; {goal_basis}",
                    )
            row.append(projected)
        base = next((p for p in row if p.world_size == 1), None)
        if base is None:  # speedup against one worker needs its TTA: projected if not asked
            one = measured.get((network, 1))
            base_tta = one.time_to_accuracy_s if one else None
            if base_tta is None:
                goal = steps_to_goal(sweep.points, 1, network)
                if goal is not None:
                    single = project_point(sweep, fits, network, 1, allreduce_sweep)
                    base_tta = goal[0] * single.step_s + goal[1]
        else:
            base_tta = base.time_to_accuracy_s
        for p in row:
            tta = p.time_to_accuracy_s
            speed = base_tta / tta if base_tta and tta else None
            cost_regular = cost_preemptible = None
            if prices is not None and tta is not None:
                cost_regular = analytics.cost(p.world_size, prices.regular_per_hour, 0.0, tta)
                cost_preemptible = analytics.cost(
                    p.world_size, prices.preemptible_per_hour, 0.0, tta
                )
            out.append(
                replace(
                    p,
                    speedup=speed,
                    cost_regular=cost_regular,
                    cost_preemptible=cost_preemptible,
                )
            )
    return out


# -- leave-one-out ---------------------------------------------------------------------------


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
