"""The GPU check's instruments: matmul peak, FLOPs per sample, host-synchronisation counting,
and a phase clock that also reads the wall.

Each is small and usable on a CPU, where the tests exercise it; on a GPU they time with CUDA
events after warm-up, so a figure is the device's, not the launch queue's.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from workers.tracker import PhaseClock

# The warning torch raises for an implicit synchronisation (a device-to-host copy, ``.item()``,
# ``nonzero``) once ``torch.cuda.set_sync_debug_mode("warn")`` is on.
SYNC_WARNING = "called a synchronizing CUDA operation"


@dataclass(frozen=True)
class MatmulRate:
    """A square matrix product's rate: ``tflops`` (10¹² floating-point operations per
    second, 2·n³ per product) over ``repeats`` timed products of ``n``×``n`` ``dtype``."""

    dtype: str
    n: int
    repeats: int
    tflops: float
    spread_tflops: tuple[float, float]  # the slowest and fastest single product


def matmul_rate(
    dtype: torch.dtype, device: torch.device, n: int = 8192, repeats: int = 10, warmup: int = 3
) -> MatmulRate:
    """Measure ``n``×``n``×``n`` products of random ``dtype`` matrices on ``device``.

    On a GPU each product is timed by a pair of CUDA events, after ``warmup`` untimed ones,
    and read after one synchronisation; on a CPU by the wall clock. fp32 is measured with TF32
    off (the strict fp32 rate); the caller may measure TF32 apart.
    """
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    for _ in range(warmup):
        torch.mm(a, b)
    seconds: list[float] = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
        marks[0].record()
        for i in range(repeats):
            torch.mm(a, b)
            marks[i + 1].record()
        marks[-1].synchronize()
        seconds = [marks[i].elapsed_time(marks[i + 1]) / 1000.0 for i in range(repeats)]
    else:
        for _ in range(repeats):
            started = time.perf_counter()
            torch.mm(a, b)
            seconds.append(time.perf_counter() - started)
    flops = 2.0 * n**3
    total = sum(seconds)
    return MatmulRate(
        dtype=str(dtype).removeprefix("torch."),
        n=n,
        repeats=repeats,
        tflops=flops * repeats / total / 1e12,
        spread_tflops=(flops / max(seconds) / 1e12, flops / min(seconds) / 1e12),
    )


def training_flops_per_sample(
    model: torch.nn.Module, inputs: torch.Tensor, loss: Callable[[torch.Tensor], torch.Tensor]
) -> float:
    """Floating-point operations of one forward and backward pass, per sample of ``inputs``
    (counted by ``torch.utils.flop_counter``: matrix products and convolutions, 2 per
    multiply-add; element-wise work is not counted, as is usual for such figures)."""
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.train()
    with FlopCounterMode(display=False) as counter:
        loss(model(inputs)).backward()
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return counter.get_total_flops() / len(inputs)


class SyncCounter:
    """Counts the host's waits for the device while it is active (a context manager).

    Counted: calls of ``synchronize`` on the objects given (by default
    ``torch.cuda.synchronize``, ``torch.cuda.Event.synchronize`` and
    ``torch.cuda.Stream.synchronize``), calls of ``Tensor.item`` on tensors of
    ``device_type``, and, on a GPU, every implicit synchronisation torch reports once
    ``torch.cuda.set_sync_debug_mode("warn")`` is on (``float(t)``, ``t.tolist()``, a
    device-to-host copy). A wait that happens inside a counted call counts once.

    ``targets`` are ``(owner, attribute name)`` pairs to wrap; tests give their own.
    """

    def __init__(
        self,
        device_type: str = "cuda",
        targets: list[tuple[Any, str]] | None = None,
        watch_implicit: bool | None = None,
    ) -> None:
        self.device_type = device_type
        if targets is None:
            targets = [
                (torch.cuda, "synchronize"),
                (torch.cuda.Event, "synchronize"),
                (torch.cuda.Stream, "synchronize"),
            ]
        self.targets = [*targets, (torch.Tensor, "item")]
        self.watch_implicit = (
            torch.cuda.is_available() if watch_implicit is None else watch_implicit
        )
        self.count = 0
        self._depth = 0
        self._saved: list[tuple[Any, str, Any]] = []
        self._warnings: Any = None
        self._show: Any = None
        self._previous_mode: int | None = None

    def _wrap(self, owner: Any, name: str) -> None:
        original = getattr(owner, name)
        counter = self
        is_item = owner is torch.Tensor and name == "item"

        def counted(*args: Any, **kwargs: Any) -> Any:
            if counter._depth == 0 and (not is_item or args[0].device.type == counter.device_type):
                counter.count += 1
            counter._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                counter._depth -= 1

        self._saved.append((owner, name, original))
        setattr(owner, name, counted)

    def _implicit(self, message: Any, category: Any, *rest: Any, **kwargs: Any) -> None:
        if SYNC_WARNING in str(message):
            if self._depth == 0:
                self.count += 1
        elif self._show is not None:
            self._show(message, category, *rest, **kwargs)

    def __enter__(self) -> SyncCounter:
        for owner, name in self.targets:
            self._wrap(owner, name)
        if self.watch_implicit:
            self._warnings = warnings.catch_warnings()
            self._warnings.__enter__()
            warnings.simplefilter("always")
            self._show = warnings.showwarning
            warnings.showwarning = self._implicit
            self._previous_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.watch_implicit:
            torch.cuda.set_sync_debug_mode(self._previous_mode or 0)
            self._warnings.__exit__(*exc)
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()


@dataclass
class StepWall:
    """One training step seen from the host and from the device, in seconds."""

    wall_s: float  # from the clock's start to the end of its synchronising read
    phases_s: float  # the sum of the step's phases (CUDA events on a GPU)
    syncs: int  # host waits for the device counted during the step


class WatchedClock(PhaseClock):
    """A :class:`PhaseClock` that also notes each step's wall time and the host waits counted
    by ``syncs`` between its start and its first read: the check compares the two clocks and
    counts synchronisations per step without touching the engine."""

    def __init__(self, device: torch.device, syncs: SyncCounter) -> None:
        super().__init__(device)
        self.syncs = syncs
        self.steps: list[StepWall] = []
        self._wall_started: float | None = None
        self._syncs_at_start = 0

    def start(self) -> None:
        self._syncs_at_start = self.syncs.count
        super().start()
        self._wall_started = time.perf_counter()

    def read(self) -> dict[str, float]:
        phases = super().read()
        if self._wall_started is not None:
            wall = time.perf_counter() - self._wall_started
            syncs = self.syncs.count - self._syncs_at_start
            self.steps.append(StepWall(wall, sum(phases.values()), syncs))
            self._wall_started = None
        return phases


@contextmanager
def cuda_timer(device: torch.device) -> Iterator[list[float]]:
    """Seconds the work queued inside the block took on ``device`` (CUDA events, one
    synchronisation at the end; the wall clock on a CPU), appended to the yielded list."""
    out: list[float] = []
    if device.type == "cuda":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        yield out
        end.record()
        end.synchronize()
        out.append(begin.elapsed_time(end) / 1000.0)
    else:
        started = time.perf_counter()
        yield out
        out.append(time.perf_counter() - started)
