"""What the training loop trains with, built before the common start, and its start record.

:func:`build_training` makes :class:`Training`: the task's model (seeded, the same
weights on every rank), its wrapper for the variant (sync: one all-reduce of every
gradient; ddp: ``DistributedDataParallel``), fp16 master weights with a dynamic loss
scale where the task runs in half on a GPU, the optimizer, and the compile decision
with its warm-up. :func:`record_start` writes the run's MLPerf hyperparameters
(:func:`mlperf_hyperparameters`) and the start record.

The loop itself is :func:`workers.engine.train`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from torch.nn.parallel import DistributedDataParallel

from scalebench.tasks import TranslationSpec
from workers.adapter import TaskAdapter
from workers.compile import Compiled, compile_for_training
from workers.mixed_precision import DynamicLossScale, MasterWeights
from workers.records import DDP_EXPOSED_WAIT
from workers.sync_sgd import GradientAllReduce, broadcast_model, lapped_bucket_all_reduce
from workers.tracker import Tracker


class Training(NamedTuple):
    """What the loop trains with."""

    model: torch.nn.Module  # the task's model: what is updated, evaluated and counted
    net: torch.nn.Module  # what a forward pass calls: the model or DDP's wrapper, maybe compiled
    reducer: GradientAllReduce | None  # sync: every gradient in one all-reduce; ddp: None
    masters: MasterWeights | None  # fp16 weights: their fp32 masters and loss scale
    optimizer: torch.optim.Optimizer  # over the masters where there are some
    compiled: Compiled
    half: bool  # the model's weights are fp16
    waits_for_buckets: bool  # ddp over ranks: backward's end, waiting for buckets, is comms


def runs_in_half(device: torch.device) -> bool:
    """fp16 weights with fp32 masters on GPUs, as the benchmark text describes; fp32 elsewhere."""
    return device.type == "cuda"


def build_training(task: TaskAdapter[Any], tracker: Tracker) -> Training:
    """Seed, build the task's model on its device, give every rank rank 0's weights, wrap it
    for the variant, make the masters and the optimizer, then compile and warm up (or not,
    by the ``compile`` option): all before the common start."""
    options, device = task.options, task.device
    torch.manual_seed(options.seed)
    model = task.build_model().to(device)
    half = task.half_on_gpu and runs_in_half(device)
    if half:
        model.half()
    broadcast_model(model)
    waits_for_buckets = options.variant == "ddp" and task.world_size > 1
    if options.variant == "ddp":
        device_ids = [device.index] if device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=device_ids)
        if waits_for_buckets:  # backward's last part, waiting for the buckets, is communication
            ddp.register_comm_hook(tracker.clock, lapped_bucket_all_reduce)
        net: torch.nn.Module = ddp
        reducer = None
    else:
        net = model
        reducer = GradientAllReduce(model.parameters())
    masters = None
    if half:
        assert task.loss_scale is not None
        scale = task.loss_scale
        masters = MasterWeights(
            model.parameters(),
            DynamicLossScale(
                scale.initial, scale.factor, scale.window, scale.max_scale, device=device
            ),
        )
    optimizer = task.build_optimizer(masters.master if masters else list(model.parameters()))
    compiled = compile_for_training(net, model, task, options.compile)
    return Training(
        model, compiled.net, reducer, masters, optimizer, compiled, half, waits_for_buckets
    )


def record_start(task: TaskAdapter[Any], tracker: Tracker, training: Training, epochs: int) -> None:
    """The run's hyperparameters (MLPerf's log) and its start record, which opens the timed run:
    the task, the request's options, the model's size, and what compiling cost."""
    options = task.options
    tracker.hyperparameters(mlperf_hyperparameters(task))
    tracker.start(
        task=task.spec.id,
        light=options.light,
        variant=options.variant,
        seed=options.seed,
        data_set=task.data_spec.name,
        max_epochs=epochs,
        parameters=sum(p.numel() for p in training.model.parameters()),
        device=str(task.device),
        precision="fp16" if training.half else options.precision,
        **task.start_details(),
        **training.compiled.start_details(),
        **({"ddp_communication": DDP_EXPOSED_WAIT} if training.waits_for_buckets else {}),
    )


def mlperf_hyperparameters(task: TaskAdapter[Any]) -> dict[str, Any]:
    """The run's hyperparameters under MLPerf's log keys: global batch (samples, or the
    translation tasks' sentences or tokens), base rate before scaling with k, optimizer,
    and the warm-up (epochs by the task's rule, or steps for the translation tasks); then
    the sizes of the training and evaluation sets this run used (``train_samples``,
    ``eval_samples``; a light run's smaller sets), in the task's samples: images (Task 1a),
    rows (2a), tokens (3a), sentence pairs (4a, 4b: the training pairs within the length
    limit, the test sentences translated). An adapter whose start details give no sizes
    logs none."""
    spec, k, light = task.spec, task.world_size, task.options.light
    details = task.start_details()
    sizes = {
        "train_samples": details.get("train_samples"),
        "eval_samples": details.get("test_samples"),
    }
    sizes = {key: size for key, size in sizes.items() if size is not None}
    if isinstance(spec, TranslationSpec):
        batch = spec.light_global_batch if light else spec.global_batch
        warmup = {
            "opt_learning_rate_warmup_steps": spec.light_warmup_steps
            if light
            else spec.warmup_steps
        }
    else:
        batch = details.get("global_batch", spec.batch_per_worker * k)
        rule = spec.schedule.warmup
        epochs = {"linear-log2k": math.log2(k), "sqrt-k-over-3k": 3 * k}.get(rule, 0)
        warmup = {"opt_learning_rate_warmup_epochs": epochs}
    return {
        "global_batch_size": batch,
        "opt_base_learning_rate": spec.optimizer.lr,
        "opt_name": spec.optimizer.name,
        **warmup,
        **sizes,
    }
