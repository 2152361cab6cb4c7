"""WikiText-2 (Task 3a) made ready: its published archive downloaded and checked, the token
files unpacked, and their token counts and vocabulary checked against the seed's.

The archive is ``wikitext-2-v1.zip`` (the tokenized release); its SHA-256 is the one the
Julia package DataDeps.jl's WikiText registration records. Counted as the workers count
them (:func:`workers.data.text.tokenize`: the words of each line, then ``<eos>``), the
training file has 2,088,628 tokens and the validation file 217,646, over a training
vocabulary of 33,278 words.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

from scalebench.datasets import WIKITEXT2, DataSetCorrupt, DataSetMissing
from workers.data.archives import Archive, obtain
from workers.data.atomic import replaced_when_done
from workers.data.stamps import STAMP, Prepared, file_state, read_stamp, write_stamp

WIKITEXT2_ARCHIVE = Archive(
    "wikitext",
    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
    "wikitext-2-v1.zip",
    sha256="92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c",
)
TOKENS = {"train": 2_088_628, "valid": 217_646}  # the seed's counts, <eos> included
VOCABULARY = 33_278


def unpack(archive: Path, folder: Path) -> None:
    """The three token files out of the zip archive, each whole or not at all."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(archive) as packed:
            members = {info.filename.rpartition("/")[2]: info for info in packed.infolist()}
            for name in WIKITEXT2.files:
                if name not in members:
                    raise DataSetCorrupt(f"{archive}: has no {name}; not the WikiText-2 archive")
                with (
                    replaced_when_done(folder / name) as partial,
                    packed.open(members[name]) as source,
                    partial.open("wb") as out,
                ):
                    while block := source.read(1 << 20):
                        out.write(block)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise DataSetCorrupt(
            f"{archive}: not a complete zip archive ({exc}); delete it and prepare again"
        ) from None


def prepare_wikitext2(
    data_dir: Path,
    *,
    download: bool = False,
    archive: Archive = WIKITEXT2_ARCHIVE,
    tokens: dict[str, int] = TOKENS,
    vocabulary: int = VOCABULARY,
    say: Callable[[str], None] = print,
) -> Prepared:
    """Unpack WikiText-2 from its archive when its files are missing (fetched when
    ``download``), then check the token counts and the vocabulary; fresh while the files
    are unchanged since."""
    from workers.data.text import WIKITEXT2_FILES, load_wikitext2, tokenize

    folder = data_dir / WIKITEXT2.folder
    status = "verified"
    if WIKITEXT2.missing(data_dir):
        try:
            path = obtain(archive, data_dir, download=download, say=say)
        except DataSetMissing as exc:
            raise DataSetMissing(f"WikiText-2: {exc}") from None
        unpack(path, folder)
        status = "downloaded"
    files = [folder / name for name in WIKITEXT2.files]
    states = {path.name: file_state(path) for path in files}
    total = sum(state["size"] for state in states.values())
    stamp_path = folder / STAMP
    if read_stamp(stamp_path).get("files") == states and status == "verified":
        return Prepared(WIKITEXT2.name, "fresh", str(folder), bytes=total)
    for split, expected in tokens.items():
        found = len(tokenize(folder / WIKITEXT2_FILES[split]))
        if found != expected:
            raise DataSetCorrupt(
                f"{folder / WIKITEXT2_FILES[split]}: {found:,} tokens, expected "
                f"{expected:,} (the tokenised wikitext-2-v1 release, not the raw one)"
            )
    corpus = load_wikitext2(data_dir)
    if len(corpus.words) != vocabulary:
        raise DataSetCorrupt(
            f"{folder}: {len(corpus.words):,} distinct training words, expected "
            f"{vocabulary:,} (the tokenised wikitext-2-v1 release, not the raw one)"
        )
    write_stamp(stamp_path, {"files": states})
    return Prepared(WIKITEXT2.name, status, str(folder), bytes=total)
