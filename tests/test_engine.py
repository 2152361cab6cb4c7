"""The training engine on a small task of its own: records, stops, accumulation, warm-up."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nn import functional as F

from scalebench.tasks import Goal, get_task
from workers import engine
from workers.adapter import Batch, Step, TaskAdapter, TrainingOptions, pass_sizes
from workers.compile import SavedState, compile_for_training, graphs_compiled
from workers.records import PHASES, RecordWriter, read_rank_file
from workers.tracker import Tracker

SPEC = get_task("task2a-logreg-epsilon")
NEVER = Goal(metric="score", direction="max", threshold=1.0, light_threshold=1.0)
FEATURES = 6


class Regression(TaskAdapter[torch.Tensor]):
    """Least squares on generated data: ``passes`` passes of ``batch`` rows per step.

    ``blow_up_at`` makes that pass's loss infinite; ``loss_sum`` switches to a
    summed loss normalised by the global row count (as the translation tasks do).
    """

    def __init__(
        self,
        options: TrainingOptions,
        *,
        rows: int = 70,
        batch: int = 16,
        passes: int = 1,
        loss_sum: bool = False,
        blow_up_at: int | None = None,
        batch_norm: bool = True,
    ) -> None:
        super().__init__(SPEC, options, torch.device("cpu"))
        generator = torch.Generator().manual_seed(1)
        self.x = torch.randn(rows, FEATURES, generator=generator)
        self.y = self.x @ torch.arange(1.0, FEATURES + 1) + 0.5
        self.batch, self.passes, self.loss_sum = batch, passes, loss_sum
        self.blow_up_at, self.batch_norm = blow_up_at, batch_norm
        self.calls = 0

    def build_model(self) -> torch.nn.Module:
        norm = torch.nn.BatchNorm1d(8) if self.batch_norm else torch.nn.Identity()
        return torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), norm, torch.nn.Linear(8, 1))

    def build_optimizer(self, parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        return torch.optim.SGD(parameters, lr=0.05, momentum=0.9)

    def steps(self, epoch: int) -> list[Step[torch.Tensor]]:
        order = torch.randperm(len(self.y), generator=torch.Generator().manual_seed(epoch))
        cuts = [order[i : i + self.batch] for i in range(0, len(order), self.batch)]
        return [Step(cuts[i : i + self.passes]) for i in range(0, len(cuts), self.passes)]

    def load(self, item: torch.Tensor) -> Batch:
        return Batch(
            inputs=(self.x[item],), targets=self.y[item], samples=len(item), units=len(item)
        )

    def forward(self, net: torch.nn.Module, batch: Batch) -> torch.Tensor:
        return net(*batch.inputs).squeeze(1)

    def loss(self, output: torch.Tensor, batch: Batch) -> torch.Tensor:
        self.calls += 1
        loss = F.mse_loss(output, batch.targets, reduction="sum" if self.loss_sum else "mean")
        return loss * math.inf if self.calls == self.blow_up_at else loss

    def learning_rate(self, epoch: int, index: int, step: Step[torch.Tensor], steps: int) -> float:
        return 0.05 / (1 + epoch)

    def warmup_batches(self) -> list[Batch]:
        generator = torch.Generator().manual_seed(2)
        return [
            Batch(
                inputs=(torch.randn(n, FEATURES, generator=generator),),
                targets=torch.randn(n, generator=generator),
                samples=n,
            )
            for n in pass_sizes(len(self.y), self.batch)
        ]

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module) -> tuple[dict[str, float], dict[str, Any]]:
        model.eval()
        loss = float(F.mse_loss(model(self.x).squeeze(1), self.y))
        return {"score": -loss, "loss": loss}, {"note": "whole set"}


def run(
    task: Regression, tmp_path: Path, epochs: int = 3, goal: Goal = NEVER
) -> tuple[str | Exception, Any]:
    writer = RecordWriter(tmp_path / "run", "run", rank=0, world_size=1)
    tracker = Tracker(writer, torch.device("cpu"), goal=goal, light=True, max_epochs=epochs)
    try:
        outcome: str | Exception = engine.train(task, tracker)
    except engine.Diverged as exc:
        tracker.fail("diverged", str(exc))
        outcome = exc
    finally:
        tracker.close()
    return outcome, read_rank_file(tmp_path / "run" / "rank-0.jsonl")


def options(**changes: Any) -> TrainingOptions:
    return TrainingOptions(light=True, data_dir=Path("."), max_epochs=3, **changes)


def test_every_step_is_recorded_with_its_phases_and_the_last_short_batch(
    tmp_path: Path, one_rank: None
) -> None:
    outcome, rank = run(Regression(options()), tmp_path)
    assert outcome == "max_epochs"
    steps = rank.of_kind("step")
    assert len(steps) == 3 * 5  # 70 rows in batches of 16: four full and one of 6
    assert [s["samples"] for s in steps[:5]] == [16, 16, 16, 16, 6]
    assert all(set(s["phases"]) == set(PHASES) for s in steps)
    # one rank: no collective runs, nothing is packed, communication is zero
    assert all(s["phases"]["communication"] == 0 for s in steps)
    assert all(s["phases"]["gradient_packing"] < s["phases"]["backward"] for s in steps)
    assert [s["lr"] for s in steps[::5]] == [0.05, 0.025, 0.05 / 3]
    assert steps[-1]["loss"] < steps[0]["loss"]
    evals = rank.of_kind("eval")
    assert [e["epoch"] for e in evals] == [0, 1, 2] and evals[0]["note"] == "whole set"
    start = next(e for e in rank.of_kind("event") if e["event"] == "start")
    assert start["compile"] == "off" and start["compiled"] is False and start["compile_s"] == 0
    finished = next(e for e in rank.of_kind("event") if e["event"] == "finished")
    assert finished["status"] == "max_epochs" and finished["recompilations"] == 0


def test_bf16_runs_forward_and_loss_under_bfloat16_autocast_and_still_trains(
    tmp_path: Path, one_rank: None
) -> None:
    class Watched(Regression):
        def forward(self, net: torch.nn.Module, batch: Batch) -> torch.Tensor:
            output = super().forward(net, batch)
            self.dtypes.add(output.dtype)
            return output

    task = Watched(options(precision="bf16"))
    task.dtypes = set()
    outcome, rank = run(task, tmp_path)
    assert outcome == "max_epochs" and task.dtypes == {torch.bfloat16}
    steps = rank.of_kind("step")
    assert len(steps) == 15 and steps[-1]["loss"] < steps[0]["loss"]


def test_a_non_finite_loss_stops_the_run_after_recording_that_step(
    tmp_path: Path, one_rank: None
) -> None:
    outcome, rank = run(Regression(options(), blow_up_at=3), tmp_path)
    assert isinstance(outcome, engine.Diverged) and "epoch 0, step 2" in str(outcome)
    losses = [s["loss"] for s in rank.of_kind("step")]
    assert len(losses) == 3 and losses[2] is None  # non-finite values are stored as null
    assert rank.events() == ["start", "diverged"]


def test_the_goal_stops_training_at_the_first_evaluation_that_meets_it(
    tmp_path: Path, one_rank: None
) -> None:
    always = Goal(metric="score", direction="max", threshold=-1e9, light_threshold=-1e9)
    outcome, rank = run(Regression(options()), tmp_path, goal=always)
    assert outcome == "goal_reached"
    assert len(rank.of_kind("eval")) == 1
    assert rank.events() == ["start", "goal_reached", "finished"]


def test_accumulated_passes_of_a_summed_loss_equal_one_pass_over_their_rows(
    tmp_path: Path, one_rank: None
) -> None:
    """Two passes of 8 rows, summed and divided by 16, make the update of one 16-row mean."""
    _, one = run(Regression(options(), rows=64, batch=16, batch_norm=False), tmp_path / "one")
    _, two = run(
        Regression(options(), rows=64, batch=8, passes=2, loss_sum=True, batch_norm=False),
        tmp_path / "two",
    )
    one_steps, two_steps = one.of_kind("step"), two.of_kind("step")
    assert len(one_steps) == len(two_steps) == 12
    assert [s["samples"] for s in two_steps] == [16] * 12
    for a, b in zip(one_steps, two_steps, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)  # the same rows, the same weights


def test_the_model_name_dispatch_is_the_spec_s_adapter() -> None:
    from scalebench.tasks import TrainingSpec, task_ids

    adapters = {}
    for task_id in task_ids():
        spec = get_task(task_id)
        if isinstance(spec, TrainingSpec):
            module, _, name = spec.adapter.partition(":")
            adapters[task_id] = getattr(__import__(module, fromlist=[name]), name)
    assert all(issubclass(a, TaskAdapter) for a in adapters.values())
    assert len(adapters) == 5


def test_pass_sizes_name_the_full_and_the_last_short_batch() -> None:
    assert pass_sizes(70, 16) == [6, 16]
    assert pass_sizes(64, 16) == [16]
    assert pass_sizes(10, 16) == [10]


def test_warm_up_leaves_weights_buffers_gradients_and_generators_bit_identical(
    tmp_path: Path, one_rank: None
) -> None:
    import random

    import numpy as np

    task = Regression(options(compile="on"))
    torch.manual_seed(0)
    model = task.build_model()
    before = SavedState.of(model)
    draws_before = (torch.rand(3), random.random(), np.random.random())
    before.restore(model)  # the draws above moved the generators: put them back

    compiled = compile_for_training(model, model, task, "on", backend="eager")
    assert compiled.compiled and compiled.compile_s > 0
    after = SavedState.of(model)
    for name, value in before.model.items():
        assert torch.equal(value, after.model[name]), name  # running mean and count included
    assert all(g is None for g in after.grads)
    assert torch.equal(before.torch_rng, after.torch_rng)
    assert before.python_rng == after.python_rng
    assert (torch.rand(3), random.random(), np.random.random())[1:] == draws_before[1:]


def test_a_warmed_up_compiled_run_compiles_nothing_during_training(
    tmp_path: Path, one_rank: None
) -> None:
    """The epoch's last batch (6 rows) was warmed up: zero recompilations in the timed run."""
    torch._dynamo.reset()
    task = Regression(options(compile="on"))
    graphs = graphs_compiled()
    model = task.build_model()
    compiled = compile_for_training(model, model, task, "on", backend="eager")
    assert graphs_compiled() > graphs
    net = compiled.net
    net.train()
    for step in task.steps(0):
        batch = task.load(step.passes[0])
        task.loss(task.forward(net, batch), batch).backward()
    assert compiled.finish_details() == {"recompilations": 0}


