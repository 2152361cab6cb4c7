"""One Airflow DAG per benchmark task, built from its spec, and the steps of a sweep.

    validate → prepare_dataset → plan
             → workers_01.train → workers_02.train → … → workers_32.train
             → ingest → summarize
    (validate is the sweep's setup, ingest and summarize its teardowns: they
    run however the run ends, so a sweep always reaches the database closed)

The trigger form comes from the DAG's params (JSON-schema checked by Airflow
before the run starts); ``validate`` then applies scalebench's own checks
(GPUs for nccl, the cluster's size, the data set of a full task, ...) before
any worker starts, and fails naming the field.

Each worker count has its own task group (``workers_<k>``, ``k`` zero-padded to two
digits so that Airflow's grid, which sorts groups by name, lists them in order) so that
its training task can take
``k`` slots of the workers pool (a mapped task's ``pool_slots`` is fixed when
the DAG is built, so it cannot vary with the map). Its mapped ``train`` runs
that size's repeats one at a time, and the sizes run one after another: two
groups of one sweep never share the machines they are timed on. A size the
form did not pick maps over nothing and shows as skipped.

Nothing here imports torch.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from airflow.sdk import DAG, Asset, Param, TaskGroup, task

from operators.training_group import TrainingGroupOperator
from scalebench.config import default_compile
from scalebench.datasets import downloadable, published_checksums
from scalebench.request import FIELDS
from scalebench.request_fields import AUTO, RequestField
from scalebench.stacks import STACK_NAME, STACK_SCHEMA
from scalebench.statuses import CANCELLED
from scalebench.tasks import AllReduceSpec, TaskSpec

# Why ingest closes a group that has no verdict of its own.
ENDED_WITHOUT_VERDICT = "its Airflow task ended without a verdict (killed, or its worker lost)"
ENDED_BEFORE_START = "the DAG run ended before this group started"


def dag_id(spec: TaskSpec) -> str:
    """``task1a-resnet20-cifar10`` → ``task1a_resnet20_cifar10``."""
    return spec.id.replace("-", "_")


def dataset_asset(spec: TaskSpec) -> Asset:
    """The Airflow Asset that ``prepare_dataset`` updates for ``spec``'s data set."""
    return Asset(name=f"{spec.id}-dataset", uri=f"scalebench://datasets/{spec.id}")


def params(spec: TaskSpec) -> dict[str, Param]:
    """The trigger form: one Param per request field the task takes, from its declaration
    (:data:`scalebench.request.FIELDS`), with what depends on the task (its worker counts,
    variants, precisions, time limit and data set). The download switch is offered only for
    a data set scalebench can fetch."""
    training = not isinstance(spec, AllReduceSpec)
    return {
        field.name: param(field, spec)
        for field in FIELDS
        if field.in_form
        and field.asked_of(training)
        and (field.name != "download" or downloadable(spec.data.name))
    }


def task_group_id(world_size: int) -> str:
    """The task group of one worker count: ``workers_01`` … ``workers_32``, so that sorting
    by name (Airflow's grid does) sorts by worker count."""
    return f"workers_{world_size:02d}"


# The JSON Schema dialect of every field's schema. Airflow checks a Param's schema against
# its dialect's meta-schema each time it resolves the Param, and it resolves every Param
# whenever it serializes a task (each parse of the DAG file, each ``dag.test``); the fields
# use only draft 7's keywords (type, enum, bounds, items, pattern), and draft 7's meta-schema
# is checked in a third of the time of the default 2020-12's (benchmarks/dag_serialization.py).
SCHEMA_DIALECT = {"$schema": "http://json-schema.org/draft-07/schema#"}


