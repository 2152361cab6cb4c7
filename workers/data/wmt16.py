"""WMT16 English–German (Task 4a), prepared as the MLPerf GNMT reference prepares it.

The steps, each stamped when done (:class:`workers.data.steps.Steps`), in
``<data dir>/wmt16-en-de/``:

1. **download** the five archives (:data:`WMT16_ARCHIVES`) into ``<data dir>/downloads``,
   each checked (:mod:`workers.data.archives`);
2. **text**: the training text is Europarl v7, Common Crawl and News Commentary v11,
   concatenated in that order into ``train.en``/``train.de``; newstest2014, 2015 and 2016
   are taken out of their SGM files (the ``deen`` files of the dev and test archives);
3. **tokenize** every file with Moses' tokenizer for its language (``*.tok.*``);
4. **clean**: ``clean-corpus-n`` with lengths 1 to 80 on every pair (``*.tok.clean.*``);
   newstest2015 and 2016 make the development set ``newstest_dev``; the training and
   development pairs then go through the reference's Latin-1 filter
   (:mod:`workers.data.moses`);
5. **learn BPE**: 32,000 joint merges learned by ``subword-nmt`` on the cleaned German and
   then English training text (``bpe.32000``);
6. **apply BPE** to the files the workers read: the cleaned training and development text
   and the tokenized newstest2014 (``*.bpe.32000.*``). The reference applies it to every
   tokenized file; the others are never read;
7. **vocabulary**: ``subword-nmt``'s ``get_vocab`` of the BPE'd training text, English then
   German, one subword a line, most frequent first (``vocab.bpe.32000``);
8. **ids**: every sentence as vocabulary ids (``<split>.<lang>.ids.npy`` with its sentence
   ``offsets``), ids 0–3 being ``<pad>``, ``<s>``, ``</s>``, ``<unk>``.

The tokenizing and BPE steps run on every core, in chunks, in order. The workers load
the ids (:func:`load_wmt16`), and BLEU is scored on their output with the BPE joins undone
and Moses' detokenizer applied, against the raw newstest2014 German text.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scalebench.datasets import WMT16, DataSetCorrupt, DataSetMissing
from workers.data import moses
from workers.data.archives import Archive, from_sacrebleu, obtain_all
from workers.data.atomic import replaced_when_done
from workers.data.sentences import ids_paths, load_sentences, save_sentences
from workers.data.stamps import Prepared, file_state
from workers.data.steps import Steps
from workers.data.textfiles import extract_members, map_lines, read_lines, write_lines

MERGES = 32_000
LONGEST_WORDS = 80  # clean-corpus-n's maximum sentence length, in words

# The training archives' SHA-256 and sizes are those TensorFlow Datasets records for the
# same addresses; the dev and test archives come from sacrebleu's registry (entries
# ``wmt16/dev`` and ``wmt16``: address and MD5). Europarl v7 comes in WMT13's archive (the same
# ``europarl-v7.de-en`` files as statmt.org/europarl/v7/de-en.tgz, which the reference
# fetches and which has no published checksum).
WMT16_ARCHIVES = (
    Archive(
        "statmt",
        "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        "wmt13-training-parallel-europarl-v7.tgz",
        sha256="0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
        bytes=657_632_379,
    ),
    Archive(
        "statmt",
        "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        "wmt13-training-parallel-commoncrawl.tgz",
        sha256="c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
        bytes=918_311_367,
    ),
    Archive(
        "statmt",
        "http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz",
        "wmt16-training-parallel-nc-v11.tgz",
        sha256="cfe8ab047e05043476e498ee765c98e939c7b7d6d294e856344c84476b619d6a",
        bytes=75_178_032,
    ),
    from_sacrebleu("wmt16/dev", "wmt16-dev.tgz"),
    from_sacrebleu("wmt16", "wmt16-test.tgz"),
)
# The training corpora, in the reference's order: (archive index, member file stem).
TRAINING = ((0, "europarl-v7.de-en"), (1, "commoncrawl.de-en"), (2, "news-commentary-v11.de-en"))
# The test sets: name -> (archive index, SGM stem of the source and reference files).
NEWSTESTS = {
    "newstest2014": (3, "newstest2014-deen"),
    "newstest2015": (3, "newstest2015-deen"),
    "newstest2016": (4, "newstest2016-deen"),
}
LANGS = ("en", "de")
# The splits the workers read: split -> the BPE'd file stem.
SPLITS = {"train": "train.tok.clean", "valid": "newstest_dev.tok.clean", "test": "newstest2014.tok"}
REFERENCES = "newstest2014.de"  # the raw German text BLEU is scored against
VOCABULARY = f"vocab.bpe.{MERGES}"
CODES = f"bpe.{MERGES}"


def make_text(archives: list[Path], folder: Path) -> None:
    """Step 2: ``train.{en,de}`` and the newstests' plain text, from the archives."""
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for index in sorted({index for index, _ in TRAINING}):
        stems = [stem for i, stem in TRAINING if i == index]
        extract_members(
            archives[index], {f"{s}.{lang}": raw / f"{s}.{lang}" for s in stems for lang in LANGS}
        )
    for index in sorted({index for index, _ in NEWSTESTS.values()}):
        wanted = {}
        for _, (i, stem) in NEWSTESTS.items():
            if i == index:
                wanted[f"{stem}-src.de.sgm"] = raw / f"{stem}-src.de.sgm"
                wanted[f"{stem}-ref.en.sgm"] = raw / f"{stem}-ref.en.sgm"
        extract_members(archives[index], wanted)
    counts = {}
    for lang in LANGS:
        parts = [raw / f"{stem}.{lang}" for _, stem in TRAINING]
        counts[lang] = write_lines(
            folder / f"train.{lang}", itertools.chain.from_iterable(map(read_lines, parts))
        )
    if counts["en"] != counts["de"]:
        raise DataSetCorrupt(
            f"wmt16-en-de: the training text has {counts['en']:,} English and {counts['de']:,} "
            "German lines; the archives are not sentence-aligned"
        )
    for name, (_, stem) in NEWSTESTS.items():
        for lang, side in (("de", "src"), ("en", "ref")):
            segments = moses.sgm_segments(read_lines(raw / f"{stem}-{side}.{lang}.sgm"))
            write_lines(folder / f"{name}.{lang}", segments)
    shutil.rmtree(raw)


