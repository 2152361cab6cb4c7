"""Sentences stored as token ids: one flat ``int32`` array per split and language, and the
offsets where each sentence starts (``<split>.<lang>.ids.npy``, ``.offsets.npy``). The
workers memory-map the ids, so a rank holds only what it reads."""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from workers.data.atomic import replaced_when_done


def ids_paths(folder: Path, split: str, lang: str) -> tuple[Path, Path]:
    """(ids, offsets) of ``split`` in language ``lang``."""
    return folder / f"{split}.{lang}.ids.npy", folder / f"{split}.{lang}.offsets.npy"


def save_sentences(folder: Path, split: str, lang: str, sentences: Iterable[Iterable[int]]) -> None:
    """Store ``sentences`` (each its ids), both files whole or not at all. The ids gather in
    typed arrays (4 bytes an id, not a Python int's 28): WMT's training text is over a
    hundred million of them."""
    ids = array("i")
    offsets = array("q", [0])
    for sentence in sentences:
        ids.extend(sentence)
        offsets.append(len(ids))
    ids_path, offsets_path = ids_paths(folder, split, lang)
    with replaced_when_done(ids_path) as partial:
        np.save(partial, np.frombuffer(ids, dtype=np.int32))
    with replaced_when_done(offsets_path) as partial:
        np.save(partial, np.frombuffer(offsets, dtype=np.int64))


def load_sentences(folder: Path, split: str, lang: str) -> list[np.ndarray]:
    """Each sentence of ``split`` in ``lang`` as ``int64`` ids."""
    ids_path, offsets_path = ids_paths(folder, split, lang)
    ids = np.load(ids_path, mmap_mode="r")
    offsets = np.load(offsets_path)
    return [np.asarray(ids[a:b], dtype=np.int64) for a, b in itertools.pairwise(offsets)]
