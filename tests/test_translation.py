"""Task 4b: the spec against the text, batching, the Transformer, BPE preparation; light runs
of both translation tasks."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from test_task_specs import SPEC_TEXT, needs_text

from operators.local_launcher import launch_group
from scalebench.tasks import TransformerConfig, TranslationSpec, get_task
from workers.data.translation import PAD, synthetic_pairs, token_batches
from workers.models.transformer import Transformer
from workers.records import read_run

TASK4B = "task4b-transformer-wmt17"
TINY = TransformerConfig(
    model=16, heads=2, feed_forward=32, encoder_layers=1, decoder_layers=1, dropout=0.0
)


def spec() -> TranslationSpec:
    task = get_task(TASK4B)
    assert isinstance(task, TranslationSpec)
    return task


@needs_text
def test_task4b_hyperparameters_follow_the_text() -> None:
    text = SPEC_TEXT.read_text(encoding="utf-8")
    part = text[text.index("We benchmark the Transformer Model") :]
    part = part[: part.index("Here we present the results")]
    task = spec()
    machines = re.search(r"k = ([\d, ]+) - global minibatch size", part)
    assert machines and task.world_sizes == tuple(int(k) for k in machines.group(1).split(","))
    assert task.batch_unit == "tokens"
    assert task.global_batch == 2 ** int(re.search(r"b = 2\*\*(\d+)tokens", part).group(1))
    assert task.max_epochs == int(re.search(r"maximum epochs: (\d+)", part).group(1))
    assert task.optimizer.lr == float(re.search(r"base_learning_rate = (\d\.\d+e-\d)", part)[1])
    assert task.warmup_steps == int(re.search(r"We use (\d+) warmup steps", part).group(1))
    assert "Adam(betas=(0.9, 0.98), eps=1e-9" in part
    assert task.optimizer.betas == (0.9, 0.98) and task.optimizer.eps == 1e-9
    assert task.loss_scale.initial == 2 ** int(re.search(r"initial_scale = 2\*\*(\d+)", part)[1])
    assert task.loss_scale.window == int(re.search(r"scale_window = (\d+)", part).group(1))
    assert task.max_batch_per_worker == int(re.search(r"bs_max = (\d+)", part).group(1))
    assert task.max_length == int(re.search(r"maximum length (\d+) tokens", part).group(1))
    assert "WMT-17" in part and task.data.name == "wmt17-en-de"


# The benchmark's second published text: it keeps Task 4a's batch figures.
SECOND_TEXT = SPEC_TEXT.with_name("001_23da3aea731e972a.txt")


@pytest.mark.skipif(not SECOND_TEXT.is_file(), reason="the published task text is not here")
def test_task4a_passes_hold_the_texts_largest_batch() -> None:
    text = SECOND_TEXT.read_text(encoding="utf-8")
    part = text[: text.index("4.b Transformer")]  # Task 4a's section ends here
    gnmt = get_task("task4a-gnmt-wmt16")
    assert isinstance(gnmt, TranslationSpec)
    bs_max = int(re.findall(r"bs_max = (\d+)", part)[-1])
    assert gnmt.max_batch_per_worker == bs_max == 128
    # update_freq = max(1, b / (bs_max × k)); bs = b / (k × update_freq)
    assert (gnmt.update_freq(1, False), gnmt.batch_per_pass(1, False)) == (16, 128)
    assert (gnmt.update_freq(16, False), gnmt.batch_per_pass(16, False)) == (1, 128)


def test_update_frequency_and_tokens_per_pass_follow_the_rule() -> None:
    task = spec()
    # update_freq = max(1, b / (bs_max × k)); bs = b / (k × update_freq)
    assert (task.update_freq(1, False), task.batch_per_pass(1, False)) == (16, 8192)
    assert (task.update_freq(4, False), task.batch_per_pass(4, False)) == (4, 8192)
    assert (task.update_freq(32, False), task.batch_per_pass(32, False)) == (1, 4096)


def test_the_light_pair_translates_every_word_and_puts_the_verb_last() -> None:
    pairs = synthetic_pairs(200, seed=3)
    assert pairs == synthetic_pairs(200, seed=3)
    verb_translations: dict[str, set[str]] = {}
    for english, german in pairs:
        en, de = english.split(), german.split()
        assert len(en) == len(de) and not set(en) & set(de)  # no word is copied
        [verb] = [w for w in en if w.startswith("v")]
        verb_translations.setdefault(verb, set()).add(de[-1])
    assert all(len(t) == 1 for t in verb_translations.values())  # one dictionary, verb-final
    # "det adj noun" becomes "det noun adj": the German word order differs from the English
    assert any(e.split()[1].startswith("a") for e, _ in pairs)
    assert sum(e.split() != g.split() for e, g in pairs) == len(pairs)


def test_token_batches_stay_under_the_budget_and_cover_every_sentence() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=500)
    order = rng.permutation(500)
    batches = token_batches(lengths, 512, order)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    for batch in batches:
        assert lengths[batch].max() * len(batch) <= 512


def test_the_decoder_sees_no_future_and_the_embedding_is_shared() -> None:
    torch.manual_seed(0)
    model = Transformer(30, TINY).eval()
    source = torch.tensor([[5, 6, 7, PAD]])
    target = torch.tensor([[1, 8, 9, 10]])
    changed = target.clone()
    changed[0, 3] = 11
    a, b = model(source, target), model(source, changed)
    assert torch.allclose(a[0, :3], b[0, :3], atol=1e-5)  # earlier positions unaffected
    assert not torch.allclose(a[0, 3], b[0, 3])
    parameters = dict(model.named_parameters())
    assert "embedding.weight" in parameters and not any(
        "out" in n and "proj" not in n for n in parameters if "linear" in n
    )
    a.sum().backward()
    assert model.embedding.weight.grad is not None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task_id", "unit", "per_pass"),
    [(TASK4B, "tokens", 2048), ("task4a-gnmt-wmt16", "sentences", 64)],
)
def test_two_workers_train_an_epoch_and_score_it_in_bleu(
    task_id: str, unit: str, per_pass: int, tmp_path: Path, light_env: dict[str, str]
) -> None:
    """One light epoch on two ranks: both score the same BLEU with sacrebleu's signature,
    in fp32 on a CPU, in the task's batch unit. The light target (BLEU 20) is measured by
    benchmarks/light_targets.py."""
    run_dir = tmp_path / "k2"
    lines: list[str] = []
    result = launch_group(
        ["--task", task_id, "--light", "--results", str(run_dir), "--max-epochs", "1"],
        2,
        timeout_s=900,
        env=light_env,
        sink=lines.append,
    )
    assert result.status == "succeeded", "\n".join(lines[-20:])
    scores = []
    for rank in read_run(run_dir):
        (evaluation,) = rank.of_kind("eval")
        scores.append(evaluation["metrics"]["bleu"])
        assert evaluation["bleu_signature"].startswith("nrefs:1|case:mixed")
        start = next(e for e in rank.of_kind("event") if e["event"] == "start")
        assert start["precision"] == "fp32"  # a CPU run says it did not use fp16
        assert (start["batch_unit"], start["update_freq"], start["batch_per_pass"]) == (
            unit,
            1,
            per_pass,
        )
    assert scores[0] == scores[1] and 0 <= scores[0] <= 100


def test_the_big_transformer_has_the_parameters_its_shapes_give() -> None:
    with torch.device("meta"):  # the full model's shapes, without its memory
        model = Transformer(32_000, TransformerConfig())
    d, f, layers = 1024, 4096, 6
    attention = 4 * d * d + 4 * d  # query, key, value and output projections with biases
    feed_forward = 2 * d * f + f + d
    encoder_layer = attention + feed_forward + 2 * 2 * d  # two layer norms
    decoder_layer = 2 * attention + feed_forward + 3 * 2 * d
    expected = 32_000 * d + layers * (encoder_layer + decoder_layer) + 2 * 2 * d  # final norms
    assert sum(p.numel() for p in model.parameters()) == expected
    assert 205e6 < expected < 215e6  # the paper's "big" model: 213M with its 37k vocabulary


@pytest.mark.parametrize(
    ("task_id", "limit"), [("task4a-gnmt-wmt16", 150), ("task4b-transformer-wmt17", 80)]
)
def test_test_sentences_longer_than_the_texts_limit_are_left_out_and_counted(
    task_id: str, limit: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, one_rank: None
) -> None:
    from dataclasses import replace

    import workers.translation as translation
    from workers.adapter import TrainingOptions

    spec = get_task(task_id)
    assert isinstance(spec, TranslationSpec) and spec.test_max_length == limit
    real = translation.load_bitext

    def with_long_test_sentences(name: str, data_dir: Path) -> translation.Bitext:
        bitext = real(name, data_dir)
        longest = [np.ones(limit, dtype=np.int64), np.ones(limit + 1, dtype=np.int64)]
        return replace(
            bitext,
            test_source=[*bitext.test_source, *longest],
            test_references=[*bitext.test_references, "at the limit", "over it"],
        )

    monkeypatch.setattr(translation, "load_bitext", with_long_test_sentences)
    options = TrainingOptions(light=True, data_dir=tmp_path)
    task = translation.Translation(spec, options, torch.device("cpu"))
    shown = real(spec.light_data.name, tmp_path)
    assert task.bitext.test_references[-1] == "at the limit"  # kept: not longer than it
    assert len(task.bitext.test_source) == len(shown.test_source) + 1
    assert task.start_details()["test_samples_left_out"] == 1
