"""Loading what the workers recorded into the results database.

A results location (a local path or any fsspec URI) holds sweep directories,
each with a ``sweep.json`` manifest and one directory per run:

    <location>/<sweep>/sweep.json (and verdicts.jsonl while it runs: scalebench.manifest)
    <location>/<sweep>/<run>/rank-<r>.jsonl

Each run is loaded in one transaction that first deletes the run's earlier
rows, so ingesting the same run again leaves the same rows, and a crash in
the middle leaves nothing of that run half-written. A stored run is never
replaced by a reading of its files that holds fewer records or a worse
verdict (files damaged or removed after a good ingest): the stored run stays
and the conflict is reported, unless ``replace`` says otherwise. Lines that
cannot be read, repeat an earlier record, hold impossible values (a negative
duration) or values no column can hold are counted into the run's
``quarantined_lines`` and reported with their line numbers; rank files that
disagree about their run are refused, with the reason, and nothing of that run
is written; a rank file outside the group's world size is left out. Failed,
diverged and timed-out runs are loaded with that status and whatever they
measured. A database that drops the connection or restarts meanwhile is
waited for (:data:`RETRY_DELAYS_S`), and the transaction it broke is tried
again. On PostgreSQL the large tables (step timings, all-reduce samples) are
loaded with binary COPY.

Ingests of the same sweep at once (two ``scalebench ingest``, or an Airflow retry beside
a manual one) end as one would: on PostgreSQL each holds an advisory lock keyed on the
sweep id (:func:`sweep_lock`) while it loads the sweep, so they take turns; on SQLite the
database's own write lock and a busy timeout make them take turns run by run, and the
sweep row is written with one upsert statement.

One module per subject:

- :mod:`results_db.ingest.sweeps`: the entry (:func:`ingest_location`) and one sweep's load;
- :mod:`results_db.ingest.discovery`: finding sweep folders and checking their manifests;
- :mod:`results_db.ingest.sweep_rows`: a sweep's row, compared, upserted, removed;
- :mod:`results_db.ingest.runs`: one run's load, in one transaction (:func:`load_run`);
- :mod:`results_db.ingest.run_checks`: whether a reading of a run can be stored;
- :mod:`results_db.ingest.run_rows`: a run's rows written and removed;
- :mod:`results_db.ingest.retries`: transient database errors and trying again;
- :mod:`results_db.ingest.locking`: the sweeps' advisory locks;
- :mod:`results_db.ingest.times`: times as aware UTC instants.

Every public name is importable from this package.
"""

from __future__ import annotations

from results_db.ingest.discovery import (
    RUN_ID,
    find_sweeps,
    run_id_problem,
    sweep_problems,
    unlisted_runs,
)
from results_db.ingest.locking import (
    SWEEP_LOCK_SPACE,
    sweep_lock,
    sweep_lock_key,
)
from results_db.ingest.retries import (
    RETRY_DELAYS_S,
    transient,
    with_retries,
)
from results_db.ingest.run_checks import (
    RunExtent,
    cluster_marks,
    extent_of,
    goal_target,
    run_problem,
    shared_nodes,
    stored_extent,
)
from results_db.ingest.run_rows import (
    delete_run,
    mark_running,
    run_strings,
    write_run,
)
from results_db.ingest.runs import (
    KeptStoredRun,
    RunOfAnotherSweep,
    load_run,
)
from results_db.ingest.sweep_rows import (
    SWEEP_IDENTITY,
    delete_sweep,
    stored_sweep_differences,
    sweep_outcome,
    sweep_values,
    upsert_sweep,
)
from results_db.ingest.sweeps import (
    IngestReport,
    ingest_location,
    ingest_sweep,
)
from results_db.ingest.times import (
    parse_time,
    utc,
)

# the name the sweep's outcome had before these modules were split out
_sweep_outcome = sweep_outcome

__all__ = [
    "RETRY_DELAYS_S",
    "RUN_ID",
    "SWEEP_IDENTITY",
    "SWEEP_LOCK_SPACE",
    "IngestReport",
    "KeptStoredRun",
    "RunExtent",
    "RunOfAnotherSweep",
    "cluster_marks",
    "delete_run",
    "delete_sweep",
    "extent_of",
    "find_sweeps",
    "goal_target",
    "ingest_location",
    "ingest_sweep",
    "load_run",
    "mark_running",
    "parse_time",
    "run_id_problem",
    "run_problem",
    "run_strings",
    "shared_nodes",
    "stored_extent",
    "stored_sweep_differences",
    "sweep_lock",
    "sweep_lock_key",
    "sweep_outcome",
    "sweep_problems",
    "sweep_values",
    "transient",
    "unlisted_runs",
    "upsert_sweep",
    "utc",
    "with_retries",
    "write_run",
]
