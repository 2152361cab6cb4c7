"""One Airflow DAG per benchmark task, built from its spec.

    validate → plan → train_group (one mapped task per worker count × repeat)
             → ingest (also after failed groups) → summarize

The trigger form comes from the DAG's params (JSON-schema checked by Airflow
before the run starts); ``validate`` then applies scalebench's own checks
(GPUs for nccl, the data set of a full task, ...) before any worker starts,
and fails naming the field. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, task

from operators.training_group import TrainingGroupOperator
from workers.distributed import BACKENDS
from workers.tasks import AllReduceSpec, TaskSpec
from workers.tasks.specs import TRAINING_VARIANTS, WORLD_SIZES


def dag_id(spec: TaskSpec) -> str:
    """``task1a-resnet20-cifar10`` → ``task1a_resnet20_cifar10``."""
    return spec.id.replace("-", "_")


def params(spec: TaskSpec) -> dict[str, Param]:
    """The trigger form."""
    form = {
        "workers": Param(
            [1, 2], type="array", items={"type": "integer", "enum": list(WORLD_SIZES)},
            minItems=1, uniqueItems=True, title="Worker counts",
            description="One training group per worker count (and repeat).",
        ),
        "light": Param(True, type="boolean", title="Light variant",
                       description="Laptop-sized data and target; off for the full task."),
        "backend": Param("gloo", type="string", enum=list(BACKENDS), title="Backend"),
        "repeats": Param(1, type="integer", minimum=1, maximum=20, title="Repeats",
                         description="Runs per worker count; 3 or more drop fastest and slowest."),
        "seed": Param(0, type="integer", minimum=0, title="Seed of the first repeat"),
        "collective_timeout_s": Param(60, type="number", exclusiveMinimum=0,
                                      title="Collective timeout (s)"),
        "group_timeout_s": Param(3600, type="number", exclusiveMinimum=0,
                                 title="Time limit per group (s)"),
    }  # fmt: skip
    if not isinstance(spec, AllReduceSpec):
        form["variant"] = Param("sync", type="string", enum=list(TRAINING_VARIANTS),
                                title="Training variant")  # fmt: skip
    return form


def doc(spec: TaskSpec) -> str:
    if isinstance(spec, AllReduceSpec):
        measures = (
            "all-reduce latency (p50, mean, p95) and bus bandwidth per message size, "
            "for each worker count"
        )
    else:
        measures = (
            f"time to reach {spec.goal.describe(False)} (light: {spec.goal.light_threshold:g}) "
            "at each worker count, speedup against one worker, and the communication ratio"
        )
    return (
        f"## {spec.title}\n\nMeasures {measures}. Each worker count runs as its own "
        "training group; failed groups are recorded with what they measured. Results "
        "go to the results database; open the dashboard or run `scalebench report`."
    )


def build_benchmark_dag(spec: TaskSpec) -> DAG:
    """The DAG that sweeps ``spec`` over the worker counts chosen in the trigger form."""
    with DAG(
        dag_id=dag_id(spec),
        schedule=None,
        params=params(spec),
        tags=["scalebench", "benchmark", spec.id.split("-")[0]],
        doc_md=doc(spec),
        catchup=False,
    ) as benchmark:

        @task
        def validate(**context: Any) -> dict[str, Any]:
            from scalebench.sweep import validate_request

            chosen = dict(context["params"])
            request = validate_request(task=spec.id, **chosen)
            return {**asdict(request), "data_dir": str(request.data_dir)}

        @task
        def plan(request: dict[str, Any], **context: Any) -> list[dict[str, Any]]:
            from scalebench import config
            from scalebench.sweep import SweepRequest, start_sweep

            request = {**request, "world_sizes": tuple(request["world_sizes"]),
                       "data_dir": Path(request["data_dir"])}  # fmt: skip
            run_type = str(getattr(context["dag_run"], "run_type", "manual"))
            trigger = "scheduled" if "scheduled" in run_type else "manual"
            _, groups = start_sweep(SweepRequest(**request), config.results_path(), trigger)
            return groups

        @task(trigger_rule="all_done")
        def ingest(groups: list[dict[str, Any]]) -> str:
            from scalebench import config
            from scalebench.database_commands import ingest as load

            sweep_dir = groups[0]["sweep_dir"]
            load(config.database_url(), sweep_dir)
            return Path(sweep_dir).name

        @task
        def summarize(sweep_id: str) -> list[dict[str, Any]]:
            from scalebench.database_commands import summarize_sweep

            return summarize_sweep(sweep_id)

        groups = plan(validate())
        trained = TrainingGroupOperator.partial(
            task_id="train_group", max_active_tis_per_dag=1
        ).expand(group=groups)
        loaded = ingest(groups)
        trained >> loaded
        summarize(loaded)
    return benchmark
