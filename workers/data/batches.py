"""Cutting an in-memory image set into per-rank, per-epoch batches."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workers.data.sources import ImageArrays


@dataclass
class ImageTensors:
    """Normalised float images (N, C, H, W) and int64 labels, train and test."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor


def normalise(arrays: ImageArrays) -> ImageTensors:
    """Per-channel standardisation with the training set's mean and standard deviation."""
    train = torch.from_numpy(arrays.train_images).float()
    test = torch.from_numpy(arrays.test_images).float()
    mean = train.mean(dim=(0, 2, 3), keepdim=True)
    std = train.std(dim=(0, 2, 3), keepdim=True).clamp_min(1e-6)
    return ImageTensors(
        train_x=(train - mean) / std,
        train_y=torch.from_numpy(arrays.train_labels).long(),
        test_x=(test - mean) / std,
        test_y=torch.from_numpy(arrays.test_labels).long(),
    )


def epoch_partition(n: int, rank: int, world_size: int, epoch: int, seed: int) -> torch.Tensor:
    """The sample indices rank ``rank`` trains on in ``epoch``.

    All ranks draw the same permutation (seeded by ``seed`` and ``epoch``) and
    take disjoint, equal slices of it, so the shards cover the data set but
    for ``n mod world_size`` samples, and change every epoch.
    """
    # Modulo 2**63: any seed up to MAX_SEED gives a seed torch accepts (small seeds unchanged).
    generator = torch.Generator().manual_seed((seed * 1_000_003 + epoch) % 2**63)
    order = torch.randperm(n, generator=generator)
    per_rank = n // world_size
    return order[rank * per_rank : (rank + 1) * per_rank]


def shard(n: int, rank: int, world_size: int) -> slice:
    """A contiguous, disjoint evaluation shard; the last rank takes the remainder."""
    per_rank = n // world_size
    stop = n if rank == world_size - 1 else (rank + 1) * per_rank
    return slice(rank * per_rank, stop)


def augment(
    images: torch.Tensor, padding: int, flip: bool, generator: torch.Generator
) -> torch.Tensor:
    """Random crop (after ``padding`` zero pixels each side) and optional horizontal flip."""
    batch, _, height, width = images.shape
    if padding > 0:
        padded = torch.nn.functional.pad(images, (padding, padding, padding, padding))
        dy = torch.randint(0, 2 * padding + 1, (batch,), generator=generator)
        dx = torch.randint(0, 2 * padding + 1, (batch,), generator=generator)
        rows = (dy[:, None] + torch.arange(height))[:, :, None]  # (B, H, 1)
        cols = (dx[:, None] + torch.arange(width))[:, None, :]  # (B, 1, W)
        index = torch.arange(batch)[:, None, None]
        images = padded.permute(0, 2, 3, 1)[index, rows, cols].permute(0, 3, 1, 2)
    if flip:
        mirror = torch.rand(batch, generator=generator) < 0.5
        images = torch.where(mirror[:, None, None, None], images.flip(3), images)
    return images.contiguous()


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device`` without making the host wait for the GPU.

    A copy from ordinary (pageable) memory first waits until the GPU's stream is idle; from
    page-locked memory it is only queued. So on a GPU the batch is pinned, then copied without
    blocking (the step's one synchronisation, at its end, covers it). On a CPU: the tensor.
    """
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
