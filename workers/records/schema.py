"""The records' schema: what every record holds, by kind, and what a reader accepts.

Each rank appends to its own file ``rank-<r>.jsonl`` in the run's directory and
flushes after every record, so a killed rank leaves every record it finished.
Every record carries:

- ``v``: schema version (:data:`SCHEMA_VERSION`; version 1 records, whose
  evaluation times were named ``eval_seconds``, ``train_seconds`` and
  ``wall_seconds``, are read with today's names; version 2 steps, see below);
- ``run_id``, ``rank``, ``world_size``;
- ``kind``: one of :data:`KINDS`;
- ``t``: seconds since the group's common start (taken right after a barrier).

and a payload by kind:

- ``step``: ``epoch``, ``step``, ``samples`` (this rank's), ``loss`` (mean over
  ranks, ``null`` when not finite), ``lr``, and ``phases``: seconds spent in
  ``data``, ``forward``, ``loss``, ``backward``, ``gradient_packing`` (copying
  the gradients into the all-reduce's buffer and back, and dividing them),
  ``communication`` (the collectives alone) and ``optimizer``. Steps of
  version 2 and older have no ``gradient_packing``: their ``communication``
  includes it, and they are read with 0 seconds of packing.
- ``eval``: ``epoch``, ``metrics`` (global values, e.g. ``top1_accuracy`` in
  percent and ``loss``), ``eval_s`` (this evaluation), ``train_s`` (wall time
  so far minus all evaluation time so far), ``wall_s``: the names of the
  results database's columns.
- ``allreduce``: ``bytes``, ``elements``, ``dtype``, ``backend``, ``seconds``
  (one entry per timed repetition, this rank's view).
- ``event``: ``event`` (``start``, ``goal_reached``, ``diverged``, ``finished``,
  ``failed``, ``switched_to_asgd``) plus free details (``reason``, ``status``...).
- ``env``: versions, devices, host.

Readers hold a record to what a measurement can be: a time ``t`` or a duration (a phase,
an evaluation, an all-reduce repetition) from 0 to :data:`MAX_RECORD_S` seconds, step
times that never go back within one attempt of a rank, lines of at most
:data:`MAX_LINE_BYTES` bytes, and rank files that are regular files (not a device, a pipe
or a link to one, which could be read for ever).

The three refusals are here too: :class:`BadRecord` (a line), :class:`UnreadableRankFile` (a
file) and :class:`InconsistentRun` (the rank files of a run).
"""

from __future__ import annotations

import re
from pathlib import PurePath

from scalebench.request import MAX_GROUP_TIMEOUT_S
from scalebench.run_metrics import RUN_METRICS

SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
# Fields renamed since version 1, by kind: {old name: new name}.
RENAMED_SINCE_1 = {
    "eval": {"eval_seconds": "eval_s", "train_seconds": "train_s", "wall_seconds": "wall_s"},
}
KINDS = ("step", "eval", "allreduce", "event", "env")
PHASES = ("data", "forward", "loss", "backward", "gradient_packing", "communication", "optimizer")
PHASE_SET = frozenset(PHASES)
# Before version 3 there was no gradient_packing phase: packing, dividing and unpacking the
# gradients were timed as part of "communication". Such steps are read with 0 packing
# seconds, and their communication keeps its old meaning (see ``RECORDS_NOTE``).
FIRST_VERSION_WITH_PACKING = 3
PHASES_BEFORE_PACKING = frozenset(PHASES) - {"gradient_packing"}
RECORDS_NOTE = (
    "recorded before records version 3: its communication includes packing and unpacking "
    "the gradients"
)
# What the "communication" phase of a ``ddp`` step holds when its start record says
# ``ddp_communication: exposed_wait``: the wait for the bucketed all-reduces after backward's
# last bucket, plus the loss's all-reduce. Runs without it timed only the loss there.
DDP_EXPOSED_WAIT = "exposed_wait"
INT4_MAX = 2**31 - 1  # counters are stored as 32-bit integers
_COMMON_COUNTERS = ("rank", "world_size")
COUNTERS = {
    "step": (*_COMMON_COUNTERS, "epoch", "step", "samples"),
    "eval": (*_COMMON_COUNTERS, "epoch"),
    "allreduce": _COMMON_COUNTERS,
    "event": _COMMON_COUNTERS,
    "env": _COMMON_COUNTERS,
}
EVENTS = ("start", "goal_reached", "diverged", "finished", "failed", "switched_to_asgd")

