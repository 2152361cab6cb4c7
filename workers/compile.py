"""Compiling the training step with ``torch.compile``, as initialisation rather than training.

MLPerf's timing rule: building and compiling the model, and warming it up on
synthetic inputs, is initialisation, outside time to train, as long as no
training or evaluation data is touched. So compilation happens here, before
the group's common start:

1. the model (or its DDP wrapper) is wrapped with ``torch.compile``;
2. it is warmed up with the adapter's synthetic batches — one forward,
   loss and backward for every input shape a timed step will present (the
   last, shorter batch of an epoch included), so the timed run compiles
   nothing new;
3. everything the warm-up changed is put back exactly: weights, buffers
   (batch-norm running statistics and their counters), gradients and every
   random generator (torch's CPU and CUDA generators, Python's ``random``,
   NumPy's global generator). The optimizer is never stepped.

The setting: ``off`` runs eager; ``on`` compiles, and a failure to compile
refuses the run (:class:`CompileRefused`, naming the ``compile`` field);
``auto`` compiles full runs where the task's spec says measurement showed that
it pays on this kind of device (``TrainingSpec.compile_pays_on``; light runs
are too short to repay the compiler, see :func:`should_compile`), and falls
back to eager, with the reason in the start record, when compiling fails.

On a GPU, a task whose batches have fixed shapes, where replaying was measured to
pay (``TrainingSpec.cuda_graphs``: Task 1a), is compiled in ``reduce-overhead``
mode: the forward and the backward are each captured once as a CUDA graph (per
batch shape) during the warm-up and replayed by every timed step, so a step
launches two graphs instead of one kernel at a time. The loss, the all-reduce and
the optimizer stay eager, so the step's phases are still timed by CUDA events
between them: ``forward`` and ``backward`` are then each one replay. On a CPU the
mode changes nothing.

Recorded: ``compile`` (the setting), ``compiled`` (whether the run is
compiled), ``cuda_graphs`` (whether it replays CUDA graphs), ``compile_s``
(seconds of compilation, capture and warm-up, before the start),
``compile_fallback`` (why ``auto`` ran eager after a failure), and at the end
``recompilations`` (graphs compiled during the timed run; 0 is the goal).
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from workers.adapter import TaskAdapter


class CompileRefused(ValueError):
    """``compile: on`` was asked for and the model cannot be compiled here."""


def graphs_compiled() -> int:
    """How many graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@dataclass
class Compiled:
    """The module a training step calls, and what compiling it cost."""

    net: torch.nn.Module
    setting: str
    compiled: bool
    cuda_graphs: bool = False
    compile_s: float = 0.0
    fallback: str | None = None
    graphs_at_start: int = 0

    def start_details(self) -> dict[str, Any]:
        details: dict[str, Any] = {
            "compile": self.setting,
            "compiled": self.compiled,
            "compile_s": self.compile_s,
        }
        if self.cuda_graphs:
            details["cuda_graphs"] = True
        if self.fallback is not None:
            details["compile_fallback"] = self.fallback
        return details

    def finish_details(self) -> dict[str, Any]:
        if not self.compiled:
            return {"recompilations": 0}
        return {"recompilations": graphs_compiled() - self.graphs_at_start}


@dataclass
class SavedState:
    """Everything a warm-up may change, copied so it can be put back bit for bit."""

    model: dict[str, torch.Tensor]
    grads: list[torch.Tensor | None]
    torch_rng: torch.Tensor
    cuda_rng: list[torch.Tensor]
    python_rng: object
    numpy_rng: dict[str, Any]

    @classmethod
    def of(cls, model: torch.nn.Module) -> SavedState:
        return cls(
            model={k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()},
            grads=[None if p.grad is None else p.grad.detach().clone() for p in model.parameters()],
            torch_rng=torch.get_rng_state(),
            cuda_rng=torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            python_rng=random.getstate(),
            numpy_rng=copy.deepcopy(np.random.get_state(legacy=False)),
        )

    def restore(self, model: torch.nn.Module) -> None:
        with torch.no_grad():
            for name, value in model.state_dict(keep_vars=True).items():
                value.copy_(self.model[name])
        for p, grad in zip(model.parameters(), self.grads, strict=True):
            p.grad = None if grad is None else grad.clone()
        torch.set_rng_state(self.torch_rng)
        if self.cuda_rng:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        random.setstate(self.python_rng)
        np.random.set_state(self.numpy_rng)


