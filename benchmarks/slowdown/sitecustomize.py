"""A slower build of the workers, for the benchmarks only (``regression_power.py``,
``stack_pairs.py``).

Python imports this module at start-up when its folder is on ``PYTHONPATH``. In a rank
(``RANK`` is set) with ``SCALEBENCH_BENCH_SLOWDOWN`` set to a fraction (0.10 = 10 %), it
adds busy work, as slower code would, to the phase ``SCALEBENCH_BENCH_PHASE`` names:

- ``data`` (the default): at the end of each step's data phase, spinning for that fraction
  of the previous step's seconds (the spin itself not counted);
- ``compute``: at the end of each step's optimizer phase, spinning for that fraction of
  the previous step's compute seconds (forward, loss, backward and optimizer, the spin not
  counted), so the compute phase takes about that much longer;
- ``communication``: after each ``torch.distributed.all_reduce``, spinning for that
  fraction of the call's seconds (the all-reduce task's collectives, and a training step's
  communication phase).

Nothing in the product reads these variables: the benchmark puts this folder on the
ranks' ``PYTHONPATH`` (a stack's ``env``), and every other run starts without it.
"""

from __future__ import annotations

import os
import time

_COMPUTE = ("forward", "loss", "backward", "optimizer")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _slow_steps(fraction: float, phase: str) -> None:
    """Spin at the end of ``phase``'s lap (``data``, or ``compute``: the optimizer's)."""
    from workers.tracker import PhaseClock

    lap, read = PhaseClock.lap, PhaseClock.read
    closing = "optimizer" if phase == "compute" else "data"

    def slow_lap(self: PhaseClock, name: str) -> None:
        if name == closing:
            spun = fraction * getattr(self, "_bench_previous_s", 0.0)
            _spin(spun)
            self._bench_spun_s = spun  # type: ignore[attr-defined]
        lap(self, name)

    def read_and_remember(self: PhaseClock) -> dict[str, float]:
        phases = read(self)
        spun = getattr(self, "_bench_spun_s", 0.0)
        base = sum(phases.get(p, 0.0) for p in _COMPUTE) if phase == "compute" else None
        # (read may be called again for the same step: the spin stays subtracted)
        self._bench_previous_s = (  # type: ignore[attr-defined]
            (base if base is not None else sum(phases.values())) - spun
        )
        return phases

    PhaseClock.lap = slow_lap  # type: ignore[method-assign]
    PhaseClock.read = read_and_remember  # type: ignore[method-assign]


def _slow_all_reduce(fraction: float) -> None:
    import torch.distributed as dist

    all_reduce = dist.all_reduce

    def slow_all_reduce(*args: object, **kwargs: object) -> object:
        began = time.perf_counter()
        work = all_reduce(*args, **kwargs)  # type: ignore[arg-type]
        _spin(fraction * (time.perf_counter() - began))
        return work

    dist.all_reduce = slow_all_reduce  # type: ignore[assignment]


def _install(fraction: float, phase: str) -> None:
    if phase == "communication":
        _slow_all_reduce(fraction)
        return
    _slow_steps(fraction, phase)
    if phase == "data":  # as before: the all-reduce task slowed too
        _slow_all_reduce(fraction)


_fraction = os.environ.get("SCALEBENCH_BENCH_SLOWDOWN")
if _fraction and "RANK" in os.environ:
    _install(float(_fraction), os.environ.get("SCALEBENCH_BENCH_PHASE", "data"))
