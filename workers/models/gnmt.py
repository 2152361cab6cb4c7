"""GNMT (Wu et al., 2016) as the benchmark trains it for Task 4a: stacked residual LSTMs.

The layout is the one NVIDIA's "GNMT v2" and MLBench's reference use:

- **encoder**: one bidirectional LSTM layer (each direction ``hidden`` wide,
  so its output is ``2 × hidden``), then ``layers − 1`` unidirectional
  layers; from the third layer on, each layer's input is added to its output
  (residual connection);
- **decoder**: a first LSTM layer whose output is the query of a normalised
  Bahdanau (additive) attention over the encoder outputs; every later layer
  reads its input concatenated with the attention context, residual from the
  third layer on; a linear classifier over the vocabulary;
- one embedding matrix shared by source and target (one joint BPE vocabulary);
  dropout on every layer's input.

Weights start uniform in ±0.1 as in the reference, except the embedding, which
keeps PyTorch's N(0, 1): with ±0.1 rows a small model's inputs are so faint
that it learns the light language pair several times more slowly (measured:
loss 2.5 instead of 0.9 after three epochs at width 128).

Batches are (batch, time); id 0 is padding. The decoder runs either over a
whole shifted target (training, teacher forcing) or one token at a time with
its LSTM states carried over (:meth:`GNMT.next_token_logits`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import _VF, nn
from torch.nn.utils.rnn import PackedSequence, pad_packed_sequence

from scalebench.tasks import GNMTConfig
from workers.data.batches import to_device
from workers.data.translation import PAD

LSTMState = tuple[torch.Tensor, torch.Tensor]  # (h, c), each (layers=1, batch, hidden)


@dataclass
class DecoderCache:
    """What one decoding step hands the next: LSTM states and the projected memory."""

    states: list[LSTMState]
    projected_keys: torch.Tensor


class NormalizedAdditiveAttention(nn.Module):
    """score(q, k) = g · (v / ‖v‖) · tanh(W_q q + W_k k + b); padded keys score −∞."""

    def __init__(self, query: int, key: int, width: int) -> None:
        super().__init__()
        self.query_layer = nn.Linear(query, width, bias=False)
        self.key_layer = nn.Linear(key, width, bias=False)
        self.bias = nn.Parameter(torch.zeros(width))
        self.v = nn.Parameter(torch.empty(width).uniform_(-0.1, 0.1))
        self.gain = nn.Parameter(torch.tensor(width**-0.5))

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        projected_keys: torch.Tensor,
        key_padding: torch.Tensor,
    ) -> torch.Tensor:
        """Context (batch, T, key) for queries (batch, T, query) over keys (batch, S, key).

        ``projected_keys`` is ``self.key_layer(keys)``, computed once per batch.
        """
        hidden = torch.tanh(
            self.query_layer(queries)[:, :, None] + projected_keys[:, None] + self.bias
        )  # (batch, T, S, width)
        v = self.gain * self.v / self.v.norm()
        scores = hidden @ v  # (batch, T, S)
        scores = scores.masked_fill(key_padding[:, None, :], float("-inf"))
        return torch.softmax(scores.float(), dim=-1).to(keys.dtype) @ keys


def pack_without_waiting(x: torch.Tensor, lengths: torch.Tensor) -> PackedSequence:
    """``pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)``, the same
    computation, with the longest-first order sorted on the host and copied to ``x``'s device
    from pinned memory: torch's own copies it from pageable memory, which waits for the GPU."""
    lengths, order = torch.sort(lengths, descending=True)
    order = to_device(order, x.device)
    data, batch_sizes = _VF._pack_padded_sequence(x.index_select(0, order), lengths, True)
    return PackedSequence(data, batch_sizes, order, None)


