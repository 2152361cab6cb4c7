"""Seconds Airflow takes to serialize the benchmark DAGs, their form fields' schemas in draft 7
(as built) and in Airflow's default dialect (2020-12: the schemas without ``$schema``).

Airflow serializes every DAG of the folder each time its dag-processor parses the file, and
each ``dag.test`` (``airflow dags test``, the quick start) serializes the whole folder again.
Serializing a task resolves every Param of its DAG (about twenty form fields), and resolving a
Param checks its schema against the dialect's meta-schema: that check is most of the cost.

    .venv/bin/python benchmarks/dag_serialization.py [--repeats 7]

Builds the DAGs of ``dags/benchmarks.py`` once per dialect, serializes all of them once to
warm up, then ``--repeats`` times; prints each dialect's median seconds for all the DAGs with
the fastest and slowest repeat, and the ratio of the medians. Exit status 1 when draft 7 is not
at least twice as fast (``GOAL_RATIO``). ``--smoke``: one DAG, one repeat, no warm-up, no goal
judged.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

GOAL_RATIO = 2.0  # draft 7's serialization at least this many times faster


def serialize_all_s(dags: list) -> float:
    """Seconds to serialize every DAG of ``dags`` as the dag-processor does."""
    from airflow.serialization.serialized_objects import DagSerialization

    began = time.perf_counter()
    for dag in dags:
        DagSerialization.to_dict(dag)
    return time.perf_counter() - began


def build_dags(dialect: dict[str, str]) -> list:
    """Every benchmark task's DAG, its form fields' schemas declaring ``dialect``."""
    from operators import benchmark_dag
    from scalebench.tasks import TASKS

    with mock.patch.object(benchmark_dag, "SCHEMA_DIALECT", dialect):
        return [benchmark_dag.build_benchmark_dag(spec) for spec in TASKS.values()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed serializations each")
    parser.add_argument("--smoke", action="store_true", help="one DAG, one repeat, no goal judged")
    args = parser.parse_args()
    if args.smoke:
        args.repeats = 1
    home = Path(tempfile.mkdtemp(prefix="scalebench-bench-airflow-"))
    # Airflow reads its configuration when first imported: its own home, none of the user's.
    os.environ.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    from machine_load import OtherCpuUse

    from operators.benchmark_dag import SCHEMA_DIALECT

    others = OtherCpuUse()
    medians = {}
    for name, dialect in (("draft 7 (as built)", SCHEMA_DIALECT), ("2020-12 (default)", {})):
        dags = build_dags(dialect)[: 1 if args.smoke else None]
        if not args.smoke:
            serialize_all_s(dags)  # warm-up: imports, caches of the validators
        times = [serialize_all_s(dags) for _ in range(args.repeats)]
        medians[name] = statistics.median(times)
        print(
            f"{name}: {len(dags)} DAG(s) in {medians[name]:.2f} s "
            f"(median of {len(times)}; {min(times):.2f}–{max(times):.2f} s)",
            flush=True,
        )
    ratio = medians["2020-12 (default)"] / medians["draft 7 (as built)"]
    print(f"draft 7 serializes {ratio:.1f}× as fast (goal ≥ {GOAL_RATIO:g}×); {others.describe()}")
    if args.smoke:
        print("smoke run: one DAG, one repeat each, no goal judged")
        return 0
    return 0 if ratio >= GOAL_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
