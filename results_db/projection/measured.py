"""What a projection needs of a training sweep: its configuration and, at each measured
(link, worker count), its successful runs averaged (:class:`MeasuredPoint`); the gradient
message's bytes (:func:`gradient_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# bytes of one element of the gradient buffer, per run precision (the parameters' dtype:
# fp16 runs keep half-precision parameters, bf16 autocast keeps float32 ones)
PRECISION_DTYPE = {"fp16": "float16"}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


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
