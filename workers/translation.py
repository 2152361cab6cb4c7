"""Tasks 4a and 4b: GNMT and a Transformer trained to a BLEU score with synchronous Adam.

The same loop as the other tasks, every phase timed:

    data → forward → loss → backward   (× update_freq passes, gradients accumulate)
         → communication → optimizer

Each rank takes its share of the sentence pairs, cut into batches of similar
lengths: at most ``batch_per_pass`` padded target tokens (Task 4b) or exactly
that many sentence pairs (Task 4a). The loss is label-smoothed cross-entropy
summed over target tokens; after the passes, gradients are summed over ranks
(one flat all-reduce) and divided by the global batch's size in the task's
unit, target tokens or sentences (a second, three-number all-reduce counts
them); the result is clipped when the task says so, and Adam updates. A step
record's ``samples`` are this rank's target tokens, so throughput reads in
tokens per second, and its loss is the mean per target token.

On a GPU the model runs in ``float16`` with ``float32`` master weights and the
task's dynamic loss scale (:mod:`workers.mixed_precision`); on a CPU it runs in
``float32`` and the start record says so. BLEU is scored by sacrebleu on the
detokenised beam-search translations (:mod:`workers.beam_search`) of the whole
test set, gathered from every rank; its signature is written into each
evaluation record.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from workers.beam_search import beam_search
from workers.bleu import corpus_bleu
from workers.data.batches import epoch_partition, shard
from workers.data.translation import (
    BOS,
    EOS,
    PAD,
    Bitext,
    load_bitext,
    sentence_batches,
    token_batches,
)  # fmt: skip
from workers.image_classification import TrainingOptions
from workers.mixed_precision import DynamicLossScale, MasterWeights
from workers.models.gnmt import GNMT
from workers.models.transformer import Transformer
from workers.schedules import gnmt_lr, transformer_lr
from workers.sync_sgd import GradientAllReduce, broadcast_model
from workers.tasks import GNMTConfig, ParallelText, TransformerConfig, TranslationSpec
from workers.tracker import Tracker


def padded(sentences: list[np.ndarray], start: int | None = None, end: int | None = None
           ) -> torch.Tensor:  # fmt: skip
    """(batch, longest) ids, padded with ``<pad>``, optionally framed by ``start``/``end``."""
    framed = [
        ([start] if start is not None else []) + s.tolist() + ([end] if end is not None else [])
        for s in sentences
    ]
    out = torch.full((len(framed), max(map(len, framed))), PAD, dtype=torch.long)
    for row, ids in enumerate(framed):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def pair_batch(bitext: Bitext, indices: np.ndarray, device: torch.device
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Source, decoder input (``<s>`` + target) and decoder output (target + ``</s>``)."""
    sources = [bitext.train_source[i] for i in indices]
    targets = [bitext.train_target[i] for i in indices]
    source = padded(sources).to(device)
    target_in = padded(targets, start=BOS).to(device)
    target_out = padded(targets, end=EOS).to(device)
    return source, target_in, target_out


TranslationModel = Transformer | GNMT


def build_model(spec: TranslationSpec, vocabulary: int, light: bool) -> TranslationModel:
    config = spec.light_model_config if light else spec.model_config
    if isinstance(config, GNMTConfig):
        return GNMT(vocabulary, config)
    assert isinstance(config, TransformerConfig)
    return Transformer(vocabulary, config, max_length=spec.max_length + 16)


def runs_in_half(device: torch.device) -> bool:
    """fp16 weights with fp32 masters on GPUs, as the text describes; fp32 elsewhere."""
    return device.type == "cuda"


def learning_rate(spec: TranslationSpec, update: int, total_updates: int, light: bool) -> float:
    """The task's rate at optimizer update ``update`` (from 0) of ``total_updates``."""
    warmup = spec.light_warmup_steps if light else spec.warmup_steps
    if spec.lr_schedule == "gnmt":
        d = spec.decay
        return gnmt_lr(update, total_updates, spec.optimizer.lr, warmup, d.start, d.interval,
                       d.max_decays, d.factor)  # fmt: skip
    return transformer_lr(update, spec.optimizer.lr, warmup)


@torch.no_grad()
def evaluate(model: TranslationModel, bitext: Bitext, device: torch.device, spec: TranslationSpec,
             batch: int = 64) -> tuple[dict[str, float], str]:  # fmt: skip
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


