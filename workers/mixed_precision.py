"""Mixed-precision training as the benchmark text describes it (Tasks 4a and 4b).

The model's weights and gradients are ``float16``; the optimizer updates
``float32`` master copies. A dynamic loss scale keeps small gradients from
underflowing:

1. start with ``scale = initial``;
2. before backward, multiply the loss by ``scale``;
3. before the update, divide the gradients by ``scale × normaliser`` in
   ``float32`` (the normaliser turns summed gradients into the mean the
   update should use, e.g. tokens over all workers / (world size × update
   frequency));
4. if any gradient is ``inf`` or ``NaN``: ``scale /= factor`` and **skip** the
   update; otherwise clip (when a norm is given) and update;
5. after ``window`` updates in a row without overflow: ``scale *= factor``
   (never above ``max_scale``).

On a CPU, half precision is not what the benchmark measures: the tasks run
in ``float32`` there (the scaler is then not used) and their records say so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


class DynamicLossScale:
    """The loss-scale bookkeeping alone (steps 1, 4 and 5 above), easy to test."""

    def __init__(
        self,
        initial: float,
        factor: float = 2.0,
        window: int = 2000,
        max_scale: float | None = None,
    ) -> None:
        self.scale = float(initial)
        self.factor = factor
        self.window = window
        self.max_scale = max_scale
        self.clean_steps = 0
        self.skipped = 0

    def update(self, overflow: bool) -> bool:
        """Account for one step; returns True when its update may be applied."""
        if overflow:
            self.scale /= self.factor
            self.clean_steps = 0
            self.skipped += 1
            return False
        self.clean_steps += 1
        if self.clean_steps >= self.window:
            self.scale *= self.factor
            if self.max_scale is not None:
                self.scale = min(self.scale, self.max_scale)
            self.clean_steps = 0
        return True


class MasterWeights:
    """``float32`` master copies of a ``float16`` model's parameters, and the update path.

    Use: ``loss × scaler.scale`` → backward → (all-reduce the ``float16``
    gradients) → :meth:`step`. The optimizer must have been built on
    :attr:`master` (the ``float32`` copies).
    """

    def __init__(self, parameters: Iterable[torch.nn.Parameter], scaler: DynamicLossScale) -> None:
        self.model_params = [p for p in parameters if p.requires_grad]
        self.master = [p.detach().float().clone().requires_grad_(True) for p in self.model_params]
        self.scaler = scaler

    def step(
        self,
        optimizer: torch.optim.Optimizer,
        normaliser: float | torch.Tensor = 1.0,
        clip_norm: float | None = None,
    ) -> bool:
        """Unscale into the masters, check, clip, update, copy back; False when skipped."""
        divisor = self.scaler.scale * normaliser
        for model_p, master_p in zip(self.model_params, self.master, strict=True):
            grad = model_p.grad
            if grad is None:
                master_p.grad = torch.zeros_like(master_p)
            else:
                master_p.grad = grad.detach().float().div_(divisor)
        norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(m.grad) for m in self.master])
        )
        norm_value = float(norm)  # the update waits for the device here, once
        overflow = not math.isfinite(norm_value)
        for p in self.model_params:
            p.grad = None
        if not self.scaler.update(overflow):
            return False
        if clip_norm is not None and norm_value > clip_norm:
            for m in self.master:
                m.grad.mul_(clip_norm / (norm_value + 1e-6))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            for model_p, master_p in zip(self.model_params, self.master, strict=True):
                model_p.copy_(master_p)
        return True
