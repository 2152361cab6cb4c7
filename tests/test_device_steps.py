"""A step that measures the GPU: data made on the device, no waits in the fp16 update.

The batch of Tasks 1a and 2a is gathered (and for 1a cropped and flipped) where the data
lives, from random draws made on the CPU, so a seed gives the same batches on any device.
An fp16 update with a fused optimizer checks for overflow, clips, skips and rescales on the
device. The CUDA cases run where torch sees a GPU (``scripts/gpu-check.sh`` machines) and are
skipped elsewhere; this file needs no fixture beyond its own, so it runs there alone too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn import functional as F

from scalebench.tasks import TrainingSpec, get_task
from workers.adapter import TaskAdapter, TrainingOptions, adapter_for
from workers.data.batches import augment_draws, crop_and_flip
from workers.mixed_precision import DynamicLossScale, MasterWeights

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA GPU here")


@pytest.fixture
def group_of_one(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


def reference_crop(images: torch.Tensor, draws: torch.Tensor, padding: int) -> torch.Tensor:
    """Each image padded, cropped and mirrored one at a time: the definition, written out."""
    out = []
    for image, dy, dx, mirror in zip(images, *draws.tolist(), strict=True):
        padded = F.pad(image, (padding,) * 4)
        crop = padded[:, dy : dy + image.shape[1], dx : dx + image.shape[2]]
        out.append(crop.flip(2) if mirror else crop)
    return torch.stack(out)


def test_the_device_crop_is_the_crop_of_each_image() -> None:
    generator = torch.Generator().manual_seed(3)
    images = torch.randn(16, 3, 8, 8, generator=generator)
    draws = augment_draws(16, 2, True, generator)
    assert draws.shape == (3, 16) and draws.dtype == torch.long
    assert set(draws[2].tolist()) == {0, 1} and int(draws[:2].max()) <= 4
    torch.testing.assert_close(
        crop_and_flip(images, draws, 2, True), reference_crop(images, draws, 2), rtol=0, atol=0
    )


def adapter(task_id: str, device: torch.device) -> TaskAdapter:
    options = TrainingOptions(light=True, data_dir=Path("."), seed=5)
    return adapter_for(get_task(task_id), options, device)


def test_task1a_batches_are_cut_from_the_device_copy(group_of_one: None) -> None:
    task = adapter("task1a-resnet20-cifar10", torch.device("cpu"))
    [step, *_] = task.steps(0)
    [item] = step.passes
    generator = torch.Generator().manual_seed((5 * 7919 + 0) % 2**63)  # the adapter's seed rule
    draws = augment_draws(
        item.shape[-1], task.images.crop_padding, task.images.horizontal_flip, generator
    )
    assert torch.equal(item[1:], draws)  # drawn when the epoch was planned, batch by batch
    batch = task.load(item)
    expected = reference_crop(task.data.train_x[item[0]], draws, task.images.crop_padding)
    torch.testing.assert_close(batch.inputs[0], expected, rtol=0, atol=0)
    assert batch.inputs[0].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(batch.targets, task.data.train_y[item[0]])


@CUDA
@pytest.mark.parametrize("task_id", ["task1a-resnet20-cifar10", "task2a-logreg-epsilon"])
def test_a_seed_gives_the_same_batches_on_the_cpu_and_the_gpu(
    task_id: str, group_of_one: None
) -> None:
    on_cpu, on_gpu = adapter(task_id, torch.device("cpu")), adapter(task_id, torch.device("cuda"))
    for cpu_step, gpu_step in list(zip(on_cpu.steps(0), on_gpu.steps(0), strict=True))[:5]:
        a, b = on_cpu.load(cpu_step.passes[0]), on_gpu.load(gpu_step.passes[0])
        assert b.inputs[0].device.type == "cuda"
        torch.testing.assert_close(b.inputs[0].cpu(), a.inputs[0], rtol=0, atol=0)
        assert torch.equal(b.targets.cpu(), a.targets)


def half_model(device: torch.device | str = "cpu") -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2).to(device).half()


def fused_masters(
    device: torch.device | str = "cpu",
) -> tuple[torch.nn.Linear, MasterWeights, torch.optim.SGD]:
    model = half_model(device)
    masters = MasterWeights(model.parameters(), DynamicLossScale(initial=2**7, device=device))
    return model, masters, torch.optim.SGD(masters.master, lr=0.5, fused=True)


def test_a_fused_optimizer_skips_an_overflow_without_asking_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, masters, optimizer = fused_masters()

    def host_read(*args: object) -> bool:
        raise AssertionError("the overflow flag was read on the host")

    monkeypatch.setattr(DynamicLossScale, "update", host_read)
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    model.weight.grad[0, 0] = float("inf")
    assert masters.step(optimizer, clip_norm=1.0) is None  # decided on the device
    for p, old in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, old)
    assert masters.scaler.scale == 2**6 and masters.scaler.skipped == 1
    for p in model.parameters():  # a clean update after it is applied, at the new scale
        p.grad = torch.full_like(p, 0.25 * 2**6)
    masters.step(optimizer)
    torch.testing.assert_close(
        model.weight.float(), (before[0].float() - 0.5 * 0.25).half().float()
    )
    assert masters.scaler.skipped == 1 and masters.scaler.clean_steps == 1


def test_the_device_scale_grows_after_a_clean_window_and_stops_at_its_maximum() -> None:
    scale = DynamicLossScale(initial=4.0, window=3, max_scale=8.0)
    clean = torch.tensor(0.0)
    for expected in (4, 4, 8, 8, 8, 8):
        scale.update_on_device(clean)
        assert scale.scale == expected
    scale.update_on_device(torch.tensor(1.0))
    assert scale.scale == 4 and scale.clean_steps == 0 and scale.skipped == 1


@CUDA
def test_an_fp16_update_on_the_gpu_never_waits_for_it() -> None:
    model, masters, _ = fused_masters("cuda")
    optimizer = torch.optim.Adam(masters.master, lr=1e-3, fused=True)
    x = torch.randn(8, 4, device="cuda", dtype=torch.half)
    normaliser = torch.tensor(8.0, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            (model(x).float().pow(2).sum() * masters.scaler.scale_tensor).backward()
            masters.step(optimizer, normaliser=normaliser, clip_norm=1.0)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert masters.scaler.skipped == 0


def test_gnmt_given_host_lengths_encodes_as_it_does_reading_them_from_the_batch() -> None:
    from scalebench.tasks import GNMTConfig
    from workers.data.translation import PAD
    from workers.models.gnmt import GNMT

    torch.manual_seed(0)
    model = GNMT(20, GNMTConfig(hidden=16, layers=3, dropout=0.0)).eval()
    lengths = torch.tensor([4, 6, 1, 4])  # in the batch's order, as the adapter gives them
    source = torch.full((4, 6), PAD)
    for row, n in enumerate(lengths.tolist()):
        source[row, :n] = torch.randint(4, 20, (n,))
    with torch.no_grad():
        torch.testing.assert_close(model.encode(source, lengths), model.encode(source))


def test_padding_in_one_assignment_equals_padding_row_by_row() -> None:
    import numpy as np

    from workers.data.translation import PAD
    from workers.translation import padded

    rng = np.random.default_rng(0)
    for _ in range(100):
        sentences = [rng.integers(4, 99, rng.integers(0, 12)) for _ in range(rng.integers(1, 9))]
        for frame in ({}, {"start": 1}, {"end": 2}):
            rows = [
                [frame.get("start")] * ("start" in frame)
                + s.tolist()
                + [frame.get("end")] * ("end" in frame)
                for s in sentences
            ]
            expected = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long)
            for row, ids in enumerate(rows):
                expected[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            assert torch.equal(padded(sentences, **frame), expected)


class _Enough(Exception):
    """The steps wanted are trained."""


def _first_steps(
    spec: TrainingSpec, compile: str, steps: int, tmp: Path
) -> tuple[dict, list[float]]:
    """``steps`` steps of a light run of ``spec`` on the GPU from seed 0: its start record and
    each step's loss."""
    from workers import engine
    from workers.records import RecordWriter, rank_file_name, read_rank_file
    from workers.tracker import Tracker

    losses: list[float] = []

    class Counted(Tracker):
        def step(self, *args: object, **kwargs: object) -> None:
            super().step(*args, **kwargs)  # type: ignore[arg-type]
            losses.append(float(args[4]))  # type: ignore[arg-type]
            if len(losses) == steps:
                raise _Enough

    torch.manual_seed(0)
    options = TrainingOptions(light=True, data_dir=tmp, max_epochs=1, compile=compile)
    adapter = adapter_for(spec, options, torch.device("cuda"))
    tracker = Counted(RecordWriter(tmp, compile, rank=0, world_size=1), torch.device("cuda"))
    with pytest.raises(_Enough):
        engine.train(adapter, tracker)
    tracker.close()
    events = read_rank_file(tmp / rank_file_name(0)).of_kind("event")
    return next(e for e in events if e["event"] == "start"), losses


@CUDA
def test_a_compiled_fixed_shape_step_replays_cuda_graphs_and_trains_as_eager(
    tmp_path: Path, group_of_one: None
) -> None:
    """A compiled step whose spec asks for CUDA graphs captures its forward and backward
    before the start; replayed, they give the losses the eager step gives. Task 2a, asked
    for graphs here (it compiles in seconds; its spec does not ask: they do not pay there)."""
    from dataclasses import replace

    from workers.compile import graphs_compiled

    torch._dynamo.reset()
    (tmp_path / "eager").mkdir()
    (tmp_path / "graphs").mkdir()
    spec = replace(get_task("task2a-logreg-epsilon"), cuda_graphs=True)
    eager_start, eager = _first_steps(spec, "off", 60, tmp_path / "eager")
    start, replayed = _first_steps(spec, "on", 60, tmp_path / "graphs")
    assert not eager_start["compiled"] and "cuda_graphs" not in eager_start
    assert start["compiled"] and start["cuda_graphs"] is True
    assert graphs_compiled() > 0
    torch.testing.assert_close(torch.tensor(replayed), torch.tensor(eager), rtol=1e-4, atol=1e-5)
