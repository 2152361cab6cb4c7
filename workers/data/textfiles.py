"""Text files of a data set's preparation: members taken out of a tar archive, lines read
and written whole, and a step that maps every line of a file on all cores, in order, saying
how far it got."""

from __future__ import annotations

import itertools
import os
import shutil
import tarfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from scalebench.datasets import DataSetCorrupt
from workers.data.atomic import replaced_when_done

CHUNK_LINES = 20_000  # lines a process of the pool works on at a time


def extract_members(archive: Path, wanted: dict[str, Path]) -> None:
    """Write the members of tar ``archive`` whose file names are keys of ``wanted`` to their
    paths (found by file name, wherever they lie in it), each whole or not at all."""
    found: set[str] = set()
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                name = member.name.rpartition("/")[2]
                if member.isfile() and name in wanted and name not in found:
                    source = tar.extractfile(member)
                    assert source is not None
                    with replaced_when_done(wanted[name]) as partial, partial.open("wb") as out:
                        shutil.copyfileobj(source, out, 1 << 20)
                    found.add(name)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise  # the disk, not the archive
        raise DataSetCorrupt(
            f"{archive}: not a complete tar archive ({exc}); delete it and prepare again"
        ) from None
    missing = sorted(set(wanted) - found)
    if missing:
        raise DataSetCorrupt(
            f"{archive}: has no {', '.join(missing)}; not the archive of this data set"
        )


def read_lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8", errors="replace", newline="\n") as handle:
        for line in handle:
            yield line.rstrip("\n")


def write_lines(path: Path, lines: Iterable[str]) -> int:
    count = 0
    with replaced_when_done(path) as partial, partial.open("w", encoding="utf-8") as out:
        for line in lines:
            out.write(line + "\n")
            count += 1
    return count


def count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 24), b""))


def in_chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    source = iter(lines)
    while chunk := list(itertools.islice(source, size)):
        yield chunk


def map_lines(
    source: Path,
    target: Path,
    work: Callable[[list[str]], list[str]],
    say: Callable[[str], None],
    processes: int | None = None,
) -> None:
    """Write ``work`` of every line of ``source`` to ``target``, in order, ``CHUNK_LINES``
    lines at a time on ``processes`` processes (all cores; a file of one chunk runs here),
    saying how far it got with the time left about every 10 %."""
    total = count_lines(source)
    processes = processes or os.cpu_count() or 1
    began, done, said = time.monotonic(), 0, 0
    with replaced_when_done(target) as partial, partial.open("w", encoding="utf-8") as out:
        chunks = in_chunks(read_lines(source), CHUNK_LINES)
        if total <= CHUNK_LINES or processes == 1:
            results: Iterable[list[str]] = map(work, chunks)
            pool = None
        else:
            pool = ProcessPoolExecutor(processes)
            results = pool.map(work, chunks)
        try:
            for lines in results:
                out.writelines(line + "\n" for line in lines)
                done += len(lines)
                if total and done * 10 >= (said + 1) * total and done < total:
                    said = done * 10 // total
                    elapsed = time.monotonic() - began
                    left = elapsed / done * (total - done)
                    say(
                        f"{target.name}: {done:,} of {total:,} lines, {elapsed:.0f} s elapsed, "
                        f"about {left:.0f} s to go"
                    )
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)
