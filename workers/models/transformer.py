"""The encoder-decoder Transformer of "Attention Is All You Need" for Task 4b.

``torch.nn.Transformer`` does the attention and feed-forward layers (post-norm,
as in the paper); around it: one embedding matrix shared by the source, the
target and the output projection (a joint vocabulary), scaled by √d, plus
fixed sinusoidal positions. Batches are (batch, time); id 0 is padding.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from scalebench.tasks import TransformerConfig
from workers.data.translation import PAD


def sinusoids(length: int, width: int) -> torch.Tensor:
    """Positions (length, width): sin on even features, cos on odd, wavelengths 2π…10000·2π."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table


class Transformer(nn.Module):
    """Source ids (batch, S) and shifted target ids (batch, T) → logits (batch, T, vocabulary)."""

    def __init__(self, vocabulary: int, config: TransformerConfig, max_length: int = 512) -> None:
        super().__init__()
        self.width = config.model
        self.embedding = nn.Embedding(vocabulary, config.model, padding_idx=PAD)
        nn.init.normal_(self.embedding.weight, std=config.model**-0.5)
        with torch.no_grad():
            self.embedding.weight[PAD].zero_()
        self.register_buffer("positions", sinusoids(max_length, config.model), persistent=False)
        self.dropout = nn.Dropout(config.dropout)
        self.core = nn.Transformer(
            d_model=config.model,
            nhead=config.heads,
            num_encoder_layers=config.encoder_layers,
            num_decoder_layers=config.decoder_layers,
            dim_feedforward=config.feed_forward,
            dropout=config.dropout,
            batch_first=True,
        )
        # Padded batches stay dense tensors: the nested-tensor shortcut of the encoder's
        # inference path is a prototype API (and warns so).
        self.core.encoder.use_nested_tensor = False

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        scaled = self.embedding(ids) * math.sqrt(self.width)
        positions = self.positions
        if ids.size(1) > positions.size(0):  # a test sentence longer than any in training
            positions = sinusoids(ids.size(1), self.width).to(positions.device)
        return self.dropout(scaled + positions[: ids.size(1)].to(scaled.dtype))

    def encode(self, source: torch.Tensor) -> torch.Tensor:
        return self.core.encoder(self.embed(source), src_key_padding_mask=source == PAD)

    def decode(
        self, memory: torch.Tensor, source: torch.Tensor, target_in: torch.Tensor
    ) -> torch.Tensor:
        length = target_in.size(1)
        causal = torch.ones(length, length, dtype=torch.bool, device=target_in.device).triu(1)
        hidden = self.core.decoder(
            self.embed(target_in),
            memory,
            tgt_mask=causal,
            tgt_key_padding_mask=target_in == PAD,
            memory_key_padding_mask=source == PAD,
        )
        return F.linear(hidden, self.embedding.weight)

    def forward(
        self, source: torch.Tensor, target_in: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits (batch, T, vocabulary); ``lengths`` (the sources', as GNMT takes them) unused."""
        return self.decode(self.encode(source), source, target_in)

    def next_token_logits(
        self, memory: torch.Tensor, source: torch.Tensor, prefix: torch.Tensor, cache: None
    ) -> tuple[torch.Tensor, None]:
        """Logits (batch, vocabulary) after ``prefix``, decoding the whole prefix again
        (see :mod:`workers.beam_search`); there is no cache."""
        return self.decode(memory, source, prefix)[:, -1], None

    @staticmethod
    def reorder_cache(cache: None, rows: torch.Tensor) -> None:
        return None
