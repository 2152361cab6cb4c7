"""The files a full data set is made from, as their publishers serve them: where each comes
from (or its mirror), its SHA-256, and one call that makes it present and checked.

- :class:`Archive` names one file: the source it belongs to, its official address, its
  SHA-256 and size where they are known (recorded here, from the publisher or from the
  first download that matched them), and its name in the downloads folder.
- Mirrors: ``SCALEBENCH_DATA_MIRRORS`` gives a base address per source
  (``statmt=https://mirror.example/statmt,libsvm=file:///srv/libsvm``); an archive from a
  mirrored source is fetched from the base followed by its official address's path.
- :func:`obtain` puts an archive in ``<data dir>/downloads``: downloaded, resumed when an
  earlier try stopped, and checked. A wrong SHA-256 deletes what arrived and names the file.
  Where no SHA-256 is recorded (LIBSVM publishes none), the first download's is kept in
  ``downloads/digests.json`` and every later one must match it; a file given by hand
  (imported, or put there) is taken unchecked but never sets that digest.
- :func:`import_archives`: ``scalebench data import DIR``, archives a user already has,
  recognised by their SHA-256 (or, for those without one, by name) and checked the same way.

Torch-free: the Airflow side and the data pod run this.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from scalebench.datasets import DataSetCorrupt, DataSetMissing
from workers.data.atomic import replaced_when_done
from workers.data.download import fetch
from workers.data.stamps import file_state

MIRRORS_VARIABLE = "SCALEBENCH_DATA_MIRRORS"
DOWNLOADS = "downloads"  # under the data directory
DIGESTS = "digests.json"  # in the downloads folder: each archive's SHA-256 as checked


@dataclass(frozen=True)
class Archive:
    """One file as its publisher serves it; ``sha256``, ``md5`` and ``bytes`` ``None`` where
    unknown (an MD5 is checked where it is all that is published)."""

    source: str  # the mirror key: statmt, libsvm, wikitext, ...
    url: str
    file: str  # its name in the downloads folder (unique across the data sets)
    sha256: str | None = None
    bytes: int | None = None
    md5: str | None = None
    max_bytes: int | None = None  # where ``bytes`` is unknown: a download past it is stopped

    @property
    def published_name(self) -> str:
        """The name the publisher serves it under (the last part of its address)."""
        return urlsplit(self.url).path.rpartition("/")[2]


def from_sacrebleu(key: str, file: str, source: str = "statmt") -> Archive:
    """The archive of sacrebleu's registry entry ``key`` (its address and MD5), saved as
    ``file``: where the test sets come from, as sacrebleu itself fetches them."""
    from sacrebleu.dataset import DATASETS

    entry = DATASETS[key]
    return Archive(source, entry.data[0], file, md5=entry.md5[0])


def mirrors(environ: dict[str, str] | None = None) -> dict[str, str]:
    """``SCALEBENCH_DATA_MIRRORS`` as {source: base address}; a malformed entry is refused."""
    text = (environ if environ is not None else os.environ).get(MIRRORS_VARIABLE, "")
    found: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        source, equals, base = entry.partition("=")
        if not equals or not source.strip() or not base.strip():
            raise DataSetMissing(
                f"{MIRRORS_VARIABLE}: {entry!r} is not SOURCE=BASE_ADDRESS "
                "(for example statmt=https://mirror.example/statmt)"
            )
        found[source.strip()] = base.strip().rstrip("/")
    return found


def address(archive: Archive, environ: dict[str, str] | None = None) -> str:
    """Where ``archive`` is fetched from: its source's mirror when one is set, else its URL."""
    base = mirrors(environ).get(archive.source)
    return f"{base}{urlsplit(archive.url).path}" if base else archive.url


def digests_of(path: Path, chunk: int = 1 << 20) -> tuple[str, str]:
    """(SHA-256, MD5) of ``path``, read once."""
    sha256, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            sha256.update(block)
            md5.update(block)
    return sha256.hexdigest(), md5.hexdigest()


def sha256_of(path: Path) -> str:
    return digests_of(path)[0]


def downloads_folder(data_dir: Path) -> Path:
    return data_dir / DOWNLOADS


