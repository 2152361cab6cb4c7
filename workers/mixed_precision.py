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

On a GPU none of this makes the host wait: the overflow check, the clip, the
skip and the scale's update are tensors on the device, and an optimizer built
with ``fused=True`` skips an overflowing update itself (its ``found_inf``, as
``torch.amp`` uses it). With any other optimizer the step reads the
overflow flag, once.

On a CPU, half precision is not what the benchmark measures: the tasks run
in ``float32`` there (the scaler is then not used) and their records say so.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class DynamicLossScale:
    """The loss-scale bookkeeping (steps 1, 4 and 5 above), kept on ``device``.

    The scale, the run of clean updates and the count of skipped ones are tensors, so
    :meth:`update_on_device` never waits for the device. :attr:`scale`, :attr:`clean_steps`
    and :attr:`skipped` read them (a wait on a GPU: for records and tests, not per step).
    """

    def __init__(
        self,
        initial: float,
        factor: float = 2.0,
        window: int = 2000,
        max_scale: float | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.factor = factor
        self.window = window
        self.max_scale = max_scale
        self.scale_tensor = torch.tensor(float(initial), dtype=torch.float32, device=device)
        self._clean = torch.zeros((), dtype=torch.int32, device=device)
        self._skipped = torch.zeros((), dtype=torch.float32, device=device)

    @property
    def scale(self) -> float:
        return float(self.scale_tensor)

    @property
    def clean_steps(self) -> int:
        return int(self._clean)

    @property
    def skipped(self) -> int:
        return int(self._skipped)

    def update_on_device(self, found_inf: torch.Tensor) -> None:
        """Account for one update; ``found_inf`` (0-d, 1.0 when a gradient overflowed)."""
        flag = found_inf.reshape(()).to(torch.float32)
        torch._amp_update_scale_(
            self.scale_tensor, self._clean, flag, self.factor, 1.0 / self.factor, self.window
        )
        if self.max_scale is not None:
            self.scale_tensor.clamp_(max=self.max_scale)
        self._skipped += flag

    def update(self, overflow: bool) -> bool:
        """Account for one update known on the host; returns True when it may be applied."""
        self.update_on_device(torch.tensor(float(overflow), device=self.scale_tensor.device))
        return not overflow


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` can be told of an overflow on the device and skip by itself
    (torch's fused implementations read a ``found_inf`` tensor)."""
    return bool(optimizer.defaults.get("fused"))


class MasterWeights:
    """``float32`` master copies of a ``float16`` model's parameters, and the update path.

    Use: ``loss × scaler.scale_tensor`` → backward → (all-reduce the ``float16``
    gradients) → :meth:`step`. The optimizer must have been built on
    :attr:`master` (the ``float32`` copies), with ``fused=True`` for a step without waits.
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
    ) -> bool | None:
        """Unscale into the masters, check, clip, update, copy back.

        Returns whether the update was applied when that is known on the host (an optimizer
        that cannot skip on the device: the flag is read, one wait), else None: a fused
        optimizer skipped it or not on the device, and the scale was updated there.
        """
        divisor = self.scaler.scale_tensor * normaliser
        for model_p, master_p in zip(self.model_params, self.master, strict=True):
            grad = model_p.grad
            if grad is None:
                master_p.grad = torch.zeros_like(master_p)
            else:
                master_p.grad = grad.detach().float().div_(divisor)
        grads = [m.grad for m in self.master]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        found_inf = (~torch.isfinite(norm)).to(torch.float32)  # 0-d, on the device
        for p in self.model_params:
            p.grad = None
        on_device = skips_on_device(optimizer)
        if on_device:
            self.scaler.update_on_device(found_inf)
        elif not self.scaler.update(bool(found_inf)):  # the update waits for the device here
            return False
        if clip_norm is not None:  # an overflowing update is skipped: its factor is moot
            torch._foreach_mul_(grads, (clip_norm / (norm + 1e-6)).clamp(max=1.0))
        if on_device:
            optimizer.found_inf = found_inf  # type: ignore[attr-defined]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            torch._foreach_copy_(self.model_params, self.master)
        return None if on_device else True
