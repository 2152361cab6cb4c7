"""Shorter trainings, for the smokes of benchmarks that train through ``scalebench run``.

Python imports this module at start-up when its folder is on ``PYTHONPATH``. In a rank
(``RANK`` is set) with ``SCALEBENCH_BENCH_MAX_EPOCHS`` set to a count, a training ends after
at most that many epochs (the task's own limit when it is lower), as ``python -m workers.run
--max-epochs`` would end it: a run that has not reached its target by then ends without it.

Nothing in the product reads the variable: a benchmark's ``--smoke`` puts this folder on the
``PYTHONPATH`` of the command it starts, and every other run starts without it.
"""

from __future__ import annotations

import os


def _install(most: int) -> None:
    from scalebench.tasks.specs import TrainingSpec

    epochs = TrainingSpec.epochs

    def fewer_epochs(self: TrainingSpec, light: bool) -> int:
        return min(most, epochs(self, light))

    TrainingSpec.epochs = fewer_epochs  # type: ignore[method-assign]


if "RANK" in os.environ and os.environ.get("SCALEBENCH_BENCH_MAX_EPOCHS"):
    _install(int(os.environ["SCALEBENCH_BENCH_MAX_EPOCHS"]))
