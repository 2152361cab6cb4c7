"""Data-set preparation: checksums and format verified, fresh caches skipped, downloads checked."""

from __future__ import annotations

import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from scalebench.datasets import DataSetCorrupt, DataSetMissing
from workers.data.cifar10 import prepare_cifar10
from workers.data.download import fetch
from workers.data.prepare import prepare
from workers.data.sources import CIFAR10_DIR
from workers.data.stamps import Prepared, md5_of

NAMES = [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]


def write_cifar_like(root: Path, images: int = 10000) -> dict[str, str]:
    """Batches in the CIFAR-10 pickle format (random bytes); returns their MD5s."""
    folder = root / CIFAR10_DIR
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in NAMES:
        batch = {
            b"data": rng.integers(0, 256, (images, 3072), dtype=np.uint8),
            b"labels": rng.integers(0, 10, images).tolist(),
        }
        with (folder / name).open("wb") as handle:
            pickle.dump(batch, handle)
    return {name: md5_of(folder / name) for name in NAMES}


def test_a_verified_set_is_fresh_until_a_file_changes(tmp_path: Path) -> None:
    checksums = write_cifar_like(tmp_path)
    first = prepare_cifar10(tmp_path, checksums=checksums)
    assert first.status == "verified" and first.files == checksums
    assert first.bytes > 6 * 30_000_000
    assert prepare_cifar10(tmp_path, checksums=checksums).status == "fresh"

    damaged = tmp_path / CIFAR10_DIR / "data_batch_3"
    data = bytearray(damaged.read_bytes())
    data[-10] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(DataSetCorrupt, match="data_batch_3: MD5"):
        prepare_cifar10(tmp_path, checksums=checksums)


def test_a_file_with_the_right_checksum_but_the_wrong_format_is_refused(tmp_path: Path) -> None:
    write_cifar_like(tmp_path, images=10)  # too few images per batch
    folder = tmp_path / CIFAR10_DIR
    checksums = {name: md5_of(folder / name) for name in NAMES}
    with pytest.raises(DataSetCorrupt, match="expected 10,000 images"):
        prepare_cifar10(tmp_path, checksums=checksums)
    assert not (folder / ".scalebench-verified.json").exists()


def test_files_not_matching_the_published_checksums_are_refused(tmp_path: Path) -> None:
    write_cifar_like(tmp_path, images=10)
    with pytest.raises(DataSetCorrupt, match="not the official CIFAR-10 release"):
        prepare(name="cifar10", data_dir=tmp_path)


def test_a_missing_set_is_refused_unless_downloading(tmp_path: Path) -> None:
    with pytest.raises(DataSetMissing, match="cifar-10-batches-py"):
        prepare("cifar10", tmp_path)


def test_a_download_is_checked_then_unpacked(tmp_path: Path) -> None:
    source = tmp_path / "source"
    checksums = write_cifar_like(source)
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source / CIFAR10_DIR, arcname=CIFAR10_DIR)
    target = tmp_path / "data"
    url = archive.as_uri()

    with pytest.raises(DataSetCorrupt, match="archive MD5"):
        prepare_cifar10(target, download=True, url=url, checksums=checksums, archive_md5="0" * 32)
    assert not (target / CIFAR10_DIR).exists()

    done = prepare_cifar10(
        target, download=True, url=url, checksums=checksums, archive_md5=md5_of(archive)
    )
    assert done.status == "downloaded"
    assert sorted(os.listdir(target)) == [CIFAR10_DIR]  # the archive itself is not kept


def test_a_mirror_is_used_and_checked_against_the_published_checksum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = tmp_path / "mirror.tar.gz"
    with tarfile.open(mirror, "w:gz") as tar:
        tar.add(__file__, arcname="not-cifar.py")
    monkeypatch.setenv("SCALEBENCH_CIFAR10_URL", mirror.as_uri())
    with pytest.raises(DataSetCorrupt, match=f"{mirror.name}: archive MD5 .*, expected c58f"):
        prepare("cifar10", tmp_path / "data", download=True)
    monkeypatch.setenv("SCALEBENCH_CIFAR10_URL", (tmp_path / "gone.tar.gz").as_uri())
    with pytest.raises(DataSetMissing, match=r"could not download .*gone\.tar\.gz.*a mirror"):
        prepare("cifar10", tmp_path / "data", download=True)
    # nothing half-written is left (the lock file of the set's preparations stays)
    assert os.listdir(tmp_path / "data") == [".cifar10.lock"]


def test_a_download_says_how_far_it_got(tmp_path: Path) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(os.urandom(3 << 20))
    lines: list[str] = []
    fetch(source.as_uri(), tmp_path / "copy.bin", say=lines.append)
    assert (tmp_path / "copy.bin").read_bytes() == source.read_bytes()
    assert 2 <= len(lines) <= 11 and lines[-1].startswith("copy.bin: 100% of 3 MB")
    assert "s to go" in lines[0]


def test_a_download_that_never_ends_is_stopped_past_its_expected_size(tmp_path: Path) -> None:
    target = tmp_path / "archive.tar.gz"
    with pytest.raises(DataSetCorrupt, match=r"more than 1,100 bytes, where the file is 1,000"):
        fetch("file:///dev/zero", target, say=lambda line: None, expected_bytes=1000)
    assert target.stat().st_size <= 1100  # nothing past the limit was written


def test_the_digits_set_needs_no_download() -> None:
    prepared = prepare("digits", Path("/nonexistent"))
    assert isinstance(prepared, Prepared) and prepared.status == "verified"
