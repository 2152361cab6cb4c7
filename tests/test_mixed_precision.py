"""The loss scaler and the float32 master weights used by the translation tasks."""

from __future__ import annotations

import torch

from workers.mixed_precision import DynamicLossScale, MasterWeights


def test_an_overflow_halves_the_scale_and_skips_the_step() -> None:
    scale = DynamicLossScale(initial=2**10, factor=2, window=128, max_scale=2**13)
    assert scale.update(overflow=False) is True
    assert scale.update(overflow=True) is False
    assert scale.scale == 2**9 and scale.clean_steps == 0 and scale.skipped == 1


def test_a_clean_window_doubles_the_scale_up_to_its_maximum() -> None:
    scale = DynamicLossScale(initial=2**12, factor=2, window=128, max_scale=2**13)
    for _ in range(127):
        scale.update(overflow=False)
    assert scale.scale == 2**12
    scale.update(overflow=False)
    assert scale.scale == 2**13
    for _ in range(128):
        scale.update(overflow=False)
    assert scale.scale == 2**13  # capped
    scale.update(overflow=True)
    for _ in range(127):
        scale.update(overflow=False)
    assert scale.scale == 2**12  # the window restarts after an overflow


def half_model() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2).half()


def test_the_update_happens_on_float32_masters_then_is_copied_back() -> None:
    model = half_model()
    masters = MasterWeights(model.parameters(), DynamicLossScale(initial=2**7))
    optimizer = torch.optim.SGD(masters.master, lr=0.5)
    assert all(m.dtype == torch.float32 for m in masters.master)
    before = model.weight.detach().float().clone()
    for p in model.parameters():  # a known gradient, scaled by the loss scale
        p.grad = torch.full_like(p, 0.25 * 2**7)
    assert masters.step(optimizer) is True
    assert model.weight.dtype == torch.float16
    torch.testing.assert_close(model.weight.float(), (before - 0.5 * 0.25).half().float())
    assert model.weight.grad is None


def test_an_infinite_gradient_leaves_the_weights_alone() -> None:
    model = half_model()
    masters = MasterWeights(model.parameters(), DynamicLossScale(initial=2**7))
    optimizer = torch.optim.SGD(masters.master, lr=0.5)
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    model.weight.grad[0, 0] = float("inf")
    assert masters.step(optimizer) is False
    assert masters.scaler.scale == 2**6
    for p, old in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, old)


def test_gradients_are_divided_by_the_normaliser_and_clipped() -> None:
    model = half_model()
    masters = MasterWeights(model.parameters(), DynamicLossScale(initial=1.0))
    optimizer = torch.optim.SGD(masters.master, lr=1.0)
    before = model.bias.detach().float().clone()
    for p in model.parameters():
        p.grad = torch.full_like(p, 8.0)
    masters.step(optimizer, normaliser=4.0, clip_norm=1e9)  # gradient 2 everywhere
    torch.testing.assert_close(model.bias.float(), before - 2.0, atol=1e-2, rtol=0)
    for p in model.parameters():
        p.grad = torch.full_like(p, 8.0)
    weights_before = model.bias.detach().float().clone()
    masters.step(optimizer, clip_norm=1.0)  # norm 8·√10 clipped to 1
    change = (weights_before - model.bias.float()).abs().max().item()
    assert abs(change - 1.0 / 10**0.5) < 5e-3
