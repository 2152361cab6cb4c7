"""A sweep's runs by stack: what each arm of each paired round measured.

A sweep that names stacks (:mod:`scalebench.stacks`) runs every group once per stack in
rounds; :func:`arm_runs` reads, for each succeeded run, its stack, round (repeat), worker
count and link, and the values the stacks are compared by (:data:`ARM_METRICS`), in seconds.
:func:`sweep_stacks` gives the stacks in the order the request named them (the first is the
one the others are compared against).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, func, select

from results_db.models import EpochEval, Run, Sweep
from results_db.queries.runs import run_environments
from results_db.regressions.values import evaluation_seconds, steady_seconds
from scalebench.statuses import SUCCEEDED

# What the arms are compared by, each in seconds, lower is better: a step's steady seconds
# after warm-up (results_db.regressions.values.steady_seconds: work on the processor in the
# run's quietest stretch; communication, the least any rank spent in the collective, as a
# mean), an evaluation's seconds (evaluation_seconds, the first left out as a warm-up; how
# many there were shows in time to accuracy) and its time to accuracy.
ARM_METRICS = (
    "steady_step_s",  # every phase of the step
    "compute_s",  # forward + loss + backward + optimizer
    "communication_s",
    "data_s",
    "eval_s",
    "time_to_accuracy_s",
)


@dataclass(frozen=True)
class ArmRun:
    """One succeeded run of a stack: its round (``repeat``, from 0), worker count, link, and
    each of :data:`ARM_METRICS` it measured (seconds; a metric it has none of is absent:
    a run without steps, or one that did not reach its goal, has no time to accuracy)."""

    run_id: str
    stack: str
    world_size: int
    network: str
    repeat: int
    seconds: dict[str, float]
    pairing: str = ""  # how its round's arms ran (scalebench.pairing): duet or interleaved


def sweep_stacks(conn: Connection, sweep_id: str) -> list[str]:
    """The sweep's stacks' names in the order its request named them (empty: it named
    none); LookupError for a sweep not in the database."""
    config = conn.execute(select(Sweep.config).where(Sweep.id == sweep_id)).scalar()
    if config is None:
        raise LookupError(f"no sweep {sweep_id!r} in the results database")
    stacks = config.get("stacks") or []
    return [str(s["name"]) for s in stacks if isinstance(s, dict) and "name" in s]


def arm_runs(conn: Connection, sweep_id: str) -> list[ArmRun]:
    """Every succeeded run of the sweep that ran a stack, in the order of their ids."""
    taken = (Run.sweep_id == sweep_id, Run.stack != "", Run.status == SUCCEEDED)
    runs = conn.execute(
        select(
            Run.id,
            Run.stack,
            Run.world_size,
            Run.network,
            Run.repeat,
            Run.time_to_accuracy_s,
            Run.pairing,
        )
        .where(*taken)
        .order_by(Run.id)
    ).all()
    evaluations: dict[str, list[float]] = {}
    for run_id, eval_s in conn.execute(
        select(EpochEval.run_id, EpochEval.eval_s)
        .join(Run, Run.id == EpochEval.run_id)
        .where(*taken)
        .order_by(EpochEval.run_id, EpochEval.epoch)
    ):
        evaluations.setdefault(run_id, []).append(float(eval_s))
    arms = []
    for run_id, stack, world_size, network, repeat, tta_s, pairing in runs:
        seconds = steady_seconds(conn, run_id)
        eval_s = evaluation_seconds(evaluations.get(run_id, []))
        if eval_s > 0:  # a run without evaluations has none to compare
            seconds["eval_s"] = eval_s
        if tta_s is not None:
            seconds["time_to_accuracy_s"] = float(tta_s)
        arms.append(ArmRun(run_id, stack, world_size, network, repeat, seconds, pairing))
    return arms


def stack_identities(conn: Connection, sweep_id: str) -> dict[str, dict[str, object]]:
    """Per stack, what its first run's rank 0 ran: the interpreter (``executable``), the
    versions of Python, torch, CUDA, NCCL and numpy, the variables the stack set
    (``env``), and on Kubernetes the image its pods ran as the kubelet resolved it
    (``image_digest``, where recorded)."""
    first_runs = conn.execute(
        select(Run.stack, func.min(Run.id))
        .where(Run.sweep_id == sweep_id, Run.stack != "")
        .group_by(Run.stack)
    ).all()
    identities: dict[str, dict[str, object]] = {}
    for stack, run_id in first_runs:
        ranks = run_environments(conn, run_id)
        if not ranks:
            continue
        rank0 = ranks[0]
        identities[stack] = {
            "executable": rank0.executable,
            "python": rank0.python,
            "torch": rank0.torch,
            "cuda": rank0.cuda,
            "nccl": rank0.nccl,
            "numpy": rank0.numpy,
            "env": dict(rank0.stack_env),
        }
        image = conn.execute(select(Run.image_digest).where(Run.id == run_id)).scalar()
        if image:
            identities[stack]["image_digest"] = image
    return identities
