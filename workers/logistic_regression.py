"""Task 2a's adapter: L2-regularised logistic regression trained to a validation accuracy.

The model is one linear layer (``features`` weights and a bias) giving a
logit; the loss is binary cross-entropy on it plus ``l2/2 × ‖w‖²`` on the
weights. Plain SGD, the rate scaled by the worker count and cut on a
validation-loss plateau. The loop is workers/engine.py.

On a GPU the rank's rows are copied to the device once (epsilon's training
features are 3.2 GB) and every batch is gathered there: only the indices
travel, an epoch's in one copy. On a CPU the same code reads the (memory-mapped) arrays batch by
batch, so epsilon never has to fit in memory at once.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from scalebench.tasks import TabularData, TrainingSpec
from workers.adapter import Batch, IndexedTrainingSet, TrainingOptions, pass_sizes
from workers.data.batches import shard
from workers.data.sources import load_tabular


def regularised_loss(
    logits: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, l2: float
) -> torch.Tensor:
    """Mean binary cross-entropy of ``logits`` against 0/1 ``labels``, plus ``l2/2 × ‖w‖²``."""
    return F.binary_cross_entropy_with_logits(logits, labels) + 0.5 * l2 * weight.pow(2).sum()


def as_tensor(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` on ``device``: a view of it on the CPU (a memory-mapped file stays mapped and
    is read where indexed), one copy on a GPU. The arrays are only ever read."""
    with warnings.catch_warnings():  # a read-only memory map gives a read-only view
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        return torch.from_numpy(array).to(device)


class LogisticRegression(IndexedTrainingSet[torch.Tensor]):
    """Passes are sorted row indices (sorted: fewer page faults in memory-mapped files)."""

    def __init__(self, spec: TrainingSpec, options: TrainingOptions, device: torch.device) -> None:
        super().__init__(spec, options, device)
        assert isinstance(self.data_spec, TabularData)
        self.table: TabularData = self.data_spec
        data = load_tabular(self.table.name, options.data_dir)
        self.train_x, self.train_y = (
            as_tensor(data.train_x, device),
            as_tensor(data.train_y, device),
        )
        self.test_x, self.test_y = as_tensor(data.test_x, device), as_tensor(data.test_y, device)
        self.cut_into_batches(len(self.train_y), len(self.test_y))

    def pass_of(self, indices: torch.Tensor) -> torch.Tensor:
        return indices.sort().values

    def build_model(self) -> torch.nn.Module:
        self.model = torch.nn.Linear(self.table.features, 1)
        return self.model

    def load(self, item: torch.Tensor) -> Batch:
        """Gather the batch's rows where they live."""
        return Batch(inputs=(self.train_x[item],), targets=self.train_y[item], samples=len(item))

    def forward(self, net: torch.nn.Module, batch: Batch) -> torch.Tensor:
        return net(*batch.inputs).squeeze(1)

    def loss(self, output: torch.Tensor, batch: Batch) -> torch.Tensor:
        return regularised_loss(output.float(), batch.targets, self.model.weight, self.spec.l2)

    def warmup_batches(self) -> list[Batch]:
        """Random rows of the full batch's shape and of the epoch's last, shorter batch."""
        sizes = pass_sizes(self.n_train // self.world_size, self.batch)
        generator = torch.Generator().manual_seed(0)
        return [
            Batch(
                inputs=(torch.randn(n, self.table.features, generator=generator).to(self.device),),
                targets=torch.randint(0, 2, (n,), generator=generator).float().to(self.device),
                samples=n,
            )
            for n in sizes
        ]

    @torch.no_grad()
    def evaluate(
        self, model: torch.nn.Module, batch: int = 10_000
    ) -> tuple[dict[str, float], dict[str, Any]]:
        """Accuracy (percent) and mean cross-entropy over the whole test set, global over ranks."""
        rows, labels = self.test_x, self.test_y
        part = shard(len(labels), self.rank, self.world_size)
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss, correct, count
        for start in range(part.start, part.stop, batch):
            stop = min(start + batch, part.stop)
            x, y = rows[start:stop], labels[start:stop]
            logits = model(x).squeeze(1)
            totals[0] += F.binary_cross_entropy_with_logits(logits, y, reduction="sum").double()
            totals[1] += ((logits > 0).float() == y).sum().double()
            totals[2] += len(y)
        dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        loss_sum, correct, count = totals.tolist()
        return {"accuracy": 100.0 * correct / count, "loss": loss_sum / count}, {}
