"""The translation tasks' fp16 path (GPUs) run on the CPU: half weights, float32 masters."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from scalebench.tasks import TranslationSpec, get_task
from tests.epochs import SMALL_TRANSLATORS as SMALL
from workers import engine, training_setup
from workers.adapter import TrainingOptions, adapter_for
from workers.records import RecordWriter, read_run
from workers.tracker import Tracker


@pytest.mark.slow
@pytest.mark.parametrize("task_id", sorted(SMALL))
def test_an_fp16_epoch_trains_half_weights_through_float32_masters(
    task_id: str, tmp_path: Path, one_rank: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(training_setup, "runs_in_half", lambda device: True)
    task = get_task(task_id)
    assert isinstance(task, TranslationSpec)
    # Translations of at most 12 tokens: the BLEU of an epoch-old model needs no more (the
    # beam search's length is tested in tests/test_beam_search.py).
    spec = replace(task, light_model_config=SMALL[task_id], decode_max_length=12)
    cpu = torch.device("cpu")
    writer = RecordWriter(tmp_path / "run", "run", rank=0, world_size=1)
    tracker = Tracker(writer, cpu, goal=spec.goal, light=True, max_epochs=1)
    options = TrainingOptions(light=True, data_dir=tmp_path, max_epochs=1)
    try:
        assert engine.train(adapter_for(spec, options, cpu), tracker) == "max_epochs"
    finally:
        tracker.close()
    [rank] = read_run(tmp_path / "run")
    start = next(e for e in rank.of_kind("event") if e["event"] == "start")
    assert start["precision"] == "fp16"
    losses = [s["loss"] for s in rank.of_kind("step")]
    assert all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-5:]) < sum(losses[:5])  # the float32 masters learned
    finished = next(e for e in rank.of_kind("event") if e["event"] == "finished")
    # Fewer updates than a scale window: the scale only fell, halved once per skipped update.
    assert len(losses) < spec.loss_scale.window
    skipped = finished["skipped_updates"]
    assert skipped < len(losses) and finished["loss_scale"] == spec.loss_scale.initial / 2**skipped
    assert "bleu" in rank.of_kind("eval")[-1]["metrics"]
