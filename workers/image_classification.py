"""Task 1a's adapter: ResNet-20 trained to a target top-1 accuracy (the loop is workers/engine.py).

A step is one batch of ``batch_per_worker`` images from this rank's share
of the epoch's permutation, randomly cropped (after zero padding) and
flipped as the data set's spec says; the loss is cross-entropy.

The rank's images live on its device, loaded once: on a GPU, gathering the
batch, cropping and flipping run there and the pixels never return to the
host. Only the batches' indices and their random draws travel (a few hundred
integers a batch, drawn on the CPU so that a seed gives the same batches on
any device): the whole epoch's, in one copy when the epoch is planned. SGD with
the spec's momentum, Nesterov and weight decay; the rate warms up per step
and decays on a validation-loss plateau (:class:`workers.schedules.LearningRate`).
Evaluation scores top-1 accuracy and cross-entropy over the whole test set.

``precision="bf16"`` runs forward and loss under bfloat16 autocast; weights,
gradients, the all-reduce and evaluation stay fp32.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.nn import functional as F

from scalebench.tasks import ImageData, TrainingSpec
from workers.adapter import Batch, IndexedTrainingSet, TrainingOptions, pass_sizes
from workers.data.batches import (
    ImageTensors,
    augment,
    augment_draws,
    crop_and_flip,
    normalise,
    shard,
)
from workers.data.sources import load_images
from workers.models.resnet import resnet20


class ImageClassification(IndexedTrainingSet[torch.Tensor]):
    """Passes are (4, batch) tensors: indices into the training images, then each image's
    augmentation draws (:func:`workers.data.batches.augment_draws`)."""

    def __init__(self, spec: TrainingSpec, options: TrainingOptions, device: torch.device) -> None:
        super().__init__(spec, options, device)
        assert isinstance(self.data_spec, ImageData)
        self.images: ImageData = self.data_spec
        self.data = self.load_data().to(device)
        self.cut_into_batches(len(self.data.train_y), len(self.data.test_y))
        self.augment_rng = torch.Generator().manual_seed((options.seed * 7919 + self.rank) % 2**63)

    def load_data(self) -> ImageTensors:
        """The data set's images, standardised with the training set's statistics."""
        return normalise(load_images(self.images.name, self.options.data_dir))

    def build_model(self) -> torch.nn.Module:
        """ResNet-20 in channels-last layout: measured faster on CPUs
        (see docs/training-engine.md)."""
        model = resnet20(in_channels=self.images.channels, classes=self.images.classes)
        return model.to(memory_format=torch.channels_last)

    def pass_of(self, indices: torch.Tensor) -> torch.Tensor:
        """The batch's indices and its draws, made when the epoch is planned, batch by batch
        in the order the steps take them."""
        padding, flip = self.images.crop_padding, self.images.horizontal_flip
        draws = augment_draws(len(indices), padding, flip, self.augment_rng)
        return torch.cat([indices[None], draws])

    def load(self, item: torch.Tensor) -> Batch:
        """Gather, crop and flip where the images are."""
        index, draws = item[0], item[1:]
        images = crop_and_flip(
            self.data.train_x[index], draws, self.images.crop_padding, self.images.horizontal_flip
        )
        return Batch(
            inputs=(images.contiguous(memory_format=torch.channels_last),),
            targets=self.data.train_y[index],
            samples=item.shape[-1],
        )

    def loss(self, output: torch.Tensor, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(output, batch.targets)

    def warmup_batches(self) -> list[Batch]:
        """Random images, augmented like training batches (so of the same memory layout), of
        the full batch's size and of the epoch's last, shorter batch's."""
        generator = torch.Generator().manual_seed(0)
        shape = (self.images.channels, self.images.image_size, self.images.image_size)
        batches = []
        for n in pass_sizes(self.n_train // self.world_size, self.batch):
            images = augment(
                torch.randn(n, *shape, generator=generator),
                self.images.crop_padding,
                self.images.horizontal_flip,
                generator,
            )
            images = images.contiguous(memory_format=torch.channels_last)
            labels = torch.randint(0, self.images.classes, (n,), generator=generator)
            batches.append(
                Batch(inputs=(images.to(self.device),), targets=labels.to(self.device), samples=n)
            )
        return batches

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module) -> tuple[dict[str, float], dict[str, Any]]:
        """Top-1 accuracy (percent) and mean cross-entropy over the whole test set.

        Each rank scores a disjoint shard; sums and counts are all-reduced, so the
        result is the global value, identical on every rank.
        """
        model.eval()
        part = shard(len(self.data.test_y), self.rank, self.world_size)
        x_all, y_all = self.data.test_x[part], self.data.test_y[part]
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss, correct, count
        for start in range(0, len(y_all), self.options.eval_batch):
            x = x_all[start : start + self.options.eval_batch]
            y = y_all[start : start + self.options.eval_batch]
            logits = model(x)
            totals[0] += F.cross_entropy(logits, y, reduction="sum").double()
            totals[1] += (logits.argmax(dim=1) == y).sum().double()
            totals[2] += len(y)
        dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        loss_sum, correct, count = totals.tolist()
        return {"top1_accuracy": 100.0 * correct / count, "loss": loss_sum / count}, {}