def param(field: RequestField, spec: TaskSpec) -> Param:
    """One field as a Param: its JSON-schema type, bounds and choices, title and help (in the
    task's words: the all-reduce task's where it has them, the meaning of the choices it
    offers only). A field decided when validated (default ``None``) may be left empty."""
    offered = {"variant": "variants", "precision": "precisions"}.get(field.name, "")
    choices = list(getattr(spec, offered) if offered else field.choices)
    allreduce = isinstance(spec, AllReduceSpec)
    default = field.default
    common = {  # every schema's dialect, title and help
        **SCHEMA_DIALECT,
        "title": field.title,
        "description": field.describe(choices or None, allreduce),
    }
    if len(choices) == 1:
        common["description"] += f" {spec.id} implements {choices[0]} only."
    if field.name == "group_timeout_s":
        full, light = spec.group_time_limit_s(False), spec.group_time_limit_s(True)
        common["description"] += f" This task: {full:,.0f} s full, {light:,.0f} s light."
    if field.name == "light":
        default = True  # the form offers the laptop-sized variant first
    elif field.name == "compile":
        default = form_compile_default()
    elif field.name == "download":
        default = published_checksums(spec.data.name)
        common["description"] = download_help(spec.data.name)
    if field.kind == "counts":
        items = {"type": "integer", "enum": list(spec.world_sizes)}
        return Param(
            list(default), type="array", items=items, minItems=1, uniqueItems=True, **common
        )
    if field.kind == "profiles":
        items = {"type": "string", "pattern": field.pattern}
        return Param(
            [profile.name for profile in default],
            type="array",
            items=items,
            minItems=1,
            maxItems=field.maximum,
            uniqueItems=True,
            **common,
        )
    if field.kind == "stacks":
        return Param(
            {},
            type="object",
            maxProperties=field.maximum,
            propertyNames={"pattern": f"^{STACK_NAME}$"},
            additionalProperties=STACK_SCHEMA,
            **common,
        )
    if field.kind == "choice":
        if default is None:  # empty: decided when validated, as the help says
            return Param(None, type=["null", "string"], enum=[None, *choices], **common)
        return Param(default, type="string", enum=choices, **common)
    if field.kind == "bool":
        return Param(default, type="boolean", **common)
    if field.kind == "text":
        return Param(default, type="string", maxLength=255, **common)
    bounds = {"minimum": field.minimum, "maximum": field.maximum}
    if field.kind == "seconds" and field.minimum is None:
        bounds = {"exclusiveMinimum": 0, "maximum": field.maximum}
    kind: str | list[str] = "integer" if field.kind == "int" else "number"
    if field.takes_auto:  # a number, or the word auto (the default)
        return Param(
            default,
            type=[kind, "string"],
            pattern=f"^{AUTO}$",
            **{k: v for k, v in bounds.items() if v is not None},
            **common,
        )
    if default is None:
        kind = ["null", kind]  # empty: decided when validated, as the help says
    return Param(default, type=kind, **{k: v for k, v in bounds.items() if v is not None}, **common)


def download_help(name: str) -> str:
    """What the form's download switch does for data set ``name``."""
    if published_checksums(name):
        return (
            f"Full variant: fetch {name} when it is missing (checked against its "
            "published checksums). prepare_dataset verifies it either way."
        )
    if downloadable(name):
        return (
            f"Full variant: fetch {name} when it is missing. Its publisher gives no "
            "checksums; rows, features and labels are checked."
        )
    return (
        f"{name} cannot be downloaded by scalebench: put it in SCALEBENCH_DATA_DIR "
        "(see docs/tasks.md)."
    )


def form_compile_default() -> str:
    """``SCALEBENCH_COMPILE`` when it is valid; else ``auto`` (a bad value must not stop the
    DAG file from parsing: requests that omit the field are refused naming it)."""
    try:
        return default_compile()
    except ValueError:
        return "auto"


def description(spec: TaskSpec) -> str:
    """The DAG's one-line description (the DAG list shows it)."""
    if isinstance(spec, AllReduceSpec):
        return f"{spec.title}: latency and bus bandwidth per message size at each worker count"
    return (
        f"{spec.title}: time to {spec.goal.describe(False)}, speedup and communication ratio "
        "at each worker count"
    )


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
        "training group (`workers_<kk>.train`, one mapped instance per repeat); failed "
        "groups are recorded with what they measured. `summarize` prints the sweep's "
        "table and fails when no configuration produced a result. Results go to the "
        "results database; open the dashboard or run `scalebench report`."
    )


def sweep_steps(
    spec: TaskSpec, fixed: dict[str, Any] | None = None, trigger: str | None = None
) -> tuple[Any, Any]:
    """Add the steps of one sweep of ``spec`` to the DAG being built.

    Returns ``(validate, ingest)``: the first step and the one whose result
    (the sweep id) the summary and the regression check take.

    The request comes from the trigger form, or from ``fixed`` (the nightly
    run's settings). The sweep's trigger is ``trigger`` when given, else
    ``scheduled`` for scheduled DAG runs and ``manual`` otherwise.
    """
    request = _validate_step(spec, fixed)()
    groups = _plan_step(trigger)(request)
    if not isinstance(spec, AllReduceSpec):
        _prepare_dataset_step(spec)(request) >> groups
    last = _training_steps(spec, groups)
    # ``validate`` is the setup of the sweep and ``ingest`` its teardown: Airflow runs a
    # teardown however the run ends (a task failed, a task or the whole run marked
    # failed), so every sweep that was planned reaches the database, closed; after a
    # refused request it does not run (its setup failed). Its failure fails the run.
    loaded = ingest(groups).as_teardown(setups=request.operator, on_failure_fail_dagrun=True)
    last >> loaded
    return request, loaded


