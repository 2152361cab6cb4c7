"""Task 3a: the spec against the text, the AWD-LSTM parts, the corpora, and a light run."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from test_task_specs import SPEC_TEXT, needs_text

from operators.local_launcher import launch_group
from scalebench.datasets import DataSetCorrupt, DataSetMissing
from scalebench.tasks import AWDLSTMConfig, LanguageModelSpec, get_task
from workers.data.text import EOS, load_wikitext2, markov_corpus, rank_columns
from workers.data.wikitext import prepare_wikitext2
from workers.language_model import AveragedWeights, regularised_loss, sequence_length
from workers.models.awd_lstm import AWDLSTM
from workers.records import read_run

TASK3A = "task3a-awdlstm-wikitext2"
SMALL = AWDLSTMConfig(
    embedding=8,
    hidden=16,
    layers=3,
    dropout_output=0.4,
    dropout_between=0.2,
    dropout_input=0.5,
    dropout_words=0.1,
    weight_drop=0.5,
)


def spec() -> LanguageModelSpec:
    task = get_task(TASK3A)
    assert isinstance(task, LanguageModelSpec)
    return task


@needs_text
def test_task3a_hyperparameters_follow_the_text() -> None:
    text = SPEC_TEXT.read_text(encoding="utf-8")
    part = text[text.index("We benchmark the AWD-LSTM") : text.index("We benchmark the GNMT")]
    task = spec()
    machines = re.search(r"k = ([\d, ]+) - minibatch size per worker", part)
    assert machines and task.world_sizes == tuple(int(k) for k in machines.group(1).split(","))
    assert task.batch_per_worker == int(re.search(r"b = (\d+)sentences", part).group(1))
    assert task.bptt == int(re.search(r"bptt_len = (\d+)", part).group(1))
    assert task.eval_seq_len == int(re.search(r"Validation sequence length: (\d+)", part).group(1))
    assert task.max_epochs == int(re.search(r"maximum epochs: (\d+)", part).group(1))
    assert task.optimizer.lr == float(re.search(r"\\eta = (\d+) \\times", part).group(1))
    assert task.optimizer.weight_decay == float(re.search(r"weight decay: ([\d.e-]+)", part)[1])
    assert task.clip_norm == float(re.search(r"clipped at ([\d.]+)", part).group(1))
    assert task.asgd_patience == int(re.search(r"stops improving for (\d+) epochs", part)[1])
    assert task.activation_alpha == float(re.search(r"\\alpha = ([\d.]+)", part).group(1))
    assert task.temporal_beta == float(re.search(r"\\beta = ([\d.]+)", part).group(1))
    assert "Bernouilli(0.05)" in part and task.short_bptt_probability == 0.05
    assert "Normal(bptt_len / (1 + X), 5)" in part and task.seq_len_std == 5.0
    assert "\\sqrt{num\\_workers}" in part and "num\\_workers * 3 epochs" in part
    assert task.schedule.warmup == "sqrt-k-over-3k"
    assert "Perplexity of 70 on validation set" in text and task.goal.threshold == 70.0
    assert "2088628 tokens" in part and task.data.train_tokens == 2_088_628
    assert "33278 words" in part and task.data.vocabulary == 33_278


def test_sequence_lengths_follow_the_rule() -> None:
    rng = random.Random(0)
    lengths = np.array([sequence_length(spec(), rng) for _ in range(20_000)])
    assert lengths.min() >= 5
    short = (lengths < 52).mean()  # halfway between the two centres, 35 and 70
    assert 0.04 < short < 0.06
    assert abs(np.median(lengths[lengths >= 52]) - 70) <= 1
    assert 4 < lengths[lengths >= 52].std() < 6


def test_the_full_model_has_the_published_size() -> None:
    model = AWDLSTM(33_278, AWDLSTMConfig())
    assert sum(p.numel() for p in model.parameters()) == 33_556_078  # "33M" for WikiText-2


def test_weights_are_tied_and_dropped_only_while_training() -> None:
    torch.manual_seed(0)
    model = AWDLSTM(50, SMALL)
    words = torch.randint(0, 50, (12, 3))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    model.train()
    first, _, raw, dropped = model(words, model.initial_hidden(3))
    second, _, _, _ = model(words, model.initial_hidden(3))
    assert not torch.allclose(first, second)  # new masks, including on weight_hh
    assert raw.shape == dropped.shape == (12, 3, 8)
    for name, p in model.named_parameters():  # the raw weights are never overwritten
        assert torch.equal(p, before[name]), name
    model.eval()
    a, _, _, _ = model(words, model.initial_hidden(3))
    b, _, _, _ = model(words, model.initial_hidden(3))
    assert torch.equal(a, b)
    first.sum().backward()
    assert model.embedding.weight.grad is not None  # it is also the decoder
    assert not hasattr(model, "decoder")


def test_weight_drop_reaches_the_recurrent_weights() -> None:
    torch.manual_seed(1)
    model = AWDLSTM(20, SMALL)
    model.train()
    logits, _, _, _ = model(torch.randint(0, 20, (6, 2)), model.initial_hidden(2))
    logits.sum().backward()
    grad = model.layers[0].weight_hh_l0.grad
    assert grad is not None and (grad == 0).float().mean() > 0.2  # dropped entries get none


def test_the_loss_adds_activation_and_temporal_regularisation() -> None:
    logits = torch.randn(5, 2, 7)
    targets = torch.randint(0, 7, (5, 2))
    raw = torch.randn(5, 2, 4)
    dropped = raw * 2
    total, cross_entropy = regularised_loss(logits, targets, raw, dropped, spec())
    ar = 2.0 * dropped.pow(2).mean()
    tar = 1.0 * (raw[1:] - raw[:-1]).pow(2).mean()
    assert total.item() == pytest.approx((cross_entropy + ar + tar).item())


def test_averaged_weights_are_used_for_evaluation_then_put_back() -> None:
    layer = torch.nn.Linear(3, 1)
    optimizer = torch.optim.ASGD(layer.parameters(), lr=0.1, t0=0, lambd=0.0)
    for _ in range(3):
        layer(torch.randn(4, 3)).pow(2).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    current = layer.weight.detach().clone()
    average = optimizer.state[layer.weight]["ax"].clone()
    with AveragedWeights(optimizer):
        assert torch.equal(layer.weight, average)
    assert torch.equal(layer.weight, current)


def test_each_rank_gets_its_own_contiguous_columns() -> None:
    stream = np.arange(100)
    part = rank_columns(stream, rank=1, world_size=2, columns=4)
    assert part.shape == (12, 4)
    assert part[0].tolist() == [50, 62, 74, 86] and part[1, 0] == 51  # columns run downwards


def test_wikitext_files_are_read_with_eos_and_the_training_vocabulary(tmp_path: Path) -> None:
    folder = tmp_path / "wikitext-2"
    folder.mkdir()
    (folder / "wiki.train.tokens").write_text(" = Title = \n\n the cat sat <unk> \n")
    (folder / "wiki.valid.tokens").write_text(" the dog sat \n")
    (folder / "wiki.test.tokens").write_text(" the cat \n")
    corpus = load_wikitext2(tmp_path)
    words = corpus.words
    assert words[:3] == ["=", "Title", EOS] and len(corpus.train) == 10
    assert [words[i] for i in corpus.valid] == ["the", "<unk>", "sat", EOS]  # dog is unknown
    counts = {"train": 10, "valid": 4}
    with pytest.raises(DataSetCorrupt, match="10 tokens, expected 2,088,628"):
        prepare_wikitext2(tmp_path)
    with pytest.raises(DataSetCorrupt, match="7 distinct training words, expected 33,278"):
        prepare_wikitext2(tmp_path, tokens=counts)
    assert prepare_wikitext2(tmp_path, tokens=counts, vocabulary=7).status == "verified"
    assert prepare_wikitext2(tmp_path, tokens=counts, vocabulary=7).status == "fresh"


def test_missing_wikitext_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataSetMissing, match=r"wiki\.train\.tokens"):
        load_wikitext2(tmp_path)


def test_the_light_corpus_is_deterministic_and_needs_context() -> None:
    a, b = markov_corpus(), markov_corpus()
    assert np.array_equal(a.train, b.train) and len(a.words) == 401
    counts = np.bincount(a.train, minlength=401) + 1.0
    unigram = np.exp(-np.mean(np.log((counts / counts.sum())[a.valid])))
    assert unigram > 100  # far above the light target of 6: context must be learnt


@pytest.mark.slow
def test_two_workers_train_an_epoch_and_both_see_its_perplexity(
    tmp_path: Path, light_env: dict[str, str]
) -> None:
    """One light epoch on two ranks: each evaluates the same validation perplexity, below the
    401 of a uniform guess among the light corpus's 401 words (about 210 after the epoch).
    The light target itself (6) is measured by benchmarks/light_targets.py."""
    run_dir = tmp_path / "k2"
    lines: list[str] = []
    result = launch_group(
        ["--task", TASK3A, "--light", "--results", str(run_dir), "--max-epochs", "1"],
        2,
        timeout_s=600,
        env=light_env,
        sink=lines.append,
    )
    assert result.status == "succeeded", "\n".join(lines[-20:])
    ranks = read_run(run_dir)
    seen = []
    for rank in ranks:
        assert rank.events() == ["start", "finished"]
        (evaluation,) = rank.of_kind("eval")
        seen.append(evaluation["metrics"]["perplexity"])
        steps = rank.of_kind("step")
        assert steps and all(s["phases"]["communication"] > 0 for s in steps)
    assert seen[0] == seen[1] and 1 < seen[0] < 401
