"""Beam search: a known best translation that greedy decoding misses, and both real models."""

from __future__ import annotations

import math

import pytest
import torch

from scalebench.tasks import GNMTConfig, TransformerConfig
from workers.beam_search import beam_search, length_penalty
from workers.data.translation import BOS, EOS, PAD
from workers.models.gnmt import GNMT
from workers.models.transformer import Transformer

A, B, C = 4, 5, 6  # ids after the four special ones
VOCABULARY = 7


class TableModel:
    """Next-token probabilities read from a table keyed by the prefix (ignoring the source)."""

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]]) -> None:
        self.table = table
        self.calls = 0

    def encode(self, source: torch.Tensor) -> torch.Tensor:
        return torch.zeros(source.size(0), 1, 1)

    def next_token_logits(self, memory, source, prefix, cache):
        self.calls += 1
        logits = torch.full((prefix.size(0), VOCABULARY), -1e9)
        for row, ids in enumerate(prefix.tolist()):
            for token, p in self.table.get(tuple(ids), {EOS: 1.0}).items():
                logits[row, token] = math.log(p)
        return logits, None

    def reorder_cache(self, cache, rows):
        return None


# Greedy takes A (0.6) but every continuation of A is poor; B (0.4) then </s> (1.0) is best.
GARDEN_PATH = {
    (BOS,): {A: 0.6, B: 0.4},
    (BOS, A): {A: 0.25, B: 0.25, C: 0.25, EOS: 0.25},
    (BOS, B): {EOS: 1.0},
}


def test_a_beam_of_two_finds_the_translation_greedy_decoding_misses() -> None:
    source = torch.tensor([[A, B]])
    greedy = beam_search(TableModel(GARDEN_PATH), source, beam=1, max_new=5)
    assert greedy[0, 0].item() == A
    found = beam_search(TableModel(GARDEN_PATH), source, beam=2, max_new=5)
    assert found[0].tolist()[:2] == [B, EOS] and set(found[0].tolist()[2:]) <= {PAD}


def test_every_sentence_of_a_batch_gets_its_own_beams_and_search_stops_when_all_finish() -> None:
    model = TableModel(GARDEN_PATH)
    found = beam_search(model, torch.tensor([[A], [B], [C]]), beam=3, max_new=50)
    assert [row[:2] for row in found.tolist()] == [[B, EOS]] * 3
    assert model.calls < 50  # it did not run to max_new


def test_the_length_penalty_keeps_short_hypotheses_from_winning_for_being_short() -> None:
    # </s> at once: log 0.37 ≈ −0.99. A, A, A, </s>: log 0.45 + 3 log 0.9 ≈ −1.12.
    table = {
        (BOS,): {EOS: 0.37, A: 0.45, B: 0.18},
        (BOS, A): {A: 0.9, EOS: 0.1},
        (BOS, A, A): {A: 0.9, EOS: 0.1},
        (BOS, A, A, A): {EOS: 0.9, A: 0.1},
    }
    short, long = math.log(0.37), math.log(0.45) + 3 * math.log(0.9)
    assert short > long  # by summed log-probability the empty translation wins ...
    penalty = length_penalty(torch.tensor([1, 4]), 1.0).tolist()
    assert long / penalty[1] > short / penalty[0]  # ... and loses once lengths are normalised
    source = torch.tensor([[A]])
    plain = beam_search(TableModel(table), source, beam=2, max_new=6, alpha=0.0)
    assert plain[0].tolist()[0] == EOS
    normalised = beam_search(TableModel(table), source, beam=2, max_new=6, alpha=1.0)
    assert normalised[0].tolist()[:4] == [A, A, A, EOS]


@pytest.mark.parametrize("kind", ["gnmt", "transformer"])
def test_the_models_beam_search_scores_at_least_as_well_as_greedy(kind: str) -> None:
    torch.manual_seed(3)
    if kind == "gnmt":
        model = GNMT(20, GNMTConfig(hidden=16, layers=2, dropout=0.0)).eval()
    else:
        model = Transformer(
            20,
            TransformerConfig(
                model=16, heads=2, feed_forward=32, encoder_layers=1, decoder_layers=1, dropout=0.0
            ),
        ).eval()
    source = torch.randint(4, 20, (6, 5))

    def log_probability(ids: list[int], row: int) -> float:
        ids = ids[: ids.index(EOS) + 1] if EOS in ids else ids
        prefix = torch.tensor([[BOS, *ids[:-1]]])
        with torch.no_grad():
            logits = model(source[row : row + 1], prefix)[0].log_softmax(-1)
        return sum(float(logits[t, token]) for t, token in enumerate(ids)) / float(
            length_penalty(torch.tensor(len(ids)), 0.6)
        )

    greedy = beam_search(model, source, beam=1, max_new=8)
    beamed = beam_search(model, source, beam=4, max_new=8)
    better = 0
    for row in range(6):
        g = log_probability(greedy[row].tolist(), row)
        b = log_probability(beamed[row].tolist(), row)
        assert b >= g - 1e-4
        better += b > g + 1e-4
    assert better >= 1  # on an untrained model the beam finds something greedy did not