COMMON_FIELDS = {"v": int, "run_id": str, "rank": int, "world_size": int, "kind": str, "t": float}
PAYLOAD_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "step": {"epoch": int, "step": int, "samples": int, "phases": dict},
    "eval": {
        "epoch": int,
        "metrics": dict,
        "eval_s": float,
        "train_s": float,
        "wall_s": float,
    },
    "allreduce": {"bytes": int, "elements": int, "dtype": str, "backend": str, "seconds": list},
    "event": {"event": str},
    "env": {},
}


# The machine's and the rank's CPU seconds since the common start, in a rank's final event
# (``Tracker.cpu_use``): what tells a contended run.
CPU_USE_FIELDS = ("cpu_window_s", "host_busy_cpu_s", "own_cpu_s")
# The events that close a rank's records: each carries the CPU seconds and the run
# metrics (``scalebench.run_metrics``: the machine's reference, the peak memory, ...), each
# absent from records older than its measurement.
FINAL_EVENTS = ("finished", "failed", "diverged")
_FINAL_FIELDS: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(CPU_USE_FIELDS, (int, float)),
    **{metric.name: metric.record_types for metric in RUN_METRICS},
}

# Fields of events that readers use, with their types; "required" ones must be there.
# Other details an event carries are free (stored as they are).
EVENT_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "start": {
        "started_at": (str,),
        "compile_s": (int, float),
        "goal_target": (int, float),
        "goal_metric": (str,),
        "precision": (str,),
        "compile": (str,),
        "device": (str,),
        "variant": (str,),
        "compiled": (bool,),
        "network": (str,),
    },
    "goal_reached": {
        "time_to_accuracy_s": (int, float),
        "time_to_accuracy_without_eval_s": (int, float),
        "epoch": (int,),
        "value": (int, float),
        "target": (int, float),
    },
    "finished": {"status": (str,), "recompilations": (int,), **_FINAL_FIELDS},
    "failed": {"reason": (str,), **_FINAL_FIELDS},
    "diverged": {"reason": (str,), **_FINAL_FIELDS},
    "switched_to_asgd": {},
}
# Fields of the environment record that readers use, with their types (others are free).
ENV_FIELDS: dict[str, tuple[type, ...]] = {
    "host": (str,),
    "node": (str,),
    "cpu": (str,),
    "cpu_count": (int,),
    "cpus_allowed": (int,),
    "torch_threads": (int,),
    "gpus": (list,),
    "node_rank": (int,),
    "local_rank": (int,),
    "local_world_size": (int,),
}
# Bytes per element of the data types an all-reduce record may name.
ALLREDUCE_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
REQUIRED_EVENT_FIELDS = {
    "goal_reached": ("time_to_accuracy_s", "time_to_accuracy_without_eval_s"),
    "finished": ("status",),
}
# Durations that cannot be negative, by kind (``t``, every phase, all-reduce
# repetitions and these event fields are checked as well).
DURATIONS = {
    "eval": ("eval_s", "train_s", "wall_s"),
    "event": (
        "compile_s",
        "time_to_accuracy_s",
        "time_to_accuracy_without_eval_s",
        "cpu_window_s",
        "host_busy_cpu_s",
        "own_cpu_s",
    ),
}
INT8_MAX = 2**63 - 1  # byte and element counts are stored as 64-bit integers
# The longest time a record can hold, in seconds: no group runs longer than its wall-clock
# limit (at most a week), so a record time or a duration beyond it is a broken clock or
# a damaged file, never a measurement.
MAX_RECORD_S = MAX_GROUP_TIMEOUT_S
# The longest line a reader takes, in bytes: a record is a few hundred bytes (an
# all-reduce record with thousands of repetitions some tens of kilobytes), so a longer
# line is damage; it is quarantined without being held in memory whole.
MAX_LINE_BYTES = 4 * 2**20


class BadRecord(ValueError):
    """A line that is not a readable record of this schema version."""


class InconsistentRun(ValueError):
    """Rank files of one run that disagree about the run they belong to, or whose clock
    went back."""


class UnreadableRankFile(InconsistentRun):
    """A rank file that is not a regular file (a device, a pipe, a link to one): never
    read, so nothing of its run is."""


def rank_file_name(rank: int) -> str:
    """The name of rank ``rank``'s file in its run's folder."""
    return f"rank-{rank}.jsonl"


RANK_FILE = re.compile(r"rank-(\d+)\.jsonl")


def rank_of(path: PurePath) -> int:
    """The rank a file ``rank-<r>.jsonl`` belongs to."""
    match = RANK_FILE.fullmatch(path.name)
    if match is None:
        raise ValueError(f"{path.name} is not a rank file name (rank-<r>.jsonl)")
    return int(match.group(1))
