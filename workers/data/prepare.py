"""Get a task's data set ready and prove it is intact, before any worker starts.

:func:`prepare` is idempotent. For CIFAR-10 it checks every batch file's
MD5 against the published checksums and reads each batch to check its format
(10,000 images of 3×32×32 bytes, labels 0–9); then it writes a stamp with each
file's size and modification time. While the stamp still matches the files,
the cache is *fresh* and nothing is hashed again. With ``download=True`` a
missing set is fetched from its official address, its archive checksum
verified, and unpacked. The digits set ships with scikit-learn and is only
checked for shape.

epsilon (Task 2a) comes as LIBSVM text files (``epsilon_normalized`` and
``epsilon_normalized.t``, optionally ``.bz2``-compressed; ``download=True``
fetches them from the LIBSVM site, which publishes no checksums). They are
converted once, in chunks read by scikit-learn's ``load_svmlight_file``, into
dense ``float32`` ``.npy`` arrays that the workers memory-map; the row counts,
feature count and ±1 labels are checked. Its light stand-in is generated.

Torch-free: the Airflow side runs this.
"""

from __future__ import annotations

import bz2
import hashlib
import json
import pickle
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalebench.datasets import CIFAR10, DATA_SETS, WMT_SETS, DataSetCorrupt, DataSetMissing
from workers.data.atomic import replaced_when_done
from workers.data.sources import (
    CIFAR10_DIR,
    CIFAR10_TEST_FILE,
    CIFAR10_TRAIN_FILES,
    CIFAR10_URL_VARIABLE,
    EPSILON_DIR,
    EPSILON_SOURCES,
    cifar10_url,
    epsilon_files,
)

# Published MD5 checksums of the python-pickle CIFAR-10 release.
CIFAR10_ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_ARCHIVE_BYTES = 170_498_071  # cifar-10-python.tar.gz
CIFAR10_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
STAMP = ".scalebench-verified.json"


@dataclass
class Prepared:
    """What :func:`prepare` found: ``status`` is ``fresh`` (stamp still valid),
    ``verified`` (checked now) or ``downloaded`` (fetched, then checked)."""

    name: str
    status: str
    location: str
    files: dict[str, str] = field(default_factory=dict)  # file name -> MD5
    bytes: int = 0


def write_stamp(path: Path, data: dict[str, Any]) -> None:
    """Write a stamp whole or not at all: a stamp cut short must never read as fresh."""
    with replaced_when_done(path) as partial:
        partial.write_text(json.dumps(data, indent=1), encoding="utf-8")


def read_stamp(path: Path) -> dict[str, Any]:
    """A stamp's content; ``{}`` (not fresh: check again) when it cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def md5_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _file_state(path: Path) -> dict[str, int]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _check_cifar_batch(path: Path) -> None:
    with path.open("rb") as handle:
        try:
            batch = pickle.load(handle, encoding="bytes")
        except Exception as exc:
            raise DataSetCorrupt(f"{path}: not a CIFAR-10 batch ({exc})") from None
    data, labels = batch.get(b"data"), batch.get(b"labels")
    if data is None or labels is None:
        raise DataSetCorrupt(f"{path}: no data/labels entries")
    if getattr(data, "shape", None) != (10000, 3072) or len(labels) != 10000:
        raise DataSetCorrupt(
            f"{path}: expected 10,000 images of 3072 bytes and 10,000 labels, "
            f"got {getattr(data, 'shape', None)} and {len(labels)}"
        )
    if not all(0 <= label <= 9 for label in labels):
        raise DataSetCorrupt(f"{path}: labels outside 0-9")


# How much more than the expected size a download may be before it is stopped: a source
# that never ends (a wrong mirror, ``file:///dev/zero``) must not fill the disk.
DOWNLOAD_MARGIN = 0.10


def fetch(
    url: str,
    target: Path,
    say: Callable[[str], None] = print,
    expected_bytes: int | None = None,
    max_bytes: int | None = None,
) -> None:
    """Download ``url`` into ``target``, saying how far it got about every 10 %.

    Raises :class:`DataSetMissing` naming the address when it cannot be fetched
    (no network, a wrong mirror, a server error), and :class:`DataSetCorrupt` when it
    goes on past ``expected_bytes`` plus :data:`DOWNLOAD_MARGIN`, or past ``max_bytes``
    for a file whose exact size is not known (what was written is left for the caller's
    scratch folder to remove).
    """
    started = time.monotonic()
    said = 0
    limit = max_bytes
    if expected_bytes is not None:
        limit = int(expected_bytes * (1 + DOWNLOAD_MARGIN))
    try:
        with urllib.request.urlopen(url) as response, target.open("wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or expected_bytes or 0
            done = 0
            while chunk := response.read(1 << 20):
                done += len(chunk)
                if limit is not None and done > limit:
                    size = (
                        f"the file is {expected_bytes:,}"
                        if expected_bytes is not None
                        else "no such file can be larger"
                    )
                    raise DataSetCorrupt(
                        f"{url}: more than {limit:,} bytes, where {size}; stopped (a wrong "
                        "address, or a source that never ends)"
                    )
                out.write(chunk)
                fraction = min(1.0, done / total) if total else 0.0
                if fraction * 10 >= said + 1:
                    said = int(fraction * 10)
                    elapsed = time.monotonic() - started
                    left = elapsed / fraction * (1 - fraction)
                    say(
                        f"{target.name}: {fraction:.0%} of {total / 1e6:.0f} MB, "
                        f"{elapsed:.0f} s elapsed, about {left:.0f} s to go"
                    )
    except DataSetCorrupt:
        raise
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
        raise DataSetMissing(f"could not download {url}: {exc}") from None


def download_cifar10(data_dir: Path, url: str, archive_md5: str) -> None:
    """Fetch the CIFAR-10 archive, check its MD5 and unpack it into ``data_dir``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=data_dir) as scratch:
        archive = Path(scratch) / "cifar-10-python.tar.gz"
        try:
            fetch(url, archive, expected_bytes=CIFAR10_ARCHIVE_BYTES)
        except DataSetMissing as exc:
            raise DataSetMissing(
                f"{exc}. Put the files in place by hand, or set {CIFAR10_URL_VARIABLE} to a "
                "mirror of the archive"
            ) from None
        found = md5_of(archive)
        if found != archive_md5:
            raise DataSetCorrupt(f"{url}: archive MD5 {found}, expected {archive_md5}")
        with tarfile.open(archive) as tar:
            tar.extractall(data_dir, filter="data")


