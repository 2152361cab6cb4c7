"""WMT17 English–German (Task 4b), prepared as the MLPerf Transformer reference (the script
MLBench's WMT17 preprocessing follows) prepares it.

The steps, each stamped when done (:class:`workers.data.steps.Steps`), in
``<data dir>/wmt17-en-de/``:

1. **download** the archives (:data:`WMT17_ARCHIVES`): News Commentary v12, Common Crawl and
   Europarl v7 for training (the last two shared with WMT16), WMT17's dev archive for
   newstest2013, and newstest2014 from sacrebleu's registry (``wmt14/full``);
2. **text**: the three corpora's lines, stripped, concatenated in the reference's order (News
   Commentary, Common Crawl, Europarl) into ``train.{en,de}``; newstest2013 as is, and
   newstest2014 out of its SGM files. The corpora's own files are kept in ``raw/``;
3. **vocabulary**: the reference's ``wmt32k`` subword vocabulary (:mod:`workers.data.subtokenizer`)
   with a minimum count of 6, counted on a sample of a million characters of each of the six
   corpus files (English first), written as the reference writes it (``vocab.ende.32768``);
4. **ids**: every sentence as subtoken ids (``<split>.<lang>.ids.npy`` with its sentence
   ``offsets``) for training, newstest2013 (``valid``) and newstest2014 (``test``), which BLEU
   is scored on. The reference's ids 0 and 1 (``<pad>``, ``<EOS>``) become the workers'
   four special ids, so a subtoken's id is the reference's plus 2.

The encoding runs on every core, in chunks, in order.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scalebench.datasets import WMT17, DataSetCorrupt
from workers.data import moses, subtokenizer
from workers.data.archives import Archive, from_sacrebleu, obtain_all
from workers.data.atomic import replaced_when_done
from workers.data.sentences import ids_paths, load_sentences, save_sentences
from workers.data.stamps import Prepared, file_state
from workers.data.steps import Steps
from workers.data.textfiles import extract_members, map_lines, read_lines, write_lines
from workers.data.wmt16 import WMT16_ARCHIVES

MIN_COUNT = 6  # the reference's minimum subtoken count for its training data
SAMPLE_CHARS = 1_000_000  # characters of each corpus file the vocabulary is counted on
SHIFT = 2  # the workers' id of a subtoken is the reference's plus this

# News Commentary v12's SHA-256 and size are those TensorFlow Datasets records; newstest2013
# and newstest2014 come from sacrebleu's registry (address and MD5).
WMT17_ARCHIVES = (
    Archive(
        "statmt",
        "http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz",
        "wmt17-training-parallel-nc-v12.tgz",
        sha256="2b45f30ef1d550d302fd17dd3a5cbe19134ccc4c2cf50c2dae534aee600101a2",
        bytes=168_591_139,
    ),
    WMT16_ARCHIVES[1],  # Common Crawl
    WMT16_ARCHIVES[0],  # Europarl v7
    from_sacrebleu("wmt17/dev", "wmt17-dev.tgz"),
    from_sacrebleu("wmt14/full", "wmt14-test-full.tgz"),
)
# The training corpora, in the reference's order: (archive index, member file stem).
TRAINING = ((0, "news-commentary-v12.de-en"), (1, "commoncrawl.de-en"), (2, "europarl-v7.de-en"))
LANGS = ("en", "de")
SPLITS = {"train": "train", "valid": "newstest2013", "test": "newstest2014"}
REFERENCES = "newstest2014.de"
VOCABULARY = "vocab.ende.32768"


def make_text(archives: list[Path], folder: Path) -> None:
    """Step 2: the corpora's files in ``raw/``, ``train.{en,de}``, newstest2013 and 2014."""
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for index, stem in TRAINING:
        extract_members(
            archives[index], {f"{stem}.{lang}": raw / f"{stem}.{lang}" for lang in LANGS}
        )
    counts = {}
    for lang in LANGS:
        parts = (read_lines(raw / f"{stem}.{lang}") for _, stem in TRAINING)
        stripped = (line.strip() for line in itertools.chain.from_iterable(parts))
        counts[lang] = write_lines(folder / f"train.{lang}", stripped)
    if counts["en"] != counts["de"]:
        raise DataSetCorrupt(
            f"wmt17-en-de: the training text has {counts['en']:,} English and {counts['de']:,} "
            "German lines; the archives are not sentence-aligned"
        )
    scratch = folder / "scratch"
    scratch.mkdir(exist_ok=True)
    extract_members(
        archives[3], {f"newstest2013.{lang}": scratch / f"newstest2013.{lang}" for lang in LANGS}
    )
    for lang in LANGS:
        write_lines(
            folder / f"newstest2013.{lang}",
            (x.strip() for x in read_lines(scratch / f"newstest2013.{lang}")),
        )
    sgm = {"en": "newstest2014-deen-src.en.sgm", "de": "newstest2014-deen-ref.de.sgm"}
    extract_members(archives[4], {name: scratch / name for name in sgm.values()})
    for lang, name in sgm.items():
        write_lines(folder / f"newstest2014.{lang}", moses.sgm_segments(read_lines(scratch / name)))
    shutil.rmtree(scratch)


