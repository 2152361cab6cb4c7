"""Parallel text for the translation tasks: token ids of sentence pairs, and a detokeniser.

- **WMT En→De** (Tasks 4a and 4b): plain-text sentence-aligned files in
  ``<data dir>/<name>/``: ``train.en``/``train.de`` and the test set
  ``newstest2014.en``/``newstest2014.de``. The preparation step
  (:func:`prepare_wmt`) trains one joint byte-pair encoding on the training
  text with the ``tokenizers`` library (SentencePiece-style ``▁`` word
  boundaries, so decoding gives back detokenised text), encodes every split
  once and stores the ids (``<split>.<lang>.ids.npy``) and sentence offsets
  (``<split>.<lang>.offsets.npy``) beside the BPE model (``bpe.json``).
- **synthetic** (the light variants): a generated language pair where BLEU is
  meaningful. English-like sentences come from a small grammar
  (``det [adj] noun verb det [adj] noun [prep det noun]``); the "German" side
  maps every word through a fixed dictionary and reorders: adjectives follow
  their noun and the verb goes to the end. A model must learn the words and the
  reordering; copying the source scores 0. Made from a fixed seed in a
  fraction of a second, so nothing is stored.

Ids 0–3 are ``<pad>``, ``<s>``, ``</s>``, ``<unk>`` in both.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scalebench.datasets import DATA_SETS, WMT_SETS, WMT_SPLITS, DataSetCorrupt, DataSetMissing
from workers.data.atomic import replaced_when_done

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


@dataclass
class Bitext:
    """Sentence pairs as id arrays (no ``<s>``/``</s>``), the test side's references
    as detokenised text, and the tokenizer that maps between the two."""

    train_source: list[np.ndarray]
    train_target: list[np.ndarray]
    test_source: list[np.ndarray]
    test_references: list[str]
    tokenizer: object  # ``get_vocab_size()`` and ``decode(ids)``: a ``tokenizers.Tokenizer``, or
    # WMT16's :class:`workers.data.wmt16.BpeVocabulary`

    @property
    def vocabulary(self) -> int:
        return self.tokenizer.get_vocab_size()  # type: ignore[attr-defined]

    def detokenize(self, ids: Iterable[int]) -> str:
        """Text of a generated id sequence (stops at ``</s>``; special ids dropped)."""
        kept = []
        for i in ids:
            if i == EOS:
                break
            if i > UNK:
                kept.append(int(i))
        return self.tokenizer.decode(kept)  # type: ignore[attr-defined]


# -- the synthetic light pair ------------------------------------------------------------------


def synthetic_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` (English-like, German-like) sentence pairs of the light language pair."""
    lexicon = random.Random(2017)  # the languages are fixed; ``seed`` picks the sentences
    nouns = [f"n{i}" for i in range(40)]
    adjectives = [f"a{i}" for i in range(20)]
    verbs = [f"v{i}" for i in range(20)]
    preps = [f"p{i}" for i in range(5)]
    dets = ["the", "a"]
    words = nouns + adjectives + verbs + preps + dets
    foreign = [f"g{i}" for i in range(len(words))]
    lexicon.shuffle(foreign)
    dictionary = dict(zip(words, foreign, strict=True))
    rng = random.Random(seed)

    def phrase() -> tuple[list[str], list[str]]:
        det, noun = rng.choice(dets), rng.choice(nouns)
        if rng.random() < 0.5:
            adj = rng.choice(adjectives)
            return [det, adj, noun], [dictionary[det], dictionary[noun], dictionary[adj]]
        return [det, noun], [dictionary[det], dictionary[noun]]

    pairs = []
    for _ in range(count):
        subject_en, subject_de = phrase()
        verb = rng.choice(verbs)
        object_en, object_de = phrase()
        english = [*subject_en, verb, *object_en]
        german = [*subject_de, *object_de]
        if rng.random() < 0.3:
            prep, det, noun = rng.choice(preps), rng.choice(dets), rng.choice(nouns)
            english += [prep, det, noun]
            german += [dictionary[prep], dictionary[det], dictionary[noun]]
        german.append(dictionary[verb])  # verb-final
        pairs.append((" ".join(english), " ".join(german)))
    return pairs