def prepare_cifar10(
    data_dir: Path,
    *,
    download: bool = False,
    url: str | None = None,
    checksums: dict[str, str] = CIFAR10_MD5,
    archive_md5: str = CIFAR10_ARCHIVE_MD5,
) -> Prepared:
    folder = data_dir / CIFAR10_DIR
    names = [*CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE]
    status = "verified"
    try:
        CIFAR10.require(data_dir)
    except DataSetMissing:
        if not download:
            raise
        download_cifar10(data_dir, url or cifar10_url(), archive_md5)
        CIFAR10.require(data_dir)
        status = "downloaded"
    stamp_path = folder / STAMP
    states = {name: _file_state(folder / name) for name in names}
    total = sum(s["size"] for s in states.values())
    if status == "verified" and stamp_path.is_file():
        stamp = read_stamp(stamp_path)
        if stamp.get("files") == states and stamp.get("checksums") == checksums:
            return Prepared("cifar10", "fresh", str(folder), dict(checksums), total)
    for name in names:
        found = md5_of(folder / name)
        if found != checksums[name]:
            raise DataSetCorrupt(
                f"{folder / name}: MD5 {found}, expected {checksums[name]}; "
                "the file is damaged or not the official CIFAR-10 release"
            )
        _check_cifar_batch(folder / name)
    write_stamp(stamp_path, {"files": states, "checksums": checksums})
    return Prepared("cifar10", status, str(folder), dict(checksums), total)