def test_compile_on_that_fails_is_refused_and_auto_falls_back_to_eager(
    tmp_path: Path, one_rank: None
) -> None:
    from workers.compile import CompileRefused

    def no_compiler(graph: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
        raise RuntimeError("no C++ compiler found")

    torch._dynamo.reset()
    task = Regression(options(compile="on"))
    model = task.build_model()
    with pytest.raises(CompileRefused, match=r"compile: 'on' .*no C\+\+ compiler"):
        compile_for_training(model, model, task, "on", backend=no_compiler)
    torch._dynamo.reset()
    task.spec = replace(SPEC, compile_pays_on=("cpu",))
    task.options = replace(task.options, light=False)  # auto compiles full runs only
    fallback = compile_for_training(model, model, task, "auto", backend=no_compiler)
    assert not fallback.compiled and fallback.net is model
    assert "no C++ compiler" in fallback.start_details()["compile_fallback"]
    task.options = replace(task.options, light=True)
    assert not compile_for_training(model, model, task, "auto").compiled  # too short to pay
    task.spec, task.options = replace(SPEC, compile_pays_on=()), replace(task.options, light=False)
    assert not compile_for_training(model, model, task, "auto").compiled  # pays nowhere: eager


def test_a_compiled_step_replays_cuda_graphs_on_a_gpu_where_its_spec_asks_only(
    tmp_path: Path, one_rank: None
) -> None:
    from workers.compile import captures_cuda_graphs

    graphed = [
        t
        for t in (
            "task1a-resnet20-cifar10",
            "task2a-logreg-epsilon",
            "task3a-awdlstm-wikitext2",
            "task4a-gnmt-wmt16",
            "task4b-transformer-wmt17",
        )
        if get_task(t).cuda_graphs
    ]
    assert graphed == ["task1a-resnet20-cifar10"]  # measured to pay on a GPU (Task 2a did not)
    task = Regression(options(compile="on"))
    task.spec = replace(SPEC, cuda_graphs=True)
    assert not captures_cuda_graphs(task)  # on a CPU: nothing to capture
    compiled = compile_for_training(task.build_model(), task.build_model(), task, "on", "eager")
    assert compiled.compiled and "cuda_graphs" not in compiled.start_details()
    replayed = replace(compiled, cuda_graphs=True)  # as on a GPU: the start record says so
    assert replayed.start_details()["cuda_graphs"] is True
    task.device = torch.device("cuda")  # only asked, never used: no GPU needed
    assert captures_cuda_graphs(task)
    task.spec = replace(SPEC, cuda_graphs=False)
    assert not captures_cuda_graphs(task)
