"""The all-reduce model of a scaling projection: the ring model's seconds, fitted to a
Task 0 curve (:func:`fit_ring`, :class:`RingFit`), and the models across nodes it is
compared with (:func:`node_model_errors`).

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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scalebench.nodes import shape_label


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
