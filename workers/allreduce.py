"""Task 0: all-reduce latency and bandwidth across message sizes.

For each dtype and each size (elements, ``np.logspace`` rounded), the harness
runs ``warmup`` untimed all-reduces, then ``repetitions`` timed ones. Every
timed repetition starts after a barrier, so the ranks enter it together, and
on a GPU the clock is read only after ``torch.cuda.synchronize()``. Every
repetition's time is recorded (no averaging here); summaries come later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from scalebench.tasks import AllReduceSpec
from workers.tracker import Tracker

log = logging.getLogger("scalebench.worker")

DTYPES = {"float32": torch.float32, "float16": torch.float16}


@dataclass(frozen=True)
class AllReduceOptions:
    light: bool
    repetitions: int | None = None  # None: the spec's
    max_elements: int | None = None  # drop sizes above this many elements
    dtype: str | None = None  # only this one of the spec's data types (None: each)


def message_sizes(spec: AllReduceSpec, light: bool, max_elements: int | None = None) -> list[int]:
    """Element counts to measure, ascending and distinct (:meth:`AllReduceSpec.sizes`)."""
    return spec.sizes(light, max_elements)


def dtype_supported(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the backend can sum tensors of ``dtype`` (tried on one element).

    The answer is agreed across ranks so that all skip or all run it.
    """
    try:
        probe = torch.ones(1, dtype=dtype, device=device)
        dist.all_reduce(probe)
        ok = 1.0
    except (RuntimeError, ValueError):
        ok = 0.0
    agreed = torch.tensor([ok], device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    return bool(agreed.item() == 1.0)


def time_allreduce(
    tensor: torch.Tensor, repetitions: int, warmup: int, sync: Callable[[], None] | None
) -> list[float]:
    """Seconds of each of ``repetitions`` all-reduces of ``tensor`` on this rank."""
    for _ in range(warmup):
        dist.all_reduce(tensor)
    if sync:
        sync()
    seconds = []
    for _ in range(repetitions):
        dist.barrier()
        if sync:
            sync()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        if sync:
            sync()
        seconds.append(time.perf_counter() - start)
    return seconds


def seconds_to_go(taken: Sequence[tuple[int, float]], remaining: Sequence[int]) -> float | None:
    """Seconds the ``remaining`` message sizes (bytes) will take, from what the sizes
    measured so far took (``taken``: bytes, seconds), fitted as latency + bytes / bandwidth.

    ``None`` until the sizes measured show the bandwidth term (the two largest each took at
    least twice the median size's time; one slow repetition is not a trend): extrapolating
    from small messages, where latency is all there is, would be wildly wrong.
    """
    if not remaining:
        return 0.0
    if len(taken) < 3:
        return None
    times = sorted(t for _, t in taken)
    largest = sorted(taken)[-2:]
    if any(t < 2 * times[len(times) // 2] for _, t in largest):
        return None
    n = len(taken)
    mean_b = sum(b for b, _ in taken) / n
    mean_t = sum(times) / n
    spread = sum((b - mean_b) ** 2 for b, _ in taken)
    per_byte = max(0.0, sum((b - mean_b) * (t - mean_t) for b, t in taken) / spread)
    latency = max(0.0, mean_t - per_byte * mean_b)
    return sum(latency + per_byte * b for b in remaining)


def run(
    spec: AllReduceSpec, options: AllReduceOptions, tracker: Tracker, device: torch.device
) -> str:
    """Measure every (dtype, size) the options leave in; returns ``completed``."""
    backend = str(dist.get_backend())
    repetitions = options.repetitions or (
        spec.light_repetitions if options.light else spec.repetitions
    )
    sizes = message_sizes(spec, options.light, options.max_elements)
    sync = torch.cuda.synchronize if device.type == "cuda" else None
    tracker.start(
        task=spec.id,
        light=options.light,
        sizes=len(sizes),
        repetitions=repetitions,
        warmup=spec.warmup,
        device=str(device),
    )
    measured, unsupported = [], []
    for name in [options.dtype] if options.dtype else spec.dtypes:
        if dtype_supported(DTYPES[name], device):
            measured.append(name)
        else:
            unsupported.append(name)
            if tracker.is_leader:
                log.warning("backend %s cannot all-reduce %s here; skipped", backend, name)

    remaining = [elements * DTYPES[name].itemsize for name in measured for elements in sizes]
    taken: list[tuple[int, float]] = []  # (bytes, seconds this size took) so far
    for name in measured:
        dtype = DTYPES[name]
        for elements in sizes:
            began = tracker.now()
            # Zeros: repeated in-place sums stay zero, never overflowing float16.
            tensor = torch.zeros(elements, dtype=dtype, device=device)
            seconds = time_allreduce(tensor, repetitions, spec.warmup, sync)
            tracker.writer.write(
                "allreduce",
                tracker.now(),
                bytes=elements * tensor.element_size(),
                elements=elements,
                dtype=name,
                backend=backend,
                seconds=seconds,
            )
            del tensor
            taken.append((remaining.pop(0), tracker.now() - began))
            if tracker.is_leader:
                eta = seconds_to_go(taken, remaining)
                median = sorted(seconds)[len(seconds) // 2]
                log.info(
                    "%s %11d elements: median %.3g ms (%.1f s elapsed, %s)",
                    name,
                    elements,
                    median * 1e3,
                    tracker.now(),
                    "estimating the time to go" if eta is None else f"about {eta:.0f} s to go",
                )
    tracker.finish("completed", dtypes=measured, unsupported_dtypes=unsupported)
    return "completed"