def _validate_step(spec: TaskSpec, fixed: dict[str, Any] | None) -> Any:
    """``validate``: the request from the trigger form (or ``fixed``, the nightly's), checked,
    as its fields; a refused one fails the task without a retry, naming the field."""

    @task(trigger_rule="all_done")  # after an earlier sweep of the nightly, whatever it did
    def validate(**context: Any) -> dict[str, Any]:
        from scalebench.sweep import InvalidParameter, request_from_form

        if fixed is not None:  # the nightly's settings: a trigger's conf has no say
            from scalebench.nightly import conf_refusal

            refusal = conf_refusal(getattr(context.get("dag_run"), "conf", None))
            if refusal:
                refuse(f"request refused: {refusal}")
        chosen = dict(fixed if fixed is not None else context["params"])
        if fixed is not None:  # a paired night: tonight's stack beside the pinned reference
            chosen = _with_nightly_arms(spec.id, chosen)
        cluster = None
        if chosen.get("launcher") == "kubernetes":  # ranks_per_node auto and the fit
            from operators.kubernetes.cluster import ClusterUnreachable, nodes_for_sweep

            try:
                cluster = nodes_for_sweep()
            except ClusterUnreachable as exc:
                refuse(f"request refused: launcher: {exc}")
        try:
            request = request_from_form(spec.id, chosen, cluster)
        except InvalidParameter as exc:  # the user's to fix: no retry, the field named
            hint = ""
            if fixed is not None and "reference" in str(exc) and "stacks" in str(exc):
                hint = (
                    "; the nightly's reference stack: pin one that is there with scalebench "
                    "nightly pin PYTHON_OR_IMAGE, or unpin it (scalebench nightly unpin)"
                )
            refuse(f"request refused: {exc}{hint}")
        if len(request.stacks) > 1:
            from scalebench import pairing

            print(
                pairing.described(
                    request.pairing,
                    request.world_sizes,
                    request.threads_per_worker,
                    len(request.stacks),
                    len(pairing.host_cores()),
                )
            )
        if on_the_claim(request) and not request.download:  # there already, or refused now
            from operators.kubernetes.data_pod import DataPodFailed, prepare_in_task
            from operators.kubernetes.settings import KubernetesSettings

            try:
                print(
                    prepare_in_task(
                        KubernetesSettings.from_env(), data_set(request), False, context, "validate"
                    )
                )
            except DataPodFailed as exc:
                refuse(
                    f"request refused: data_dir: {exc} Or ask for the download (download: true)."
                )
        return request.to_fields()

    return validate


def on_the_claim(request: Any) -> bool:
    """Whether the request's data set lives in the cluster's data claim: a full training
    sweep on Kubernetes (the Airflow worker never holds it)."""
    training = not isinstance(request.spec, AllReduceSpec)
    return request.launcher == "kubernetes" and not request.light and training


def data_set(request: Any) -> str:
    """The name of the data set the request's variant trains on."""
    spec = request.spec
    return (spec.light_data if request.light else spec.data).name