# Warm-up calls of a step in reduce-overhead mode: the first runs the compiled code as it is,
# the second captures the CUDA graph (torch's CUDA graph trees), the third replays it, all
# before the start.
CAPTURE_CALLS = 3


def warm_up(
    net: torch.nn.Module, model: torch.nn.Module, task: TaskAdapter[Any], rounds: int = 1
) -> None:
    """Forward, loss and backward of every synthetic batch, ``rounds`` times; then the state
    as it was."""
    saved = SavedState.of(model)
    autocast = task.options.autocast(task.device)
    net.train()
    try:
        for _ in range(rounds):
            for batch in task.warmup_batches():
                with autocast:
                    loss = task.loss(task.forward(net, batch), batch)
                loss.backward()
                for p in model.parameters():  # as every step's update leaves them
                    p.grad = None
    finally:
        saved.restore(model)
    if task.device.type == "cuda":
        torch.cuda.synchronize(task.device)


def failure_reason(exc: BaseException) -> str:
    """The root cause of a compiler failure in one line (the compiler wraps it in layers)."""
    while (inner := getattr(exc, "inner_exception", None) or exc.__cause__) is not None:
        exc = inner
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def should_compile(setting: str, task: TaskAdapter[Any]) -> bool:
    """``on``; or ``auto`` for a full run on a device where compiling was measured to pay.

    Light runs stay eager under ``auto``: on this project's 2-core reference
    machine compiling Task 1a took 65–70 s with a cold cache (8 s warm) to save
    about a second of a 25 s light run (``benchmarks/light_tta_compile.py``);
    a full run trains for hours, and 3–6 % of that repays it many times.
    """
    if setting == "auto":
        return not task.options.light and task.device.type in task.spec.compile_pays_on
    return setting == "on"


def captures_cuda_graphs(task: TaskAdapter[Any]) -> bool:
    """Whether a compiled step of ``task`` replays CUDA graphs: on a GPU, for a task whose
    spec asks for them (fixed batch shapes, measured to pay)."""
    return task.device.type == "cuda" and task.spec.cuda_graphs


def compile_for_training(
    net: torch.nn.Module,
    model: torch.nn.Module,
    task: TaskAdapter[Any],
    setting: str,
    backend: str | Callable[..., Any] = "inductor",
) -> Compiled:
    """``net`` compiled and warmed up when ``setting`` asks for it, else ``net`` as it is.

    ``model`` is the bare module inside ``net`` (the same object without DDP);
    its state is what the warm-up restores.
    """
    if not should_compile(setting, task):
        return Compiled(net, setting, compiled=False)
    began = time.perf_counter()
    graphs = captures_cuda_graphs(task)
    try:
        mode = "reduce-overhead" if graphs else None
        compiled_net = torch.compile(net, backend=backend, dynamic=False, mode=mode)
        warm_up(compiled_net, model, task, rounds=CAPTURE_CALLS if graphs else 1)
    except Exception as exc:  # the compiler's failures have no common type
        reason = failure_reason(exc)
        if setting == "on":
            raise CompileRefused(
                f"compile: 'on' but the model cannot be compiled here ({reason})"
            ) from exc
        torch._dynamo.reset()
        return Compiled(net, setting, compiled=False, fallback=reason)
    return Compiled(
        compiled_net,
        setting,
        compiled=True,
        cuda_graphs=graphs,
        compile_s=time.perf_counter() - began,
        graphs_at_start=graphs_compiled(),
    )
