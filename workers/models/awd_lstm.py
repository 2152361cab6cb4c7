"""AWD-LSTM (Merity, Keskar and Socher, 2017): a regularised stacked LSTM language model.

What makes it "ASGD weight-dropped":

- **weight drop**: DropConnect on each layer's hidden-to-hidden matrix, one
  mask per forward pass (the dropped matrix is handed to the LSTM with
  ``torch.func.functional_call``, so the cuDNN/CPU kernels stay in use);
- **locked dropout**: one dropout mask per sequence, shared by every time step,
  on the embedded words, between layers and on the output;
- **word dropout**: whole rows of the embedding matrix dropped;
- **tied weights**: the decoder is the embedding matrix transposed (the last
  layer is as wide as the embedding).

``forward`` also returns what activation regularisation (AR) and temporal
activation regularisation (TAR) need: the last layer's output before and
after its dropout.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from scalebench.tasks import AWDLSTMConfig

Hidden = list[tuple[torch.Tensor, torch.Tensor]]


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout with one mask per sequence: ``x`` is (time, batch, features)."""
    if not training or p == 0:
        return x
    mask = x.new_empty(1, x.size(1), x.size(2)).bernoulli_(1 - p) / (1 - p)
    return x * mask


def embedding_dropout(
    embedding: nn.Embedding, words: torch.Tensor, p: float, training: bool
) -> torch.Tensor:
    """Look up ``words`` with whole rows of the embedding matrix dropped (and rescaled)."""
    weight = embedding.weight
    if training and p > 0:
        mask = weight.new_empty(weight.size(0), 1).bernoulli_(1 - p) / (1 - p)
        weight = weight * mask
    return F.embedding(words, weight)


class AWDLSTM(nn.Module):
    """Word ids (time, batch) → logits (time, batch, vocabulary)."""

    def __init__(self, vocabulary: int, config: AWDLSTMConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(vocabulary, config.embedding)
        widths = [config.embedding] + [config.hidden] * (config.layers - 1) + [config.embedding]
        self.layers = nn.ModuleList(nn.LSTM(widths[i], widths[i + 1]) for i in range(config.layers))
        self.decoder_bias = nn.Parameter(torch.zeros(vocabulary))
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)

    def initial_hidden(self, batch: int) -> Hidden:
        weight = self.embedding.weight
        return [
            (
                weight.new_zeros(1, batch, layer.hidden_size),
                weight.new_zeros(1, batch, layer.hidden_size),
            )
            for layer in self.layers
        ]

    def forward(
        self, words: torch.Tensor, hidden: Hidden
    ) -> tuple[torch.Tensor, Hidden, torch.Tensor, torch.Tensor]:
        """Returns logits, the new hidden state, and the last layer's raw and dropped output."""
        c = self.config
        x = embedding_dropout(self.embedding, words, c.dropout_words, self.training)
        x = locked_dropout(x, c.dropout_input, self.training)
        new_hidden: Hidden = []
        raw = x
        for i, layer in enumerate(self.layers):
            weights = dict(layer.named_parameters())
            if self.training and c.weight_drop > 0:
                weights["weight_hh_l0"] = F.dropout(weights["weight_hh_l0"], c.weight_drop)
            raw, state = functional_call(layer, weights, (x, hidden[i]))
            new_hidden.append(state)
            last = i == len(self.layers) - 1
            x = locked_dropout(raw, c.dropout_output if last else c.dropout_between, self.training)
        logits = F.linear(x, self.embedding.weight, self.decoder_bias)
        return logits, new_hidden, raw, x


def detach(hidden: Hidden) -> Hidden:
    """The hidden state without its history (truncated backpropagation through time)."""
    return [(h.detach(), c.detach()) for h, c in hidden]
