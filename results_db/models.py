"""The results schema: SQLAlchemy 2 typed declarative models.

One row per sweep and per run (a training group at one worker count and one
repeat), plus what the run measured:

- ``epoch_eval``: one row per evaluation (global values, identical on every
  rank, so rank 0's);
- ``step_timing``: one row per rank per training step. Per-step rows, not
  per-epoch aggregates: a full ResNet-20 run is about 64,000 steps at one
  worker and fewer at more (the global batch grows), so a whole six-size
  sweep stays under a million rows, which COPY loads in seconds; and per-step
  rows keep the distribution (stragglers, warm-up, outliers) that an epoch
  mean would hide;
- ``allreduce_sample``: one row per rank, size, dtype and timed repetition;
- ``run_event`` and ``run_environment``;
- ``price`` (dated $/h per instance and GPU type) and ``regression`` (flags
  raised by the nightly detector).

Every number is a numeric column, every time a timestamp, JSON is JSON.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# JSONB on PostgreSQL (indexable, compact), JSON elsewhere.
JSONType = JSON().with_variant(JSONB(), "postgresql")


NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Sweep(Base):
    """One trigger of a task: several worker counts, each repeated."""

    __tablename__ = "sweep"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    task: Mapped[str] = mapped_column(String(100), index=True)
    trigger: Mapped[str] = mapped_column(String(20))
    config: Mapped[dict[str, Any]] = mapped_column(JSONType)
    config_hash: Mapped[str] = mapped_column(String(64), index=True)
    code_version: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    outcome: Mapped[str | None] = mapped_column(String(20))
    # The night a scheduled sweep stands for: its Airflow run's logical date (None: a sweep
    # started by hand, ordered by created_at).
    night: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Run(Base):
    """One training group at one worker count and one repeat, and how it ended.

    Times in seconds. ``time_to_accuracy_s`` runs from the group's common start
    to the end of the first evaluation meeting the goal (``None`` when the
    goal was not reached); ``compute_s``/``gradient_packing_s``/``communication_s``/
    ``step_s`` are means over ranks of summed phase times. ``records_version`` is the
    records' schema version (``workers.records``); before 3, and for runs stored
    before it was kept (``None``), ``communication`` includes packing and
    unpacking the gradients (``workers.records.RECORDS_NOTE``).
    """

    __tablename__ = "run"
    __table_args__ = (
        Index("ix_run_sweep_world_size", "sweep_id", "world_size"),
        Index("ix_run_config_hash_world_size", "config_hash", "world_size"),
    )

    id: Mapped[str] = mapped_column(String(250), primary_key=True)
    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweep.id", ondelete="CASCADE"))
    task: Mapped[str] = mapped_column(String(100), index=True)
    config_hash: Mapped[str] = mapped_column(String(64))
    world_size: Mapped[int] = mapped_column(Integer)
    repeat: Mapped[int] = mapped_column(Integer)
    backend: Mapped[str] = mapped_column(String(20))
    device: Mapped[str] = mapped_column(String(40))
    precision: Mapped[str] = mapped_column(String(20))
    # torch.compile: the setting asked for, whether the step ran compiled, the
    # seconds compilation and warm-up took before the common start (slowest
    # rank), and graphs compiled during the timed run (0 is the goal).
    compile: Mapped[str] = mapped_column(String(10), server_default="off")
    compiled: Mapped[bool] = mapped_column(Boolean, server_default=false())
    compile_s: Mapped[float] = mapped_column(Float, server_default="0")
    recompilations: Mapped[int | None] = mapped_column(Integer)
    variant: Mapped[str] = mapped_column(String(20))
    light: Mapped[bool] = mapped_column(Boolean)
    status: Mapped[str] = mapped_column(String(20), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    goal_reached: Mapped[bool] = mapped_column(Boolean)
    goal_metric: Mapped[str | None] = mapped_column(String(50))
    goal_target: Mapped[float | None] = mapped_column(Float)
    time_to_accuracy_s: Mapped[float | None] = mapped_column(Float)
    time_to_accuracy_without_eval_s: Mapped[float | None] = mapped_column(Float)
    eval_s: Mapped[float] = mapped_column(Float, default=0.0)
    compute_s: Mapped[float] = mapped_column(Float, default=0.0)
    gradient_packing_s: Mapped[float] = mapped_column(Float, server_default="0")
    communication_s: Mapped[float] = mapped_column(Float, default=0.0)
    step_s: Mapped[float] = mapped_column(Float, default=0.0)
    communication_ratio: Mapped[float | None] = mapped_column(Float)
    epochs: Mapped[int] = mapped_column(Integer, default=0)
    steps: Mapped[int] = mapped_column(Integer, default=0)
    samples_per_s: Mapped[float | None] = mapped_column(Float)
    quarantined_lines: Mapped[int] = mapped_column(Integer, default=0)
    # spread: one rank per node was asked (Kubernetes); pack: ranks may share a node.
    # shared_node: a spread run whose ranks' environment records name one node twice.
    placement: Mapped[str] = mapped_column(String(10), server_default="pack")
    shared_node: Mapped[bool] = mapped_column(Boolean, server_default=false())
    # The request's ranks per node (scalebench.nodes): world_size ranks ran on
    # ceil(world_size / ranks_per_node) nodes; 1 for runs stored before it could be asked.
    ranks_per_node: Mapped[int] = mapped_column(Integer, server_default="1")
    # The link profile the ranks talked over (scalebench.network): host (unshaped), or an
    # emulated rate with an optional delay, e.g. 100mbit, 1gbit+2ms.
    network: Mapped[str] = mapped_column(String(40), server_default="host")
    # The stack its ranks ran (scalebench.stacks); empty where the request named none. What
    # the stack was (interpreter, versions, variables) is each rank's run_environment.details.
    stack: Mapped[str] = mapped_column(String(40), server_default="")
    # How the arms of its round ran (scalebench.pairing): duet (at once, each on cores of
    # its own) or interleaved (one after the other); empty where the request named no stacks.
    pairing: Mapped[str] = mapped_column(String(20), server_default="")
    # The image a Kubernetes run's worker containers ran, as the kubelet resolved it
    # (repo/worker@sha256:<64 hex>; several, sorted and comma-separated, where its pods ran
    # different ones); empty for local runs and runs stored before it was recorded.
    image_digest: Mapped[str] = mapped_column(String(300), server_default="")
    # The transports its traffic took (scalebench.transports), within its nodes and between
    # them: what NCCL's logs of the ranks name (P2P, SHM, NET/IB, NET/Socket; several
    # comma-separated), TCP (gloo) for gloo; empty where not known or not used (one node).
    transport_within_node: Mapped[str] = mapped_column(String(100), server_default="")
    transport_between_nodes: Mapped[str] = mapped_column(String(100), server_default="")
    records_version: Mapped[int | None] = mapped_column(Integer)
    # the share of the group's cores other processes took while it ran (None: not measured)
    contention_share: Mapped[float | None] = mapped_column(Float)
    contended: Mapped[bool] = mapped_column(Boolean, server_default=false())
    hardware: Mapped[str | None] = mapped_column(String(250))  # processor (+ GPUs)
    # The run metrics (scalebench.run_metrics, which says how the ranks' values are reduced;
    # a test holds these columns to it), None for runs stored before each was measured.
    # The machine's reference workload's median seconds per sample over the ranks
    # (workers.machine_reference): the nightly judges step times relative to it.
    machine_reference_s: Mapped[float | None] = mapped_column(Float)
    # The most memory any rank held at once, bytes (workers.tracker.peak_memory_bytes).
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    ingested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Every rank's step records summed, stored at ingest so that per-step phase
    # means need no scan of step_timing: how many step records, and seconds per phase.
    step_records: Mapped[int] = mapped_column(Integer, server_default="0")
    data_total_s: Mapped[float] = mapped_column(Float, server_default="0")
    forward_total_s: Mapped[float] = mapped_column(Float, server_default="0")
    loss_total_s: Mapped[float] = mapped_column(Float, server_default="0")
    backward_total_s: Mapped[float] = mapped_column(Float, server_default="0")
    gradient_packing_total_s: Mapped[float] = mapped_column(Float, server_default="0")
    communication_total_s: Mapped[float] = mapped_column(Float, server_default="0")
    optimizer_total_s: Mapped[float] = mapped_column(Float, server_default="0")


class EpochEval(Base):
    """A global evaluation after ``epoch`` (0-based); seconds since the common start."""

    __tablename__ = "epoch_eval"

    run_id: Mapped[str] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    t_s: Mapped[float] = mapped_column(Float)
    metric_value: Mapped[float | None] = mapped_column(Float)
    loss: Mapped[float | None] = mapped_column(Float)
    eval_s: Mapped[float] = mapped_column(Float)
    train_s: Mapped[float] = mapped_column(Float)
    wall_s: Mapped[float] = mapped_column(Float)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONType)


class StepTiming(Base):
    """One training step of one rank; phase times in seconds."""

    __tablename__ = "step_timing"

    # No foreign key on the two large tables: its per-row trigger halves COPY
    # throughput (measured). Ingest writes and deletes these rows in the same
    # transaction as their run row, which keeps them consistent.
    run_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    t_s: Mapped[float] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer)
    loss: Mapped[float | None] = mapped_column(Float)
    lr: Mapped[float | None] = mapped_column(Float)
    data_s: Mapped[float] = mapped_column(Float)
    forward_s: Mapped[float] = mapped_column(Float)
    loss_s: Mapped[float] = mapped_column(Float)
    backward_s: Mapped[float] = mapped_column(Float)
    gradient_packing_s: Mapped[float] = mapped_column(Float, server_default="0")
    communication_s: Mapped[float] = mapped_column(Float)
    optimizer_s: Mapped[float] = mapped_column(Float)


class AllReduceSample(Base):
    """One timed all-reduce repetition seen by one rank."""

    __tablename__ = "allreduce_sample"
    __table_args__ = (Index("ix_allreduce_sample_config", "backend", "dtype", "world_size"),)

    # No foreign key on the two large tables: its per-row trigger halves COPY
    # throughput (measured). Ingest writes and deletes these rows in the same
    # transaction as their run row, which keeps them consistent.
    run_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    dtype: Mapped[str] = mapped_column(String(20), primary_key=True)
    elements: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    repetition: Mapped[int] = mapped_column(Integer, primary_key=True)
    world_size: Mapped[int] = mapped_column(Integer)
    backend: Mapped[str] = mapped_column(String(20))
    bytes: Mapped[int] = mapped_column(BigInteger)
    seconds: Mapped[float] = mapped_column(Float)


class AllReduceCurve(Base):
    """One run's all-reduce of one dtype and message size: the slowest rank's seconds of
    each repetition, in repetition order. Every latency and bandwidth summary is built
    from these; ingest stores them so a summary needs no pass over ``allreduce_sample``."""

    __tablename__ = "allreduce_curve"

    run_id: Mapped[str] = mapped_column(String(250), primary_key=True)
    dtype: Mapped[str] = mapped_column(String(20), primary_key=True)
    bytes: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    slowest_s: Mapped[list[float]] = mapped_column(JSON)


class RunEvent(Base):
    """An event of one rank: start, goal_reached, diverged, finished, failed."""

    __tablename__ = "run_event"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    t_s: Mapped[float] = mapped_column(Float)
    event: Mapped[str] = mapped_column(String(30))
    details: Mapped[dict[str, Any]] = mapped_column(JSONType)


class RunEnvironment(Base):
    """Versions, devices and host of one rank."""

    __tablename__ = "run_environment"

    run_id: Mapped[str] = mapped_column(ForeignKey("run.id", ondelete="CASCADE"), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str | None] = mapped_column(String(255))
    python: Mapped[str | None] = mapped_column(String(40))
    torch: Mapped[str | None] = mapped_column(String(60))
    cuda: Mapped[str | None] = mapped_column(String(40))
    nccl: Mapped[str | None] = mapped_column(String(40))
    gpus: Mapped[list[str]] = mapped_column(JSONType)
    details: Mapped[dict[str, Any]] = mapped_column(JSONType)


class Price(Base):
    """Hourly prices of a machine type (and GPU type), valid from a date, in USD."""

    __tablename__ = "price"
    __table_args__ = (UniqueConstraint("kind", "name", "valid_from"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(20))  # "instance" or "gpu"
    name: Mapped[str] = mapped_column(String(100))
    regular_per_hour: Mapped[float] = mapped_column(Numeric(12, 4))
    preemptible_per_hour: Mapped[float] = mapped_column(Numeric(12, 4))
    source: Mapped[str] = mapped_column(Text)
    valid_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Regression(Base):
    """A configuration the nightly detector found slower than its baseline."""

    __tablename__ = "regression"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweep.id", ondelete="CASCADE"), index=True)
    task: Mapped[str] = mapped_column(String(100))
    config_hash: Mapped[str] = mapped_column(String(64))
    world_size: Mapped[int] = mapped_column(Integer)
    metric: Mapped[str] = mapped_column(String(50))
    baseline_mean: Mapped[float] = mapped_column(Float)
    latest_mean: Mapped[float | None] = mapped_column(Float)  # None: no successful run
    change: Mapped[float | None] = mapped_column(Float)  # relative: 0.08 = 8 % slower
    p_value: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text, default="")
    flagged_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ReferencePin(Base):
    """A reference stack pinned for the nightly (``scalebench nightly pin``): the nightly runs
    it beside tonight's stack, round by round. The pin is the row not yet ``unpinned_at``
    (at most one); pinning another unpins it."""

    __tablename__ = "reference_pin"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # one stack as a request names it: {"python": ...} or {"image": ...}, with "env"
    stack: Mapped[dict[str, Any]] = mapped_column(JSONType)
    note: Mapped[str] = mapped_column(Text, default="")
    pinned_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    unpinned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class NightlyFinding(Base):
    """One change a paired nightly found: the first night of a new level, and every series
    (task × network × workers × metric, tonight/reference ratio or the reference arm) that
    moved on it, attributed to the stack or the platform, and its triage state.

    ``size``, ``low``, ``high``: the headline series' ratio after / before (1.05 = 5 %
    slower) and its 95 % interval; ``series``: each moved series with its own; ``phases``:
    the step's phases that moved; ``diff``: what changed across the change (the stacks'
    identities, or the hardware and platform), each key's value before and after.
    """

    __tablename__ = "nightly_finding"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    first_night: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    first_sweep_id: Mapped[str] = mapped_column(String(200))
    attribution: Mapped[str] = mapped_column(String(20))  # "stack" or "platform"
    size: Mapped[float] = mapped_column(Float)
    low: Mapped[float] = mapped_column(Float)
    high: Mapped[float] = mapped_column(Float)
    p_value: Mapped[float] = mapped_column(Float)
    series: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    phases: Mapped[list[str]] = mapped_column(JSONType)
    diff: Mapped[dict[str, Any]] = mapped_column(JSONType)
    state: Mapped[str] = mapped_column(String(20), default="open")
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    state_changed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AllReduceFit(Base):
    """The ring model fitted to one Task 0 configuration of a sweep (``results_db.projection``):
    t(n, k) = 2(k − 1)·α + 2(k − 1)/k · n/β, on the median seconds of each message size.

    ``alpha_s``: seconds per ring step; ``beta_bytes_per_s``: one link's bytes per second;
    ``residual``: root mean square relative error over the sizes (0.1: 10 %);
    ``median_error``, ``max_error``: the median and the largest relative error;
    ``min_bytes``/``max_bytes``: the sizes fitted.
    Written at ingest and by ``scalebench db refit``.
    """

    __tablename__ = "allreduce_fit"

    sweep_id: Mapped[str] = mapped_column(
        ForeignKey("sweep.id", ondelete="CASCADE"), primary_key=True
    )
    backend: Mapped[str] = mapped_column(String(20), primary_key=True)
    device: Mapped[str] = mapped_column(String(40), primary_key=True)  # cpu, cuda
    dtype: Mapped[str] = mapped_column(String(20), primary_key=True)
    network: Mapped[str] = mapped_column(String(40), primary_key=True)
    world_size: Mapped[int] = mapped_column(Integer, primary_key=True)
    alpha_s: Mapped[float] = mapped_column(Float)
    beta_bytes_per_s: Mapped[float] = mapped_column(Float)
    residual: Mapped[float] = mapped_column(Float)
    median_error: Mapped[float] = mapped_column(Float)
    max_error: Mapped[float] = mapped_column(Float)
    sizes: Mapped[int] = mapped_column(Integer)
    min_bytes: Mapped[int] = mapped_column(BigInteger)
    max_bytes: Mapped[int] = mapped_column(BigInteger)
    fitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
