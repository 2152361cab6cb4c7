"""Synchronous SGD's communication step, written out.

Before every update, all gradients are packed into one flat buffer, summed
across ranks with a single all-reduce, divided by the number of ranks and
unpacked. This rank's loss rides along as one extra element, so every rank
learns the mean loss (and whether any rank diverged) at no extra message.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist


class GradientAllReduce:
    """Averages the gradients of ``parameters`` over all ranks with one all-reduce."""

    def __init__(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        self.parameters = [p for p in parameters if p.requires_grad]
        if not self.parameters:
            raise ValueError("no trainable parameters")
        numel = sum(p.numel() for p in self.parameters)
        first = self.parameters[0]
        self.buffer = torch.empty(numel + 1, dtype=first.dtype, device=first.device)

    @property
    def bytes(self) -> int:
        """Size of one all-reduce message, in bytes."""
        return self.buffer.numel() * self.buffer.element_size()

    def __call__(self, loss: torch.Tensor) -> torch.Tensor:
        """Average gradients in place; return the loss averaged over ranks (a 0-d tensor on
        the device: reading it is left to the end of the step, so a GPU is not stalled here)."""
        offset = 0
        for p in self.parameters:
            n = p.numel()
            if p.grad is None:
                self.buffer[offset : offset + n].zero_()
            else:
                self.buffer[offset : offset + n].copy_(p.grad.reshape(-1))
            offset += n
        self.buffer[-1] = loss.detach()
        dist.all_reduce(self.buffer, op=dist.ReduceOp.SUM)
        self.buffer.div_(dist.get_world_size())
        offset = 0
        for p in self.parameters:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.copy_(self.buffer[offset : offset + n].view_as(p))
            offset += n
        return self.buffer[-1]


def mean_over_ranks(value: torch.Tensor) -> torch.Tensor:
    """The mean of a scalar over all ranks (one small all-reduce), as a 0-d tensor."""
    reduced = value.detach().reshape(1).clone()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    return reduced[0].double() / dist.get_world_size()


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
