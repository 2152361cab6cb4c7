"""Task 4a: the spec against the text, sentence batches, GNMT and its schedule (its light run
is in test_translation.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from test_task_specs import SPEC_TEXT, needs_text

from scalebench.tasks import GNMTConfig, TranslationSpec, get_task
from workers.beam_search import beam_search
from workers.data.translation import BOS, EOS, PAD, sentence_batches
from workers.models.gnmt import GNMT, parameter_count
from workers.translation import learning_rate

TASK4A = "task4a-gnmt-wmt16"
TINY = GNMTConfig(hidden=16, layers=4, dropout=0.0)


def spec() -> TranslationSpec:
    task = get_task(TASK4A)
    assert isinstance(task, TranslationSpec)
    return task


@needs_text
def test_task4a_hyperparameters_follow_the_text() -> None:
    text = SPEC_TEXT.read_text(encoding="utf-8")
    part = text[text.index("We benchmark the GNMT Machine Translation Model") :]
    part = part[: part.index("We benchmark the Transformer Model")]
    task = spec()
    machines = re.search(r"k = ([\d, ]+) - global minibatch size", part)
    assert machines and task.world_sizes == tuple(int(k) for k in machines.group(1).split(","))
    assert task.batch_unit == "sentences"
    assert task.global_batch == int(re.search(r"b = (\d+)sentences", part).group(1))
    assert task.max_epochs == int(re.search(r"maximum epochs: (\d+)", part).group(1))
    assert task.optimizer.lr == float(re.search(r"base_learning_rate = (\d\.\d+e-\d)", part)[1])
    assert task.lr_schedule == "gnmt"
    assert task.warmup_steps == int(re.search(r"We use (\d+) warmup steps", part).group(1))
    assert "exponentially increased" in part
    decay = re.search(
        r"decay by ([\d.]+) after having gone through (\d+)% of total training, "
        r"and then for every (\d+)% for maximum (\d+) times",
        part,
    )
    assert decay is not None
    assert task.decay.factor == float(decay[1])
    assert task.decay.start == pytest.approx(int(decay[2]) / 100)
    assert task.decay.interval == pytest.approx(int(decay[3]) / 100)
    assert task.decay.max_decays == int(decay[4])
    assert "Adam(betas=(0.9, 0.999), eps=1e-8, weight_decay=0" in part
    assert task.optimizer.betas == (0.9, 0.999) and task.optimizer.eps == 1e-8
    assert task.optimizer.weight_decay == 0.0
    assert task.clip_norm == float(re.search(r"max norm of (\d+\.\d+)", part).group(1))
    assert task.loss_scale.initial == 2 ** int(re.search(r"initial_scale = 2\*\*(\d+)", part)[1])
    assert task.loss_scale.max_scale == 2 ** int(re.search(r"max_scale = 2\*\*(\d+)", part)[1])
    assert task.loss_scale.window == int(re.search(r"scale_window = (\d+)", part).group(1))
    assert task.loss_scale.factor == float(re.search(r"scale_factor = (\d+)", part).group(1))
    lengths = re.search(
        r"trained on sentences of maximum length (\d+) tokens, "
        r"and tested on sentences of max length (\d+)",
        part,
    )
    assert lengths is not None
    assert (task.max_length, task.decode_max_length) == (int(lengths[1]), int(lengths[2]))
    assert "WMT-16" in part and task.data.name == "wmt16-en-de"
    assert "Time to BLEU-Score of 24.0 on test set" in text and task.goal.threshold == 24.0


def test_update_frequency_and_sentences_per_pass_follow_the_rule() -> None:
    task = spec()
    # update_freq = max(1, b / (bs_max × k)); bs = b / (k × update_freq); b = 2048 sentences
    # (bs_max = 128 sentences, the text's figure)
    assert (task.update_freq(1, False), task.batch_per_pass(1, False)) == (16, 128)
    assert (task.update_freq(2, False), task.batch_per_pass(2, False)) == (8, 128)
    assert (task.update_freq(16, False), task.batch_per_pass(16, False)) == (1, 128)
    assert (task.update_freq(32, False), task.batch_per_pass(32, False)) == (1, 64)
    for k in task.world_sizes:
        assert k * task.update_freq(k, False) * task.batch_per_pass(k, False) == 2048


def test_the_rate_warms_up_exponentially_then_halves_four_times() -> None:
    task = spec()
    total = 8 * 1_000  # eight epochs of 1,000 updates
    assert learning_rate(task, 0, total, light=False) == 0.0  # the text: initial rate 0.0
    assert learning_rate(task, 200, total, light=False) == pytest.approx(2e-3)
    assert learning_rate(task, 3_199, total, light=False) == pytest.approx(2e-3)
    assert learning_rate(task, 3_200, total, light=False) == pytest.approx(1e-3)  # 40 %
    assert learning_rate(task, 3_600, total, light=False) == pytest.approx(5e-4)  # 45 %
    assert learning_rate(task, 4_400, total, light=False) == pytest.approx(1.25e-4)  # 55 %
    assert learning_rate(task, 7_999, total, light=False) == pytest.approx(1.25e-4)


def test_sentence_batches_hold_the_asked_count_of_similar_lengths() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=1000)
    order = rng.permutation(1000)[:900]
    batches = sentence_batches(lengths, 64, order)
    assert sorted(np.concatenate(batches).tolist()) == sorted(order.tolist())
    assert [len(b) for b in batches] == [64] * 14 + [4]
    spans = [int(lengths[b].max() - lengths[b].min()) for b in batches]
    assert max(spans) <= 8  # sorted by length: a batch spans few lengths


def test_parameter_count_matches_the_layer_shapes() -> None:
    assert sum(p.numel() for p in GNMT(50, TINY).parameters()) == parameter_count(50, TINY)
    with torch.device("meta"):  # the full model's shapes, without its memory
        full = GNMT(32_000, GNMTConfig())
    counted = sum(p.numel() for p in full.parameters())
    assert counted == parameter_count(32_000, GNMTConfig())
    assert 155e6 < counted < 165e6  # about 160M, as published for GNMT v2 with a 32k vocabulary
    assert len(full.encoder_layers) == 3 and full.encoder_bidirectional.bidirectional
    assert len(full.decoder_layers) == 3


def test_logits_have_the_target_shape_and_padding_changes_nothing() -> None:
    torch.manual_seed(0)
    model = GNMT(30, TINY).eval()
    source = torch.tensor([[5, 6, 7, 8], [9, 10, PAD, PAD]])
    target = torch.tensor([[BOS, 11, 12], [BOS, 13, PAD]])
    logits = model(source, target)
    assert logits.shape == (2, 3, 30)
    # More padding on the source leaves every output as it was (packing and the attention mask).
    longer = torch.cat([source, torch.full((2, 3), PAD)], dim=1)
    assert torch.allclose(model(longer, target), logits, atol=1e-5)
    # A sentence's translation does not depend on the other sentences of its batch.
    alone = model(source[1:, :2], target[1:])
    assert torch.allclose(alone, logits[1:], atol=1e-5)


def test_the_decoder_sees_no_future_and_one_step_at_a_time_equals_teacher_forcing() -> None:
    torch.manual_seed(0)
    model = GNMT(30, TINY).eval()
    source = torch.tensor([[5, 6, 7, 8, 9]])
    target = torch.tensor([[BOS, 11, 12, 13]])
    full = model(source, target)
    changed = target.clone()
    changed[0, 3] = 14
    assert torch.allclose(model(source, changed)[0, :3], full[0, :3], atol=1e-6)
    memory, states, steps = model.encode(source), None, []
    for t in range(target.size(1)):
        logits, states = model.decode(memory, source, target[:, t : t + 1], states)
        steps.append(logits)
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_a_beam_of_one_picks_the_most_likely_token_given_its_own_prefix() -> None:
    torch.manual_seed(1)
    model = GNMT(30, TINY).eval()
    source = torch.tensor([[5, 6, 7, 8], [9, 10, 11, PAD]])
    out = beam_search(model, source, beam=1, max_new=6)
    assert out.shape[0] == 2 and 1 <= out.shape[1] <= 6
    for row in range(2):
        ids = out[row]
        if (ids == EOS).any():  # after </s> come only pads
            end = int((ids == EOS).nonzero()[0])
            assert (ids[end + 1 :] == PAD).all()
            ids = ids[: end + 1]
        prefix = torch.cat([torch.tensor([BOS]), ids[:-1]])[None]
        logits = model(source[row : row + 1], prefix)
        assert logits.argmax(dim=-1)[0].tolist() == ids.tolist()