def prepare_digits(name: str = "digits") -> Prepared:
    """scikit-learn's digits, checked (``digits32`` is the same set, upscaled when loaded)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    if digits.images.shape != (1797, 8, 8) or set(digits.target.tolist()) != set(range(10)):
        raise DataSetCorrupt(f"scikit-learn digits: unexpected shape {digits.images.shape}")
    return Prepared(
        name, "verified", "sklearn.datasets.load_digits", bytes=int(digits.images.nbytes)
    )


EPSILON_TEXT = {"train": "epsilon_normalized", "test": "epsilon_normalized.t"}
# The most bytes one row of LIBSVM text can take per feature ("1999:-0.0123456789012345 ",
# an index, a colon, a float as repr writes it, a space) and for its label and line end.
LIBSVM_FEATURE_BYTES, LIBSVM_ROW_BYTES = 32, 8


def libsvm_bound(rows: int, features: int) -> int:
    """The most bytes a LIBSVM text file of ``rows`` rows of ``features`` features can take:
    what a download or an unpacked ``.bz2`` of it may reach before it is stopped (the
    compressed file is smaller still)."""
    return rows * (features * LIBSVM_FEATURE_BYTES + LIBSVM_ROW_BYTES)


def convert_libsvm(
    source: Path,
    features: int,
    x_path: Path,
    y_path: Path,
    *,
    expected_rows: int | None = None,
    chunk_bytes: int = 256 << 20,
    say: Callable[[str], None] = print,
) -> int:
    """Convert a LIBSVM text file with ±1 labels into dense ``float32`` ``.npy`` arrays.

    Reads ``chunk_bytes`` of text at a time (``load_svmlight_file``'s
    ``offset``/``length`` split the file at line ends), so memory stays at one
    chunk's dense rows. Labels become 0 (−1) and 1 (+1). A file without rows, or
    with other than ``expected_rows``, is refused before anything is written; the
    arrays appear under their names only when complete. Returns the row count.
    """
    import numpy as np
    from sklearn.datasets import load_svmlight_file

    with source.open("rb") as handle:
        rows = sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 24), b""))
    if rows == 0 or (expected_rows is not None and rows != expected_rows):
        expected = f"{expected_rows:,}" if expected_rows is not None else "some"
        raise DataSetCorrupt(
            f"{source}: {rows:,} lines, expected {expected} rows; the file is cut short or "
            "not this data set: delete it and prepare again"
        )
    size = source.stat().st_size
    with replaced_when_done(x_path) as tmp_x, replaced_when_done(y_path) as tmp_y:
        x = np.lib.format.open_memmap(tmp_x, mode="w+", dtype=np.float32, shape=(rows, features))
        y = np.empty(rows, dtype=np.float32)
        done, offset, began = 0, 0, time.monotonic()
        while offset < size:
            chunk, labels = load_svmlight_file(
                str(source),
                n_features=features,
                dtype=np.float32,
                zero_based=False,
                offset=offset,
                length=chunk_bytes,
            )
            if not set(np.unique(labels).tolist()) <= {-1.0, 1.0}:
                raise DataSetCorrupt(f"{source}: labels other than -1 and +1")
            n = chunk.shape[0]
            x[done : done + n] = chunk.toarray()
            y[done : done + n] = labels > 0
            done += n
            offset += chunk_bytes
            rate = done / max(time.monotonic() - began, 1e-9)
            say(
                f"{source.name}: {done:,}/{rows:,} rows, "
                f"{(rows - done) / max(rate, 1e-9):.0f} s to go"
            )
        if done != rows:
            raise DataSetCorrupt(f"{source}: read {done:,} rows of {rows:,} lines")
        x.flush()
        del x
        np.save(tmp_y, y)
    return rows


def _text_source(folder: Path, name: str, download: bool, url: str, max_bytes: int) -> Path:
    """The LIBSVM text file ``name`` in ``folder``: as is, unpacked from ``.bz2``, or fetched;
    a download or an unpacking past ``max_bytes`` (:func:`libsvm_bound`) is stopped, so a
    wrong source cannot fill the disk."""
    text, packed = folder / name, folder / f"{name}.bz2"
    if text.is_file():
        return text
    if not packed.is_file():
        if not download:
            raise DataSetMissing(f"neither {text} nor {packed} exists")
        folder.mkdir(parents=True, exist_ok=True)
        with replaced_when_done(packed) as partial:
            fetch(url, partial, max_bytes=max_bytes)
    try:
        with (
            replaced_when_done(text) as unpacked,
            bz2.open(packed, "rb") as src,
            unpacked.open("wb") as dst,
        ):
            written = 0
            while chunk := src.read(1 << 24):
                written += len(chunk)
                if written > max_bytes:
                    raise DataSetCorrupt(
                        f"{packed}: unpacks to more than {max_bytes:,} bytes, more than its "
                        "rows can take; stopped (not the LIBSVM file)"
                    )
                dst.write(chunk)
    except DataSetCorrupt:
        raise
    except (OSError, EOFError, ValueError) as exc:
        raise DataSetCorrupt(
            f"{packed}: not a complete bzip2 file ({exc}); delete it and put the original "
            "there, or delete it and pass --download"
        ) from None
    return text


def prepare_epsilon(
    data_dir: Path,
    *,
    download: bool = False,
    features: int = 2000,
    rows: dict[str, int] | None = None,
    sources: dict[str, str] = EPSILON_SOURCES,
    say: Callable[[str], None] = print,
) -> Prepared:
    """Convert (once) and check epsilon; ``rows`` are the expected row counts per split."""
    import numpy as np

    rows = rows if rows is not None else {"train": 400_000, "test": 100_000}
    folder = data_dir / EPSILON_DIR
    files = epsilon_files(data_dir)
    stamp_path = folder / STAMP
    status = "verified"
    if not all(path.is_file() for path in files.values()):
        for split, name in EPSILON_TEXT.items():
            try:
                bound = libsvm_bound(rows[split], features)
                source = _text_source(folder, name, download, sources[split], bound)
            except DataSetMissing as exc:
                raise DataSetMissing(
                    f"epsilon: {exc}. Put LIBSVM's {name}.bz2 into {folder}, or pass --download"
                ) from None
            convert_libsvm(
                source,
                features,
                files[f"{split}_x"],
                files[f"{split}_y"],
                expected_rows=rows[split],
                say=say,
            )
        status = "converted"
    states = {path.name: _file_state(path) for path in files.values()}
    total = sum(state["size"] for state in states.values())
    fresh = stamp_path.is_file() and (read_stamp(stamp_path).get("files") == states)
    if status == "verified" and fresh:
        return Prepared("epsilon", "fresh", str(folder), bytes=total)
    for split, expected in rows.items():
        x = np.load(files[f"{split}_x"], mmap_mode="r")
        y = np.load(files[f"{split}_y"], mmap_mode="r")
        if x.shape != (expected, features) or y.shape != (expected,):
            raise DataSetCorrupt(
                f"epsilon {split}: expected {expected:,} rows of {features} features, "
                f"got {x.shape} with {y.shape[0]:,} labels"
            )
        if not set(np.unique(y).tolist()) <= {0.0, 1.0}:
            raise DataSetCorrupt(f"epsilon {split}: labels other than 0 and 1")
    write_stamp(stamp_path, {"files": states})
    return Prepared("epsilon", status, str(folder), bytes=total)


def prepare_epsilon_like() -> Prepared:
    from workers.data.sources import load_epsilon_like

    data = load_epsilon_like()
    if not 0.45 < float(data.train_y.mean()) < 0.55:
        raise DataSetCorrupt(f"generated epsilon-like rows: {data.train_y.mean():.2f} positive")
    return Prepared(
        "epsilon_like",
        "verified",
        "generated (workers/data/sources.py)",
        bytes=int(data.train_x.nbytes + data.test_x.nbytes),
    )


def prepare_wikitext2(data_dir: Path, *, vocabulary: int = 33_278) -> Prepared:
    """Check WikiText-2's token files: present, readable, and the published vocabulary size."""
    from workers.data.text import WIKITEXT2_DIR, WIKITEXT2_FILES, load_wikitext2

    folder = data_dir / WIKITEXT2_DIR
    files = [folder / name for name in WIKITEXT2_FILES.values()]
    states = {path.name: _file_state(path) for path in files if path.is_file()}
    stamp_path = folder / STAMP
    total = sum(state["size"] for state in states.values())
    if (
        len(states) == len(files)
        and stamp_path.is_file()
        and (read_stamp(stamp_path).get("files") == states)
    ):
        return Prepared("wikitext2", "fresh", str(folder), bytes=total)
    corpus = load_wikitext2(data_dir)  # raises DataSetMissing naming the files
    if len(corpus.words) != vocabulary:
        raise DataSetCorrupt(
            f"{folder}: {len(corpus.words):,} distinct training words, expected {vocabulary:,} "
            "(the tokenised wikitext-2-v1 release, not the raw one)"
        )
    write_stamp(stamp_path, {"files": states})
    return Prepared("wikitext2", "verified", str(folder), bytes=total)


