"""Learning-rate schedules, as plain functions of the epoch."""

from __future__ import annotations

import math

from scalebench.tasks import ScheduleSpec


def warmup_epochs(world_size: int) -> float:
    """Length of the linear-scaling warm-up: log2(k) epochs (0 for one worker)."""
    return math.log2(world_size) if world_size > 1 else 0.0


def warmup_lr(base_lr: float, world_size: int, epoch: float) -> float:
    """Goyal et al.'s gradual warm-up: from ``base_lr`` to ``base_lr × k`` over log2(k) epochs.

    ``epoch`` is fractional (epoch index plus the fraction of its steps done),
    so the rate rises every step rather than in jumps.
    """
    length = warmup_epochs(world_size)
    target = base_lr * world_size
    if epoch >= length:
        return target
    return base_lr + (target - base_lr) * epoch / length


class LearningRate:
    """Warm-up, then decay on a validation-loss plateau.

    After warm-up, the rate is multiplied by ``spec.plateau_factor`` once the
    validation loss has failed to improve on its best value for
    ``spec.plateau_patience`` consecutive epochs; the count then restarts.
    """

    def __init__(self, spec: ScheduleSpec, base_lr: float, world_size: int) -> None:
        self.spec = spec
        self.base_lr = base_lr
        self.world_size = world_size
        self.decay = 1.0
        self.best_loss = math.inf
        self.epochs_without_improvement = 0

    def at(self, epoch: float) -> float:
        if self.spec.warmup == "linear-log2k":
            lr = warmup_lr(self.base_lr, self.world_size, epoch)
        elif self.spec.warmup == "scale-k":
            lr = self.base_lr * self.world_size
        elif self.spec.warmup == "sqrt-k-over-3k":
            target = self.base_lr * math.sqrt(self.world_size)
            lr = (
                target
                if epoch >= 3 * self.world_size
                else (self.base_lr + (target - self.base_lr) * epoch / (3 * self.world_size))
            )
        else:
            lr = self.base_lr
        return lr * self.decay

    def end_of_epoch(self, epoch: int, validation_loss: float) -> bool:
        """Account for the validation loss after ``epoch``; True when the rate was cut."""
        if self.spec.plateau_factor == 1.0:
            return False
        if self.spec.warmup == "linear-log2k" and epoch + 1 < warmup_epochs(self.world_size):
            return False
        if validation_loss < self.best_loss:
            self.best_loss = validation_loss
            self.epochs_without_improvement = 0
            return False
        self.epochs_without_improvement += 1
        if self.epochs_without_improvement >= self.spec.plateau_patience:
            self.decay *= self.spec.plateau_factor
            self.epochs_without_improvement = 0
            return True
        return False


def gnmt_lr(
    step: int,
    total_steps: int,
    base_lr: float = 2e-3,
    warmup_steps: int = 200,
    decay_start: float = 0.4,
    decay_interval: float = 0.05,
    max_decays: int = 4,
    factor: float = 0.5,
) -> float:
    """Task 4a's rate at optimizer step ``step`` (from 0) of ``total_steps``.

    Exponential warm-up over ``warmup_steps`` from 0, as the text says
    (``initial_learning_rate = 0.0``): ``base_lr × (100^x − 1) / 99`` at the
    fraction ``x`` of the warm-up done, 0 at the first step and ``base_lr`` at
    the end, the curve of MLPerf's GNMT (rising a hundredfold) lowered to start
    at 0. Then ``base_lr`` until ``decay_start`` of training, after which it is
    multiplied by ``factor`` at that point and every ``decay_interval`` of
    training, at most ``max_decays`` times.
    """
    if step < warmup_steps:
        return base_lr * (100.0 ** (step / warmup_steps) - 1.0) / 99.0
    start = decay_start * total_steps
    if step < start:
        return base_lr
    decays = min(max_decays, 1 + int((step - start) // max(decay_interval * total_steps, 1)))
    return base_lr * factor**decays


def transformer_lr(step: int, base_lr: float = 1.976e-3, warmup_steps: int = 1000) -> float:
    """Task 4b's rate at optimizer step ``step`` (from 0): linear from 0 to ``base_lr``
    over ``warmup_steps``, then ``base_lr × √(warmup_steps / step)``."""
    if step < warmup_steps:
        return base_lr * step / warmup_steps
    return base_lr * math.sqrt(warmup_steps / step)
