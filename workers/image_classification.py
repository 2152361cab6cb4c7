"""Task 1a: ResNet-20 trained to a target top-1 accuracy with synchronous SGD.

One loop, every phase timed:

    data → forward → loss → backward → communication → optimizer

``variant="sync"`` (the benchmark as specified) averages gradients with one
flat all-reduce after backward, timed as communication. ``variant="ddp"``
uses ``DistributedDataParallel`` for comparison: its gradient all-reduce
overlaps backward, so its "backward" phase includes gradient communication
and its "communication" phase is only the one-element loss all-reduce.

``precision="bf16"`` runs forward and loss under bfloat16 autocast; weights,
gradients, the all-reduce and evaluation stay fp32.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel

from workers.data.batches import augment, epoch_partition, normalise, shard
from workers.data.sources import load_images
from workers.models.resnet import resnet20
from workers.schedules import LearningRate
from workers.sync_sgd import GradientAllReduce, average_buffers, broadcast_model, mean_over_ranks
from workers.tasks import OptimizerSpec, TrainingSpec
from workers.tracker import Tracker


@dataclass(frozen=True)
class TrainingOptions:
    light: bool
    data_dir: Path
    seed: int = 0
    variant: str = "sync"
    max_epochs: int | None = None  # None: the spec's (light) maximum
    eval_batch: int = 1000
    precision: str = "fp32"  # "bf16": forward and loss under bfloat16 autocast


def build_optimizer(
    spec: OptimizerSpec, parameters: Iterable[torch.nn.Parameter]
) -> torch.optim.SGD:
    """SGD with the spec's momentum, Nesterov, weight decay and dampening."""
    return torch.optim.SGD(
        parameters,
        lr=spec.lr,
        momentum=spec.momentum,
        nesterov=spec.nesterov,
        weight_decay=spec.weight_decay,
        dampening=spec.dampening,
    )


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    device: torch.device,
    batch: int,
) -> dict[str, float]:
    """Top-1 accuracy (percent) and mean cross-entropy over the whole test set.

    Each rank scores a disjoint shard; sums and counts are all-reduced, so the
    result is the global value, identical on every rank.
    """
    model.eval()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    part = shard(len(labels), rank, world_size)
    x_all, y_all = images[part], labels[part]
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
    for start in range(0, len(y_all), batch):
        x = x_all[start : start + batch].to(device)
        y = y_all[start : start + batch].to(device)
        logits = model(x)
        totals[0] += F.cross_entropy(logits, y, reduction="sum").double()
        totals[1] += (logits.argmax(dim=1) == y).sum().double()
        totals[2] += len(y)
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    loss_sum, correct, count = totals.tolist()
    return {"top1_accuracy": 100.0 * correct / count, "loss": loss_sum / count}


def train(
    spec: TrainingSpec, options: TrainingOptions, tracker: Tracker, device: torch.device
) -> str:
    """Train until the goal or the epoch limit; returns ``goal_reached`` or ``max_epochs``.

    Raises :class:`workers.tracker.Diverged` when the mean loss is not finite.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data_spec = spec.light_data if options.light else spec.data
    data = normalise(load_images(data_spec.name, options.data_dir))

    torch.manual_seed(options.seed)
    model = resnet20(in_channels=data_spec.channels, classes=data_spec.classes).to(device)
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
    augment_rng = torch.Generator().manual_seed(options.seed * 7919 + rank)
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
        order = epoch_partition(n_train, rank, world_size, epoch, options.seed)
        for step in range(steps):
            clock.start()
            index = order[step * batch : (step + 1) * batch]
            images = augment(
                data.train_x[index], data_spec.crop_padding, data_spec.horizontal_flip, augment_rng
            ).to(device, non_blocking=True)
            labels = data.train_y[index].to(device, non_blocking=True)
            clock.lap("data")

            with autocast:
                logits = net(images)
                clock.lap("forward")
                loss = F.cross_entropy(logits, labels)
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
        average_buffers(model)
        metrics = evaluate(model, data.test_x, data.test_y, device, options.eval_batch)
        if tracker.evaluation(epoch, metrics, started):
            tracker.finish("goal_reached", epochs=epoch + 1)
            return "goal_reached"
        schedule.end_of_epoch(epoch, metrics["loss"])
    tracker.finish("max_epochs", epochs=epochs)
    return "max_epochs"
