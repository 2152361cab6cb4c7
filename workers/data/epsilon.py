"""epsilon (Task 2a) made ready, and its light stand-in checked.

epsilon comes as LIBSVM text files (``epsilon_normalized`` and ``epsilon_normalized.t``,
optionally ``.bz2``-compressed; ``download=True`` fetches them from the LIBSVM site into the
downloads folder; it publishes no checksums, so the first download's SHA-256 is kept and
every later download is checked against it). They are converted once, in chunks read by
scikit-learn's ``load_svmlight_file``, into dense ``float32`` ``.npy`` arrays that the
workers memory-map; the row counts, feature count and ±1 labels are checked. Its light
stand-in is generated.
"""

from __future__ import annotations

import bz2
import time
from collections.abc import Callable
from pathlib import Path

from scalebench.datasets import DataSetCorrupt, DataSetMissing
from workers.data.archives import Archive, obtain
from workers.data.atomic import replaced_when_done
from workers.data.sources import EPSILON_DIR, EPSILON_SOURCES, epsilon_files
from workers.data.stamps import STAMP, Prepared, file_state, read_stamp, write_stamp

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


def epsilon_archive(split: str, url: str, max_bytes: int) -> Archive:
    """The LIBSVM file of ``split``: no checksum is published, so the first download's
    SHA-256 is kept and every later download must match it (:mod:`workers.data.archives`)."""
    return Archive("libsvm", url, f"{EPSILON_TEXT[split]}.bz2", max_bytes=max_bytes)


def _text_source(
    folder: Path, split: str, download: bool, url: str, max_bytes: int, say: Callable[[str], None]
) -> Path:
    """The LIBSVM text file of ``split`` in ``folder``: as is, unpacked from a ``.bz2`` put
    there or fetched into the downloads folder (:func:`workers.data.archives.obtain`); an
    unpacking past ``max_bytes`` (:func:`libsvm_bound`) is stopped, so a wrong source cannot
    fill the disk."""
    name = EPSILON_TEXT[split]
    text, packed = folder / name, folder / f"{name}.bz2"
    if text.is_file():
        return text
    if not packed.is_file():
        archive = epsilon_archive(split, url, max_bytes)
        try:
            packed = obtain(archive, folder.parent, download=download, say=say)
        except DataSetMissing:
            if download:
                raise
            raise DataSetMissing(f"neither {text} nor {packed} exists") from None
    folder.mkdir(parents=True, exist_ok=True)
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
        if isinstance(exc, OSError) and exc.errno is not None:
            raise  # the disk (full, read-only), not the file: the caller names it
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
                source = _text_source(folder, split, download, sources[split], bound, say)
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
    states = {path.name: file_state(path) for path in files.values()}
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
