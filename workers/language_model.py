"""Task 3a's adapter: AWD-LSTM language model trained to a validation perplexity.

The loop is workers/engine.py. Each rank trains on its own contiguous part
of the training stream, folded into ``batch_per_worker`` parallel columns;
the hidden state is carried from one step to the next (truncated
backpropagation through time). Every step
draws its sequence length by the spec's rule and scales the learning rate by
``seq_len / bptt``. The loss adds activation regularisation (AR) and temporal
activation regularisation (TAR). Gradients are averaged with one flat
all-reduce, then clipped to the spec's norm (in the optimizer phase), so
every rank clips the same gradient.

SGD runs until the validation perplexity has not improved for
``asgd_patience`` epochs; then training switches to averaged SGD (ASGD), and
evaluations use the averaged weights. Perplexity is global: every rank scores
a part of the validation stream and the summed losses are all-reduced.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from scalebench.tasks import LanguageModelSpec, TextData
from workers.adapter import Batch, Step, TaskAdapter, TrainingOptions
from workers.data.text import Corpus, load_corpus, rank_columns
from workers.models.awd_lstm import AWDLSTM, Hidden, detach
from workers.schedules import LearningRate
from workers.tracker import Tracker


def sequence_length(spec: LanguageModelSpec, rng: random.Random) -> int:
    """The spec's rule: mostly ``bptt``, sometimes half of it, with Normal noise."""
    centre = spec.bptt / 2 if rng.random() < spec.short_bptt_probability else spec.bptt
    return max(spec.min_seq_len, round(rng.gauss(centre, spec.seq_len_std)))


def regularised_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    raw_output: torch.Tensor,
    dropped_output: torch.Tensor,
    spec: LanguageModelSpec,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(training loss with AR and TAR, plain cross-entropy) for one sequence."""
    cross_entropy = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    ar = spec.activation_alpha * dropped_output.pow(2).mean()
    tar = spec.temporal_beta * (raw_output[1:] - raw_output[:-1]).pow(2).mean()
    return cross_entropy + ar + tar, cross_entropy


@torch.no_grad()
def evaluate_perplexity(
    model: AWDLSTM,
    stream: np.ndarray,
    spec: LanguageModelSpec,
    device: torch.device,
    columns: int = 10,
) -> dict[str, float]:
    """Perplexity and mean cross-entropy (nats per token) over ``stream``, global over ranks."""
    model.eval()
    data = torch.from_numpy(
        rank_columns(stream, dist.get_rank(), dist.get_world_size(), columns)
    ).to(device)
    hidden = model.initial_hidden(columns)
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, tokens
    for start in range(0, data.size(0) - 1, spec.eval_seq_len):
        length = min(spec.eval_seq_len, data.size(0) - 1 - start)
        words, targets = data[start : start + length], data[start + 1 : start + 1 + length]
        logits, hidden, _, _ = model(words, hidden)
        totals[0] += F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.reshape(-1), reduction="sum"
        ).double()
        totals[1] += targets.numel()
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    loss = totals[0].item() / totals[1].item()
    return {"perplexity": math.exp(min(loss, 50.0)), "loss": loss}


class AveragedWeights:
    """Swap the model's weights for ASGD's running averages (and back) around an evaluation."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.saved: dict[torch.nn.Parameter, torch.Tensor] = {}

    def __enter__(self) -> None:
        if not isinstance(self.optimizer, torch.optim.ASGD):
            return
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                average = self.optimizer.state.get(p, {}).get("ax")
                if average is not None:
                    self.saved[p] = p.detach().clone()
                    p.data.copy_(average)

    def __exit__(self, *exc: object) -> None:
        for p, weights in self.saved.items():
            p.data.copy_(weights)
        self.saved.clear()


