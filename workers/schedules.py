"""Learning-rate schedules, as plain functions of the epoch."""

from __future__ import annotations

import math

from workers.tasks import ScheduleSpec


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
            lr = target if epoch >= 3 * self.world_size else (
                self.base_lr + (target - self.base_lr) * epoch / (3 * self.world_size)
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