@dataclass(frozen=True)
class _Tokenize:
    lang: str

    def __call__(self, lines: list[str]) -> list[str]:
        return moses.tokenize_lines(lines, self.lang)


@dataclass(frozen=True)
class _Segment:
    """Apply the BPE codes at ``codes`` to lines (loaded once per process)."""

    codes: str

    def __call__(self, lines: list[str]) -> list[str]:
        return [_bpe(self.codes).process_line(line) for line in lines]


_BPE: dict[tuple[str, int], object] = {}


def _bpe(codes: str) -> object:
    """The BPE of the codes file at ``codes`` as it is now (learned again: loaded again)."""
    key = (codes, os.stat(codes).st_mtime_ns)
    if key not in _BPE:
        from subword_nmt.apply_bpe import BPE

        with open(codes, encoding="utf-8") as handle:
            _BPE[key] = BPE(handle)
    return _BPE[key]


def clean(folder: Path, name: str) -> int:
    """Step 4 for one pair: ``<name>.tok.clean.{en,de}``; returns the pairs kept."""
    pairs = zip(
        read_lines(folder / f"{name}.tok.en"), read_lines(folder / f"{name}.tok.de"), strict=False
    )
    kept = moses.clean_pairs(pairs, 1, LONGEST_WORDS)
    if name in ("train", "newstest_dev"):
        kept = moses.latin1_pairs(kept)
    count = 0
    with (
        replaced_when_done(folder / f"{name}.tok.clean.en") as english,
        replaced_when_done(folder / f"{name}.tok.clean.de") as german,
        english.open("w", encoding="utf-8") as out_en,
        german.open("w", encoding="utf-8") as out_de,
    ):
        for line_en, line_de in kept:  # streamed: the training text is gigabytes
            out_en.write(line_en + "\n")
            out_de.write(line_de + "\n")
            count += 1
    return count


def learn_bpe(folder: Path) -> None:
    """Step 5: ``bpe.32000`` from the cleaned German then English training text."""
    from subword_nmt.learn_bpe import learn_bpe as subword_learn

    texts = [folder / f"train.tok.clean.{lang}" for lang in ("de", "en")]
    with replaced_when_done(folder / CODES) as partial, partial.open("w", encoding="utf-8") as out:
        handles = [path.open(encoding="utf-8") for path in texts]
        try:
            subword_learn(itertools.chain(*handles), out, MERGES)
        finally:
            for handle in handles:
                handle.close()


def make_vocabulary(folder: Path) -> None:
    """Step 7: ``vocab.bpe.32000``, the BPE'd training text's subwords, English then German."""
    from subword_nmt.get_vocab import get_vocab

    texts = [folder / f"train.tok.clean.bpe.{MERGES}.{lang}" for lang in ("en", "de")]
    counted = folder / f".{VOCABULARY}.counts"
    with counted.open("w", encoding="utf-8") as out:
        handles = [path.open(encoding="utf-8") for path in texts]
        try:
            get_vocab(itertools.chain(*handles), out)
        finally:
            for handle in handles:
                handle.close()
    words = (line.split(" ")[0] for line in read_lines(counted))
    write_lines(folder / VOCABULARY, words)
    counted.unlink()


SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
UNK = 3


