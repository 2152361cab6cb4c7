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

A task contributes an adapter (:class:`TaskAdapter`): its data, model, loss,
optimizer, learning-rate rule and evaluation. Everything a benchmark must do
the same way for every task — what is timed and how, what is communicated
and when, when training stops — lives here.

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

import importlib
import math
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch
import torch.distributed as dist
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.parallel import DistributedDataParallel

from scalebench.rank import DEFAULT_PRECISION
from scalebench.tasks import LossScaleSpec, TrainingSpec, TranslationSpec
from workers.compile import Compiled, compile_for_training
from workers.data.batches import epoch_partition, to_device
from workers.mixed_precision import DynamicLossScale, MasterWeights
from workers.records import DDP_EXPOSED_WAIT
from workers.schedules import LearningRate
from workers.sync_sgd import (
    GradientAllReduce,
    broadcast_model,
    lapped_bucket_all_reduce,
    mean_over_ranks,
    sum_over_ranks,
)
from workers.tracker import Tracker


class Diverged(RuntimeError):
    """The loss, averaged over ranks, is not finite."""


@dataclass(frozen=True)
class TrainingOptions:
    """How one rank trains: what the request asked for, beyond the task's spec."""

    light: bool
    data_dir: Path
    seed: int = 0
    variant: str = "sync"  # "sync" or "ddp"
    max_epochs: int | None = None  # None: the spec's (light) maximum
    eval_batch: int = 1000
    precision: str = DEFAULT_PRECISION  # "bf16": forward and loss under bfloat16 autocast
    compile: str = "off"  # "off", "on" or "auto" (see workers/compile.py)

    def autocast(self, device: torch.device) -> AbstractContextManager[Any]:
        """Where forward and loss run: under bfloat16 autocast for ``bf16``, else as they are."""
        if self.precision == "bf16":
            return torch.autocast(device.type, torch.bfloat16)
        return nullcontext()


@dataclass
class Batch:
    """One forward pass's tensors, on the device.

    ``samples`` counts what throughput is measured in (images, rows, tokens);
    ``units`` is what a summed loss is divided by (target tokens or sentences;
    unused for a mean loss).
    """

    inputs: tuple[Any, ...]
    targets: torch.Tensor
    samples: int
    units: int = 0


Item = TypeVar("Item")


@dataclass
class Step(Generic[Item]):
    """One optimizer update: the passes whose gradients it sums.

    ``passes`` are the adapter's own descriptions (indices, positions), cheap
    to make; :meth:`TaskAdapter.load` turns each into a :class:`Batch` inside
    the timed data phase. ``details`` carry what the task's learning-rate rule
    needs (e.g. the step's sequence length).
    """

    passes: Sequence[Item]
    details: dict[str, Any] = field(default_factory=dict)


