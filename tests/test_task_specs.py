"""The task registry against the benchmark-task text it was written from.

The text is read from ``../shared/seeds/`` beside the repository, or from the
file ``SCALEBENCH_SPEC_TEXT`` names. Without it the tests that read it are
skipped, unless ``SCALEBENCH_REQUIRE_SPEC_TEXT=1`` (as in CI), which makes them
fail instead.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

import pytest

from scalebench.tasks import (
    TASKS,
    AllReduceSpec,
    LanguageModelSpec,
    TabularData,
    TextData,
    TrainingSpec,
    TranslationSpec,
    get_task,
)

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


def section(text: str, start: str, end: str) -> str:
    """The part of ``text`` from ``start`` up to ``end``."""
    begin = text.index(start)
    return text[begin : text.index(end, begin)]


def find(pattern: str, text: str) -> re.Match[str]:
    """The first match of ``pattern``; fails, naming it, when the text no longer has it."""
    match = re.search(pattern, text)
    assert match, f"the text no longer matches {pattern!r}"
    return match


def world_sizes(match: re.Match[str]) -> tuple[int, ...]:
    return tuple(int(k) for k in match.group(1).split(","))


@pytest.fixture(scope="module")
def task0_text(spec_text: str) -> str:
    return section(
        spec_text, "benchmarking the communication backends", "Image classification is one of"
    )


@pytest.fixture(scope="module")
def task1_text(spec_text: str) -> str:
    return section(spec_text, "Image classification is one of", "We benchmark Logistic Regression")


@pytest.fixture(scope="module")
def task2a_text(spec_text: str) -> str:
    return section(spec_text, "We benchmark Logistic Regression", "We benchmark the AWD-LSTM")


@pytest.fixture(scope="module")
def task3a_text(spec_text: str) -> str:
    return section(spec_text, "We benchmark the AWD-LSTM", "We benchmark the GNMT")


@pytest.fixture(scope="module")
def task4a_text(spec_text: str) -> str:
    return section(spec_text, "We benchmark the GNMT", "We benchmark the Transformer")


@pytest.fixture(scope="module")
def task4b_text(spec_text: str) -> str:
    return section(
        spec_text, "We benchmark the Transformer", "Here we present the results for scaling tasks"
    )


# The results part has one block per task, each opening with its "- Frameworks" list,
# in the order the tasks are described.
RESULT_BLOCKS = (
    "task0-allreduce",
    "task1a-resnet20-cifar10",
    "task2a-logreg-epsilon",
    "task3a-awdlstm-wikitext2",
    "task4a-gnmt-wmt16",
    "task4b-transformer-wmt17",
)


@pytest.fixture(scope="module")
def results_text(spec_text: str) -> dict[str, str]:
    """Each task's block of the published results, by task id."""
    results = spec_text[spec_text.index("Here we present the results for scaling tasks") :]
    blocks = re.split(r"^- Frameworks$", results, flags=re.MULTILINE)[1:]
    assert len(blocks) == len(RESULT_BLOCKS), "the results part no longer has a block per task"
    return dict(zip(RESULT_BLOCKS, blocks, strict=True))


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
def test_task1a_goal_matches_the_published_results(results_text: dict[str, str]) -> None:
    spec = get_task("task1a-resnet20-cifar10")
    assert isinstance(spec, TrainingSpec)
    target = find(r"Time to Accuracy of (\d+)% on validation set", results_text[spec.id])
    assert spec.goal.threshold == float(target.group(1)) and spec.goal.direction == "max"


