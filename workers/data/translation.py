"""Parallel text for the translation tasks: token ids of sentence pairs, and a detokeniser.

- **WMT En→De** (Tasks 4a and 4b): prepared as their references prepare them,
  WMT16 with Moses and a 32,000-merge BPE (:mod:`workers.data.wmt16`), WMT17
  with the ``wmt32k`` subword vocabulary (:mod:`workers.data.wmt17`). Each
  split is stored as ids (``<split>.<lang>.ids.npy``) with sentence offsets;
  newstest2014's German text is what BLEU is scored against.
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

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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
    tokenizer: object  # ``get_vocab_size()`` and ``decode(ids)``: a ``tokenizers.Tokenizer``
    # (the light pair), WMT16's ``BpeVocabulary`` or WMT17's ``SubtokenVocabulary``

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


# -- WMT ----------------------------------------------------------------------------------------


def load_bitext(name: str, data_dir: Path) -> Bitext:
    """The parallel text ``name``: the generated light pair, or a prepared WMT set."""
    if name == "synthetic":
        return synthetic_bitext()
    if name == "wmt16-en-de":
        from workers.data.wmt16 import load_wmt16 as load
    elif name == "wmt17-en-de":
        from workers.data.wmt17 import load_wmt17 as load
    else:
        raise ValueError(f"unknown parallel corpus {name!r}")
    splits, references, vocabulary = load(data_dir)
    return Bitext(
        train_source=splits["train.en"],
        train_target=splits["train.de"],
        test_source=splits["test.en"],
        test_references=references,
        tokenizer=vocabulary,
    )


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
