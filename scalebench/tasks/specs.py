"""Spec types for benchmark tasks (no torch, no numpy: cheap to import)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from scalebench.rank import PRECISIONS

WORLD_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)

# "sync": one flat all-reduce after backward, as the spec says;
# "ddp": DistributedDataParallel, for comparison.
TRAINING_VARIANTS: tuple[str, ...] = ("sync", "ddp")

# torch.compile of the training step (workers/compile.py): "off" eager, "on"
# compiled or refused, "auto" compiled where measured to pay.
COMPILE_SETTINGS: tuple[str, ...] = ("off", "on", "auto")


@dataclass(frozen=True)
class Goal:
    """When a training run has reached its target.

    ``metric`` names a value of the evaluation record (e.g. ``top1_accuracy``,
    in percent); ``direction`` is ``"max"`` when larger is better. ``percent``: the
    metric is on a scale of 0 to 100 (a percentage, or BLEU as sacrebleu gives it),
    which the MLPerf log gives as a fraction (:meth:`mlperf_value`); records, the
    database and thresholds keep the 0 to 100 scale.
    """

    metric: str
    direction: Literal["max", "min"]
    threshold: float
    light_threshold: float
    percent: bool = False

    def mlperf_value(self, value: float) -> float:
        """``value`` as the MLPerf log's ``eval_accuracy``, unitless: a 0-to-100 score as a
        fraction (89.17 % → 0.8917, BLEU 24.1 → 0.241), as MLPerf's rules state their
        targets (ResNet's top-1 and, in the 0.7 rules, GNMT's and Transformer's BLEU:
        an accuracy below 1); a metric of no fixed scale (perplexity, a loss) as it is."""
        return value / 100.0 if self.percent else value

    def target(self, light: bool) -> float:
        return self.light_threshold if light else self.threshold

    def reached(self, value: float, light: bool) -> bool:
        target = self.target(light)
        return value >= target if self.direction == "max" else value <= target

    def describe(self, light: bool) -> str:
        relation = "≥" if self.direction == "max" else "≤"
        return f"{self.metric} {relation} {self.target(light):g}"


@dataclass(frozen=True)
class OptimizerSpec:
    """Optimizer hyperparameters; ``lr`` is the single-worker (or peak) learning rate.

    ``betas`` and ``eps`` are Adam's; momentum, Nesterov and dampening SGD's.
    """

    name: Literal["sgd", "adam"]
    lr: float
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    dampening: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8


@dataclass(frozen=True)
class ScheduleSpec:
    """Learning-rate schedule.

    ``warmup`` ``"linear-log2k"``: the rate rises linearly from ``lr`` to
    ``lr × k`` over the first ``log2(k)`` epochs (Goyal et al.'s linear scaling
    rule with gradual warm-up); ``"scale-k"``: ``lr × k`` from the first step,
    without warm-up; ``"sqrt-k-over-3k"``: linearly from ``lr`` to ``lr × √k``
    over the first ``3k`` epochs; ``"none"``: ``lr``. A ``plateau_factor`` of 1
    means no decay. After warm-up the rate is multiplied by
    ``plateau_factor`` whenever the validation loss has not improved for
    ``plateau_patience`` consecutive epochs.
    """

    warmup: Literal["linear-log2k", "scale-k", "sqrt-k-over-3k", "none"]
    plateau_patience: int
    plateau_factor: float


@dataclass(frozen=True)
class ImageData:
    """An image-classification data set and its training-time augmentation.

    ``crop_padding`` pixels of zero padding before a random crop back to the
    original size; ``horizontal_flip`` mirrors half of the images.
    """

    name: str
    image_size: int
    channels: int
    classes: int
    crop_padding: int
    horizontal_flip: bool


@dataclass(frozen=True)
class TabularData:
    """A binary-classification data set of dense feature vectors (labels 0/1)."""

    name: str
    features: int
    train_samples: int
    test_samples: int


@dataclass(frozen=True)
class TextData:
    """A word-level language-modelling corpus (``<eos>`` ends every line)."""

    name: str
    vocabulary: int
    train_tokens: int
    valid_tokens: int


@dataclass(frozen=True)
class AWDLSTMConfig:
    """AWD-LSTM sizes and dropouts (Merity et al., 2017): the last layer's width is
    the embedding's, so the decoder can share the embedding matrix."""

    embedding: int = 400
    hidden: int = 1150
    layers: int = 3
    dropout_output: float = 0.4  # on the last layer's output (locked over time)
    dropout_between: float = 0.2  # between LSTM layers (locked)
    dropout_input: float = 0.65  # on the embedded words (locked)
    dropout_words: float = 0.1  # whole rows of the embedding matrix
    weight_drop: float = 0.5  # DropConnect on the hidden-to-hidden weights


