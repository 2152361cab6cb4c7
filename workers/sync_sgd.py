"""Synchronous SGD's communication step, written out.

Before every update, all gradients are packed into one flat buffer, summed
across ranks with a single all-reduce, divided by the number of ranks and
unpacked. This rank's loss rides along as one extra element, so every rank
learns the mean loss (and whether any rank diverged) at no extra message.

The three parts are separate calls so that the engine can time them apart:
packing and unpacking are ``gradient_packing``, the collective alone is
``communication``. A group of one rank runs no collective at all: nothing is
packed and its communication is zero seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


class GradientAllReduce:
    """Averages the gradients of ``parameters`` over all ranks with one all-reduce:
    :meth:`pack`, then :meth:`all_reduce`, then :meth:`unpack`."""

    def __init__(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        self.parameters = [p for p in parameters if p.requires_grad]
        if not self.parameters:
            raise ValueError("no trainable parameters")
        self.world_size = dist.get_world_size()
        numel = sum(p.numel() for p in self.parameters)
        first = self.parameters[0]
        self.buffer = torch.empty(numel + 1, dtype=first.dtype, device=first.device)
        self._loss = self.buffer[-1]

    @property
    def bytes(self) -> int:
        """Size of one all-reduce message, in bytes."""
        return self.buffer.numel() * self.buffer.element_size()

    def pack(self, loss: torch.Tensor) -> None:
        """Copy every gradient (zeros for a parameter without one) and this rank's ``loss``
        into the flat buffer. Alone in its group, a rank keeps its gradients where they are."""
        if self.world_size == 1:
            for p in self.parameters:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            self._loss = loss.detach()
            return
        offset = 0
        for p in self.parameters:
            n = p.numel()
            if p.grad is None:
                self.buffer[offset : offset + n].zero_()
            else:
                self.buffer[offset : offset + n].copy_(p.grad.reshape(-1))
            offset += n
        self.buffer[-1] = loss.detach()
        self._loss = self.buffer[-1]

    def all_reduce(self) -> None:
        """Sum the buffer over the ranks: the collective, and nothing else."""
        if self.world_size > 1:
            dist.all_reduce(self.buffer, op=dist.ReduceOp.SUM)

    def unpack(self) -> torch.Tensor:
        """Divide the sum by the number of ranks and copy it back into the gradients; return
        the loss averaged over ranks (a 0-d tensor on the device: reading it is left to the
        end of the step, so a GPU is not stalled here)."""
        if self.world_size == 1:
            return self._loss
        self.buffer.div_(self.world_size)
        offset = 0
        for p in self.parameters:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.copy_(self.buffer[offset : offset + n].view_as(p))
            offset += n
        return self._loss


def mean_over_ranks(value: torch.Tensor) -> torch.Tensor:
    """The mean of a scalar over all ranks (one small all-reduce; none for a group of one),
    as a 0-d float64 tensor."""
    world_size = dist.get_world_size()
    if world_size == 1:
        return value.detach().double()
    reduced = value.detach().reshape(1).clone()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    return reduced[0].double() / world_size


def sum_over_ranks(values: torch.Tensor) -> None:
    """Sum ``values`` over all ranks in place (none needed for a group of one)."""
    if dist.get_world_size() > 1:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)


def broadcast_model(model: torch.nn.Module, src: int = 0) -> None:
    """Make every rank start from rank ``src``'s parameters and buffers."""
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src=src)


def average_buffers(model: torch.nn.Module) -> None:
    """Average floating-point buffers (batch-norm running statistics) over ranks."""
    world_size = dist.get_world_size()
    for buffer in model.buffers():
        if buffer.is_floating_point():
            dist.all_reduce(buffer.data, op=dist.ReduceOp.SUM)
            buffer.data.div_(world_size)


class Lapping(Protocol):
    def lap(self, phase: str) -> None: ...


def lapped_bucket_all_reduce(clock: Lapping, bucket):  # type: ignore[no-untyped-def]
    """DDP's communication hook: the mean over ranks of one gradient bucket (a
    ``dist.GradBucket``; returns a ``torch.futures.Future`` of its tensor), as DDP's own
    (divide by the ranks, all-reduce), with ``clock`` lapped as ``backward`` when the bucket
    is ready.

    DDP launches each bucket's all-reduce while backward goes on, so the time up to the last
    bucket's launch is backward's computation (overlapped communication included). What
    remains until backward returns is the step waiting for the all-reduces: the engine laps
    it as ``communication``.

    ``bucket`` and the result carry no annotations: DDP compares them with its own types,
    and this module's annotations are strings.
    """
    clock.lap("backward")
    return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]
