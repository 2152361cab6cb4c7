"""Get a task's data set ready and prove it is intact, before any worker starts.

:func:`prepare` is idempotent. For CIFAR-10 it checks every batch file's
MD5 against the published checksums and reads each batch to check its format
(10,000 images of 3×32×32 bytes, labels 0–9); then it writes a stamp with each
file's size and modification time. While the stamp still matches the files,
the cache is *fresh* and nothing is hashed again. With ``download=True`` a
missing set is fetched from its official address, its archive checksum
verified, and unpacked. The digits set ships with scikit-learn and is only
checked for shape.

Torch-free: the Airflow side runs this.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from workers.data.sources import (
    CIFAR10_DIR,
    CIFAR10_SOURCE,
    CIFAR10_TEST_FILE,
    CIFAR10_TRAIN_FILES,
    DataSetMissing,
    require_cifar10,
)

# Published MD5 checksums of the python-pickle CIFAR-10 release.
CIFAR10_ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
STAMP = ".scalebench-verified.json"


class DataSetCorrupt(ValueError):
    """A data set file with the wrong checksum or format."""


@dataclass
class Prepared:
    """What :func:`prepare` found: ``status`` is ``fresh`` (stamp still valid),
    ``verified`` (checked now) or ``downloaded`` (fetched, then checked)."""

    name: str
    status: str
    location: str
    files: dict[str, str] = field(default_factory=dict)  # file name -> MD5
    bytes: int = 0


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


def download_cifar10(data_dir: Path, url: str, archive_md5: str) -> None:
    """Fetch the CIFAR-10 archive, check its MD5 and unpack it into ``data_dir``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=data_dir) as scratch:
        archive = Path(scratch) / "cifar-10-python.tar.gz"
        urllib.request.urlretrieve(url, archive)
        found = md5_of(archive)
        if found != archive_md5:
            raise DataSetCorrupt(f"{url}: archive MD5 {found}, expected {archive_md5}")
        with tarfile.open(archive) as tar:
            tar.extractall(data_dir, filter="data")


def prepare_cifar10(
    data_dir: Path,
    *,
    download: bool = False,
    url: str = CIFAR10_SOURCE,
    checksums: dict[str, str] = CIFAR10_MD5,
    archive_md5: str = CIFAR10_ARCHIVE_MD5,
) -> Prepared:
    folder = data_dir / CIFAR10_DIR
    names = [*CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE]
    status = "verified"
    try:
        require_cifar10(data_dir)
    except DataSetMissing:
        if not download:
            raise
        download_cifar10(data_dir, url, archive_md5)
        require_cifar10(data_dir)
        status = "downloaded"
    stamp_path = folder / STAMP
    states = {name: _file_state(folder / name) for name in names}
    total = sum(s["size"] for s in states.values())
    if status == "verified" and stamp_path.is_file():
        stamp = json.loads(stamp_path.read_text(encoding="utf-8"))
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
    stamp_path.write_text(
        json.dumps({"files": states, "checksums": checksums}, indent=1), encoding="utf-8"
    )
    return Prepared("cifar10", status, str(folder), dict(checksums), total)


def prepare_digits() -> Prepared:
    from sklearn.datasets import load_digits

    digits = load_digits()
    if digits.images.shape != (1797, 8, 8) or set(digits.target.tolist()) != set(range(10)):
        raise DataSetCorrupt(f"scikit-learn digits: unexpected shape {digits.images.shape}")
    return Prepared("digits", "verified", "sklearn.datasets.load_digits",
                    bytes=int(digits.images.nbytes))  # fmt: skip


def prepare(name: str, data_dir: Path, *, download: bool = False) -> Prepared:
    """Make data set ``name`` ready in ``data_dir`` (see the module docstring)."""
    if name == "cifar10":
        return prepare_cifar10(data_dir, download=download)
    if name == "digits":
        return prepare_digits()
    raise ValueError(f"unknown data set {name!r}")