@dataclass(frozen=True)
class ParallelText:
    """A translation corpus: sentence pairs, source → target language."""

    name: str
    source: str  # language code, e.g. "en"
    target: str


@dataclass(frozen=True)
class TransformerConfig:
    """Encoder-decoder Transformer sizes (Vaswani et al., 2017); embeddings are shared
    by encoder, decoder and the output projection (one joint vocabulary)."""

    model: int = 1024
    heads: int = 16
    feed_forward: int = 4096
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1


@dataclass(frozen=True)
class GNMTConfig:
    """GNMT sizes (Wu et al., 2016, as in NVIDIA's "GNMT v2"): ``layers`` LSTM layers
    in the encoder (the first bidirectional) and in the decoder, all ``hidden``
    wide, residual connections from layer ``residual_from`` (0-based) on."""

    hidden: int = 1024
    layers: int = 4
    dropout: float = 0.2
    residual_from: int = 2


@dataclass(frozen=True)
class StepDecay:
    """Multiply the rate by ``factor`` once ``start`` of training (a fraction of all
    updates) is done, then every further ``interval``, at most ``max_decays`` times."""

    start: float = 0.4
    interval: float = 0.05
    factor: float = 0.5
    max_decays: int = 4


@dataclass(frozen=True)
class LossScaleSpec:
    """Dynamic loss scaling of mixed-precision training (see workers/mixed_precision.py)."""

    initial: float
    factor: float = 2.0
    window: int = 2000
    max_scale: float | None = None


# The light variants' group limit (seconds): each reaches its target in minutes on a laptop.
LIGHT_TIME_LIMIT_S = 3600.0


@dataclass(frozen=True)
class TrainingSpec:
    """A time-to-accuracy training task (Task 1a and later)."""

    id: str
    title: str
    model: str
    data: ImageData | TabularData | TextData | ParallelText
    light_data: ImageData | TabularData | TextData | ParallelText
    world_sizes: tuple[int, ...]
    batch_per_worker: int
    optimizer: OptimizerSpec
    schedule: ScheduleSpec
    goal: Goal
    max_epochs: int
    light_max_epochs: int
    l2: float = 0.0  # loss regularisation: + l2/2 × ‖w‖² (weights only, not the bias)
    # "module:Class" of the task's adapter to the training engine (workers/engine.py)
    adapter: str = ""
    # device types ("cpu", "cuda") where compile "auto" compiles: measured to pay there
    compile_pays_on: tuple[str, ...] = ()
    # compiled on a GPU, the step's forward and backward are captured as CUDA graphs and
    # replayed (torch.compile's reduce-overhead mode, one graph per batch shape): for a task
    # whose batches have a few fixed shapes (the full batch, the epoch's last), where
    # replaying was measured to pay
    cuda_graphs: bool = False
    variants: tuple[str, ...] = TRAINING_VARIANTS  # the training variants this task implements
    precisions: tuple[str, ...] = PRECISIONS  # what the trigger form may ask for
    # MLPerf's name of the benchmark this task corresponds to (the MLPerf log's
    # submission_benchmark); "" where MLPerf has none (see workers.mlperf.benchmark_name)
    mlperf_benchmark: str = ""
    notes: str = ""
    # A group's wall-clock limit when the request gives none (seconds): its slowest group,
    # one worker on a CPU, must fit with room to spare (full task; light variant).
    time_limit_s: float = 24 * 3600.0
    light_time_limit_s: float = LIGHT_TIME_LIMIT_S
    kind: Literal["training"] = field(default="training", init=False)

    def epochs(self, light: bool) -> int:
        return self.light_max_epochs if light else self.max_epochs

    def group_time_limit_s(self, light: bool) -> float:
        """A group's wall-clock limit in seconds when the request gives none."""
        return self.light_time_limit_s if light else self.time_limit_s


@dataclass(frozen=True)
class LanguageModelSpec(TrainingSpec):
    """A training task on a token stream (Task 3a), with its sequence-length rule.

    Each step's length: ``bptt`` with probability ``1 − short_bptt_probability``,
    else ``bptt / 2``; then ``max(min_seq_len, round(Normal(that, seq_len_std)))``.
    The step's learning rate is scaled by ``seq_len / bptt``.
    """

    model_config: AWDLSTMConfig = AWDLSTMConfig()
    light_model_config: AWDLSTMConfig = AWDLSTMConfig()
    bptt: int = 70
    short_bptt_probability: float = 0.05
    seq_len_std: float = 5.0
    min_seq_len: int = 5
    eval_seq_len: int = 10
    clip_norm: float = 0.25
    activation_alpha: float = 2.0  # AR: α × mean(dropped last-layer output²)
    temporal_beta: float = 1.0  # TAR: β × mean((h_t − h_{t−1})²) of the raw last-layer output
    asgd_patience: int = 5  # epochs without a better validation perplexity before averaged SGD


