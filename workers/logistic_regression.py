"""Task 2a: L2-regularised logistic regression trained to a validation accuracy.

The same loop as Task 1a, every phase timed:

    data → forward → loss → backward → communication → optimizer

The model is one linear layer (``features`` weights and a bias) giving a
logit; the loss is binary cross-entropy on it plus ``l2/2 × ‖w‖²`` on the
weights. ``variant="sync"`` averages gradients with one flat all-reduce after
backward (timed as communication); ``variant="ddp"`` lets
``DistributedDataParallel`` do it inside backward. Training rows are read
batch by batch from the (memory-mapped) arrays, so epsilon's 3.2 GB of
features never have to fit in memory at once.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from workers.data.batches import epoch_partition, shard
from workers.data.sources import load_tabular
from workers.image_classification import TrainingOptions, build_optimizer
from workers.schedules import LearningRate
from workers.sync_sgd import GradientAllReduce, broadcast_model, mean_over_ranks
from workers.tasks import TabularData, TrainingSpec
from workers.tracker import Tracker


def regularised_loss(
    logits: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, l2: float
) -> torch.Tensor:
    """Mean binary cross-entropy of ``logits`` against 0/1 ``labels``, plus ``l2/2 × ‖w‖²``."""
    return F.binary_cross_entropy_with_logits(logits, labels) + 0.5 * l2 * weight.pow(2).sum()


@torch.no_grad()
def evaluate(
    model: torch.nn.Linear, rows: np.ndarray, labels: np.ndarray, device: torch.device,
    batch: int = 10_000,
) -> dict[str, float]:  # fmt: skip
    """Accuracy (percent) and mean cross-entropy over the whole test set, global over ranks."""
    part = shard(len(labels), dist.get_rank(), dist.get_world_size())
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
    for start in range(part.start, part.stop, batch):
        stop = min(start + batch, part.stop)
        x = torch.from_numpy(np.asarray(rows[start:stop])).to(device)
        y = torch.from_numpy(np.asarray(labels[start:stop])).to(device)
        logits = model(x).squeeze(1)
        totals[0] += F.binary_cross_entropy_with_logits(logits, y, reduction="sum").double()
        totals[1] += ((logits > 0).float() == y).sum().double()
        totals[2] += len(y)
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    loss_sum, correct, count = totals.tolist()
    return {"accuracy": 100.0 * correct / count, "loss": loss_sum / count}


def train(
    spec: TrainingSpec, options: TrainingOptions, tracker: Tracker, device: torch.device
) -> str:
    """Train until the goal or the epoch limit; returns ``goal_reached`` or ``max_epochs``."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data_spec = spec.light_data if options.light else spec.data
    assert isinstance(data_spec, TabularData)
    data = load_tabular(data_spec.name, Path(options.data_dir))

    torch.manual_seed(options.seed)
    model = torch.nn.Linear(data_spec.features, 1).to(device)
    broadcast_model(model)
    if options.variant == "ddp":
        device_ids = [device.index] if device.type == "cuda" else None
        net: torch.nn.Module = DistributedDataParallel(model, device_ids=device_ids)
        reducer = None
    else:
        net = model
        reducer = GradientAllReduce(model.parameters())
    optimizer = build_optimizer(spec.optimizer, model.parameters())
    schedule = LearningRate(spec.schedule, spec.optimizer.lr, world_size)
    epochs = options.max_epochs or spec.epochs(options.light)
    batch = spec.batch_per_worker
    n_train = len(data.train_y)
    steps = math.ceil((n_train // world_size) / batch)
    clock = tracker.clock

    tracker.start(
        task=spec.id,
        light=options.light,
        variant=options.variant,
        seed=options.seed,
        data_set=data_spec.name,
        train_samples=n_train,
        test_samples=len(data.test_y),
        steps_per_epoch=steps,
        global_batch=batch * world_size,
        max_epochs=epochs,
        parameters=sum(p.numel() for p in model.parameters()),
        device=str(device),
        precision=options.precision,
    )
    autocast = torch.autocast(device.type, torch.bfloat16, enabled=options.precision == "bf16")
    for epoch in range(epochs):
        tracker.begin_epoch(epoch)
        net.train()
        order = epoch_partition(n_train, rank, world_size, epoch, options.seed).numpy()
        for step in range(steps):
            clock.start()
            index = np.sort(order[step * batch : (step + 1) * batch])  # sorted: fewer page faults
            rows = torch.from_numpy(np.asarray(data.train_x[index])).to(device, non_blocking=True)
            labels = torch.from_numpy(np.asarray(data.train_y[index])).to(device)
            clock.lap("data")

            with autocast:
                logits = net(rows).squeeze(1)
                clock.lap("forward")
                loss = regularised_loss(logits.float(), labels, model.weight, spec.l2)
                clock.lap("loss")
            loss.backward()
            clock.lap("backward")

            global_loss = reducer(loss) if reducer is not None else mean_over_ranks(loss)
            clock.lap("communication")

            lr = schedule.at(epoch + step / steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            optimizer.zero_grad(set_to_none=reducer is None)
            clock.lap("optimizer")
            tracker.step(epoch, step, steps, len(index), global_loss, lr)

        started = tracker.now()
        metrics = evaluate(model, data.test_x, data.test_y, device)
        if tracker.evaluation(epoch, metrics, started):
            tracker.finish("goal_reached", epochs=epoch + 1)
            return "goal_reached"
        schedule.end_of_epoch(epoch, metrics["loss"])
    tracker.finish("max_epochs", epochs=epochs)
    return "max_epochs"
