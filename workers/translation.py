"""The adapter of Tasks 4a and 4b: GNMT and a Transformer trained to a BLEU score with Adam.

The loop is workers/engine.py; a step here is ``update_freq`` passes whose
gradients accumulate before one update. Each rank takes its share of the
sentence pairs, cut into batches of similar lengths: at most
``batch_per_pass`` padded target tokens (Task 4b) or exactly that many
sentence pairs (Task 4a). The loss is label-smoothed cross-entropy
summed over target tokens; after the passes, gradients are summed over ranks
(one flat all-reduce) and divided by the global batch's size in the task's
unit, target tokens or sentences (a second, three-number all-reduce counts
them); the result is clipped when the task says so, and Adam updates. A step
record's ``samples`` are the global batch's target tokens divided by the
number of ranks, so throughput reads in tokens per second, and its loss is
the mean per target token.

On a GPU the model runs in ``float16`` with ``float32`` master weights and the
task's dynamic loss scale (:mod:`workers.mixed_precision`); on a CPU it runs in
``float32`` and the start record says so. BLEU is scored by sacrebleu on the
detokenised beam-search translations (:mod:`workers.beam_search`) of the whole
test set, gathered from every rank; its signature is written into each
evaluation record.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from scalebench.tasks import GNMTConfig, ParallelText, TransformerConfig, TranslationSpec
from workers.adapter import Batch, Step, TaskAdapter, TrainingOptions
from workers.beam_search import beam_search
from workers.bleu import corpus_bleu
from workers.data.batches import epoch_partition, shard, to_device
from workers.data.translation import (
    BOS,
    EOS,
    PAD,
    Bitext,
    load_bitext,
    sentence_batches,
    token_batches,
)
from workers.models.gnmt import GNMT
from workers.models.transformer import Transformer
from workers.schedules import gnmt_lr, transformer_lr


def padded(
    sentences: list[np.ndarray], start: int | None = None, end: int | None = None
) -> torch.Tensor:
    """(batch, longest) ids, padded with ``<pad>``, optionally framed by ``start``/``end``.

    Filled in one vectorised assignment: the ids of all sentences, concatenated, go to the
    cells each row's mask selects (row-major order is the concatenation's order).
    """
    lead = 0 if start is None else 1
    lengths = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
    framed = lengths + lead + (0 if end is None else 1)
    out = np.full((len(sentences), int(framed.max())), PAD, dtype=np.int64)
    columns = np.arange(out.shape[1])
    body = (columns >= lead) & (columns < (lengths + lead)[:, None])
    out[body] = np.concatenate(sentences) if len(sentences) else []
    if start is not None:
        out[:, 0] = start
    if end is not None:
        out[np.arange(len(sentences)), lengths + lead] = end
    return torch.from_numpy(out)


def pair_batch(
    bitext: Bitext, indices: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source, decoder input (``<s>`` + target) and decoder output (target + ``</s>``)."""
    sources = [bitext.train_source[i] for i in indices]
    targets = [bitext.train_target[i] for i in indices]
    return padded(sources), padded(targets, start=BOS), padded(targets, end=EOS)


def source_lengths(bitext: Bitext, indices: np.ndarray) -> torch.Tensor:
    """The sources' lengths (at least 1) as a CPU tensor: what GNMT's packed encoder takes
    without asking the GPU for them."""
    return torch.tensor([max(len(bitext.train_source[i]), 1) for i in indices])


TranslationModel = Transformer | GNMT


def build_model(spec: TranslationSpec, vocabulary: int, light: bool) -> TranslationModel:
    config = spec.light_model_config if light else spec.model_config
    if isinstance(config, GNMTConfig):
        return GNMT(vocabulary, config)
    assert isinstance(config, TransformerConfig)
    return Transformer(vocabulary, config, max_length=spec.max_length + 16)


