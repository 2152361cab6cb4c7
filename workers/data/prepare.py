"""Get a task's data set ready and prove it is intact, before any worker starts.

:func:`prepare` is idempotent: it names each data set's preparer (:data:`PREPARERS`).
CIFAR-10 is checked file by file against its published checksums
(:mod:`workers.data.cifar10`); epsilon is converted once from LIBSVM text
(:mod:`workers.data.epsilon`); WikiText-2 is unpacked from its archive and counted
(:mod:`workers.data.wikitext`); WMT16 and WMT17 are downloaded and prepared as their
references prepare them (:mod:`workers.data.wmt16`, :mod:`workers.data.wmt17`). A set
checked whole is stamped (:mod:`workers.data.stamps`): while the stamp matches the
files, the set is *fresh* and nothing is checked again. The digits set ships with
scikit-learn and is only checked for shape; the light stand-ins are generated.

Torch-free: the Airflow side runs this.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scalebench.datasets import DATA_SETS, DataSetCorrupt
from workers.data.cifar10 import prepare_cifar10
from workers.data.epsilon import prepare_epsilon, prepare_epsilon_like
from workers.data.stamps import Prepared
from workers.data.steps import preparation_lock


def prepare_digits(name: str = "digits") -> Prepared:
    """scikit-learn's digits, checked (``digits32`` is the same set, upscaled when loaded)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    if digits.images.shape != (1797, 8, 8) or set(digits.target.tolist()) != set(range(10)):
        raise DataSetCorrupt(f"scikit-learn digits: unexpected shape {digits.images.shape}")
    return Prepared(
        name, "verified", "sklearn.datasets.load_digits", bytes=int(digits.images.nbytes)
    )


def prepare_wikitext2(data_dir: Path, *, download: bool) -> Prepared:
    from workers.data.wikitext import prepare_wikitext2 as prepare_set

    return prepare_set(data_dir, download=download)


def prepare_markov() -> Prepared:
    from workers.data.text import markov_corpus

    corpus = markov_corpus()
    return Prepared(
        "markov",
        "verified",
        "generated (workers/data/text.py)",
        bytes=int(corpus.train.nbytes + corpus.valid.nbytes),
    )


def prepare_wmt16(data_dir: Path, *, download: bool) -> Prepared:
    from workers.data.wmt16 import prepare_wmt16 as prepare_set

    return prepare_set(data_dir, download=download)


def prepare_wmt17(data_dir: Path, *, download: bool) -> Prepared:
    from workers.data.wmt17 import prepare_wmt17 as prepare_set

    return prepare_set(data_dir, download=download)


def prepare_synthetic_pairs() -> Prepared:
    """The generated parallel text of the light translation tasks: built, and its size."""
    from workers.data.translation import synthetic_bitext

    bitext = synthetic_bitext()
    return Prepared(
        "synthetic",
        "verified",
        "generated (workers/data/translation.py)",
        bytes=sum(s.nbytes for s in bitext.train_source),
    )


# Every data set by name: how to make it ready in a data directory (``download``: may fetch).
PREPARERS: dict[str, Callable[[Path, bool], Prepared]] = {
    "cifar10": lambda data_dir, download: prepare_cifar10(data_dir, download=download),
    "digits": lambda data_dir, download: prepare_digits("digits"),
    "digits32": lambda data_dir, download: prepare_digits("digits32"),
    "epsilon": lambda data_dir, download: prepare_epsilon(data_dir, download=download),
    "epsilon_like": lambda data_dir, download: prepare_epsilon_like(),
    "wikitext2": lambda data_dir, download: prepare_wikitext2(data_dir, download=download),
    "markov": lambda data_dir, download: prepare_markov(),
    "wmt16-en-de": lambda data_dir, download: prepare_wmt16(data_dir, download=download),
    "wmt17-en-de": lambda data_dir, download: prepare_wmt17(data_dir, download=download),
    "synthetic": lambda data_dir, download: prepare_synthetic_pairs(),
}


def prepare(name: str, data_dir: Path, *, download: bool = False) -> Prepared:
    """Make data set ``name`` ready in ``data_dir`` (see the module docstring), holding its
    lock (:func:`workers.data.steps.preparation_lock`) when it lives on disk."""
    if name not in PREPARERS:
        raise ValueError(f"unknown data set {name!r}")
    if name not in DATA_SETS:
        return PREPARERS[name](data_dir, download)
    with preparation_lock(data_dir, name):
        return PREPARERS[name](data_dir, download)
