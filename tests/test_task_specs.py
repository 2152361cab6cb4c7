"""The task registry against the benchmark-task text it was written from.

The text is read from ``../shared/seeds/`` beside the repository, or from the
file ``SCALEBENCH_SPEC_TEXT`` names. Without it the tests that read it are
skipped, unless ``SCALEBENCH_REQUIRE_SPEC_TEXT=1`` (as in CI), which makes them
fail instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import pytest

from scalebench.tasks import TASKS, AllReduceSpec, TrainingSpec, get_task

REPO = Path(__file__).resolve().parents[1]
SPEC_TEXT = Path(
    os.environ.get("SCALEBENCH_SPEC_TEXT")
    or REPO.parent / "shared" / "seeds" / "000_fefdd5ed8ba7d1c9.txt"
)
REQUIRE_TEXT = os.environ.get("SCALEBENCH_REQUIRE_SPEC_TEXT") == "1"
MISSING = f"benchmark-task text not found at {SPEC_TEXT} (set SCALEBENCH_SPEC_TEXT)"
MISSING_REQUIRED = f"{MISSING}; SCALEBENCH_REQUIRE_SPEC_TEXT=1 requires it"

Test = TypeVar("Test", bound=Callable[..., object])


def needs_text(test: Test) -> Test:
    """``test`` as is when the text is there; else skipped, or failed when
    ``SCALEBENCH_REQUIRE_SPEC_TEXT=1`` (without asking for its fixtures, which read
    the text)."""
    if SPEC_TEXT.is_file():
        return test
    if not REQUIRE_TEXT:
        return pytest.mark.skip(reason=MISSING)(test)

    def missing_text() -> None:
        pytest.fail(MISSING_REQUIRED, pytrace=False)

    missing_text.__name__ = test.__name__
    missing_text.__qualname__ = test.__qualname__
    missing_text.__doc__ = test.__doc__
    return cast(Test, missing_text)


def read_spec_text() -> str:
    """The whole text; skips or fails the asking test, as ``needs_text`` does, when it
    is missing."""
    if not SPEC_TEXT.is_file():
        if REQUIRE_TEXT:
            pytest.fail(MISSING_REQUIRED, pytrace=False)
        pytest.skip(MISSING)
    return SPEC_TEXT.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def spec_text() -> str:
    return read_spec_text()


@pytest.fixture(scope="module")
def task1_text(spec_text: str) -> str:
    text = spec_text
    start = text.index("Image classification is one of")
    end = text.index("We benchmark Logistic Regression")
    return text[start:end]


@pytest.fixture(scope="module")
def task0_text(spec_text: str) -> str:
    text = spec_text
    start = text.index("benchmarking the communication backends")
    return text[start : text.index("Image classification is one of")]


@needs_text
def test_task0_sizes_and_repetitions(task0_text: str) -> None:
    spec = get_task("task0-allreduce")
    assert isinstance(spec, AllReduceSpec)
    logspace = re.search(r"np\.logspace\((\d+), (\d+), num=(\d+)\)", task0_text)
    assert logspace, "the text no longer names the sizes"
    low, high, num = (int(g) for g in logspace.groups())
    assert (spec.log10_min, spec.log10_max, spec.points) == (low, high, num)
    repetitions = re.search(r"(\d+) times for each tensor size", task0_text)
    assert repetitions and spec.repetitions == int(repetitions.group(1))


@needs_text
def test_task1a_hyperparameters(task1_text: str) -> None:
    spec = get_task("task1a-resnet20-cifar10")
    assert isinstance(spec, TrainingSpec)
    machines = re.search(r"k = ([\d, ]+) - minibatch size per worker", task1_text)
    assert machines
    assert spec.world_sizes == tuple(int(k) for k in machines.group(1).split(","))
    assert spec.batch_per_worker == int(re.search(r"b = (\d+)", task1_text).group(1))
    assert spec.max_epochs == int(re.search(r"maximum epochs: (\d+)", task1_text).group(1))
    lr = re.search(r"learning rate \\eta : ([\d.]+)", task1_text)
    assert lr and spec.optimizer.lr == float(lr.group(1))
    optimizer = re.search(
        r"CentralizedSGD\(momentum=([\d.]+), nesterov=(\w+), weight_decay=([\de.-]+), "
        r"dampening=([\d.]+)",
        task1_text,
    )
    assert optimizer
    momentum, nesterov, weight_decay, dampening = optimizer.groups()
    assert spec.optimizer.momentum == float(momentum)
    assert spec.optimizer.nesterov == (nesterov == "True")
    assert spec.optimizer.weight_decay == float(weight_decay)
    assert spec.optimizer.dampening == float(dampening)
    patience = re.search(
        r"plateau in the validation loss is reached for (\d+) consecutive", task1_text
    )
    assert patience and spec.schedule.plateau_patience == int(patience.group(1))
    assert "log_{2}(num\\_workers)" in task1_text and spec.schedule.warmup == "linear-log2k"
    assert "ResNet-20" in task1_text and spec.model == "resnet20"
    assert "CIFAR-10" in task1_text and spec.data.name == "cifar10"
    assert "10,000 images" in task1_text and "50,000 images are training" in task1_text


@needs_text
def test_task1a_goal_matches_the_published_results(spec_text: str) -> None:
    text = spec_text
    spec = get_task("task1a-resnet20-cifar10")
    assert "Time to Accuracy of 80% on validation set" in text
    assert spec.goal.threshold == 80.0 and spec.goal.direction == "max"


def test_every_id_is_registered_once() -> None:
    assert set(TASKS) == {
        "task0-allreduce",
        "task1a-resnet20-cifar10",
        "task2a-logreg-epsilon",
        "task3a-awdlstm-wikitext2",
        "task4a-gnmt-wmt16",
        "task4b-transformer-wmt17",
    }
    for task_id, spec in TASKS.items():
        assert spec.id == task_id


def test_unknown_task_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="task0-allreduce"):
        get_task("task9-nope")


def test_task0_counts_the_sizes_it_measures(capsys: pytest.CaptureFixture[str]) -> None:
    """80 log-spaced points rounded to whole elements give 77 distinct sizes, and the task
    list says 77."""
    from cli.main import cmd_tasks

    spec = get_task("task0-allreduce")
    assert isinstance(spec, AllReduceSpec) and spec.points == 80
    sizes = spec.sizes(light=False)
    assert len(sizes) == 77 and sizes == sorted(set(sizes))
    assert (sizes[0], sizes[-1]) == (1, 10**8)
    cmd_tasks(None)  # type: ignore[arg-type]
    assert "77 sizes × 100 repetitions" in capsys.readouterr().out