@needs_text
def test_task2a_hyperparameters_match_the_text(task2a_text: str) -> None:
    spec = get_task("task2a-logreg-epsilon")
    assert isinstance(spec, TrainingSpec) and isinstance(spec.data, TabularData)
    assert "Logistic Regression with L2 regularization" in task2a_text
    assert spec.model == "logistic-regression"
    assert "libsvm.py epsilon" in task2a_text and spec.data.name == "epsilon"
    text = task2a_text
    assert spec.world_sizes == world_sizes(find(r"k = ([\d, ]+) - minibatch size per worker", text))
    batch = find(r"b = (\d+) - maximum epochs: (\d+)", text)
    assert spec.batch_per_worker == int(batch.group(1))
    assert spec.max_epochs == int(batch.group(2))
    assert spec.optimizer.lr == float(find(r"learning rate \\eta : ([\d.]+)", text).group(1))
    patience = find(r"plateau in the validation loss is reached for (\d+) consecutive epochs", text)
    assert spec.schedule.plateau_patience == int(patience.group(1))
    # the rate is η × k from the first step: no warm-up
    find(r"scaled from \\eta to \\eta \\times k for k workers", text)
    assert spec.schedule.warmup == "scale-k"
    optimizer = find(
        r"CentralizedSGD\(momentum=([\d.]+), nesterov=(\w+), weight_decay=([\d.e-]+), "
        r"dampening=([\d.]+)",
        text,
    )
    momentum, nesterov, weight_decay, dampening = optimizer.groups()
    assert spec.optimizer.name == "sgd"
    assert spec.optimizer.momentum == float(momentum)
    assert spec.optimizer.nesterov == (nesterov == "True")
    assert spec.optimizer.weight_decay == float(weight_decay)
    assert spec.optimizer.dampening == float(dampening)
    regularisation = find(r"regularization parameters: L1=([\d.]+), L2 = ([\d.]+)", text)
    assert getattr(spec, "l1", 0.0) == float(regularisation.group(1))  # the spec has no L1 term
    assert spec.l2 == float(regularisation.group(2))


@needs_text
def test_task2a_goal_matches_the_published_results(results_text: dict[str, str]) -> None:
    """The block's "Metric" line repeats Task 1a's 80 %; its first figure, the speedup to
    the target, gives the task's own: 89 % test accuracy."""
    spec = get_task("task2a-logreg-epsilon")
    assert isinstance(spec, TrainingSpec)
    target = find(
        r"speedup of time to accuracy, for test accuracy of (\d+)%", results_text[spec.id]
    )
    assert spec.goal.metric == "accuracy" and spec.goal.direction == "max"
    assert spec.goal.threshold == float(target.group(1))


@needs_text
def test_task3a_hyperparameters_match_the_text(task3a_text: str) -> None:
    spec = get_task("task3a-awdlstm-wikitext2")
    assert isinstance(spec, LanguageModelSpec) and isinstance(spec.data, TextData)
    text = task3a_text
    assert "the AWD-LSTM model" in text and spec.model == "awd-lstm"
    assert "The Wikitext2 dataset" in text and spec.data.name == "wikitext2"
    corpus = find(
        r"train set contains (\d+) tokens, and the validation set (\d+) tokens\. "
        r"The vocabulary is made up of (\d+) words",
        text,
    )
    assert spec.data.train_tokens == int(corpus.group(1))
    assert spec.data.valid_tokens == int(corpus.group(2))
    assert spec.data.vocabulary == int(corpus.group(3))
    assert spec.world_sizes == world_sizes(find(r"k = ([\d, ]+) - minibatch size per worker", text))
    assert spec.batch_per_worker == int(find(r"b = (\d+)sentences", text).group(1))
    assert spec.bptt == int(find(r"bptt_len = (\d+)", text).group(1))
    lengths = find(
        r"X ~ Bernouilli\(([\d.]+)\), seq_len = max\(min_seq_len, "
        r"Normal\(bptt_len / \(1 \+ X\), ([\d.]+)\)\)",
        text,
    )
    assert spec.short_bptt_probability == float(lengths.group(1))
    assert spec.seq_len_std == float(lengths.group(2))
    assert spec.eval_seq_len == int(find(r"Validation sequence length: (\d+)", text).group(1))
    assert spec.max_epochs == int(find(r"maximum epochs: (\d+)", text).group(1))
    lr = find(
        r"learning rate per batch \\eta = ([\d.]+) \\times \\frac\{seq\\_len\}\{bptt\\_len\}", text
    )
    assert spec.optimizer.name == "sgd" and spec.optimizer.lr == float(lr.group(1))
    assert spec.optimizer.weight_decay == float(find(r"weight decay: ([\d.e-]+)", text).group(1))
    assert spec.clip_norm == float(find(r"Gradient norm is clipped at ([\d.]+)", text).group(1))
    asgd = find(
        r"Perplexity stops improving for (\d+) epochs, optimizer is switched to Averaged SGD", text
    )
    assert spec.asgd_patience == int(asgd.group(1))
    alpha = find(r"Activation regularization \\alpha = ([\d.]+)", text)
    assert spec.activation_alpha == float(alpha.group(1))
    beta = find(r"Temporal Activation reg\. \\beta = ([\d.]+)", text)
    assert spec.temporal_beta == float(beta.group(1))


