"""Translating with a trained model: beam search with GNMT's length normalisation.

Both translation models offer the same two calls: ``encode(source)`` and
``next_token_logits(memory, source, prefix, cache)``, which returns the
logits of the token after ``prefix`` (batch, vocabulary) and the model's
cache for the next call (the LSTM states for GNMT; nothing for the
Transformer, which re-reads its prefix), plus ``reorder_cache(cache, rows)``.

:func:`beam_search` keeps the ``beam`` best hypotheses per sentence. A
hypothesis is ranked by its summed log-probability divided by Wu et al.'s
length penalty ``lp = ((5 + length) / 6) ** alpha``, so finished short
translations do not win only for being short. A finished hypothesis stays in
its slot (extended with ``<pad>`` at no cost) and competes with the live ones
until every slot of every sentence has finished or ``max_new`` tokens are out.
With ``beam = 1`` it is greedy decoding.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch.nn import functional as F

from workers.data.translation import BOS, EOS, PAD


class Translator(Protocol):
    def encode(self, source: torch.Tensor) -> torch.Tensor: ...

    def next_token_logits(
        self, memory: torch.Tensor, source: torch.Tensor, prefix: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]: ...

    def reorder_cache(self, cache: Any, rows: torch.Tensor) -> Any: ...


def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """Wu et al. (2016): ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length.float()) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model: Translator, source: torch.Tensor, beam: int, max_new: int, alpha: float = 0.6
) -> torch.Tensor:
    """The best translation of each source row: ids (batch, ≤ max_new), ``<pad>`` after ``</s>``."""
    batch, device = source.size(0), source.device
    source = source.repeat_interleave(beam, dim=0)  # row b·beam + j is sentence b's j-th slot
    memory = model.encode(source)
    prefix = torch.full((batch * beam, 1), BOS, dtype=torch.long, device=device)
    scores = torch.zeros(batch, beam, device=device)
    scores[:, 1:] = float("-inf")  # all slots start equal: keep one until the first step
    lengths = torch.zeros(batch * beam, dtype=torch.long, device=device)
    finished = torch.zeros(batch * beam, dtype=torch.bool, device=device)
    cache = None
    for _ in range(max_new):
        logits, cache = model.next_token_logits(memory, source, prefix, cache)
        log_probs = F.log_softmax(logits.float(), dim=-1)
        vocabulary = log_probs.size(-1)
        # A finished slot can only continue with <pad>, at no cost and no added length.
        log_probs[finished] = float("-inf")
        log_probs[finished, PAD] = 0.0
        totals = scores.reshape(-1, 1) + log_probs  # (batch·beam, vocabulary)
        new_lengths = lengths + (~finished).long()
        ranked = totals / length_penalty(new_lengths, alpha)[:, None]
        best = ranked.reshape(batch, -1).topk(beam, dim=-1).indices  # (batch, beam)
        slot, token = best // vocabulary, best % vocabulary
        rows = (torch.arange(batch, device=device)[:, None] * beam + slot).reshape(-1)
        scores = totals.reshape(batch, -1).gather(1, best)
        token = token.reshape(-1)
        prefix = torch.cat([prefix[rows], token[:, None]], dim=1)
        lengths = new_lengths[rows]
        finished = finished[rows] | (token == EOS)
        cache = model.reorder_cache(cache, rows)
        if bool(finished.all()):
            break
    # The slots are ranked by length-normalised score: slot 0 is each sentence's best.
    return prefix[:, 1:].reshape(batch, beam, -1)[:, 0]
