"""A small real filesystem for the tests that fill a disk: a tmpfs mounted for one test
(root only; the ``small_disk`` fixture in conftest.py), and filling it to what is to stay
free."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SIZE = 4 * 1024 * 1024  # bytes: the small filesystem


def free_bytes(path: Path) -> int:
    status = os.statvfs(path)
    return status.f_bavail * status.f_frsize


def fill(mount: Path, leave: int, name: str = "filler") -> None:
    """Write zeros to ``mount/name`` until about ``leave`` bytes stay free (tmpfs counts
    whole pages)."""
    with open(mount / name, "ab") as handle:
        remaining = free_bytes(mount) - leave
        while remaining > 0:
            handle.write(bytes(min(remaining, 1 << 20)))
            remaining -= 1 << 20
        handle.flush()


@contextmanager
def mounted(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for this test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        reason = f"cannot mount a small filesystem here ({done.stderr.strip()})"
        if os.geteuid() == 0:  # root can mount a tmpfs: a failure here is a real one
            pytest.fail(reason)
        pytest.skip(f"{reason}: needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