@needs_text
def test_task3a_warms_up_to_sqrt_k_times_the_rate_over_the_texts_epochs(task3a_text: str) -> None:
    """Linear warm-up from η to η × √k over num_workers × 3 epochs."""
    from workers.schedules import LearningRate

    spec = get_task("task3a-awdlstm-wikitext2")
    assert isinstance(spec, LanguageModelSpec)
    find(
        r"linear warm-up to scale the learning rate \\eta to \\eta \\times \\sqrt\{num\\_workers\}",
        task3a_text,
    )
    per_worker = int(find(r"warm-up period of num\\_workers \* (\d+) epochs", task3a_text).group(1))
    assert spec.schedule.warmup == f"sqrt-k-over-{per_worker}k"
    lr = spec.optimizer.lr
    for k in spec.world_sizes:
        schedule = LearningRate(spec.schedule, lr, k)
        end = per_worker * k
        assert schedule.at(0.0) == lr
        assert schedule.at(end / 2) == pytest.approx((lr + lr * math.sqrt(k)) / 2)
        assert schedule.at(end) == pytest.approx(lr * math.sqrt(k))


@needs_text
def test_task4a_hyperparameters_match_the_text(task4a_text: str) -> None:
    spec = get_task("task4a-gnmt-wmt16")
    assert isinstance(spec, TranslationSpec)
    text = task4a_text
    assert "the GNMT Machine Translation Model" in text and spec.model == "gnmt"
    assert "The WMT-16 dataset" in text and "English-German translation" in text
    assert (spec.data.name, spec.data.source, spec.data.target) == ("wmt16-en-de", "en", "de")
    lengths = find(
        r"trained on sentences of maximum length (\d+) tokens, "
        r"and tested on sentences of max length (\d+) tokens",
        text,
    )
    assert spec.max_length == int(lengths.group(1))
    assert spec.test_max_length == int(lengths.group(2))
    assert spec.world_sizes == world_sizes(find(r"k = ([\d, ]+) - global minibatch size", text))
    batch = find(r"b = (\d+)sentences \[1\] - maximum epochs: (\d+)", text)
    assert spec.batch_unit == "sentences" and spec.global_batch == int(batch.group(1))
    assert spec.max_epochs == int(batch.group(2))
    base_lr = find(r"base_learning_rate = ([\d.e-]+)- decay", text)  # its start: the warm-up test
    assert spec.optimizer.lr == float(base_lr.group(1))
    decay = find(
        r"decay by ([\d.]+) after having gone through (\d+)% of total training, "
        r"and then for every (\d+)% for maximum (\d+) times",
        text,
    )
    assert spec.decay.factor == float(decay.group(1))
    assert spec.decay.start == int(decay.group(2)) / 100
    assert spec.decay.interval == int(decay.group(3)) / 100
    assert spec.decay.max_decays == int(decay.group(4))
    warmup = find(
        r"We use (\d+) warmup steps, where the learning rate is exponentially increased", text
    )
    assert spec.lr_schedule == "gnmt" and spec.warmup_steps == int(warmup.group(1))
    adam = find(
        r"Adam\(betas=\(([\d.]+), ([\d.]+)\), eps=([\d.e-]+), weight_decay=([\d.]+), "
        r"amsgrad=(\w+)\)",
        text,
    )
    assert spec.optimizer.name == "adam"
    assert spec.optimizer.betas == (float(adam.group(1)), float(adam.group(2)))
    assert spec.optimizer.eps == float(adam.group(3))
    assert spec.optimizer.weight_decay == float(adam.group(4))
    assert adam.group(5) == "False"  # plain Adam: the spec has no AMSGrad
    assert spec.clip_norm == float(find(r"gradient clipping: max norm of ([\d.]+)", text).group(1))
    scale = find(
        r"initial_scale = 2\*\*(\d+)scale_factor = ([\d.]+)\(downscale and upscale\)"
        r"max_scale = 2\*\*(\d+)scale_window = (\d+)",
        text,
    )
    assert spec.loss_scale.initial == 2 ** int(scale.group(1))
    assert spec.loss_scale.factor == float(scale.group(2))
    assert spec.loss_scale.max_scale == 2 ** int(scale.group(3))
    assert spec.loss_scale.window == int(scale.group(4))