def train(
    spec: TranslationSpec, options: TrainingOptions, tracker: Tracker, device: torch.device
) -> str:
    """Train until the goal or the epoch limit; returns ``goal_reached`` or ``max_epochs``."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data_spec = spec.light_data if options.light else spec.data
    assert isinstance(data_spec, ParallelText)
    bitext = load_bitext(data_spec.name, Path(options.data_dir))
    keep = [i for i in range(len(bitext.train_source))
            if len(bitext.train_source[i]) <= spec.max_length
            and len(bitext.train_target[i]) < spec.max_length]  # fmt: skip
    target_lengths = np.asarray([len(t) + 1 for t in bitext.train_target])

    torch.manual_seed(options.seed)
    model = build_model(spec, bitext.vocabulary, options.light).to(device)
    half = runs_in_half(device)
    if half:
        model.half()
    broadcast_model(model)
    reducer = GradientAllReduce(model.parameters())
    masters = None
    if half:
        scale = spec.loss_scale
        masters = MasterWeights(model.parameters(), DynamicLossScale(
            scale.initial, scale.factor, scale.window, scale.max_scale))  # fmt: skip
    opt = spec.optimizer
    optimizer = torch.optim.Adam(
        masters.master if masters else model.parameters(),
        lr=0.0, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay,
    )  # fmt: skip
    update_freq = spec.update_freq(world_size, options.light)
    batch_per_pass = spec.batch_per_pass(world_size, options.light)
    make_batches = token_batches if spec.batch_unit == "tokens" else sentence_batches
    unit = 1 if spec.batch_unit == "tokens" else 2  # index into the step's totals
    epochs = options.max_epochs or spec.epochs(options.light)
    clock = tracker.clock
    update = 0
    total_updates = 0  # known once the first epoch is cut into batches

    tracker.start(
        task=spec.id,
        light=options.light,
        variant=options.variant,
        seed=options.seed,
        data_set=data_spec.name,
        train_samples=len(keep),
        test_samples=len(bitext.test_source),
        vocabulary=bitext.vocabulary,
        update_freq=update_freq,
        batch_per_pass=batch_per_pass,
        batch_unit=spec.batch_unit,
        max_epochs=epochs,
        parameters=sum(p.numel() for p in model.parameters()),
        device=str(device),
        precision="fp16" if half else "fp32",
        beam_size=spec.beam_size,
    )
    kept = np.asarray(keep)
    for epoch in range(epochs):
        tracker.begin_epoch(epoch)
        model.train()
        order = kept[epoch_partition(len(kept), rank, world_size, epoch, options.seed).numpy()]
        batches = make_batches(target_lengths, batch_per_pass, order)
        np.random.default_rng(options.seed + epoch).shuffle(batches)
        # Every rank must take the same number of updates: the smallest count.
        count = torch.tensor([len(batches) // update_freq], device=device)
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        steps = int(count.item())
        total_updates = total_updates or steps * epochs
        for step in range(steps):
            clock.start()
            totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss, tokens, sentences
            for micro in batches[step * update_freq : (step + 1) * update_freq]:
                source, target_in, target_out = pair_batch(bitext, micro, device)
                clock.lap("data")
                logits = model(source, target_in)
                clock.lap("forward")
                loss = F.cross_entropy(
                    logits.float().reshape(-1, logits.size(-1)), target_out.reshape(-1),
                    ignore_index=PAD, label_smoothing=spec.label_smoothing, reduction="sum",
                )  # fmt: skip
                totals += torch.stack([loss.detach().double(),
                                       (target_out != PAD).sum().double(),
                                       torch.tensor(float(len(micro)), dtype=torch.float64,
                                                    device=device)])  # fmt: skip
                clock.lap("loss")
                (loss * masters.scaler.scale if masters else loss).backward()
                clock.lap("backward")

            reducer(totals[0] / totals[1])  # sums would be averaged: see the normaliser below
            dist.all_reduce(totals, op=dist.ReduceOp.SUM)
            clock.lap("communication")

            # The reducer averaged over ranks; the mean gradient = sum / global batch size.
            normaliser = float(totals[unit]) / world_size
            lr = learning_rate(spec, update, total_updates, options.light)
            for group in optimizer.param_groups:
                group["lr"] = lr
            if masters is not None:
                masters.step(optimizer, normaliser=normaliser, clip_norm=spec.clip_norm)
            else:
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.div_(normaliser)
                if spec.clip_norm is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), spec.clip_norm)
                optimizer.step()
                optimizer.zero_grad()
            clock.lap("optimizer")
            update += 1
            mean_loss = float(totals[0] / totals[1])
            tracker.step(epoch, step, steps, int(totals[1]) // world_size, mean_loss, lr)

        started = tracker.now()
        metrics, signature = evaluate(model, bitext, device, spec)
        if tracker.evaluation(epoch, metrics, started, bleu_signature=signature):
            tracker.finish("goal_reached", epochs=epoch + 1, **scaler_state(masters))
            return "goal_reached"
    tracker.finish("max_epochs", epochs=epochs, **scaler_state(masters))
    return "max_epochs"


def scaler_state(masters: MasterWeights | None) -> dict[str, float]:
    """The loss scale at the end and how many updates an overflow skipped (fp16 runs)."""
    if masters is None:
        return {}
    return {"loss_scale": masters.scaler.scale, "skipped_updates": masters.scaler.skipped}
