"""ResNet-20, data partitions, augmentation and the CIFAR-10 loader."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from scalebench.datasets import CIFAR10, DataSetMissing
from workers.data.batches import augment, epoch_partition, normalise, shard
from workers.data.sources import (
    CIFAR10_DIR,
    load_cifar10,
    load_digits,
)
from workers.models.resnet import resnet20


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_resnet20_has_the_reference_parameter_count() -> None:
    assert parameter_count(resnet20()) == 272_474


def test_resnet20_output_shape_for_cifar_and_digits() -> None:
    assert resnet20()(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert resnet20(in_channels=1)(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_resnet20_downsamples_with_projection_shortcuts() -> None:
    model = resnet20()
    projections = [b for b in model.blocks if not isinstance(b.shortcut, torch.nn.Identity)]
    assert len(projections) == 2  # first block of stages two and three
    assert [b.conv1.stride for b in projections] == [(2, 2), (2, 2)]


@pytest.mark.parametrize(("n", "world_size"), [(1437, 1), (1437, 2), (1000, 4), (50_000, 8)])
def test_partitions_are_disjoint_equal_and_cover_all_but_the_remainder(
    n: int, world_size: int
) -> None:
    parts = [epoch_partition(n, r, world_size, epoch=3, seed=0) for r in range(world_size)]
    union = torch.cat(parts)
    assert len(set(union.tolist())) == len(union)  # disjoint
    assert {len(p) for p in parts} == {n // world_size}  # equal: same steps on every rank
    assert len(union) == n - n % world_size  # covering but for the remainder
    assert set(union.tolist()) <= set(range(n))


def test_partitions_change_every_epoch_and_repeat_for_a_seed() -> None:
    first = epoch_partition(1000, 0, 2, epoch=0, seed=0)
    second = epoch_partition(1000, 0, 2, epoch=1, seed=0)
    assert not torch.equal(first, second)
    assert set(first.tolist()) != set(second.tolist())  # a different subset, not a reordering
    assert torch.equal(first, epoch_partition(1000, 0, 2, epoch=0, seed=0))


def test_evaluation_shards_cover_the_test_set_once() -> None:
    covered = []
    for rank in range(3):
        part = shard(10, rank, 3)
        covered += list(range(10))[part]
    assert covered == list(range(10))


def test_augment_crops_within_padding_and_flips() -> None:
    images = torch.arange(2 * 1 * 4 * 4, dtype=torch.float32).reshape(2, 1, 4, 4) + 1
    generator = torch.Generator().manual_seed(0)
    out = augment(images, padding=1, flip=True, generator=generator)
    assert out.shape == images.shape
    # every output pixel is a pixel of the (padded, possibly mirrored) input
    for i in range(2):
        allowed = set(images[i].flatten().tolist()) | {0.0}
        assert set(out[i].flatten().tolist()) <= allowed
    unchanged = augment(images, padding=0, flip=False, generator=generator)
    assert torch.equal(unchanged, images)


def test_augment_moves_pixels_by_at_most_the_padding() -> None:
    image = torch.zeros(64, 1, 8, 8)
    image[:, 0, 4, 4] = 1.0
    out = augment(image, padding=2, flip=False, generator=torch.Generator().manual_seed(1))
    positions = (out[:, 0] == 1.0).nonzero()[:, 1:]
    assert ((positions - 4).abs() <= 2).all()
    assert len({tuple(p.tolist()) for p in positions}) > 1  # crops differ across the batch


def test_digits_split_is_stratified_and_normalised_per_channel() -> None:
    arrays = load_digits()
    assert arrays.train_images.shape[1:] == (1, 8, 8)
    assert len(arrays.train_labels) + len(arrays.test_labels) == 1797
    assert set(np.unique(arrays.test_labels)) == set(range(10))
    tensors = normalise(arrays)
    assert tensors.train_x.mean().abs() < 1e-4
    assert abs(tensors.train_x.std().item() - 1) < 1e-3


def write_cifar_batch(path: Path, count: int, label: int) -> None:
    data = np.full((count, 3 * 32 * 32), label, dtype=np.uint8)
    with path.open("wb") as handle:
        pickle.dump({b"data": data, b"labels": [label] * count}, handle)


def test_cifar10_loader_reads_the_python_batches(tmp_path: Path) -> None:
    folder = tmp_path / CIFAR10_DIR
    folder.mkdir()
    for i in range(1, 6):
        write_cifar_batch(folder / f"data_batch_{i}", count=4, label=i)
    write_cifar_batch(folder / "test_batch", count=3, label=9)
    arrays = load_cifar10(tmp_path)
    assert arrays.train_images.shape == (20, 3, 32, 32)
    assert arrays.train_labels.tolist() == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4 + [5] * 4
    assert arrays.train_images[4, 2, 31, 31] == 2
    assert arrays.test_images.shape == (3, 3, 32, 32)


def test_missing_cifar10_says_which_files_go_where(tmp_path: Path) -> None:
    (tmp_path / CIFAR10_DIR).mkdir()
    write_cifar_batch(tmp_path / CIFAR10_DIR / "data_batch_1", 1, 0)
    with pytest.raises(DataSetMissing) as info:
        CIFAR10.require(tmp_path)
    message = str(info.value)
    assert "data_batch_2" in message and "test_batch" in message
    assert "data_batch_1," not in message
    assert str(tmp_path / CIFAR10_DIR) in message
    assert "cifar-10-python.tar.gz" in message
