"""Writes sweep directories the way workers and the launcher do, with chosen numbers."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from scalebench import manifest
from scalebench.network import parse_profile
from scalebench.sweep import new_manifest, run_id, validate_request
from workers.records import RecordWriter

PHASES = {
    "data": 0.01,
    "forward": 0.1,
    "loss": 0.01,
    "backward": 0.2,
    "gradient_packing": 0.0,
    "communication": 0.05,
    "optimizer": 0.03,
}


@dataclass
class FakeRun:
    """A training run to write: ``time_to_accuracy_s`` None means the goal was not reached."""

    world_size: int
    repeat: int = 0
    time_to_accuracy_s: float | None = 100.0
    epochs: int = 3
    steps_per_epoch: int = 4
    end: str = "finished"  # "finished", "failed", "diverged", "killed" (no final record)
    launcher_status: str = "succeeded"
    phases: dict[str, float] = field(default_factory=lambda: dict(PHASES))
    slow_first_steps: int = 0  # the run's first steps whose phases take ``slow_factor`` times
    slow_factor: float = 1.0  # as long (as warm-up steps do)
    rank_factor: float = 0.0  # rank r's phases are (1 + r × this) times longer
    compile_s: float | None = None  # compiled before the start (rank r took compile_s + r)
    network: str = "host"  # the link profile it ran on (run ids carry it, as planned)
    # cores other processes kept busy on each rank's machine while it ran (None: the final
    # event carries no CPU seconds, as before they were recorded)
    others_cores: float | None = None
    cpu: str = "AMD EPYC (family 25, model 1)"
    # the machine's reference workload's seconds the final event carries (None: none, as
    # before it was timed); rank r's is (1 + r × 0.1) times this
    machine_reference_s: float | None = None
    # the peak memory the final event carries, bytes (None: none, as before it was measured);
    # rank r's is (1 + r) times this
    peak_memory_bytes: int | None = None
    cpu_count: int = 2
    variant: str = "sync"
    start_details: dict[str, str] = field(default_factory=dict)  # more fields of the start
    parameters: int = 272_474  # the model's, as the start event records it
    stack: str = ""  # the stack it ran as (a sweep of stacks names every run's)
    # each evaluation's seconds, epoch by epoch (None: a tenth of the epoch's seconds)
    eval_seconds: tuple[float, ...] | None = None


def write_training_sweep(
    root: Path,
    sweep_id: str,
    runs: list[FakeRun],
    trigger: str = "cli",
    created_at: str | None = None,
    task: str = "task1a-resnet20-cifar10",
    light: bool = True,
    ranks_per_node: int = 1,
    finished: bool | None = None,
    night: str | None = None,
    stacks: dict[str, dict[str, object]] | None = None,
    backend: str = "gloo",
    fields: dict[str, object] | None = None,
) -> Path:
    """A sweep's folder as a run of ``runs`` leaves it; closed (its ``finished_at`` set, as
    the command line and the DAG's ingest close it) unless ``finished`` is false, or, when
    ``finished`` is not given, while one of its groups is still planned. ``backend`` is
    recorded as the request's, as asked; ``fields``: more of the request's fields, validated
    here as a trigger's are."""
    request = validate_request(
        task=task,
        workers=sorted({r.world_size for r in runs}),
        light=light,
        download=not light,  # a full sweep's records without its data set
        repeats=max(r.repeat for r in runs) + 1,
        ranks_per_node=ranks_per_node,
        **({"stacks": stacks} if stacks else {}),
        **(fields or {}),
    )
    networks = tuple(dict.fromkeys(parse_profile(r.network) for r in runs))
    # recorded as asked, neither emulated nor run here (nccl needs GPUs)
    request = replace(request, network=networks, backend=backend)
    sweep_dir = root / sweep_id
    groups = [
        manifest.GroupEntry(
            run_id(sweep_id, r.world_size, r.repeat, parse_profile(r.network), r.stack),
            r.world_size,
            r.repeat,
            status=r.launcher_status,
            network=r.network,
            stack=r.stack,
            pairing=request.pairing if r.stack else "",
        )
        for r in runs
    ]
    manifest.create(
        sweep_dir, new_manifest(request, sweep_id, groups, trigger, created_at, night=night)
    )
    for entry, run in zip(groups, runs, strict=True):
        for rank in range(run.world_size):
            write_rank(sweep_dir / entry.run_id, entry.run_id, rank, run, request.spec.goal.metric)
    if finished if finished is not None else all(g.status != "planned" for g in groups):
        manifest.finish(sweep_dir)
    return sweep_dir


