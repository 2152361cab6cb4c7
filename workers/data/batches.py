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

    def to(self, device: torch.device) -> ImageTensors:
        """The same tensors on ``device`` (copied once; the same objects on their own device)."""
        return ImageTensors(
            *(t.to(device) for t in (self.train_x, self.train_y, self.test_x, self.test_y))
        )


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


def augment_draws(batch: int, padding: int, flip: bool, generator: torch.Generator) -> torch.Tensor:
    """The random choices of one batch's augmentation, drawn on the CPU from ``generator``:
    an int64 tensor (3, ``batch``) of each image's crop offsets ``dy``, ``dx`` (0 to
    ``2 × padding``) and whether it is mirrored (0 or 1).

    They are drawn on the host whatever the device, in a fixed order (``dy``, ``dx``, then
    the mirror draw), so a seed gives the same batches on a CPU and on a GPU.
    """
    draws = torch.zeros(3, batch, dtype=torch.long)
    if padding > 0:
        draws[0] = torch.randint(0, 2 * padding + 1, (batch,), generator=generator)
        draws[1] = torch.randint(0, 2 * padding + 1, (batch,), generator=generator)
    if flip:
        draws[2] = (torch.rand(batch, generator=generator) < 0.5).long()
    return draws


def crop_and_flip(
    images: torch.Tensor, draws: torch.Tensor, padding: int, flip: bool
) -> torch.Tensor:
    """Each image cropped at its offsets after ``padding`` zero pixels each side, and (with
    ``flip``) mirrored where its draw says so (``draws``: :func:`augment_draws`' tensor, on
    ``images``' device).

    Runs where ``images`` are: on a GPU the batch never visits the host.
    """
    batch, _, height, width = images.shape
    device = images.device
    if padding > 0:
        padded = torch.nn.functional.pad(images, (padding, padding, padding, padding))
        rows = (draws[0][:, None] + torch.arange(height, device=device))[:, :, None]  # (B, H, 1)
        cols = (draws[1][:, None] + torch.arange(width, device=device))[:, None, :]  # (B, 1, W)
        index = torch.arange(batch, device=device)[:, None, None]
        images = padded.permute(0, 2, 3, 1)[index, rows, cols].permute(0, 3, 1, 2)
    if flip:
        mirror = draws[2].bool()[:, None, None, None]
        images = torch.where(mirror, images.flip(3), images)
    return images.contiguous()


def augment(
    images: torch.Tensor, padding: int, flip: bool, generator: torch.Generator
) -> torch.Tensor:
    """Random crop (after ``padding`` zero pixels each side) and optional horizontal flip."""
    draws = augment_draws(len(images), padding, flip, generator).to(images.device)
    return crop_and_flip(images, draws, padding, flip)


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device`` without making the host wait for the GPU.

    A copy from ordinary (pageable) memory first waits until the GPU's stream is idle; from
    page-locked memory it is only queued. So on a GPU the batch is pinned, then copied without
    blocking (the step's one synchronisation, at its end, covers it). On a CPU: the tensor.
    """
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