def _digests(folder: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads((folder / DIGESTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _record(folder: Path, archive: Archive, digest: str, path: Path, how: str) -> None:
    """Keep ``path``'s SHA-256 and state; ``how`` it came: ``downloaded`` from its source (the
    digest every later download of an archive without a recorded one must match), or
    ``given`` (imported, or put there: checked against what is recorded, never trusted)."""
    digests = _digests(folder)
    digests[archive.file] = {"sha256": digest, "how": how, **file_state(path)}
    with replaced_when_done(folder / DIGESTS) as partial:
        partial.write_text(json.dumps(digests, indent=1, sort_keys=True), encoding="utf-8")


def expected_digest(archive: Archive, folder: Path) -> str | None:
    """The SHA-256 ``archive`` must have: recorded here, else kept from its first download
    (a file given by hand sets none: only its source can)."""
    if archive.sha256:
        return archive.sha256
    kept = _digests(folder).get(archive.file, {})
    digest = kept.get("sha256")
    return digest if isinstance(digest, str) and kept.get("how") == "downloaded" else None


def _checked(archive: Archive, path: Path, folder: Path, origin: str) -> str:
    """``path``'s SHA-256, checked against ``archive``'s (none yet: the caller keeps it); a
    mismatch removes ``path`` and raises :class:`DataSetCorrupt` naming the file."""
    found, found_md5 = digests_of(path)
    wanted = expected_digest(archive, folder)
    if archive.md5 and found_md5 != archive.md5:
        kind, found, wanted, kept = "MD5", found_md5, archive.md5, "published"
    elif wanted is not None and found != wanted:
        kind, kept = "SHA-256", "recorded" if archive.sha256 else "kept from its first download"
    else:
        return found
    path.unlink(missing_ok=True)
    raise DataSetCorrupt(
        f"{archive.file} (from {origin}): {kind} {found}, expected {wanted} ({kept}); "
        "deleted, nothing kept. A damaged copy, a download cut short, or a mirror serving "
        "another file"
    )


def present(archive: Archive, folder: Path) -> bool:
    """Whether ``archive`` is in ``folder`` and was checked since it last changed."""
    path = folder / archive.file
    if not path.is_file():
        return False
    kept = _digests(folder).get(archive.file, {})
    unchanged = {"size": kept.get("size"), "mtime_ns": kept.get("mtime_ns")} == file_state(path)
    wanted = expected_digest(archive, folder)
    return unchanged and isinstance(kept.get("sha256"), str) and wanted in (None, kept["sha256"])


def obtain(
    archive: Archive,
    data_dir: Path,
    *,
    download: bool,
    say: Callable[[str], None] = print,
    environ: dict[str, str] | None = None,
) -> Path:
    """``archive`` in ``<data_dir>/downloads``, present and checked; fetched when missing and
    ``download`` (resumed where an earlier try stopped), else :class:`DataSetMissing` says
    how to get it."""
    folder = downloads_folder(data_dir)
    path = folder / archive.file
    if present(archive, folder):
        return path
    if path.is_file():  # there, but never checked (put in place, or a digest lost)
        _record(folder, archive, _checked(archive, path, folder, str(path)), path, "given")
        return path
    origin = address(archive, environ)
    if not download:
        raise DataSetMissing(
            f"{archive.file} is not in {folder}: pass --download to fetch it from {origin}, "
            f"or put the file there (`scalebench data import DIR`)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{archive.file}.part"
    say(f"{archive.file}: downloading from {origin}")
    try:
        fetch(origin, partial, say, archive.bytes, archive.max_bytes, resume=True)
    except DataSetCorrupt:
        partial.unlink(missing_ok=True)  # past its size: not a start worth resuming
        raise
    digest = _checked(archive, partial, folder, origin)
    os.replace(partial, path)
    _record(folder, archive, digest, path, "downloaded")
    say(f"{archive.file}: checked ({path.stat().st_size / 1e6:.1f} MB)")
    return path


def obtain_all(
    archives: Iterable[Archive],
    data_dir: Path,
    *,
    download: bool,
    say: Callable[[str], None] = print,
) -> list[Path]:
    """:func:`obtain` of every archive: those already there are checked first (a damaged
    one is named before anything is fetched), and without ``download`` one line names every
    archive that is missing."""
    wanted = list(archives)
    folder = downloads_folder(data_dir)
    for archive in wanted:
        if (folder / archive.file).is_file():
            obtain(archive, data_dir, download=False, say=say)
    missing = [a for a in wanted if not (folder / a.file).is_file()]
    if missing and not download:
        names = ", ".join(a.file for a in missing)
        raise DataSetMissing(
            f"{len(missing)} of {len(wanted)} archives are not in {folder} ({names}): pass "
            "--download to fetch them, or put them there (`scalebench data import DIR`)"
        )
    return [obtain(a, data_dir, download=download, say=say) for a in wanted]


def import_archives(
    folder: Path,
    data_dir: Path,
    archives: Iterable[Archive],
    say: Callable[[str], None] = print,
) -> list[Archive]:
    """Copy into ``<data_dir>/downloads`` every file of ``folder`` that is one of
    ``archives``: recognised by its SHA-256, or by its published name for an archive that
    has none recorded. Returns those taken; a file that matches no archive is left alone."""
    if not folder.is_dir():
        raise DataSetMissing(f"{folder} is not a folder")
    known = list(archives)
    by_digest = {a.sha256: a for a in known if a.sha256}
    by_md5 = {a.md5: a for a in known if a.md5 and not a.sha256}
    by_name = {a.published_name: a for a in known if not (a.sha256 or a.md5)}
    target = downloads_folder(data_dir)
    target.mkdir(parents=True, exist_ok=True)
    taken: list[Archive] = []
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink()):
        archive = by_name.get(path.name)
        if archive is None:
            say(f"{path.name}: checking its SHA-256 ({path.stat().st_size / 1e6:.1f} MB)")
            sha256, md5 = digests_of(path)
            archive = by_digest.get(sha256) or by_md5.get(md5)
        if archive is None:
            say(f"{path.name}: not a file of any data set; left alone")
            continue
        destination = target / archive.file
        with replaced_when_done(destination) as partial:
            shutil.copyfile(path, partial)
            digest = _checked(archive, partial, target, str(path))
        _record(target, archive, digest, destination, "given")
        say(f"{path.name}: taken as {archive.file}")
        taken.append(archive)
    return taken