class TaskAdapter(Generic[Item]):
    """What a task brings to the engine. Subclasses set the attributes and override the hooks.

    The engine calls, in order: :meth:`build_model` (after seeding),
    :meth:`build_optimizer`, :meth:`start_details`, then per epoch
    :meth:`steps`; per step :meth:`load`, :meth:`forward`, :meth:`loss` for
    every pass and :meth:`learning_rate` once; then :meth:`evaluate` and
    :meth:`end_of_epoch`.
    """

    loss_sum: bool = False  # True: loss() returns a sum over the batch's units
    clip_norm: float | None = None  # gradient-norm clip after averaging, None: none
    half_on_gpu: bool = False  # fp16 weights with fp32 masters and a loss scale, on GPUs
    loss_scale: LossScaleSpec | None = None

    def __init__(self, spec: TrainingSpec, options: TrainingOptions, device: torch.device) -> None:
        self.spec = spec
        self.options = options
        self.device = device
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.data_spec = spec.light_data if options.light else spec.data

    # -- set-up -----------------------------------------------------------------
    def build_model(self) -> torch.nn.Module:
        raise NotImplementedError

    def build_optimizer(self, parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        raise NotImplementedError

    def start_details(self) -> dict[str, Any]:
        """Fields of the start record beyond those the engine writes (data set, sizes)."""
        return {}

    # -- one epoch --------------------------------------------------------------
    def steps(self, epoch: int) -> Sequence[Step[Item]]:
        raise NotImplementedError

    def load(self, item: Item) -> Batch:
        """The data phase: one pass's tensors on the device."""
        raise NotImplementedError

    def prefetch(self, step: Step[Item]) -> None:
        """Begin preparing ``step``'s data (the next step) while the device computes the
        current one: called once the current step's work is queued, before the clock's read.
        An adapter whose batches are built on the host may stage them here (on a GPU); by
        default nothing happens, and :meth:`load` does all the work in the data phase."""

    def forward(self, net: torch.nn.Module, batch: Batch) -> Any:
        return net(*batch.inputs)

    def loss(self, output: Any, batch: Batch) -> torch.Tensor:
        raise NotImplementedError

    def learning_rate(self, epoch: int, index: int, step: Step[Item], steps: int) -> float:
        raise NotImplementedError

    def warmup_batches(self) -> list[Batch]:
        """Synthetic batches of every shape a timed step will present (compile warm-up).

        They must touch no training or evaluation data; an empty list skips warm-up.
        """
        return []

    # -- after an epoch ---------------------------------------------------------
    def evaluate(self, model: torch.nn.Module) -> tuple[dict[str, float], dict[str, Any]]:
        """(global metrics, extra fields of the evaluation record)."""
        raise NotImplementedError

    def end_of_epoch(
        self, epoch: int, metrics: dict[str, float], tracker: Tracker
    ) -> torch.optim.Optimizer | None:
        """The task's rule after an evaluation that missed the goal; may return a new optimizer."""
        return None

    def finish_details(self) -> dict[str, Any]:
        return {}


class IndexedTrainingSet(TaskAdapter[Item]):
    """A task over a fixed training set (Tasks 1a and 2a): every epoch, each rank takes its
    share of one seeded permutation of the samples in batches of ``batch_per_worker`` (the
    last one shorter); SGD with the spec's settings; the rate warms up per step and decays
    on a validation-loss plateau (:class:`workers.schedules.LearningRate`).

    A subclass loads its data, then calls :meth:`cut_into_batches`; it may override
    :meth:`pass_of` to turn a slice of the permutation into its own kind of pass (a tensor).
    The epoch's passes reach the device in one copy when the epoch is planned, so a step
    copies nothing to it.
    """

    def cut_into_batches(self, n_train: int, n_test: int) -> None:
        self.batch = self.spec.batch_per_worker
        self.n_train, self.n_test = n_train, n_test
        self.steps_per_epoch = math.ceil((n_train // self.world_size) / self.batch)
        self.schedule = LearningRate(self.spec.schedule, self.spec.optimizer.lr, self.world_size)

    def pass_of(self, indices: torch.Tensor) -> torch.Tensor:
        return indices

    def build_optimizer(self, parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return sgd(self.spec.optimizer, parameters)

    def start_details(self) -> dict[str, Any]:
        return {
            "train_samples": self.n_train,
            "test_samples": self.n_test,
            "steps_per_epoch": self.steps_per_epoch,
            "global_batch": self.batch * self.world_size,
        }

    def steps(self, epoch: int) -> list[Step[Item]]:
        order = epoch_partition(self.n_train, self.rank, self.world_size, epoch, self.options.seed)
        passes = [
            self.pass_of(order[i * self.batch : (i + 1) * self.batch])
            for i in range(self.steps_per_epoch)
        ]
        return [Step([p]) for p in on_device_at_once(passes, self.device)]

    def learning_rate(self, epoch: int, index: int, step: Step[Item], steps: int) -> float:
        return self.schedule.at(epoch + index / steps)

    def end_of_epoch(self, epoch: int, metrics: dict[str, float], tracker: Tracker) -> None:
        self.schedule.end_of_epoch(epoch, metrics["loss"])


def on_device_at_once(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """``tensors`` on ``device`` through one copy: concatenated along their last dimension,
    copied without waiting, and cut back into views. On a CPU: the tensors themselves."""
    if device.type == "cpu" or not tensors:
        return tensors
    sizes = [t.shape[-1] for t in tensors]
    return list(to_device(torch.cat(tensors, dim=-1), device).split(sizes, dim=-1))


def adapter_for(
    spec: TrainingSpec, options: TrainingOptions, device: torch.device
) -> TaskAdapter[Any]:
    """The task's adapter, named by its spec (``module:Class``), with its data loaded."""
    module_name, _, class_name = spec.adapter.partition(":")
    adapter_class = getattr(importlib.import_module(module_name), class_name)
    return adapter_class(spec, options, device)


def runs_in_half(device: torch.device) -> bool:
    """fp16 weights with fp32 masters on GPUs, as the benchmark text describes; fp32 elsewhere."""
    return device.type == "cuda"


def average_batch_norm_statistics(model: torch.nn.Module) -> None:
    """Average batch-norm running statistics over ranks (each rank saw other batches)."""
    world_size = dist.get_world_size()
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            for buffer in module.buffers():
                if buffer.is_floating_point():
                    dist.all_reduce(buffer.data, op=dist.ReduceOp.SUM)
                    buffer.data.div_(world_size)


def train(task: TaskAdapter[Any], tracker: Tracker) -> str:
    """Train until the goal or the epoch limit; returns ``goal_reached`` or ``max_epochs``.

    Raises :class:`Diverged` when the loss averaged over ranks is not finite
    (after writing that step's record).
    """
    options, device, spec = task.options, task.device, task.spec
    world_size = task.world_size

    torch.manual_seed(options.seed)
    model = task.build_model().to(device)
    half = task.half_on_gpu and runs_in_half(device)
    if half:
        model.half()
    broadcast_model(model)
    if options.variant == "ddp":
        device_ids = [device.index] if device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=device_ids)
        if world_size > 1:  # backward's last part, waiting for the buckets, is communication
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
    autocast = options.autocast(device)

    compiled: Compiled = compile_for_training(net, model, task, options.compile)
    net = compiled.net
    epochs = options.max_epochs or spec.epochs(options.light)
    clock = tracker.clock
    waits_for_buckets = options.variant == "ddp" and world_size > 1

    tracker.hyperparameters(mlperf_hyperparameters(task))
    tracker.start(
        task=spec.id,
        light=options.light,
        variant=options.variant,
        seed=options.seed,
        data_set=task.data_spec.name,
        max_epochs=epochs,
        parameters=sum(p.numel() for p in model.parameters()),
        device=str(device),
        precision="fp16" if half else options.precision,
        **task.start_details(),
        **compiled.start_details(),
        **({"ddp_communication": DDP_EXPOSED_WAIT} if waits_for_buckets else {}),
    )
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

        started = tracker.begin_evaluation(epoch)
        average_batch_norm_statistics(model)
        metrics, details = task.evaluate(model)
        if tracker.evaluation(epoch, metrics, started, **details):
            tracker.finish(
                "goal_reached", epochs=epoch + 1, **finish_details(task, compiled, masters)
            )
            return "goal_reached"
        optimizer = task.end_of_epoch(epoch, metrics, tracker) or optimizer
    tracker.finish("max_epochs", epochs=epochs, **finish_details(task, compiled, masters))
    return "max_epochs"


def finish_details(
    task: TaskAdapter[Any], compiled: Compiled, masters: MasterWeights | None
) -> dict[str, Any]:
    """Fields of the finish record: the task's, recompilations, and the fp16 loss scale."""
    details = {**task.finish_details(), **compiled.finish_details()}
    if masters is not None:  # the final scale, and how many updates an overflow skipped
        details.update(loss_scale=masters.scaler.scale, skipped_updates=masters.scaler.skipped)
    return details


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


def pass_sizes(samples_per_rank: int, batch: int) -> list[int]:
    """The distinct batch sizes of an epoch of ``samples_per_rank`` cut into ``batch``es."""
    full = min(batch, samples_per_rank)
    last = samples_per_rank - (math.ceil(samples_per_rank / batch) - 1) * batch
    return sorted({full, last})


def sgd(spec_optimizer: Any, parameters: Iterable[torch.nn.Parameter]) -> torch.optim.SGD:
    """SGD with the spec's rate, momentum, Nesterov, weight decay and dampening."""
    return torch.optim.SGD(
        parameters,
        lr=spec_optimizer.lr,
        momentum=spec_optimizer.momentum,
        nesterov=spec_optimizer.nesterov,
        weight_decay=spec_optimizer.weight_decay,
        dampening=spec_optimizer.dampening,
    )