def raw_files(folder: Path) -> list[Path]:
    """The six corpus files the vocabulary is counted on: the English ones, then the German."""
    return [folder / "raw" / f"{stem}.{lang}" for lang in LANGS for _, stem in TRAINING]


def make_vocabulary(folder: Path, min_count: int = MIN_COUNT) -> None:
    """Step 3: ``vocab.ende.32768``."""
    counts = subtokenizer.count_tokens(raw_files(folder), SAMPLE_CHARS)
    vocabulary = subtokenizer.build_vocabulary(counts, min_count)
    with replaced_when_done(folder / VOCABULARY) as partial:
        subtokenizer.write_vocabulary(partial, vocabulary)


_ENCODERS: dict[tuple[str, int], subtokenizer.Subtokenizer] = {}


@dataclass(frozen=True)
class _Encode:
    """Lines to the workers' ids, written as text (the vocabulary loaded once per process)."""

    vocabulary: str

    def __call__(self, lines: list[str]) -> list[str]:
        key = (self.vocabulary, os.stat(self.vocabulary).st_mtime_ns)  # built again: reloaded
        if key not in _ENCODERS:
            words = subtokenizer.read_vocabulary(Path(self.vocabulary))
            _ENCODERS[key] = subtokenizer.Subtokenizer(words)
        encoder = _ENCODERS[key]
        return [" ".join(str(i + SHIFT) for i in encoder.encode(line.strip())) for line in lines]


def encode(folder: Path, say: Callable[[str], None], processes: int | None) -> None:
    """Step 4: each split's sentences as the workers' ids, with offsets."""
    work = _Encode(str(folder / VOCABULARY))
    for split, stem in SPLITS.items():
        for lang in LANGS:
            text = folder / f".{split}.{lang}.ids.txt"
            map_lines(folder / f"{stem}.{lang}", text, work, say, processes)
            save_sentences(folder, split, lang, (map(int, x.split()) for x in read_lines(text)))
            text.unlink()


def prepare_wmt17(
    data_dir: Path,
    *,
    download: bool = False,
    archives: tuple[Archive, ...] = WMT17_ARCHIVES,
    min_count: int = MIN_COUNT,
    say: Callable[[str], None] = print,
    processes: int | None = None,
) -> Prepared:
    """Make WMT17 en-de ready in ``data_dir`` (the module docstring's steps; those done are
    skipped). :func:`workers.data.prepare.prepare` holds the set's lock around it."""
    folder = data_dir / WMT17.folder
    paths = obtain_all(archives, data_dir, download=download, say=say)
    folder.mkdir(parents=True, exist_ok=True)
    steps = Steps(folder, say)
    texts = [folder / f"{stem}.{lang}" for stem in SPLITS.values() for lang in LANGS]
    steps.run(
        "text", lambda: make_text(paths, folder), inputs=paths, outputs=[*texts, *raw_files(folder)]
    )
    vocabulary = folder / VOCABULARY
    steps.run(
        "vocabulary",
        lambda: make_vocabulary(folder, min_count),
        inputs=raw_files(folder),
        outputs=[vocabulary],
    )
    arrays = [p for split in SPLITS for lang in LANGS for p in ids_paths(folder, split, lang)]
    steps.run(
        "ids", lambda: encode(folder, say, processes), inputs=[vocabulary, *texts], outputs=arrays
    )
    WMT17.require(data_dir)
    total = sum(file_state(folder / name)["size"] for name in WMT17.files)
    return Prepared(WMT17.name, "converted" if steps.ran else "fresh", str(folder), bytes=total)


class SubtokenVocabulary:
    """The ``wmt32k`` subtokens behind the workers' ids, and how ids read as text."""

    def __init__(self, words: list[str]) -> None:
        self.encoder = subtokenizer.Subtokenizer(words)

    def get_vocab_size(self) -> int:
        return len(self.encoder.vocabulary) + SHIFT

    def decode(self, ids: Iterable[int]) -> str:
        return self.encoder.decode(i - SHIFT for i in ids if i >= 2 + SHIFT)


def load_wmt17(data_dir: Path) -> tuple[dict[str, list[np.ndarray]], list[str], SubtokenVocabulary]:
    """({"<split>.<lang>": sentences' ids}, newstest2014's German references, vocabulary)."""
    WMT17.require(data_dir)
    folder = data_dir / WMT17.folder

    splits = {
        f"{s}.{lang}": load_sentences(folder, s, lang) for s in ("train", "test") for lang in LANGS
    }
    references = list(read_lines(folder / REFERENCES))
    return splits, references, SubtokenVocabulary(subtokenizer.read_vocabulary(folder / VOCABULARY))