def learning_rate(spec: TranslationSpec, update: int, total_updates: int, light: bool) -> float:
    """The task's rate at optimizer update ``update`` (from 0) of ``total_updates``."""
    warmup = spec.light_warmup_steps if light else spec.warmup_steps
    if spec.lr_schedule == "gnmt":
        d = spec.decay
        return gnmt_lr(
            update,
            total_updates,
            spec.optimizer.lr,
            warmup,
            d.start,
            d.interval,
            d.max_decays,
            d.factor,
        )
    return transformer_lr(update, spec.optimizer.lr, warmup)


@torch.no_grad()
def evaluate_bleu(
    model: TranslationModel,
    bitext: Bitext,
    device: torch.device,
    spec: TranslationSpec,
    batch: int = 64,
) -> tuple[dict[str, float], str]:
    """(BLEU in 0–100, sacrebleu signature) of the whole test set's beam-search translations."""
    model.eval()
    part = shard(len(bitext.test_source), dist.get_rank(), dist.get_world_size())
    mine: list[tuple[int, str]] = []
    for start in range(part.start, part.stop, batch):
        stop = min(start + batch, part.stop)
        source = padded(bitext.test_source[start:stop]).to(device)
        longest = min(spec.decode_max_length, 2 * source.size(1) + 10)  # of similar length
        found = beam_search(model, source, spec.beam_size, longest, spec.length_penalty)
        for offset, ids in enumerate(found.tolist()):
            mine.append((start + offset, bitext.detokenize(ids)))
    gathered: list[list[tuple[int, str]]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, mine)
    hypotheses = [text for _, text in sorted(pair for part in gathered for pair in part)]
    score, signature = corpus_bleu(hypotheses, bitext.test_references)
    return {"bleu": score}, signature