class GNMT(nn.Module):
    """Source ids (batch, S) and shifted target ids (batch, T) → logits (batch, T, vocabulary)."""

    def __init__(self, vocabulary: int, config: GNMTConfig) -> None:
        super().__init__()
        hidden, layers = config.hidden, config.layers
        self.residual_from = config.residual_from
        self.embedding = nn.Embedding(vocabulary, hidden, padding_idx=PAD)  # N(0, 1) rows
        self.dropout = nn.Dropout(config.dropout)

        self.encoder_bidirectional = nn.LSTM(hidden, hidden, batch_first=True, bidirectional=True)
        self.encoder_layers = nn.ModuleList(
            [nn.LSTM(2 * hidden, hidden, batch_first=True)]
            + [nn.LSTM(hidden, hidden, batch_first=True) for _ in range(layers - 2)]
        )

        self.decoder_attention_layer = nn.LSTM(hidden, hidden, batch_first=True)
        self.attention = NormalizedAdditiveAttention(hidden, hidden, hidden)
        self.decoder_layers = nn.ModuleList(
            [nn.LSTM(2 * hidden, hidden, batch_first=True) for _ in range(layers - 1)]
        )
        self.classifier = nn.Linear(hidden, vocabulary)
        for lstm in [
            self.encoder_bidirectional,
            *self.encoder_layers,
            self.decoder_attention_layer,
            *self.decoder_layers,
        ]:
            for parameter in lstm.parameters():
                nn.init.uniform_(parameter, -0.1, 0.1)
        nn.init.uniform_(self.classifier.weight, -0.1, 0.1)
        nn.init.zeros_(self.classifier.bias)

    def encode(self, source: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Encoder outputs (batch, S, hidden); padded positions are zeros.

        ``lengths``: the sentences' lengths as a CPU tensor (a training batch's, known to its
        adapter); packing then never waits for the GPU. Without them (beam search) they are
        read from ``source``, which waits.
        """
        if lengths is None:
            lengths = (source != PAD).sum(dim=1).clamp(min=1).cpu()
        x = self.dropout(self.embedding(source))
        packed = pack_without_waiting(x, lengths)
        x, _ = pad_packed_sequence(
            self.encoder_bidirectional(packed)[0], batch_first=True, total_length=source.size(1)
        )
        for index, lstm in enumerate(self.encoder_layers, start=1):
            out, _ = lstm(self.dropout(x))
            x = out + x if index >= self.residual_from else out
        return x

    def decode(
        self,
        memory: torch.Tensor,
        source: torch.Tensor,
        target_in: torch.Tensor,
        states: list[LSTMState] | None = None,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[LSTMState]]:
        """Logits (batch, T, vocabulary) and the LSTM states after the last position.

        ``states`` (one per decoder layer) continue an earlier call; None starts fresh.
        ``projected_keys`` is the attention's projection of ``memory``, when already known.
        """
        new_states: list[LSTMState] = []
        start = states or [None] * (1 + len(self.decoder_layers))  # type: ignore[list-item]
        if projected_keys is None:
            projected_keys = self.attention.key_layer(memory)
        x = self.dropout(self.embedding(target_in))
        query, state = self.decoder_attention_layer(x, start[0])
        new_states.append(state)
        context = self.attention(query, memory, projected_keys, source == PAD)
        x = query
        for index, lstm in enumerate(self.decoder_layers, start=1):
            out, state = lstm(self.dropout(torch.cat([x, context], dim=-1)), start[index])
            new_states.append(state)
            x = out + x if index >= self.residual_from else out
        return self.classifier(x), new_states

    def forward(
        self, source: torch.Tensor, target_in: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.decode(self.encode(source, lengths), source, target_in)[0]

    def next_token_logits(
        self,
        memory: torch.Tensor,
        source: torch.Tensor,
        prefix: torch.Tensor,
        cache: DecoderCache | None,
    ) -> tuple[torch.Tensor, DecoderCache]:
        """Logits (batch, vocabulary) after ``prefix``; the cache holds the LSTM states,
        so only the prefix's last token is read (see :mod:`workers.beam_search`)."""
        keys = cache.projected_keys if cache else self.attention.key_layer(memory)
        logits, states = self.decode(
            memory, source, prefix[:, -1:], cache.states if cache else None, keys
        )
        return logits[:, -1], DecoderCache(states, keys)

    @staticmethod
    def reorder_cache(cache: DecoderCache, rows: torch.Tensor) -> DecoderCache:
        """Rows move only among one sentence's beams, whose memory rows are equal: the
        projected keys stay as they are, like the memory they come from."""
        states = [(h.index_select(1, rows), c.index_select(1, rows)) for h, c in cache.states]
        return DecoderCache(states, cache.projected_keys)


def parameter_count(vocabulary: int, config: GNMTConfig) -> int:
    """The number of weights :class:`GNMT` has, from the layer shapes alone."""
    h = config.hidden

    def lstm(inputs: int, width: int = h) -> int:  # W_ih, W_hh and both biases, 4 gates
        return 4 * width * (inputs + width + 2)

    encoder = 2 * lstm(h) + lstm(2 * h) + (config.layers - 2) * lstm(h)
    decoder = lstm(h) + (config.layers - 1) * lstm(2 * h)
    attention = 2 * h * h + 2 * h + 1
    return vocabulary * h + encoder + decoder + attention + h * vocabulary + vocabulary
