"""Word-level corpora for language modelling, as integer token streams.

- **WikiText-2** (Task 3a): the standard ``wiki.train.tokens``,
  ``wiki.valid.tokens`` and ``wiki.test.tokens`` files in
  ``<data dir>/wikitext-2/``. Every line is split on whitespace and ends with
  ``<eos>``; the vocabulary is the training file's words (33,278 of them).
- **markov** (the light variant): a deterministic generated corpus. A
  first-order Markov chain over 400 words plus ``<eos>``: each word has 6
  possible successors, picked by a Zipf-like popularity, with Dirichlet(1)
  probabilities, all from a fixed seed. A bigram count model of the training
  text scores a validation perplexity of about 7, one that ignores context
  (unigram) about 130, so the light target (6) needs the model to learn the
  transitions better than counting them does: one worker reaches it in about
  25 s on two CPU cores. Text is cheap to make (half a second), so nothing is stored.

Torch-free (NumPy only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scalebench.datasets import WIKITEXT2

WIKITEXT2_DIR = WIKITEXT2.folder
WIKITEXT2_FILES = dict(zip(("train", "valid", "test"), WIKITEXT2.files, strict=True))
EOS = "<eos>"


@dataclass(frozen=True)
class Corpus:
    """Token ids (``int64``) of each split and the words they stand for."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    words: list[str]


def tokenize(path: Path) -> list[str]:
    """The words of a WikiText file, ``<eos>`` after every line."""
    words: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            words += line.split()
            words.append(EOS)
    return words


def load_wikitext2(data_dir: Path) -> Corpus:
    WIKITEXT2.require(data_dir)
    folder = data_dir / WIKITEXT2_DIR
    splits = {split: tokenize(folder / name) for split, name in WIKITEXT2_FILES.items()}
    words = list(dict.fromkeys(splits["train"]))
    index = {word: i for i, word in enumerate(words)}
    unknown = index.get("<unk>", 0)
    ids = {
        split: np.fromiter(
            (index.get(w, unknown) for w in tokens), dtype=np.int64, count=len(tokens)
        )
        for split, tokens in splits.items()
    }
    return Corpus(ids["train"], ids["valid"], ids["test"], words)


def markov_corpus(
    words: int = 400,
    successors: int = 6,
    tokens: tuple[int, int, int] = (120_000, 12_000, 12_000),
    seed: int = 2017,
) -> Corpus:
    """The generated light corpus described in the module docstring (``<eos>`` is id 0)."""
    rng = np.random.default_rng(seed)
    vocabulary = words + 1
    popularity = 1.0 / np.arange(1, vocabulary + 1) ** 0.8
    popularity /= popularity.sum()
    transitions = np.zeros((vocabulary, vocabulary))
    for word in range(vocabulary):
        nexts = rng.choice(vocabulary, size=successors, replace=False, p=popularity)
        transitions[word, nexts] = rng.dirichlet(np.ones(successors))
    cumulative = np.cumsum(transitions, axis=1)
    draws = rng.random(sum(tokens))
    stream = np.empty(sum(tokens), dtype=np.int64)
    state = 0
    for i, u in enumerate(draws):
        state = min(int(np.searchsorted(cumulative[state], u)), vocabulary - 1)
        stream[i] = state
    train, valid = tokens[0], tokens[0] + tokens[1]
    names = [EOS] + [f"w{i:03d}" for i in range(1, vocabulary)]
    return Corpus(stream[:train], stream[train:valid], stream[valid:], names)


CORPORA: dict[str, Callable[[Path], Corpus]] = {
    "wikitext2": load_wikitext2,
    "markov": lambda _: markov_corpus(),
}


def load_corpus(name: str, data_dir: Path) -> Corpus:
    if name not in CORPORA:
        raise ValueError(f"unknown text corpus {name!r}")
    return CORPORA[name](data_dir)


def rank_columns(stream: np.ndarray, rank: int, world_size: int, columns: int) -> np.ndarray:
    """This rank's contiguous part of ``stream``, folded into ``columns`` parallel streams.

    Shape (rows, columns): column ``c`` continues down the rows, so a hidden
    state carried from one step to the next always follows its own text.
    Trailing tokens that do not fill a row are dropped.
    """
    part = len(stream) // world_size
    mine = stream[rank * part : (rank + 1) * part]
    rows = len(mine) // columns
    return mine[: rows * columns].reshape(columns, rows).T.copy()
