"""One epoch of a task trained on a prepared miniature of its full data set."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from scalebench.tasks import GNMTConfig, TransformerConfig

# Translation models small enough that an epoch on a CPU takes a second.
SMALL_TRANSLATORS = {
    "task4a-gnmt-wmt16": GNMTConfig(hidden=32, layers=2, dropout=0.0),
    "task4b-transformer-wmt17": TransformerConfig(
        model=32, heads=2, feed_forward=64, encoder_layers=1, decoder_layers=1, dropout=0.0
    ),
}


def train_one_epoch(task_id: str, data_dir: Path, run_dir: Path) -> list[dict]:
    """One epoch of the task on the prepared set in ``data_dir``, through the real engine,
    on this process as a one-rank group (the ``one_rank`` fixture): the light model and batch
    (a miniature holds less than one of the full task's updates), the full set's files.
    Returns the steps."""
    import math

    import torch

    from scalebench.tasks import get_task
    from workers import engine
    from workers.adapter import TrainingOptions, adapter_for
    from workers.records import RecordWriter, read_run
    from workers.tracker import Tracker

    task = get_task(task_id)
    spec = replace(task, light_data=task.data)
    if (
        task_id in SMALL_TRANSLATORS
    ):  # translations of at most 12 tokens: an epoch-old model needs no more
        spec = replace(spec, light_model_config=SMALL_TRANSLATORS[task_id], decode_max_length=12)
    cpu = torch.device("cpu")
    writer = RecordWriter(run_dir, "run", rank=0, world_size=1)
    tracker = Tracker(writer, cpu, goal=spec.goal, light=True, max_epochs=1)
    options = TrainingOptions(light=True, data_dir=data_dir, max_epochs=1)
    try:
        assert engine.train(adapter_for(spec, options, cpu), tracker) == "max_epochs"
    finally:
        tracker.close()
    [rank] = read_run(run_dir)
    start = next(e for e in rank.of_kind("event") if e["event"] == "start")
    assert start["data_set"] == task.data.name
    steps = rank.of_kind("step")
    assert steps and all(math.isfinite(step["loss"]) for step in steps)
    (evaluation,) = rank.of_kind("eval")
    assert evaluation["metrics"] and all(math.isfinite(v) for v in evaluation["metrics"].values())
    return steps
