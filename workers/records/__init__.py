"""Metrics records: the JSON-lines contract between workers and everything else.

Each rank appends its records to its own file ``rank-<r>.jsonl`` in the run's directory;
readers (ingest, the CLI, the dashboard's tests) read them back and refuse what no
measurement can be. One module per subject:

- :mod:`workers.records.schema`: what every record holds, by kind (versions, phases, events,
  the fields readers use and their limits), the rank files' names and the refusals;
- :mod:`workers.records.validation`: checking a record against the schema
  (:func:`validate_record`);
- :mod:`workers.records.parsing`: one line to one record (:func:`parse_line`,
  :class:`StepRecord`);
- :mod:`workers.records.writer`: a rank's records written (:class:`RecordWriter`);
- :mod:`workers.records.rank_files`: one rank file read (:class:`RankRecords`,
  :func:`read_rank_file`);
- :mod:`workers.records.runs`: every rank file of a run read and checked to describe one run
  (:func:`read_run`).

Every public name is importable from this package, which does not import torch: readers
use it too.
"""

from __future__ import annotations

from workers.records.parsing import Counter, NonNegative, StepRecord, parse_line
from workers.records.rank_files import (
    RankRecords,
    RecordCheck,
    bounded_lines,
    parse_rank_lines,
    read_rank_file,
)
from workers.records.runs import check_consistent, gc_paused, iter_rank_files, read_run
from workers.records.schema import (
    ALLREDUCE_DTYPE_BYTES,
    CPU_USE_FIELDS,
    DDP_EXPOSED_WAIT,
    EVENTS,
    FINAL_EVENTS,
    FIRST_VERSION_WITH_PACKING,
    KINDS,
    MAX_LINE_BYTES,
    MAX_RECORD_S,
    PHASES,
    RANK_FILE,
    READABLE_VERSIONS,
    RECORDS_NOTE,
    SCHEMA_VERSION,
    BadRecord,
    InconsistentRun,
    UnreadableRankFile,
    rank_file_name,
    rank_of,
)
from workers.records.validation import validate_record
from workers.records.writer import RecordWriter

__all__ = [
    "ALLREDUCE_DTYPE_BYTES",
    "CPU_USE_FIELDS",
    "DDP_EXPOSED_WAIT",
    "EVENTS",
    "FINAL_EVENTS",
    "FIRST_VERSION_WITH_PACKING",
    "KINDS",
    "MAX_LINE_BYTES",
    "MAX_RECORD_S",
    "PHASES",
    "RANK_FILE",
    "READABLE_VERSIONS",
    "RECORDS_NOTE",
    "SCHEMA_VERSION",
    "BadRecord",
    "Counter",
    "InconsistentRun",
    "NonNegative",
    "RankRecords",
    "RecordCheck",
    "RecordWriter",
    "StepRecord",
    "UnreadableRankFile",
    "bounded_lines",
    "check_consistent",
    "gc_paused",
    "iter_rank_files",
    "parse_line",
    "parse_rank_lines",
    "rank_file_name",
    "rank_of",
    "read_rank_file",
    "read_run",
    "validate_record",
]
