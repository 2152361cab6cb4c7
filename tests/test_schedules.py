"""Learning-rate warm-up (linear scaling over log2(k) epochs) and plateau decay."""

from __future__ import annotations

import pytest

from scalebench.tasks import ScheduleSpec, get_task
from workers.schedules import LearningRate, warmup_epochs, warmup_lr

SPEC = get_task("task1a-resnet20-cifar10").schedule
BASE = 0.02


@pytest.mark.parametrize(
    ("world_size", "epoch", "expected"),
    [
        (1, 0.0, 0.02),
        (1, 50.0, 0.02),
        (2, 0.0, 0.02),
        (2, 0.5, 0.03),
        (2, 1.0, 0.04),
        (2, 10.0, 0.04),
        (8, 0.0, 0.02),
        (8, 1.0, 0.02 + 0.14 / 3),
        (8, 1.5, 0.09),
        (8, 3.0, 0.16),
        (8, 100.0, 0.16),
    ],
)
def test_warmup_reaches_k_times_the_rate_after_log2_k_epochs(
    world_size: int, epoch: float, expected: float
) -> None:
    assert warmup_lr(BASE, world_size, epoch) == pytest.approx(expected)
    assert LearningRate(SPEC, BASE, world_size).at(epoch) == pytest.approx(expected)


def test_warmup_length() -> None:
    assert [warmup_epochs(k) for k in (1, 2, 4, 8, 32)] == [0, 1, 2, 3, 5]


def test_plateau_of_two_epochs_cuts_the_rate() -> None:
    schedule = LearningRate(ScheduleSpec("linear-log2k", 2, 0.1), BASE, world_size=1)
    assert not schedule.end_of_epoch(0, 1.0)
    assert not schedule.end_of_epoch(1, 0.9)  # improving
    assert not schedule.end_of_epoch(2, 0.95)  # one epoch without improvement
    assert schedule.end_of_epoch(3, 0.91)  # two: cut
    assert schedule.at(4.0) == pytest.approx(0.002)
    assert not schedule.end_of_epoch(4, 0.92)  # the count restarted
    assert schedule.end_of_epoch(5, 0.93)
    assert schedule.at(6.0) == pytest.approx(0.0002)


def test_no_plateau_decay_during_warmup() -> None:
    schedule = LearningRate(SPEC, BASE, world_size=8)  # warm-up: 3 epochs
    for epoch in range(2):
        assert not schedule.end_of_epoch(epoch, 5.0)
    assert schedule.decay == 1.0
    assert schedule.at(3.0) == pytest.approx(0.16)


def test_gnmt_warms_up_exponentially_then_halves_from_40_percent() -> None:
    from workers.schedules import gnmt_lr

    total = 10_000
    assert gnmt_lr(0, total) == 0.0  # the text's initial_learning_rate
    assert gnmt_lr(100, total) == pytest.approx(2e-3 * 9 / 99)  # (100 ** 0.5 - 1) / 99 of it
    assert 0 < gnmt_lr(1, total) < gnmt_lr(2, total) < gnmt_lr(199, total) < 2e-3
    assert gnmt_lr(200, total) == pytest.approx(2e-3)
    assert gnmt_lr(3_999, total) == pytest.approx(2e-3)
    assert gnmt_lr(4_000, total) == pytest.approx(1e-3)
    assert gnmt_lr(4_500, total) == pytest.approx(5e-4)
    assert gnmt_lr(5_500, total) == pytest.approx(1.25e-4)
    assert gnmt_lr(9_999, total) == pytest.approx(1.25e-4)  # at most 4 decays


def test_transformer_warms_up_linearly_then_decays_by_the_square_root() -> None:
    from workers.schedules import transformer_lr

    assert transformer_lr(0) == 0.0
    assert transformer_lr(500) == pytest.approx(0.988e-3)
    assert transformer_lr(1_000) == pytest.approx(1.976e-3)
    assert transformer_lr(4_000) == pytest.approx(0.988e-3)
