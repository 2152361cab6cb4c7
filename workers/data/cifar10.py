"""CIFAR-10 made ready: downloaded where asked, every batch file's MD5 checked against the
published checksums and its format read (10,000 images of 3×32×32 bytes, labels 0–9), then
stamped (:mod:`workers.data.stamps`). With ``download=True`` a missing set is fetched from its
official address (or ``SCALEBENCH_CIFAR10_URL``), its archive checksum verified, and unpacked.

Loading the batches for training is :func:`workers.data.sources.load_cifar10`.
"""

from __future__ import annotations

import pickle
import tarfile
import tempfile
from pathlib import Path

from scalebench.datasets import CIFAR10, DataSetCorrupt, DataSetMissing
from workers.data.download import fetch
from workers.data.sources import (
    CIFAR10_DIR,
    CIFAR10_TEST_FILE,
    CIFAR10_TRAIN_FILES,
    CIFAR10_URL_VARIABLE,
    cifar10_url,
)
from workers.data.stamps import STAMP, Prepared, file_state, md5_of, read_stamp, write_stamp

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
        try:
            fetch(url, archive, expected_bytes=CIFAR10_ARCHIVE_BYTES)
        except DataSetMissing as exc:
            raise DataSetMissing(
                f"{exc}. Unpack the archive into {data_dir} yourself, or set "
                f"{CIFAR10_URL_VARIABLE} to a mirror of the archive"
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
    states = {name: file_state(folder / name) for name in names}
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
