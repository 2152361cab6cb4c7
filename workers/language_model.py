"""Task 3a: AWD-LSTM language model trained to a validation perplexity.

The same loop as the other tasks, every phase timed:

    data → forward → loss → backward → communication → optimizer

Each rank trains on its own contiguous part of the training stream, folded
into ``batch_per_worker`` parallel columns; the hidden state is carried from
one step to the next (truncated backpropagation through time). Every step
draws its sequence length by the spec's rule and scales the learning rate by
``seq_len / bptt``. The loss adds activation regularisation (AR) and temporal
activation regularisation (TAR). Gradients are averaged with one flat
all-reduce, then clipped to the spec's norm ("optimizer" phase), so every
rank clips the same gradient.

SGD runs until the validation perplexity has not improved for
``asgd_patience`` epochs; then training switches to averaged SGD (ASGD), and
evaluations use the averaged weights. Perplexity is global: every rank scores
a part of the validation stream and the summed losses are all-reduced.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from workers.data.text import Corpus, load_corpus, rank_columns
from workers.image_classification import TrainingOptions
from workers.models.awd_lstm import AWDLSTM, detach
from workers.schedules import LearningRate
from workers.sync_sgd import GradientAllReduce, broadcast_model
from workers.tasks import LanguageModelSpec, TextData
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
def evaluate(
    model: AWDLSTM, stream: np.ndarray, spec: LanguageModelSpec, device: torch.device,
    columns: int = 10,
) -> dict[str, float]:  # fmt: skip
    """Perplexity and mean cross-entropy (nats per token) over ``stream``, global over ranks."""
    model.eval()
    data = torch.from_numpy(rank_columns(stream, dist.get_rank(), dist.get_world_size(),
                                         columns)).to(device)  # fmt: skip
    hidden = model.initial_hidden(columns)
    totals = torch.zeros(2, dtype=torch.float64, device=device)  # loss sum, tokens
    for start in range(0, data.size(0) - 1, spec.eval_seq_len):
        length = min(spec.eval_seq_len, data.size(0) - 1 - start)
        words, targets = data[start : start + length], data[start + 1 : start + 1 + length]
        logits, hidden, _, _ = model(words, hidden)
        totals[0] += F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                                     reduction="sum").double()  # fmt: skip
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


def train(
    spec: LanguageModelSpec, options: TrainingOptions, tracker: Tracker, device: torch.device
) -> str:
    """Train until the goal or the epoch limit; returns ``goal_reached`` or ``max_epochs``."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data_spec = spec.light_data if options.light else spec.data
    assert isinstance(data_spec, TextData)
    corpus: Corpus = load_corpus(data_spec.name, Path(options.data_dir))
    config = spec.light_model_config if options.light else spec.model_config

    torch.manual_seed(options.seed)
    model = AWDLSTM(len(corpus.words), config).to(device)
    broadcast_model(model)
    reducer = GradientAllReduce(model.parameters())
    optimizer: torch.optim.Optimizer = torch.optim.SGD(
        model.parameters(), lr=spec.optimizer.lr, weight_decay=spec.optimizer.weight_decay
    )
    schedule = LearningRate(spec.schedule, spec.optimizer.lr, world_size)
    columns = spec.batch_per_worker
    train_data = torch.from_numpy(rank_columns(corpus.train, rank, world_size, columns)).to(device)
    epochs = options.max_epochs or spec.epochs(options.light)
    # The sequence lengths are drawn from the same seed on every rank, so all
    # ranks take the same number of steps and meet at every all-reduce.
    lengths = random.Random(options.seed)
    steps = max(1, (train_data.size(0) - 1) // spec.bptt)
    best, epochs_without_improvement = math.inf, 0
    clock = tracker.clock

    tracker.start(
        task=spec.id,
        light=options.light,
        variant=options.variant,
        seed=options.seed,
        data_set=data_spec.name,
        train_samples=len(corpus.train),
        test_samples=len(corpus.valid),
        vocabulary=len(corpus.words),
        steps_per_epoch=steps,
        global_batch=columns * world_size,
        max_epochs=epochs,
        parameters=sum(p.numel() for p in model.parameters()),
        device=str(device),
        precision="fp32",
    )
    for epoch in range(epochs):
        tracker.begin_epoch(epoch)
        model.train()
        hidden = model.initial_hidden(columns)
        position, step = 0, 0
        while position < train_data.size(0) - 2:
            clock.start()
            length = min(sequence_length(spec, lengths), train_data.size(0) - 1 - position)
            words = train_data[position : position + length]
            targets = train_data[position + 1 : position + 1 + length]
            hidden = detach(hidden)
            clock.lap("data")

            logits, hidden, raw, dropped = model(words, hidden)
            clock.lap("forward")
            loss, _ = regularised_loss(logits, targets, raw, dropped, spec)
            clock.lap("loss")
            loss.backward()
            clock.lap("backward")

            global_loss = reducer(loss)
            clock.lap("communication")

            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.clip_norm)
            lr = schedule.at(epoch + min(step / steps, 1.0)) * length / spec.bptt
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            optimizer.zero_grad()
            clock.lap("optimizer")
            tracker.step(epoch, step, steps, length * columns, global_loss, lr)
            position += length
            step += 1

        started = tracker.now()
        with AveragedWeights(optimizer):
            metrics = evaluate(model, corpus.valid, spec, device)
        if tracker.evaluation(epoch, metrics, started):
            tracker.finish("goal_reached", epochs=epoch + 1)
            return "goal_reached"
        if metrics["perplexity"] < best:
            best, epochs_without_improvement = metrics["perplexity"], 0
        else:
            epochs_without_improvement += 1
        if (not isinstance(optimizer, torch.optim.ASGD)
                and epochs_without_improvement >= spec.asgd_patience):  # fmt: skip
            tracker.event("switched_to_asgd", epoch=epoch)
            optimizer = torch.optim.ASGD(model.parameters(), lr=lr, t0=0, lambd=0.0,
                                         weight_decay=spec.optimizer.weight_decay)  # fmt: skip
    tracker.finish("max_epochs", epochs=epochs)
    return "max_epochs"
