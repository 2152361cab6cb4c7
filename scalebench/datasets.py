"""The full data sets the tasks train on: where each lives, what makes it loadable, how to get it.

One :class:`DataSet` per name a task spec gives (``spec.data.name``). It says
which folder under the data directory holds the set, which files must be there
for the workers to load it, whether ``prepare(..., download=True)`` can fetch
it, and whether that download is checked against checksums recorded in the code
(CIFAR-10: MD5 of the archive and of every batch; WMT16, WMT17 and WikiText-2:
each archive's SHA-256 or MD5; LIBSVM publishes none for epsilon, so its first
download's SHA-256 is kept and every later download checked against it).

Names not listed here (``digits32``, ``markov``, ``synthetic``, ...) are
generated or ship with a package: they need nothing on disk. Pure and
torch-free: validation reads it before any worker starts, and the workers'
loaders (:mod:`workers.data`) take their file names from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class DataSetMissing(FileNotFoundError):
    """A full data set is not where the task expects it."""


class DataSetCorrupt(ValueError):
    """A data set file with the wrong checksum, format or size."""


@dataclass(frozen=True)
class DataSet:
    """``files`` are relative to ``data_dir / folder``; ``how_to_get`` is the advice a missing
    set gives, with ``{data_dir}`` and ``{folder}`` filled in."""

    name: str
    title: str
    folder: str
    files: tuple[str, ...]
    how_to_get: str
    downloadable: bool = False
    published_checksums: bool = False

    def path(self, data_dir: Path) -> Path:
        return data_dir / self.folder

    def missing(self, data_dir: Path) -> list[Path]:
        """The files of this set absent from ``data_dir`` (empty when all are there)."""
        folder = self.path(data_dir)
        return [folder / name for name in self.files if not (folder / name).is_file()]

    def require(self, data_dir: Path) -> None:
        """Raise :class:`DataSetMissing` saying which files are missing and how to get them."""
        missing = self.missing(data_dir)
        if missing:
            names = ", ".join(p.name for p in missing)
            advice = self.how_to_get.format(data_dir=data_dir, folder=self.path(data_dir))
            raise DataSetMissing(
                f"{self.title} is not in {self.path(data_dir)} (missing: {names}). {advice}"
            )


CIFAR10_SOURCE = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10 = DataSet(
    name="cifar10",
    title="CIFAR-10",
    folder="cifar-10-batches-py",
    files=(*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"),
    how_to_get=(
        "Run `scalebench data cifar10 --download --data-dir {data_dir}`, or download "
        f"{CIFAR10_SOURCE} and unpack it into {{data_dir}} so that {{folder}}/data_batch_1 … "
        "data_batch_5 and test_batch exist, or run the light variant (--light), which needs "
        "no download."
    ),
    downloadable=True,
    published_checksums=True,
)
EPSILON = DataSet(
    name="epsilon",
    title="epsilon (prepared)",
    folder="epsilon",
    files=tuple(f"{split}_{part}.npy" for split in ("train", "test") for part in ("x", "y")),
    how_to_get=(
        "Run `scalebench data epsilon --download --data-dir {data_dir}`, or put LIBSVM's "
        "epsilon_normalized(.bz2) and epsilon_normalized.t(.bz2) into {folder} and run "
        "`scalebench data epsilon` to convert them; or run the light variant (--light)."
    ),
    downloadable=True,
)
WIKITEXT2 = DataSet(
    name="wikitext2",
    title="WikiText-2",
    folder="wikitext-2",
    files=("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens"),
    how_to_get=(
        "Run `scalebench data wikitext2 --download --data-dir {data_dir}` (or `scalebench "
        "data import DIR` with wikitext-2-v1.zip in DIR, then `scalebench data wikitext2`), "
        "or run the light variant (--light)."
    ),
    downloadable=True,
    published_checksums=True,
)


def _prepared_wmt(name: str, vocabulary: str, archives: str) -> DataSet:
    """A WMT set as its reference prepares it: what the workers read is each split's subword
    ids (:mod:`workers.data.sentences`), the vocabulary, and newstest2014's German text."""
    return DataSet(
        name=name,
        title=f"{name.split('-')[0].upper()} en-de (prepared)",
        folder=name,
        files=(
            vocabulary,
            "newstest2014.de",
            *(
                f"{split}.{lang}.{part}.npy"
                for split in ("train", "valid", "test")
                for lang in ("en", "de")
                for part in ("ids", "offsets")
            ),
        ),
        how_to_get=(
            f"Run `scalebench data {name} --download --data-dir {{data_dir}}` ({archives}; or "
            f"`scalebench data import DIR` with them in DIR, then `scalebench data {name}`), or "
            "run the light variant (--light)."
        ),
        downloadable=True,
        published_checksums=True,
    )


# WMT16 as the GNMT reference prepares it (workers/data/wmt16.py: Moses, 32,000-merge BPE);
# WMT17 as the MLPerf Transformer reference does (workers/data/wmt17.py: the wmt32k vocabulary).
WMT16 = _prepared_wmt("wmt16-en-de", "vocab.bpe.32000", "about 1.7 GB of archives")
WMT17 = _prepared_wmt(
    "wmt17-en-de", "vocab.ende.32768", "about 1.8 GB of archives, two of them shared with WMT16"
)
WMT_SETS = ("wmt16-en-de", "wmt17-en-de")
DATA_SETS = {data_set.name: data_set for data_set in (CIFAR10, EPSILON, WIKITEXT2, WMT16, WMT17)}


def downloadable(name: str) -> bool:
    """True when data set ``name`` can be fetched by ``scalebench data NAME --download``."""
    return name in DATA_SETS and DATA_SETS[name].downloadable


def published_checksums(name: str) -> bool:
    """True when a download of ``name`` is checked against checksums its publisher gives."""
    return name in DATA_SETS and DATA_SETS[name].published_checksums


def check_available(name: str, data_dir: Path) -> None:
    """Raise :class:`DataSetMissing` when data set ``name`` cannot be loaded from ``data_dir``
    (sets not listed are generated and always pass)."""
    if name in DATA_SETS:
        DATA_SETS[name].require(data_dir)