def word_tokenizer(texts: Iterable[str]) -> object:
    """A whole-word tokenizer over ``texts`` (the synthetic pair needs no subwords)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocabulary = {token: i for i, token in enumerate(SPECIALS)}
    for text in texts:
        for word in text.split():
            vocabulary.setdefault(word, len(vocabulary))
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return tokenizer


def synthetic_bitext(train: int = 12_000, test: int = 400) -> Bitext:
    train_pairs, test_pairs = synthetic_pairs(train, seed=1), synthetic_pairs(test, seed=2)
    tokenizer = word_tokenizer(text for pair in train_pairs for text in pair)

    def ids(texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, dtype=np.int64) for e in tokenizer.encode_batch(texts)]

    return Bitext(
        train_source=ids([s for s, _ in train_pairs]),
        train_target=ids([t for _, t in train_pairs]),
        test_source=ids([s for s, _ in test_pairs]),
        test_references=[t for _, t in test_pairs],
        tokenizer=tokenizer,
    )


# -- WMT -----------------------------------------------------------------------------------------


def wmt_files(data_dir: Path, name: str) -> dict[str, Path]:
    folder = data_dir / name
    return {
        f"{split}.{lang}": folder / f"{stem}.{lang}"
        for split, stem in WMT_SPLITS.items()
        for lang in ("en", "de")
    }


def train_bpe(texts: Iterable[str], vocabulary: int) -> object:
    """A joint BPE model with SentencePiece-style word boundaries (decodes to plain text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocabulary, special_tokens=SPECIALS, show_progress=False
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def prepare_wmt(data_dir: Path, name: str, vocabulary: int = 32_000, batch: int = 50_000) -> int:
    """Train the BPE model and encode every split once; returns the training pairs."""
    DATA_SETS[name].require(data_dir)
    files = wmt_files(data_dir, name)
    texts = {key: _lines(path) for key, path in files.items()}
    for split in WMT_SPLITS:
        english, german = files[f"{split}.en"], files[f"{split}.de"]
        if len(texts[f"{split}.en"]) != len(texts[f"{split}.de"]):
            raise DataSetCorrupt(
                f"{name}: {english} has {len(texts[f'{split}.en']):,} lines and {german} "
                f"{len(texts[f'{split}.de']):,}; a parallel corpus needs one German line per "
                "English line (sentence-aligned files)"
            )
    folder = data_dir / name
    (folder / "bpe.json").unlink(missing_ok=True)  # the mark of a finished preparation: last
    tokenizer = train_bpe(
        [line for lang in ("en", "de") for line in texts[f"train.{lang}"]], vocabulary
    )
    for key, lines in texts.items():
        ids: list[int] = []
        offsets = [0]
        for start in range(0, len(lines), batch):
            for encoding in tokenizer.encode_batch(lines[start : start + batch]):
                ids += encoding.ids
                offsets.append(len(ids))
        for suffix, values in (
            (".ids.npy", np.asarray(ids, dtype=np.int32)),
            (".offsets.npy", np.asarray(offsets, dtype=np.int64)),
        ):
            with replaced_when_done(folder / f"{key}{suffix}") as partial:
                np.save(partial, values)
    with replaced_when_done(folder / "bpe.json") as partial:
        tokenizer.save(str(partial))
    return len(texts["train.en"])


def load_wmt(data_dir: Path, name: str) -> Bitext:
    from tokenizers import Tokenizer

    folder = data_dir / name
    model = folder / "bpe.json"
    if not model.is_file():
        raise DataSetMissing(f"{name} is not prepared: run `scalebench data {name}` ({model})")

    def sentences(key: str) -> list[np.ndarray]:
        ids = np.load(folder / f"{key}.ids.npy", mmap_mode="r")
        offsets = np.load(folder / f"{key}.offsets.npy")
        return [np.asarray(ids[a:b], dtype=np.int64) for a, b in itertools.pairwise(offsets)]

    return Bitext(
        train_source=sentences("train.en"),
        train_target=sentences("train.de"),
        test_source=sentences("test.en"),
        test_references=_lines(wmt_files(data_dir, name)["test.de"]),
        tokenizer=Tokenizer.from_file(str(model)),
    )


def load_bitext(name: str, data_dir: Path) -> Bitext:
    if name == "synthetic":
        return synthetic_bitext()
    if name == "wmt16-en-de":
        from workers.data.wmt16 import load_wmt16

        splits, references, vocabulary = load_wmt16(data_dir)
        return Bitext(
            train_source=splits["train.en"],
            train_target=splits["train.de"],
            test_source=splits["test.en"],
            test_references=references,
            tokenizer=vocabulary,
        )
    if name in WMT_SETS:
        return load_wmt(data_dir, name)
    raise ValueError(f"unknown parallel corpus {name!r}")


def token_batches(lengths: np.ndarray, max_tokens: int, order: np.ndarray) -> list[np.ndarray]:
    """Cut ``order`` (sentence indices) into batches of at most ``max_tokens`` target tokens
    (padded: batch size × its longest sentence), similar lengths together."""
    by_length = order[np.argsort(lengths[order], kind="stable")]
    batches, current, longest = [], [], 0
    for index in by_length:
        longest_if_added = max(longest, int(lengths[index]))
        if current and longest_if_added * (len(current) + 1) > max_tokens:
            batches.append(np.asarray(current))
            current, longest_if_added = [], int(lengths[index])
        current.append(index)
        longest = longest_if_added
    if current:
        batches.append(np.asarray(current))
    return batches


def sentence_batches(lengths: np.ndarray, size: int, order: np.ndarray) -> list[np.ndarray]:
    """Cut ``order`` (sentence indices) into batches of ``size`` sentences (the last one
    may be smaller), similar target lengths together so little of a batch is padding."""
    by_length = order[np.argsort(lengths[order], kind="stable")]
    return [by_length[start : start + size] for start in range(0, len(by_length), size)]