@needs_text
def test_task4a_warms_up_exponentially_from_the_texts_initial_rate(task4a_text: str) -> None:
    from workers.translation import learning_rate

    spec = get_task("task4a-gnmt-wmt16")
    assert isinstance(spec, TranslationSpec)
    rates = find(r"initial_learning_rate = ([\d.]+)base_learning_rate = ([\d.e-]+)-", task4a_text)
    initial, base = float(rates.group(1)), float(rates.group(2))
    total = spec.max_epochs * 1_000
    warmup = spec.warmup_steps
    assert learning_rate(spec, 0, total, light=False) == initial
    halfway = learning_rate(spec, warmup // 2, total, light=False)
    assert initial < halfway < (initial + base) / 2  # exponential: below the straight line
    assert learning_rate(spec, warmup, total, light=False) == pytest.approx(base)


@needs_text
def test_task4b_hyperparameters_match_the_text(task4b_text: str) -> None:
    spec = get_task("task4b-transformer-wmt17")
    assert isinstance(spec, TranslationSpec)
    text = task4b_text
    assert "the Transformer Model" in text and spec.model == "transformer"
    assert "The WMT-17 dataset" in text and "English-German translation" in text
    assert (spec.data.name, spec.data.source, spec.data.target) == ("wmt17-en-de", "en", "de")
    length = find(r"trained and tested on sentences of maximum length (\d+) tokens", text)
    assert spec.max_length == spec.test_max_length == int(length.group(1))
    assert spec.world_sizes == world_sizes(find(r"k = ([\d, ]+) - global minibatch size", text))
    batch = find(r"b = 2\*\*(\d+)tokens \[2\]\. - maximum epochs: (\d+)", text)
    assert spec.batch_unit == "tokens" and spec.global_batch == 2 ** int(batch.group(1))
    assert spec.max_epochs == int(batch.group(2))
    base_lr = find(r"base_learning_rate = ([\d.e-]+)- decay: We decay by \\sqrt\{N\}", text)
    assert spec.optimizer.lr == float(base_lr.group(1))  # its start and decay: the warm-up test
    warmup = find(r"We use (\d+) warmup steps, where the learning rate is linearly increased", text)
    assert spec.lr_schedule == "inverse-sqrt" and spec.warmup_steps == int(warmup.group(1))
    adam = find(
        r"Adam\(betas=\(([\d.]+), ([\d.]+)\), eps=([\d.e-]+), weight_decay=([\d.]+), "
        r"amsgrad=(\w+)\)",
        text,
    )
    assert spec.optimizer.name == "adam"
    assert spec.optimizer.betas == (float(adam.group(1)), float(adam.group(2)))
    assert spec.optimizer.eps == float(adam.group(3))
    assert spec.optimizer.weight_decay == float(adam.group(4))
    assert adam.group(5) == "False"  # plain Adam: the spec has no AMSGrad
    assert "clip" not in text.lower() and spec.clip_norm is None  # the text clips nothing
    scale = find(
        r"initial_scale = 2\*\*(\d+)scale_factor = ([\d.]+)\(downscale and upscale\)"
        r"scale_window = (\d+)",
        text,
    )
    assert spec.loss_scale.initial == 2 ** int(scale.group(1))
    assert spec.loss_scale.factor == float(scale.group(2))
    assert spec.loss_scale.window == int(scale.group(3))
    assert "max_scale" not in text and spec.loss_scale.max_scale is None


@needs_text
def test_task4b_passes_follow_the_texts_bs_max_and_update_freq(task4b_text: str) -> None:
    """update_freq = max(1, b / (bs_max × k)) passes of bs = b / (k × update_freq) tokens."""
    spec = get_task("task4b-transformer-wmt17")
    assert isinstance(spec, TranslationSpec)
    text = task4b_text
    bs_max = int(find(r"max\(bs\) = bs_max = (\d+)", text).group(1))
    assert spec.max_batch_per_worker == bs_max
    find(r"update_freq = max\(1, b / \(bs_max \* world_size\)\)", text)
    find(r"bs = b / \(world_size \* update_freq\)", text)
    b = spec.global_batch
    for k in spec.world_sizes:
        update_freq = max(1, b / (bs_max * k))
        assert spec.update_freq(k, light=False) == update_freq, f"k = {k}"
        assert spec.batch_per_pass(k, light=False) == b / (k * update_freq), f"k = {k}"


@needs_text
def test_task4b_warms_up_linearly_from_the_texts_initial_rate_then_decays_by_sqrt_n(
    task4b_text: str,
) -> None:
    from workers.translation import learning_rate

    spec = get_task("task4b-transformer-wmt17")
    assert isinstance(spec, TranslationSpec)
    rates = find(r"initial_learning_rate = ([\d.]+)base_learning_rate = ([\d.e-]+)-", task4b_text)
    initial, base = float(rates.group(1)), float(rates.group(2))
    total = spec.max_epochs * 1_000
    warmup = spec.warmup_steps
    assert learning_rate(spec, 0, total, light=False) == initial
    halfway = learning_rate(spec, warmup // 2, total, light=False)
    assert halfway == pytest.approx((initial + base) / 2)
    assert learning_rate(spec, warmup, total, light=False) == pytest.approx(base)
    find(r"We decay by \\sqrt\{N\} after warmup", task4b_text)  # after warm-up: as 1/√N
    assert learning_rate(spec, 4 * warmup, total, light=False) == pytest.approx(base / 2)


GOALS = {  # task: (its block's sentence naming the target, metric, direction)
    "task3a-awdlstm-wikitext2": (
        r"Time to Perplexity of (\d+) on validation set",
        "perplexity",
        "min",
    ),
    "task4a-gnmt-wmt16": (r"Time to BLEU-Score of ([\d.]+) on test set", "bleu", "max"),
    "task4b-transformer-wmt17": (r"Time to BLEU-Score of ([\d.]+) on test set", "bleu", "max"),
}


@pytest.mark.parametrize("task_id", list(GOALS))
@needs_text
def test_goal_matches_the_published_results(task_id: str, results_text: dict[str, str]) -> None:
    spec = get_task(task_id)
    assert isinstance(spec, TrainingSpec)
    sentence, metric, direction = GOALS[task_id]
    target = find(sentence, results_text[task_id])
    assert spec.goal.metric == metric and spec.goal.direction == direction
    assert spec.goal.threshold == float(target.group(1))


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
    from cli.tasks import cmd_tasks

    spec = get_task("task0-allreduce")
    assert isinstance(spec, AllReduceSpec) and spec.points == 80
    sizes = spec.sizes(light=False)
    assert len(sizes) == 77 and sizes == sorted(set(sizes))
    assert (sizes[0], sizes[-1]) == (1, 10**8)
    cmd_tasks(None)  # type: ignore[arg-type]
    assert "77 sizes × 100 repetitions" in capsys.readouterr().out
