"""Phase timers, evaluation bookkeeping and stop decisions for one rank.

Timing rules (the reason this module exists):

- on a GPU, each phase boundary of a step records a CUDA event on the
  stream, and the step synchronises once, at its end, to turn the events into
  phase seconds: work queued in one phase is charged to that phase and never
  leaks into the next one (e.g. backward kernels into "communication"), and
  the step is not stalled five times to measure it. On a CPU the phases are
  read from ``time.perf_counter``;
- ``t`` in every record is seconds since the group's common start, read right
  after a barrier;
- evaluation time is measured and reported on its own, so time-to-accuracy
  can be given with and without it.

Stop decisions are made from values that are identical on every rank (the
all-reduced loss and the all-reduced evaluation metrics), so every rank stops
at the same step without extra messages.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from mlperf_logging import mllog
from mlperf_logging.mllog.mllog import MLLogger

from scalebench.host import CpuCounters, cpu_counters
from scalebench.tasks import Goal
from workers.machine_reference import MachineReference
from workers.records import PHASES, RecordWriter

log = logging.getLogger("scalebench.worker")

# The value of MLPerf's cache_clear line: whether the system's caches were dropped before the
# run. scalebench does not drop them (the page cache needs root), so the log says False.
# Every run is a fresh process that loads its data during initialisation, which is not
# timed. The checker wants the line, with any value.
CACHES_CLEARED = False


class PhaseClock:
    """Splits one training step into named phases, in seconds.

    Call :meth:`start` at the top of a step, :meth:`lap` at the end of each
    phase (a phase may be lapped more than once per step: the laps add up),
    and :meth:`read` once the step is done. On a CUDA device a lap only
    records an event on the current stream; :meth:`read` waits for the last
    one (the step's single synchronisation) and takes the elapsed time
    between consecutive events. The stream is looked up once a step, at
    :meth:`start` (asking torch for it builds a new stream object each time,
    which on a GPU step of a millisecond is a measurable share of the host's
    time). ``event_type`` replaces ``torch.cuda.Event`` and ``current_stream``
    ``torch.cuda.current_stream`` (tests use stand-ins on the CPU; without a
    ``current_stream`` there, events are recorded on their default stream).
    """

    def __init__(
        self,
        device: torch.device,
        event_type: Callable[[], Any] | None = None,
        current_stream: Callable[[], Any] | None = None,
    ) -> None:
        self.on_events = device.type == "cuda" or event_type is not None
        if current_stream is None and event_type is None and device.type == "cuda":
            current_stream = torch.cuda.current_stream
        self._current_stream = current_stream
        self._new_event = event_type or (lambda: torch.cuda.Event(enable_timing=True))
        self._events: list[Any] = []  # reused from step to step: creating events costs
        self._laps: list[str] = []  # the phase each event after the first closes
        self._stream: Any = None  # the stream this step's events are recorded on
        self._last = 0.0
        self.phases: dict[str, float] = dict.fromkeys(PHASES, 0.0)

    def _event(self, index: int) -> Any:
        while len(self._events) <= index:
            self._events.append(self._new_event())
        event = self._events[index]
        event.record(self._stream)  # None: the event's own default, the current stream
        return event

    def start(self) -> None:
        self.phases = dict.fromkeys(PHASES, 0.0)
        if self.on_events:
            self._laps.clear()
            if self._current_stream is not None:
                self._stream = self._current_stream()
            self._event(0)
        else:
            self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        if self.on_events:
            self._laps.append(phase)
            self._event(len(self._laps))
            return
        now = time.perf_counter()
        self.phases[phase] += now - self._last
        self._last = now

    def read(self) -> dict[str, float]:
        """The step's phase seconds (on CUDA: after waiting for the step's last event)."""
        if self.on_events and self._laps:
            self._events[len(self._laps)].synchronize()
            for i, phase in enumerate(self._laps):
                self.phases[phase] += self._events[i].elapsed_time(self._events[i + 1]) / 1000.0
            self._laps.clear()
        return self.phases

    @property
    def step_seconds(self) -> float:
        return sum(self.read().values())


class _QuietFileHandler(logging.FileHandler):
    """A log file whose write errors (a full disk) are not printed as tracebacks: the
    records file meets the same error and the rank reports it once."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