def prepare_markov() -> Prepared:
    from workers.data.text import markov_corpus

    corpus = markov_corpus()
    return Prepared(
        "markov",
        "verified",
        "generated (workers/data/text.py)",
        bytes=int(corpus.train.nbytes + corpus.valid.nbytes),
    )


def prepare_parallel_text(data_dir: Path, name: str) -> Prepared:
    """Train the joint BPE model and encode a WMT corpus once; fresh while its text is unchanged."""
    from workers.data.translation import prepare_wmt, wmt_files

    DATA_SETS[name].require(data_dir)
    folder = data_dir / name
    states = {path.name: _file_state(path) for path in wmt_files(data_dir, name).values()}
    total = sum(state["size"] for state in states.values())
    stamp_path = folder / STAMP
    if (
        (folder / "bpe.json").is_file()
        and stamp_path.is_file()
        and (read_stamp(stamp_path).get("files") == states)
    ):
        return Prepared(name, "fresh", str(folder), bytes=total)
    pairs = prepare_wmt(data_dir, name)
    if pairs == 0:
        raise DataSetCorrupt(f"{folder}: no training sentence pairs")
    write_stamp(stamp_path, {"files": states})
    return Prepared(name, "converted", str(folder), bytes=total)


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
    "wikitext2": lambda data_dir, download: prepare_wikitext2(data_dir),
    "markov": lambda data_dir, download: prepare_markov(),
    **{
        name: (lambda data_dir, download, name=name: prepare_parallel_text(data_dir, name))
        for name in WMT_SETS
    },
    "synthetic": lambda data_dir, download: prepare_synthetic_pairs(),
}


def prepare(name: str, data_dir: Path, *, download: bool = False) -> Prepared:
    """Make data set ``name`` ready in ``data_dir`` (see the module docstring)."""
    if name not in PREPARERS:
        raise ValueError(f"unknown data set {name!r}")
    return PREPARERS[name](data_dir, download)
