"""The training engine: the one loop that every time-to-accuracy task runs.

    build the model (seeded) → same weights on every rank → wrap (sync or DDP)
    → compile and warm up (optional; before the common start, on synthetic inputs)
    → common start (barrier)
    for each epoch:
        for each step the task cuts the epoch into:
            for each pass of the step (more than one: gradient accumulation):
                data → forward → loss → backward
            gradient packing → communication (the all-reduce alone) → unpacking
            optimizer: learning rate set, gradients normalised and clipped, update
            the next step's data staged (where the adapter builds it on the host)
            the clock's read: the step's one wait for a GPU
            step record; a non-finite loss stops every rank (diverged)
        evaluation (global over ranks), goal check, stop decision
        the task's end-of-epoch rule (plateau decay, switch to averaged SGD)

A task contributes an adapter (:class:`workers.adapter.TaskAdapter`): its data,
model, loss, optimizer, learning-rate rule and evaluation. Everything a benchmark
must do the same way for every task — what is timed and how, what is communicated
and when, when training stops — lives here: the loop, :func:`train`, with its
optimizer phase, evaluation and finish record beside it; what it trains with
(model, wrapper, masters, optimizer, compilation) and its start record are built
before the start by :mod:`workers.training_setup`.

Two ways to average gradients (``variant``):

- ``sync`` (the benchmark as specified): after backward, every gradient and
  the loss are packed into one flat buffer and all-reduced once; that
  all-reduce alone is the "communication" phase, packing, dividing and
  unpacking are "gradient_packing". A group of one rank runs no collective:
  its communication is zero;
- ``ddp``: ``DistributedDataParallel`` all-reduces gradient buckets while
  backward runs. Backward is timed up to the last bucket's launch (overlapped
  communication included); the wait that follows for the buckets' all-reduces,
  and the loss's one-element all-reduce, are "communication" (the exposed
  communication: what the step waits for, not all that travelled).

Two kinds of loss (``TaskAdapter.loss_sum``):

- a mean over the pass's samples (Tasks 1a, 2a, 3a: one pass per step); the
  step's loss is the mean over ranks;
- a sum over the pass's units (Tasks 4a, 4b: several passes per step); the
  summed gradients are divided by the global batch's count of the task's unit
  (target tokens or sentences), and the step's loss is per target token.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.modules.batchnorm import _BatchNorm

from workers.adapter import TaskAdapter
from workers.duet import meet_the_other_arms
from workers.mixed_precision import MasterWeights
from workers.sync_sgd import mean_over_ranks, sum_over_ranks
from workers.tracker import Tracker
from workers.training_setup import Training, build_training, record_start


class Diverged(RuntimeError):
    """The loss, averaged over ranks, is not finite."""


def train(task: TaskAdapter[Any], tracker: Tracker) -> str:
    """Train until the goal or the epoch limit; returns ``goal_reached`` or ``max_epochs``.

    Raises :class:`Diverged` when the loss averaged over ranks is not finite
    (after writing that step's record).
    """
    options, device, world_size = task.options, task.device, task.world_size
    training = build_training(task, tracker)  # model, wrapper, masters, optimizer, compiled
    model, net, reducer, masters = training.model, training.net, training.reducer, training.masters
    optimizer, waits_for_buckets = training.optimizer, training.waits_for_buckets
    autocast = options.autocast(device)
    epochs = options.max_epochs or task.spec.epochs(options.light)
    clock = tracker.clock
    meet_the_other_arms()  # in a duet: the arms' timed runs begin together
    record_start(task, tracker, training, epochs)
    for epoch in range(epochs):
        tracker.begin_epoch(epoch)
        net.train()
        plan = task.steps(epoch)
        for index, step in enumerate(plan):
            clock.start()
            samples: int | torch.Tensor = 0
            if task.loss_sum:  # this rank's summed loss, samples and units over the passes
                totals = torch.zeros(3, dtype=torch.float64, device=device)
            for item in step.passes:
                batch = task.load(item)
                clock.lap("data")
                with autocast:
                    output = task.forward(net, batch)
                    clock.lap("forward")
                    loss = task.loss(output, batch)
                    if task.loss_sum:
                        totals[0] += loss.detach().double()
                        totals[1] += batch.samples
                        totals[2] += batch.units
                    clock.lap("loss")
                samples += batch.samples
                (loss * masters.scaler.scale_tensor if masters else loss).backward()
                clock.lap("communication" if waits_for_buckets else "backward")

            # Gradients averaged over ranks. sync: packed into one buffer, all-reduced (the
            # collective alone is "communication"), divided and copied back; ddp averaged
            # them during backward, so only the loss travels here.
            if reducer is not None:
                # With a summed loss the reducer carries this rank's mean along (unused) and
                # the sums travel in a second, 3-number all-reduce: mean gradient = averaged
                # sum × k / global units.
                # A group of one packs nothing and runs no collective: 0 s for both, and no
                # laps (each costs a CUDA event; the little pack() does goes to "optimizer").
                reducer.pack(totals[0] / totals[1] if task.loss_sum else loss)
                if world_size > 1:
                    clock.lap("gradient_packing")
                reducer.all_reduce()
                if task.loss_sum:
                    sum_over_ranks(totals)
                if world_size > 1:
                    clock.lap("communication")
                global_loss = reducer.unpack()
                if world_size > 1:
                    clock.lap("gradient_packing")
            else:
                assert not task.loss_sum, "a summed loss needs the sync variant"
                global_loss = mean_over_ranks(loss)
                if world_size > 1:
                    clock.lap("communication")
            normaliser: float | torch.Tensor = 1.0
            if task.loss_sum:
                global_loss = totals[0] / totals[1]
                samples = totals[1] / world_size
                normaliser = totals[2] / world_size

            lr = task.learning_rate(epoch, index, step, len(plan))
            update(task, model, optimizer, masters, lr, normaliser)
            # The loss and sample count travel to the host without waiting: the copies are
            # queued before the step's last event, so the clock's read below, the step's one
            # synchronisation on a GPU, leaves them readable. On a CPU nothing is copied.
            loss_on_host = global_loss.detach().to("cpu", non_blocking=True)
            if isinstance(samples, torch.Tensor):
                samples = samples.to("cpu", non_blocking=True)
            clock.lap("optimizer")
            if index + 1 < len(plan):  # the next step's data, while the device computes
                task.prefetch(plan[index + 1])
            clock.read()

            loss_value = float(loss_on_host)
            tracker.step(epoch, index, len(plan), int(samples), loss_value, lr)
            if not math.isfinite(loss_value):
                raise Diverged(f"loss is {loss_value} at epoch {epoch}, step {index}")

        metrics, goal_reached = evaluate(task, model, tracker, epoch)
        if goal_reached:
            return finish(task, tracker, training, "goal_reached", epoch + 1)
        optimizer = task.end_of_epoch(epoch, metrics, tracker) or optimizer
    return finish(task, tracker, training, "max_epochs", epochs)


def update(
    task: TaskAdapter[Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    masters: MasterWeights | None,
    lr: float,
    normaliser: float | torch.Tensor,
) -> None:
    """The optimizer phase of a step: the learning rate ``lr`` set, the averaged gradients
    divided by ``normaliser`` (a summed loss: the global batch's units per rank; else 1),
    clipped to the task's norm, and the update. With fp16 weights the update is the
    masters' (overflow check, skip and rescale on the device)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    if masters is not None:
        masters.step(optimizer, normaliser=normaliser, clip_norm=task.clip_norm)
    else:
        if task.loss_sum:
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.div_(normaliser)
        if task.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), task.clip_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def evaluate(
    task: TaskAdapter[Any], model: torch.nn.Module, tracker: Tracker, epoch: int
) -> tuple[dict[str, float], bool]:
    """The evaluation after ``epoch``: batch-norm statistics averaged over ranks, the task's
    global metrics, and the evaluation record; (the metrics, whether they reach the goal)."""
    started = tracker.begin_evaluation(epoch)
    average_batch_norm_statistics(model)
    metrics, details = task.evaluate(model)
    return metrics, tracker.evaluation(epoch, metrics, started, **details)


def average_batch_norm_statistics(model: torch.nn.Module) -> None:
    """Average batch-norm running statistics over ranks (each rank saw other batches)."""
    world_size = dist.get_world_size()
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            for buffer in module.buffers():
                if buffer.is_floating_point():
                    dist.all_reduce(buffer.data, op=dist.ReduceOp.SUM)
                    buffer.data.div_(world_size)


def finish(
    task: TaskAdapter[Any], tracker: Tracker, training: Training, outcome: str, epochs: int
) -> str:
    """The finish record after ``epochs`` epochs: ``outcome``, the task's fields, the
    recompilations while timed, and with fp16 weights the final loss scale and how many
    updates an overflow skipped; returns ``outcome``."""
    details = {**task.finish_details(), **training.compiled.finish_details()}
    if training.masters is not None:
        scaler = training.masters.scaler
        details.update(loss_scale=scaler.scale, skipped_updates=scaler.skipped)
    tracker.finish(outcome, epochs=epochs, **details)
    return outcome