def write_rank(
    run_dir: Path, run_id: str, rank: int, run: FakeRun, metric: str = "top1_accuracy"
) -> None:
    writer = RecordWriter(run_dir, run_id, rank, run.world_size)
    writer.write(
        "env",
        0.0,
        host=f"node-{rank}",
        python="3.11",
        torch="2.13.0",
        cuda=None,
        nccl=None,
        gpus=[],
        cpu=run.cpu,
        cpu_capability="AVX2",
        cpu_count=run.cpu_count,
        torch_threads=1,
        **({"stack": {"name": run.stack, "env": {}}} if run.stack else {}),
    )
    compiled = (
        {}
        if run.compile_s is None
        else {"compile": "auto", "compiled": True, "compile_s": run.compile_s + rank}
    )
    network = {} if run.network == "host" else {"network": run.network}
    writer.write(
        "event",
        0.0,
        event="start",
        started_at="2026-11-01T02:00:00+00:00",
        device="cpu",
        precision="fp32",
        variant=run.variant,
        parameters=run.parameters,
        **compiled,
        **network,
        **run.start_details,
    )
    total_epochs = run.epochs
    epoch_s = (run.time_to_accuracy_s or 100.0) / total_epochs
    t = 0.0
    for epoch in range(total_epochs):
        for step in range(run.steps_per_epoch):
            t = epoch * epoch_s + (step + 1) * epoch_s * 0.9 / run.steps_per_epoch
            writer.write(
                "step",
                t,
                epoch=epoch,
                step=step,
                samples=128,
                loss=2.0 - 0.1 * epoch,
                lr=0.02,
                phases={
                    name: seconds
                    * (
                        run.slow_factor
                        if epoch * run.steps_per_epoch + step < run.slow_first_steps
                        else 1.0
                    )
                    * (1.0 + rank * run.rank_factor)
                    for name, seconds in run.phases.items()
                },
            )
        if run.end in ("diverged", "killed") and epoch == total_epochs - 1:
            break
        end = (epoch + 1) * epoch_s
        reached = run.time_to_accuracy_s is not None and epoch == total_epochs - 1
        accuracy = 80.0 if reached else 50.0 + epoch
        writer.write(
            "eval",
            end,
            epoch=epoch,
            metrics={metric: accuracy, "loss": 1.0},
            eval_s=epoch_s * 0.1 if run.eval_seconds is None else run.eval_seconds[epoch],
            train_s=end - (epoch + 1) * epoch_s * 0.1,
            wall_s=end,
        )
    if run.time_to_accuracy_s is not None and run.end == "finished":
        writer.write(
            "event",
            run.time_to_accuracy_s,
            event="goal_reached",
            epoch=total_epochs - 1,
            value=80.0,
            target=70.0,
            time_to_accuracy_s=run.time_to_accuracy_s,
            time_to_accuracy_without_eval_s=run.time_to_accuracy_s * 0.9,
        )
    cpu_use = {}
    if run.others_cores is not None:  # one rank per machine ("node-<rank>"), 1 thread of 2 cores
        own_s = 0.95 * (t + 1)
        cpu_use = {
            "cpu_window_s": t + 1,
            "host_busy_cpu_s": own_s + run.others_cores * (t + 1),
            "own_cpu_s": own_s,
        }
    if run.machine_reference_s is not None:
        cpu_use["machine_reference_s"] = run.machine_reference_s * (1 + rank * 0.1)
    if run.peak_memory_bytes is not None:
        cpu_use["peak_memory_bytes"] = run.peak_memory_bytes * (1 + rank)
    if run.end == "finished":
        recompiled = {} if run.compile_s is None else {"recompilations": rank}
        writer.write(
            "event", t + 1, event="finished", status="goal_reached", **recompiled, **cpu_use
        )
    elif run.end == "failed":
        writer.write(
            "event", t + 1, event="failed", reason="RuntimeError: peer went away", **cpu_use
        )
    elif run.end == "diverged":
        writer.write(
            "event", t + 1, event="diverged", reason="loss is nan at epoch 2, step 3", **cpu_use
        )
    writer.close()
