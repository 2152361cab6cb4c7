"""A slower build of the workers, for ``benchmarks/regression_power.py`` only.

Python imports this module at start-up when its folder is on ``PYTHONPATH``. In a rank
(``RANK`` is set) with ``SCALEBENCH_BENCH_SLOWDOWN`` set to a fraction (0.10 = 10 %), it
adds busy work, as slower code would:

- training: at the end of each step's data phase, spinning for that fraction of the
  previous step's seconds (the spin itself not counted), so steps take about that much
  longer;
- all-reduce: after each ``torch.distributed.all_reduce``, spinning for that fraction of
  the call's seconds.

Nothing in the product reads the variable: the benchmark puts this folder on the ranks'
``PYTHONPATH``, and every other run starts without it.
"""

from __future__ import annotations

import os
import time


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _install(fraction: float) -> None:
    import torch.distributed as dist

    from workers.tracker import PhaseClock

    lap, read = PhaseClock.lap, PhaseClock.read

    def slow_lap(self: PhaseClock, phase: str) -> None:
        if phase == "data":
            spun = fraction * getattr(self, "_bench_previous_step_s", 0.0)
            _spin(spun)
            self._bench_spun_s = spun  # type: ignore[attr-defined]
        lap(self, phase)

    def read_and_remember(self: PhaseClock) -> dict[str, float]:
        phases = read(self)
        spun = getattr(self, "_bench_spun_s", 0.0)
        self._bench_previous_step_s = sum(phases.values()) - spun  # type: ignore[attr-defined]
        return phases

    all_reduce = dist.all_reduce

    def slow_all_reduce(*args: object, **kwargs: object) -> object:
        began = time.perf_counter()
        work = all_reduce(*args, **kwargs)  # type: ignore[arg-type]
        _spin(fraction * (time.perf_counter() - began))
        return work

    PhaseClock.lap = slow_lap  # type: ignore[method-assign]
    PhaseClock.read = read_and_remember  # type: ignore[method-assign]
    dist.all_reduce = slow_all_reduce  # type: ignore[assignment]


if "RANK" in os.environ and os.environ.get("SCALEBENCH_BENCH_SLOWDOWN"):
    _install(float(os.environ["SCALEBENCH_BENCH_SLOWDOWN"]))