class LanguageModel(TaskAdapter[tuple[int, int]]):
    """Passes are (position, length) of a slice of this rank's columns of the training stream."""

    spec: LanguageModelSpec

    def __init__(
        self, spec: LanguageModelSpec, options: TrainingOptions, device: torch.device
    ) -> None:
        super().__init__(spec, options, device)
        assert isinstance(self.data_spec, TextData)
        self.corpus: Corpus = load_corpus(self.data_spec.name, options.data_dir)
        self.columns = spec.batch_per_worker
        self.train_data = torch.from_numpy(
            rank_columns(self.corpus.train, self.rank, self.world_size, self.columns)
        ).to(device)
        # The sequence lengths are drawn from the same seed on every rank, so all
        # ranks take the same number of steps and meet at every all-reduce.
        self.lengths = random.Random(options.seed)
        self.nominal_steps = max(1, (self.train_data.size(0) - 1) // spec.bptt)
        self.schedule = LearningRate(spec.schedule, spec.optimizer.lr, self.world_size)
        self.clip_norm = spec.clip_norm
        self.best, self.epochs_without_improvement = math.inf, 0
        self.last_lr = spec.optimizer.lr

    def build_model(self) -> torch.nn.Module:
        config = self.spec.light_model_config if self.options.light else self.spec.model_config
        self.model = AWDLSTM(len(self.corpus.words), config)
        return self.model

    def build_optimizer(self, parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
            parameters, lr=self.spec.optimizer.lr, weight_decay=self.spec.optimizer.weight_decay
        )
        return self.optimizer

    def start_details(self) -> dict[str, Any]:
        return {
            "train_samples": len(self.corpus.train),
            "test_samples": len(self.corpus.valid),
            "vocabulary": len(self.corpus.words),
            "steps_per_epoch": self.nominal_steps,
            "global_batch": self.columns * self.world_size,
        }

    def steps(self, epoch: int) -> list[Step[tuple[int, int]]]:
        """The epoch's slices, each of a length drawn by the spec's rule; the state restarts."""
        self.hidden: Hidden = self.model.initial_hidden(self.columns)
        end = self.train_data.size(0) - 1
        plan, position = [], 0
        while position < end - 1:
            length = min(sequence_length(self.spec, self.lengths), end - position)
            plan.append(Step([(position, length)], {"length": length}))
            position += length
        return plan

    def load(self, item: tuple[int, int]) -> Batch:
        position, length = item
        words = self.train_data[position : position + length]
        targets = self.train_data[position + 1 : position + 1 + length]
        self.hidden = detach(self.hidden)
        return Batch(inputs=(words,), targets=targets, samples=length * self.columns)

    def forward(self, net: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, ...]:
        logits, self.hidden, raw, dropped = net(batch.inputs[0], self.hidden)
        return logits, raw, dropped

    def loss(self, output: tuple[torch.Tensor, ...], batch: Batch) -> torch.Tensor:
        logits, raw, dropped = output
        return regularised_loss(logits, batch.targets, raw, dropped, self.spec)[0]

    def learning_rate(
        self, epoch: int, index: int, step: Step[tuple[int, int]], steps: int
    ) -> float:
        """The warmed-up rate, scaled by the step's sequence length over ``bptt``."""
        fraction = min(index / self.nominal_steps, 1.0)
        self.last_lr = self.schedule.at(epoch + fraction) * step.details["length"] / self.spec.bptt
        return self.last_lr

    def evaluate(self, model: torch.nn.Module) -> tuple[dict[str, float], dict[str, Any]]:
        assert isinstance(model, AWDLSTM)
        with AveragedWeights(self.optimizer):
            return evaluate_perplexity(model, self.corpus.valid, self.spec, self.device), {}

    def end_of_epoch(
        self, epoch: int, metrics: dict[str, float], tracker: Tracker
    ) -> torch.optim.Optimizer | None:
        """Averaged SGD takes over after ``asgd_patience`` epochs without a better perplexity."""
        if metrics["perplexity"] < self.best:
            self.best, self.epochs_without_improvement = metrics["perplexity"], 0
        else:
            self.epochs_without_improvement += 1
        if (
            isinstance(self.optimizer, torch.optim.ASGD)
            or self.epochs_without_improvement < self.spec.asgd_patience
        ):
            return None
        tracker.event("switched_to_asgd", epoch=epoch)
        self.optimizer = torch.optim.ASGD(
            self.model.parameters(),
            lr=self.last_lr,
            t0=0,
            lambd=0.0,
            weight_decay=self.spec.optimizer.weight_decay,
        )
        return self.optimizer