class MLPerfLog:
    """MLPerf ``:::MLLOG`` lines for rank 0, written with the ``mlperf-logging`` package."""

    def __init__(self, path: Path | None) -> None:
        self._logger: MLLogger | None = None
        if path is None:
            return
        py_logger = logging.getLogger(f"scalebench.mllog.{path}")
        py_logger.propagate = False
        py_logger.setLevel(logging.INFO)
        handler = _QuietFileHandler(path, encoding="utf-8")
        py_logger.addHandler(handler)
        self._logger = MLLogger(logger=py_logger, default_stack_offset=2)

    def event(self, key: str, value: Any = None, **metadata: Any) -> None:
        if self._logger is not None:
            self._logger.event(key=key, value=value, metadata=metadata or None)

    def close(self) -> None:
        if self._logger is not None:
            for handler in list(self._logger.logger.handlers):
                with contextlib.suppress(OSError):  # a full disk: lines are lost, not the run
                    handler.close()
                self._logger.logger.removeHandler(handler)


class Tracker:
    """Records what one rank measures and decides when training stops."""

    def __init__(
        self,
        writer: RecordWriter,
        device: torch.device,
        *,
        goal: Goal | None = None,
        light: bool = False,
        max_epochs: int = 0,
        mlperf_log: MLPerfLog | None = None,
        progress_every_s: float = 10.0,
        network: str = "host",
    ) -> None:
        self.writer = writer
        self.network = network  # the link profile the group runs on, recorded at its start
        self.device = device
        self.goal = goal
        self.light = light
        self.max_epochs = max_epochs
        self.mlperf = mlperf_log or MLPerfLog(None)
        self.clock = PhaseClock(device)
        self.eval_total_s = 0.0
        self.epoch_wall_s: list[float] = []
        self.progress_every_s = progress_every_s
        self._last_progress = 0.0
        self._epoch_started = 0.0
        self._start: float | None = None
        self._cpu_at_start: CpuCounters | None = None
        self.machine_reference = MachineReference()
        self.is_leader = writer.rank == 0

    # -- MLPerf's initialisation and hyperparameters ----------------------------
    def init_start(self) -> None:
        """Initialisation (data, model, compilation) begins: MLPerf's ``init_start``, after
        ``cache_clear`` (see :data:`CACHES_CLEARED`)."""
        self.mlperf.event(mllog.constants.CACHE_CLEAR, CACHES_CLEARED)
        self.mlperf.event(mllog.constants.INIT_START)

    def submission(self, values: dict[str, Any]) -> None:
        """MLPerf's submission lines (``submission_org``, ``submission_benchmark``, ...; see
        :func:`workers.mlperf.submission`), once, during initialisation."""
        for key, value in values.items():
            self.mlperf.event(key, value)

    def hyperparameters(self, values: dict[str, Any]) -> None:
        """MLPerf hyperparameter lines (``global_batch_size``, ``opt_base_learning_rate``, ...)
        and the data sets' sizes (``train_samples``, ``eval_samples``)."""
        for key, value in values.items():
            self.mlperf.event(key, value)

    # -- time ---------------------------------------------------------------
    def start(self, **details: Any) -> None:
        """Time the machine's reference workload (on a CPU), then barrier and take the common
        start; writes the ``start`` event."""
        if self.device.type == "cpu":
            self.machine_reference.measure()
        if dist.is_initialized():
            dist.barrier()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self._start = time.perf_counter()
        self._cpu_at_start = cpu_counters()
        if self.goal is not None:  # the target this run trains to, as it was when it ran
            details = {
                "goal_metric": self.goal.metric,
                "goal_target": self.goal.target(self.light),
                **details,
            }
        if self.network != "host":
            details = {**details, "network": self.network}
        self.event("start", started_at=datetime.now(UTC).isoformat(), **details)
        self.mlperf.event(mllog.constants.INIT_STOP)  # MLPerf: initialisation is not timed
        self.mlperf.event(mllog.constants.RUN_START)

    def now(self, synchronize: bool = True) -> float:
        """Seconds since the common start (after a CUDA sync on GPU, unless the caller has
        just waited for the device itself); 0 before it."""
        if self._start is None:
            return 0.0
        if synchronize and self.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - self._start

    # -- records ------------------------------------------------------------
    def event(self, name: str, **details: Any) -> None:
        self.writer.write("event", self.now(), event=name, **details)

    def environment(self, info: dict[str, Any]) -> None:
        self.writer.write("env", self.now(), **info)

    def begin_epoch(self, epoch: int) -> None:
        self._epoch_started = self.now()
        self.mlperf.event(mllog.constants.EPOCH_START, epoch_num=epoch)

    def step(self, epoch: int, step: int, steps: int, samples: int, loss: float, lr: float) -> None:
        """Write the step record for the phases just timed by :attr:`clock`.

        ``loss`` is the mean over ranks (the engine stops every rank when it
        is not finite, after this record).
        """
        phases = dict(self.clock.read())  # on a GPU, the step's one synchronisation
        t = self.now(synchronize=False)  # the device finished the step at that read
        self.writer.write(
            "step",
            t,
            epoch=epoch,
            step=step,
            samples=samples,
            loss=loss,
            lr=lr,
            phases=phases,
        )
        if self.is_leader and t - self._last_progress >= self.progress_every_s:
            self._last_progress = t
            log.info(
                "epoch %d/%d step %d/%d loss %.4f lr %.4g (%.1f s)",
                epoch + 1,
                self.max_epochs,
                step + 1,
                steps,
                loss,
                lr,
                t,
            )

    def begin_evaluation(self, epoch: int) -> float:
        """An evaluation begins: returns its start (from :meth:`now`) for :meth:`evaluation`."""
        self.mlperf.event(mllog.constants.EVAL_START, epoch_num=epoch)
        return self.now()

    def evaluation(
        self, epoch: int, metrics: dict[str, float], started: float, **details: Any
    ) -> bool:
        """Record an evaluation that began at ``started`` (from :meth:`now`).

        ``details`` go into the record beside the metrics (e.g. the sacrebleu
        signature of a BLEU score). Returns True when the goal is reached (the
        same answer on every rank, since ``metrics`` are global).
        """
        end = self.now()
        eval_s = end - started
        self.mlperf.event(mllog.constants.EVAL_STOP, epoch_num=epoch)
        self.eval_total_s += eval_s
        self.epoch_wall_s.append(end - self._epoch_started)
        self.writer.write(
            "eval",
            end,
            epoch=epoch,
            metrics=metrics,
            eval_s=eval_s,
            train_s=end - self.eval_total_s,
            wall_s=end,
            **details,
        )
        self.mlperf.event(mllog.constants.EPOCH_STOP, epoch_num=epoch)
        if self.goal is None:
            return False
        value = metrics[self.goal.metric]
        # MLPerf's accuracy is a fraction: a percentage (or BLEU) is logged divided by 100
        self.mlperf.event(
            mllog.constants.EVAL_ACCURACY, self.goal.mlperf_value(value), epoch_num=epoch
        )
        reached = self.goal.reached(value, self.light)
        if self.is_leader:
            remaining = self.max_epochs - epoch - 1
            mean_epoch = sum(self.epoch_wall_s) / len(self.epoch_wall_s)
            log.info(
                "epoch %d/%d: %s = %.2f (target %s), eval %.2f s, elapsed %.1f s, %s",
                epoch + 1,
                self.max_epochs,
                self.goal.metric,
                value,
                self.goal.describe(self.light),
                eval_s,
                end,
                time_to_go(reached, remaining, mean_epoch),
            )
        if reached:
            self.event(
                "goal_reached",
                epoch=epoch,
                value=value,
                target=self.goal.target(self.light),
                time_to_accuracy_s=end,
                time_to_accuracy_without_eval_s=end - self.eval_total_s,
            )
        return reached

    def cpu_use(self) -> dict[str, float]:
        """CPU seconds since the common start: the whole machine's (``host_busy_cpu_s``) and
        this rank's (``own_cpu_s``), over ``cpu_window_s`` seconds of wall time. The final
        event carries them: with the other ranks' own seconds they tell how much of the
        machine something outside the group took. Empty before the start or without
        ``/proc/stat``."""
        end = cpu_counters()
        if self._start is None or self._cpu_at_start is None or end is None:
            return {}
        return {
            "cpu_window_s": time.perf_counter() - self._start,
            "host_busy_cpu_s": end.host_busy_s - self._cpu_at_start.host_busy_s,
            "own_cpu_s": end.own_s - self._cpu_at_start.own_s,
        }

    def closing_measurements(self) -> dict[str, float]:
        """What the final event carries besides its reason: :meth:`cpu_use`,
        ``peak_memory_bytes`` (:func:`peak_memory_bytes`), and ``machine_reference_s``, the
        reference workload's median seconds over its timing at the start and now (see
        :mod:`workers.machine_reference`), on a CPU only: the workload times the processor,
        which a GPU's step time does not follow. The run metrics among them are declared in
        :mod:`scalebench.run_metrics`."""
        measured = {**self.cpu_use(), "peak_memory_bytes": peak_memory_bytes(self.device)}
        if self._start is None or self.device.type != "cpu":
            return measured
        self.machine_reference.measure()
        reference_s = self.machine_reference.seconds
        return {**measured, **({"machine_reference_s": reference_s} if reference_s else {})}

    def finish(self, status: str, **details: Any) -> None:
        """Close a run that ended normally: ``status`` is why it ended."""
        self.event("finished", status=status, **self.closing_measurements(), **details)
        self.mlperf.event(mllog.constants.RUN_STOP, status=metadata_status(status))

    def fail(self, event: str, reason: str) -> None:
        """Record a run that stopped early (``diverged`` or ``failed``)."""
        self.event(event, reason=reason, **self.closing_measurements())
        self.mlperf.event(mllog.constants.RUN_STOP, status="aborted", reason=reason)

    def close(self) -> None:
        self.mlperf.close()
        self.writer.close()


def peak_memory_bytes(device: torch.device) -> int:
    """The most memory this rank has held at once, in bytes: on a GPU the most torch has
    allocated on it (``torch.cuda.max_memory_allocated``); on a CPU the process's peak
    resident set (``getrusage``'s ``ru_maxrss``: KiB on Linux, bytes on macOS), its Python
    and libraries included."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def time_to_go(reached: bool, epochs_left: int, mean_epoch_s: float) -> str:
    """The end of an epoch's progress line: what is left of the run. ``epochs_left``: the
    epochs the limit still allows; ``mean_epoch_s``: an epoch's mean wall time, seconds."""
    if reached:
        return "target reached: training ends here"
    if epochs_left <= 0:
        return "target not reached: that was the last epoch"
    plural = "s" if epochs_left > 1 else ""
    return (
        f"at most {epochs_left} epoch{plural} to go "
        f"(about {epochs_left * mean_epoch_s:.0f} s at the mean epoch's pace)"
    )


def metadata_status(status: str) -> str:
    """MLPerf's run_stop status: ``success`` only when the target was reached."""
    return "success" if status in ("goal_reached", "completed") else "aborted"