def _with_nightly_arms(task: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The nightly's request with its stacks and rounds where a reference stack is set or
    pinned (``results_db.service.reference.nightly_arms``): pairs replace the repeats."""
    from results_db.service.engines import CommandError
    from results_db.service.reference import nightly_arms
    from scalebench.nightly import NightlySettings

    if fields.get("launcher") == "kubernetes":
        from operators.kubernetes.settings import KubernetesSettings

        this_stack = {"image": KubernetesSettings.from_env().image}
    else:
        this_stack = {"python": sys.executable}  # the interpreter the ranks start by default
    try:
        arms = nightly_arms(
            results_database(), task, fields, NightlySettings.from_env(), this_stack
        )
    except (CommandError, ValueError) as exc:  # a pinned reference that is gone, say
        refuse(f"request refused: {exc}")
    if not arms:
        print("no reference stack pinned: tonight runs unpaired (scalebench nightly pin)")
        return fields
    print(
        f"paired night: stacks {', '.join(arms['stacks'])}, {arms['pairs']} round(s) "
        "(reference: " + str(arms["stacks"]["reference"]) + ")"
    )
    return {**{k: v for k, v in fields.items() if k != "repeats"}, **arms}


def _prepare_dataset_step(spec: TaskSpec) -> Any:
    """``prepare_dataset``: the request's data set fetched (when asked) and verified; it
    updates the data set's Asset."""

    @task(outlets=[dataset_asset(spec)])
    def prepare_dataset(request: dict[str, Any], **context: Any) -> dict[str, Any]:
        from scalebench.datasets import DataSetCorrupt, DataSetMissing
        from scalebench.sweep import SweepRequest
        from workers.data.prepare import prepare

        asked = SweepRequest.from_fields(request)
        data = spec.light_data if asked.light else spec.data
        if on_the_claim(asked):  # prepared by a pod, in the claim the worker pods read
            from operators.kubernetes.data_pod import DataPodFailed, prepare_in_task
            from operators.kubernetes.settings import KubernetesSettings

            try:
                said = prepare_in_task(
                    KubernetesSettings.from_env(),
                    data.name,
                    asked.download,
                    context,
                    "prepare_dataset",
                )
            except DataPodFailed as exc:  # no retry: someone must act
                refuse(f"data set {data.name}: {exc}")
            print(said)
            ready = {
                "name": data.name,
                "status": "ready",
                "location": said,
                "files": {},
                "bytes": 0,
            }
            context["outlet_events"][dataset_asset(spec)].extra = ready
            return ready
        try:
            prepared = prepare(data.name, asked.data_dir, download=asked.download)
        except (DataSetMissing, DataSetCorrupt) as exc:  # no retry: someone must act
            refuse(f"data set {data.name}: {exc}")
        print(f"{prepared.name}: {prepared.status} at {prepared.location}")
        context["outlet_events"][dataset_asset(spec)].extra = asdict(prepared)
        return asdict(prepared)

    return prepare_dataset


def _plan_step(trigger: str | None) -> Any:
    """``plan``: the sweep started (its folder and manifest) and its groups planned."""

    @task
    def plan(request: dict[str, Any], **context: Any) -> list[dict[str, Any]]:
        from scalebench import config
        from scalebench.sweep import SweepRequest, start_sweep

        dag_run = context["dag_run"]
        run_type = str(getattr(dag_run, "run_type", "manual"))
        kind = trigger or ("scheduled" if "scheduled" in run_type else "manual")
        # A scheduled sweep stands for its run's night (a backfill runs past nights today).
        logical_date = getattr(dag_run, "logical_date", None)
        night = logical_date.isoformat() if kind == "scheduled" and logical_date else None
        database = results_database()  # migrated first: the plan is stored the moment it is made
        sweep = start_sweep(
            SweepRequest.from_fields(request), config.results_path(), kind, night=night
        )
        print(f"sweep {sweep.sweep_id}: {len(sweep.groups)} group(s) planned in {sweep.sweep_dir}")
        if database is not None:
            store_plan(database, sweep.sweep_dir)
        return [group.to_xcom() for group in sweep.groups]

    return plan


def results_database() -> str | None:
    """The results database's URL, its schema migrated; ``None`` (said in the task log) when
    it cannot be used now: the groups still run, and their loads and ``ingest`` try again."""
    from results_db.service import upgrade
    from scalebench import config
    from scalebench.errors import describe

    try:
        url = config.database_url()
        upgrade(url)
    except Exception as exc:
        logging.getLogger("airflow.task").warning(
            "the results database cannot take the plan now (%s); the groups' loads and the "
            "sweep's ingest will store it",
            describe(exc),
        )
        return None
    return url


def store_plan(url: str, sweep_dir: Path) -> None:
    """Store the sweep just planned, every group a ``planned`` row, so that the dashboard
    shows the whole sweep from its start. A database that cannot take it now only delays
    it: each group is loaded as it starts and ends, and ``ingest`` loads the whole sweep."""
    from results_db.service import load_plan
    from scalebench.errors import describe

    try:
        load_plan(url, sweep_dir)
    except Exception as exc:
        logging.getLogger("airflow.task").warning(
            "the plan is not in the results database yet (%s); the groups' loads and the "
            "sweep's ingest will store it",
            describe(exc),
        )


@task
def select(groups: list[dict[str, Any]], world_size: int) -> list[dict[str, Any]]:
    """The launches of one worker count, in repeat order: each planned group alone, the arms
    of a duet round together (:func:`scalebench.sweep.launches`), one training task each."""
    from scalebench.sweep import GroupPlan, launch_to_xcom, launches

    sized = [GroupPlan.from_xcom(g) for g in groups]
    return [
        launch_to_xcom(launch) for launch in launches(sized) if launch[0].world_size == world_size
    ]


def _training_steps(spec: TaskSpec, groups: Any) -> Any:
    """One task group per worker count of ``spec`` (``workers_<kk>``), each training its
    groups of ``groups`` one repeat at a time, the sizes one after another; returns the last
    size's ``train``."""
    previous = None
    for k in spec.world_sizes:
        with TaskGroup(task_group_id(k), tooltip=f"training groups of {k} worker(s)"):
            train = TrainingGroupOperator.partial(
                task_id="train",
                pool=_pool(),
                pool_slots=k,
                max_active_tis_per_dag=1,
                trigger_rule="all_done",  # a failed size does not cancel the next one
            ).expand(group=select(groups, k))
        if previous is not None:
            previous >> train
        previous = train
    return previous


# A database that restarts or drops the connection gets three more tries, 30 s, 60 s
# and 120 s later: ingest is idempotent, so a retry loads exactly what one try would.
@task(retries=3, retry_delay=timedelta(seconds=30), retry_exponential_backoff=True)
def ingest(groups: list[dict[str, Any]] | None) -> str:
    """Close the sweep (groups left without a verdict: cancelled or skipped), load it."""
    from airflow.sdk.exceptions import AirflowSkipException

    from results_db.service import ingest as load
    from scalebench import config, manifest
    from scalebench.sweep import GroupPlan

    if not groups:
        raise AirflowSkipException("no sweep was planned: nothing to ingest")
    sweep_dir = Path(GroupPlan.from_xcom(groups[0]).sweep_dir)
    manifest.close(
        sweep_dir, started_reason=ENDED_WITHOUT_VERDICT, unstarted_reason=ENDED_BEFORE_START
    )
    try:
        load(config.database_url(), str(sweep_dir))
    except Exception as exc:
        from sqlalchemy.exc import OperationalError

        from results_db.service import database_problem

        problem = database_problem(exc)
        if problem is None or isinstance(exc, OperationalError):
            raise  # a bug, or a database that may come back: Airflow retries
        # A URL that cannot work, or a database without the schema: no retry helps.
        refuse(f"{problem}; the records stay in {sweep_dir}")
    return sweep_dir.name


def refuse(sentence: str) -> NoReturn:
    """Fail the task without a retry for what the user must fix, ``sentence`` saying what
    (naming the field). It is logged first, as the task log's first error line; Airflow
    then adds its own "Task failed with exception" record, with a stack, which a task
    cannot prevent."""
    from airflow.sdk.exceptions import AirflowFailException

    logging.getLogger("airflow.task").error("%s", sentence)
    raise AirflowFailException(sentence) from None


def judge_step(request: Any, loaded: Any, *, fail_when_cancelled: bool) -> Any:
    """Add ``summarize``: print the sweep's table and decide the DAG run's state.

    A teardown of the sweep as well, so it runs after the run was marked failed
    (when Airflow would skip any ordinary task still waiting) and fails it: a
    run ends ``success`` only when its sweep produced a result and, with
    ``fail_when_cancelled``, was not cancelled. After a refused request it does
    not run, and the run fails on ``validate`` alone.
    """

    @task
    def summarize(sweep_id: str | None) -> list[dict[str, Any]]:
        from results_db.service import summarize_sweep, sweep_outcome

        if sweep_id is None:
            raise RuntimeError("the sweep was not loaded into the results database; see ingest")
        rows = summarize_sweep(sweep_id)
        if fail_when_cancelled and sweep_outcome(sweep_id) == CANCELLED:
            raise RuntimeError(f"sweep {sweep_id} was cancelled; what it measured is kept")
        return rows

    return summarize(loaded).as_teardown(setups=request.operator, on_failure_fail_dagrun=True)


def _pool() -> str:
    from scalebench import config

    return config.pool()


def build_benchmark_dag(spec: TaskSpec) -> DAG:
    """The DAG that sweeps ``spec`` over the worker counts chosen in the trigger form."""
    with DAG(
        dag_id=dag_id(spec),
        schedule=None,
        params=params(spec),
        tags=["scalebench", "benchmark", spec.id.split("-")[0]],
        description=description(spec),
        doc_md=doc(spec),
        catchup=False,
    ) as benchmark:
        request, loaded = sweep_steps(spec)
        judge_step(request, loaded, fail_when_cancelled=True)
    return benchmark
