"""The machine's speed, timed beside each run: a fixed workload that does not go through torch.

A virtual machine's speed changes under it: the same light run took 88–108 s a night for
14 minutes and 62–73 s after, with nothing else in the machine and no steal time shown
(docs/benchmarks.md). A nightly that compares a night's step time with the week before
then sees the machine, not the code. So every rank times this workload twice, right before
the common start and right after its last step (outside every timed phase), and its final
event carries the median as ``machine_reference_s``. The nightly judges step time and
time to accuracy relative to it: a slower host slows both, slower code only the run.

The workload is eight products of two 192 × 192 ``float32`` matrices by numpy's BLAS on
one thread: compute-bound and in cache, like a CPU training step's kernels, and the same
instructions whatever torch release is installed, so a slower torch still shows. Ranks on
a GPU do not time it (their steps follow the GPU, not the processor).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

SIZE = 192  # rows and columns of each matrix
PRODUCTS = 8  # matrix products per timed sample
SAMPLES = 15  # timed samples per measurement, after one untimed


class MachineReference:
    """Times the reference workload: call :meth:`measure` at each point wanted, then read
    :attr:`seconds`, the median of every sample, in seconds per sample."""

    def __init__(self, samples: int = SAMPLES) -> None:
        generator = np.random.default_rng(0)
        self._a = generator.standard_normal((SIZE, SIZE), dtype=np.float32)
        self._b = generator.standard_normal((SIZE, SIZE), dtype=np.float32)
        self._out = np.empty_like(self._a)
        self.samples = samples
        self.timings_s: list[float] = []

    def _products(self) -> None:
        for _ in range(PRODUCTS):
            np.matmul(self._a, self._b, out=self._out)

    def measure(self) -> None:
        """Time :attr:`samples` samples (one untimed first), on one BLAS thread."""
        with threadpool_limits(limits=1, user_api="blas"):
            self._products()
            for _ in range(self.samples):
                started = time.perf_counter()
                self._products()
                self.timings_s.append(time.perf_counter() - started)

    @property
    def seconds(self) -> float | None:
        """Median seconds per sample over every measurement so far (None before any)."""
        return statistics.median(self.timings_s) if self.timings_s else None