@dataclass(frozen=True)
class AllReduceSpec:
    """The communication benchmark (Task 0).

    Sizes are element counts ``numpy.logspace(log10_min, log10_max, num=points)``
    rounded to integers (duplicates from rounding removed); each size is
    all-reduced ``repetitions`` times after ``warmup`` untimed repetitions.
    """

    id: str
    title: str
    world_sizes: tuple[int, ...]
    log10_min: float
    log10_max: float
    points: int
    repetitions: int
    warmup: int
    light_log10_max: float
    light_points: int
    light_repetitions: int
    dtypes: tuple[str, ...] = ("float32", "float16")
    notes: str = ""
    # A group's wall-clock limit when the request gives none (seconds; full, light).
    time_limit_s: float = 3600.0
    light_time_limit_s: float = LIGHT_TIME_LIMIT_S
    kind: Literal["allreduce"] = field(default="allreduce", init=False)

    def group_time_limit_s(self, light: bool) -> float:
        """A group's wall-clock limit in seconds when the request gives none."""
        return self.light_time_limit_s if light else self.time_limit_s

    def sizes(self, light: bool, max_elements: int | None = None) -> list[int]:
        """Element counts to measure, ascending and distinct: rounding the log-spaced
        points to whole elements merges some of the smallest (80 points give 77 sizes)."""
        import numpy as np

        top = self.light_log10_max if light else self.log10_max
        points = self.light_points if light else self.points
        sizes = np.unique(np.rint(np.logspace(self.log10_min, top, num=points)).astype(np.int64))
        return [int(s) for s in sizes if max_elements is None or s <= max_elements]


TaskSpec = TrainingSpec | AllReduceSpec


@dataclass(frozen=True)
class TranslationSpec(TrainingSpec):
    """A translation task (Tasks 4a, 4b): synchronous Adam, a BLEU goal.

    The global batch is ``global_batch`` target tokens (``batch_unit``
    ``"tokens"``) or sentence pairs (``"sentences"``); each worker takes at
    most ``max_batch_per_worker`` of them per forward pass and accumulates
    ``update_freq = max(1, global_batch / (max_batch_per_worker × k))``
    passes before the update. The summed loss's gradients are summed over all
    passes and ranks and divided by the global batch's count in that unit.

    Rate: ``warmup_steps`` of warm-up to ``optimizer.lr``, linear then
    ``1/√step`` (``lr_schedule`` ``"inverse-sqrt"``), or exponential then
    ``decay`` (``"gnmt"``). Training pairs have at most ``max_length`` tokens a
    side, test sentences at most ``test_max_length``; translations at most
    ``decode_max_length``, found by beam search with
    ``beam_size`` hypotheses and GNMT's length penalty (``length_penalty`` is
    its alpha; see workers/beam_search.py).
    """

    model_config: TransformerConfig | GNMTConfig = TransformerConfig()
    light_model_config: TransformerConfig | GNMTConfig = TransformerConfig()
    batch_unit: Literal["tokens", "sentences"] = "tokens"
    global_batch: int = 2**17
    light_global_batch: int = 2**12
    max_batch_per_worker: int = 8192
    lr_schedule: Literal["inverse-sqrt", "gnmt"] = "inverse-sqrt"
    warmup_steps: int = 1000
    light_warmup_steps: int = 100
    decay: StepDecay = StepDecay()
    label_smoothing: float = 0.1
    clip_norm: float | None = None
    max_length: int = 80
    test_max_length: int = 80  # test sentences (source tokens) longer than this are left out
    decode_max_length: int = 80
    beam_size: int = 4
    length_penalty: float = 0.6  # alpha of ((5 + length) / 6) ** alpha
    loss_scale: LossScaleSpec = LossScaleSpec(initial=2**7)

    def update_freq(self, world_size: int, light: bool) -> int:
        batch = self.light_global_batch if light else self.global_batch
        return max(1, batch // (self.max_batch_per_worker * world_size))

    def batch_per_pass(self, world_size: int, light: bool) -> int:
        """Target tokens or sentences one worker takes per forward pass."""
        batch = self.light_global_batch if light else self.global_batch
        return max(1, batch // (world_size * self.update_freq(world_size, light)))