class Translation(TaskAdapter[np.ndarray]):
    """Passes are arrays of sentence-pair indices of similar lengths."""

    spec: TranslationSpec
    loss_sum = True
    half_on_gpu = True

    def __init__(
        self, spec: TranslationSpec, options: TrainingOptions, device: torch.device
    ) -> None:
        super().__init__(spec, options, device)
        assert isinstance(self.data_spec, ParallelText)
        bitext = load_bitext(self.data_spec.name, options.data_dir)
        # The text tests on sentences of at most test_max_length tokens: the rest is left out.
        tested = [i for i, s in enumerate(bitext.test_source) if len(s) <= spec.test_max_length]
        self.test_left_out = len(bitext.test_source) - len(tested)
        if self.test_left_out:
            bitext = replace(
                bitext,
                test_source=[bitext.test_source[i] for i in tested],
                test_references=[bitext.test_references[i] for i in tested],
            )
        self.bitext = bitext
        source, target = self.bitext.train_source, self.bitext.train_target
        self.kept = np.asarray(
            [
                i
                for i in range(len(source))
                if len(source[i]) <= spec.max_length and len(target[i]) < spec.max_length
            ]
        )
        self.target_lengths = np.asarray([len(t) + 1 for t in target])
        self.update_freq = spec.update_freq(self.world_size, options.light)
        self.batch_per_pass = spec.batch_per_pass(self.world_size, options.light)
        self.clip_norm = spec.clip_norm
        self.loss_scale = spec.loss_scale
        self.epochs = options.max_epochs or spec.epochs(options.light)
        self.update = 0
        self.total_updates = 0  # known once the first epoch is cut into batches
        # On a GPU, batches are copied on a side stream, staged one step ahead (prefetch).
        self.copy_stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.staged: list[tuple[np.ndarray, Batch]] = []

    def build_model(self) -> torch.nn.Module:
        return build_model(self.spec, self.bitext.vocabulary, self.options.light)

    def build_optimizer(self, parameters: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """Adam; fused on a GPU, where it skips an overflowing fp16 update without making the
        host wait (:func:`workers.mixed_precision.skips_on_device`)."""
        opt = self.spec.optimizer
        return torch.optim.Adam(
            parameters,
            lr=0.0,
            betas=opt.betas,
            eps=opt.eps,
            weight_decay=opt.weight_decay,
            fused=self.device.type == "cuda",
        )

    def start_details(self) -> dict[str, Any]:
        return {
            "train_samples": len(self.kept),
            "test_samples": len(self.bitext.test_source),
            "test_samples_left_out": self.test_left_out,
            "vocabulary": self.bitext.vocabulary,
            "update_freq": self.update_freq,
            "batch_per_pass": self.batch_per_pass,
            "batch_unit": self.spec.batch_unit,
            "beam_size": self.spec.beam_size,
        }

    def steps(self, epoch: int) -> list[Step[np.ndarray]]:
        """The epoch's batches, shuffled, ``update_freq`` a step; the same count on every rank."""
        order = self.kept[
            epoch_partition(
                len(self.kept), self.rank, self.world_size, epoch, self.options.seed
            ).numpy()
        ]
        make_batches = token_batches if self.spec.batch_unit == "tokens" else sentence_batches
        batches = make_batches(self.target_lengths, self.batch_per_pass, order)
        np.random.default_rng(self.options.seed + epoch).shuffle(batches)
        count = torch.tensor([len(batches) // self.update_freq], device=self.device)
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        steps = int(count.item())
        self.total_updates = self.total_updates or steps * self.epochs
        uf = self.update_freq
        return [Step(batches[i * uf : (i + 1) * uf]) for i in range(steps)]

    def stage(self, item: np.ndarray) -> Batch:
        """One pass's batch built on the host and (on a GPU) copied from pinned memory on the
        side stream: nothing waits for the copy here."""
        source, target_in, target_out = pair_batch(self.bitext, item)
        lengths = source_lengths(self.bitext, item)
        tokens = int((target_out != PAD).sum())
        with torch.cuda.stream(self.copy_stream) if self.copy_stream else nullcontext():
            source, target_in, target_out = (
                to_device(t, self.device) for t in (source, target_in, target_out)
            )
        return Batch(
            inputs=(source, target_in, lengths),
            targets=target_out,
            samples=tokens,
            units=tokens if self.spec.batch_unit == "tokens" else len(item),
        )

    def prefetch(self, step: Step[np.ndarray]) -> None:
        """On a GPU, the next step's batches are built and their copies queued now, while the
        device computes the current step (on a CPU nothing overlaps: :meth:`load` builds)."""
        if self.copy_stream is not None:
            self.staged = [(item, self.stage(item)) for item in step.passes]

    def load(self, item: np.ndarray) -> Batch:
        """The pass's staged batch (else staged now); the compute stream waits for its copy
        on the device, not the host."""
        if self.staged and self.staged[0][0] is item:
            batch = self.staged.pop(0)[1]
        else:
            self.staged = []
            batch = self.stage(item)
        if self.copy_stream is not None:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_stream(self.copy_stream)
            for tensor in (*batch.inputs[:2], batch.targets):
                tensor.record_stream(compute)  # its memory is not reused while compute reads it
        return batch

    def loss(self, output: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Label-smoothed cross-entropy summed over the batch's target tokens."""
        return F.cross_entropy(
            output.float().reshape(-1, output.size(-1)),
            batch.targets.reshape(-1),
            ignore_index=PAD,
            label_smoothing=self.spec.label_smoothing,
            reduction="sum",
        )

    def learning_rate(self, epoch: int, index: int, step: Step[np.ndarray], steps: int) -> float:
        lr = learning_rate(self.spec, self.update, self.total_updates, self.options.light)
        self.update += 1
        return lr

    def evaluate(self, model: torch.nn.Module) -> tuple[dict[str, float], dict[str, Any]]:
        assert isinstance(model, Transformer | GNMT)
        metrics, signature = evaluate_bleu(model, self.bitext, self.device, self.spec)
        return metrics, {"bleu_signature": signature}