def encode(folder: Path) -> None:
    """Step 8: each split's sentences as vocabulary ids, with offsets."""
    words = [*SPECIALS, *read_lines(folder / VOCABULARY)]
    index = {word: i for i, word in enumerate(words)}
    for split, stem in SPLITS.items():
        for lang in LANGS:
            lines = read_lines(folder / f"{stem}.bpe.{MERGES}.{lang}")
            sentences = ([index.get(word, UNK) for word in line.split()] for line in lines)
            save_sentences(folder, split, lang, sentences)


def prepare_wmt16(
    data_dir: Path,
    *,
    download: bool = False,
    archives: tuple[Archive, ...] = WMT16_ARCHIVES,
    say: Callable[[str], None] = print,
    processes: int | None = None,
) -> Prepared:
    """Make WMT16 en-de ready in ``data_dir`` (the module docstring's steps; those done are
    skipped). :func:`workers.data.prepare.prepare` holds the set's lock around it."""
    folder = data_dir / WMT16.folder
    paths = obtain_all(archives, data_dir, download=download, say=say)
    folder.mkdir(parents=True, exist_ok=True)
    steps = Steps(folder, say)
    texts = [folder / f"{name}.{lang}" for name in ("train", *NEWSTESTS) for lang in LANGS]
    steps.run("text", lambda: make_text(paths, folder), inputs=paths, outputs=texts)
    tokenized = [path.with_name(f"{path.stem}.tok{path.suffix}") for path in texts]

    def tokenize_all() -> None:
        for source, target in zip(texts, tokenized, strict=True):
            map_lines(source, target, _Tokenize(source.suffix[1:]), say, processes)

    steps.run("tokenize", tokenize_all, inputs=texts, outputs=tokenized)
    pairs = ("train", *NEWSTESTS, "newstest_dev")
    cleaned = [folder / f"{name}.tok.clean.{lang}" for name in pairs for lang in LANGS]

    def clean_all() -> None:
        for lang in LANGS:
            dev = (folder / f"{name}.tok.{lang}" for name in ("newstest2015", "newstest2016"))
            write_lines(
                folder / f"newstest_dev.tok.{lang}",
                itertools.chain.from_iterable(map(read_lines, dev)),
            )
        for name in pairs:
            kept = clean(folder, name)
            say(f"{name}: {kept:,} pairs kept")

    steps.run("clean", clean_all, inputs=tokenized, outputs=cleaned)
    train_clean = [folder / f"train.tok.clean.{lang}" for lang in LANGS]
    steps.run("learn_bpe", lambda: learn_bpe(folder), inputs=train_clean, outputs=[folder / CODES])
    plain = [folder / f"{stem}.{lang}" for stem in SPLITS.values() for lang in LANGS]
    segmented = [path.with_name(f"{path.stem}.bpe.{MERGES}{path.suffix}") for path in plain]

    def apply_all() -> None:
        work = _Segment(str(folder / CODES))
        for source, target in zip(plain, segmented, strict=True):
            map_lines(source, target, work, say, processes)

    steps.run("apply_bpe", apply_all, inputs=[folder / CODES, *plain], outputs=segmented)
    vocabulary = folder / VOCABULARY
    steps.run(
        "vocabulary", lambda: make_vocabulary(folder), inputs=segmented[:2], outputs=[vocabulary]
    )
    arrays = [p for split in SPLITS for lang in LANGS for p in ids_paths(folder, split, lang)]
    steps.run("ids", lambda: encode(folder), inputs=[vocabulary, *segmented], outputs=arrays)
    WMT16.require(data_dir)
    total = sum(file_state(folder / name)["size"] for name in WMT16.files)
    status = "converted" if steps.ran else "fresh"
    return Prepared(WMT16.name, status, str(folder), bytes=total)


class BpeVocabulary:
    """The subwords of ``vocab.bpe.32000`` behind ids 4 and up, and how ids read as text."""

    def __init__(self, words: list[str], lang: str = "de") -> None:
        self.words = [*SPECIALS, *words]
        self.lang = lang

    def get_vocab_size(self) -> int:
        return len(self.words)

    def decode(self, ids: Iterable[int]) -> str:
        """Plain text of subword ids: BPE joins (``@@``) undone, then Moses-detokenized."""
        text = " ".join(self.words[i] for i in ids if 0 <= i < len(self.words))
        text = text.replace("@@ ", "").removesuffix("@@")
        return moses.detokenize(text.split(), self.lang)


def load_wmt16(data_dir: Path) -> tuple[dict[str, list[np.ndarray]], list[str], BpeVocabulary]:
    """({"<split>.<lang>": sentences' ids}, newstest2014's German references, vocabulary)."""
    try:
        WMT16.require(data_dir)
    except DataSetMissing as exc:
        raise DataSetMissing(f"{exc}") from None
    folder = data_dir / WMT16.folder

    splits = {
        f"{s}.{lang}": load_sentences(folder, s, lang) for s in ("train", "test") for lang in LANGS
    }
    references = list(read_lines(folder / REFERENCES))
    return splits, references, BpeVocabulary(list(read_lines(folder / VOCABULARY)))
