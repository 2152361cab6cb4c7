"""What a task brings to the training engine, and what the tasks' adapters share.

:class:`TaskAdapter` is the contract: a task's data, model, loss, optimizer,
learning-rate rule and evaluation; :func:`adapter_for` finds a task's adapter
by its spec. :class:`TrainingOptions` is how one rank trains, :class:`Batch` one
forward pass's tensors and :class:`Step` one optimizer update's passes. For
adapters over a fixed training set (Tasks 1a and 2a): :class:`IndexedTrainingSet`,
:func:`on_device_at_once`, :func:`pass_sizes` and :func:`sgd`.

The loop that calls an adapter is :func:`workers.engine.train`.
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

from scalebench.rank import DEFAULT_PRECISION
from scalebench.tasks import LossScaleSpec, TrainingSpec
from workers.data.batches import epoch_partition, to_device
from workers.schedules import LearningRate
from workers.tracker import Tracker


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
