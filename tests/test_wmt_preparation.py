"""WMT16 en-de prepared as the GNMT reference prepares it, from miniature archives in the
upstream formats served on 127.0.0.1 (no internet): Moses' steps against the Perl scripts'
own output (tests/data/moses), subword-nmt's BPE against subword-nmt run directly, the
faults a download and a preparation meet, and one epoch trained on the result."""

from __future__ import annotations

import errno
import io
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from scalebench.datasets import WMT16, DataSetCorrupt
from tests.archive_server import Served, as_served, mirrored, sgm, tgz, upstream_path
from tests.epochs import train_one_epoch
from tests.small_disk import fill
from workers.data import moses, textfiles, wmt16
from workers.data.archives import digests_of, downloads_folder
from workers.data.steps import STEPS
from workers.data.translation import load_bitext

MOSES = Path(__file__).parent / "data" / "moses"


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_tokenize_gives_the_tokens_of_moses_tokenizer_perl() -> None:
    for lang in ("en", "de"):
        source, recorded = lines(MOSES / f"corpus.{lang}"), lines(MOSES / f"corpus.tok.{lang}")
        assert len(source) == len(recorded) == 20
        for line, perl in zip(source, recorded, strict=True):
            assert moses.tokenize(line, lang).split() == perl.split(), line


def test_clean_pairs_keeps_what_clean_corpus_n_perl_keeps() -> None:
    pairs = zip(lines(MOSES / "clean.en"), lines(MOSES / "clean.de"), strict=True)
    kept = list(moses.clean_pairs(pairs, 1, 80))
    perl = list(zip(lines(MOSES / "clean.out.en"), lines(MOSES / "clean.out.de"), strict=True))
    assert kept == perl and len(kept) == 21


def test_sgm_segments_are_what_input_from_sgm_perl_prints() -> None:
    with (MOSES / "test.sgm").open(encoding="utf-8") as handle:
        assert list(moses.sgm_segments(handle)) == lines(MOSES / "test.txt")


def test_the_latin1_filter_drops_pairs_of_other_scripts() -> None:
    pairs = [("a b", "c d"), ("Для их", "x"), ("x", "★ y"), ("Müller", "Straße")]
    assert list(moses.latin1_pairs(pairs)) == [("a b", "c d"), ("Müller", "Straße")]


# -- miniature archives in the upstream layout ---------------------------------------------


def corpus(count: int, seed: int) -> list[tuple[str, str]]:
    """Parallel sentences: Moses' recorded corpus, then generated pairs of the light pair."""
    from workers.data.translation import synthetic_pairs

    natural = list(zip(lines(MOSES / "corpus.en"), lines(MOSES / "corpus.de"), strict=True))
    return [*natural, *synthetic_pairs(count, seed)]


def make_archives(root: Path) -> tuple[wmt16.Archive, ...]:
    """The five archives under ``root`` at their official paths, and their entries with
    these files' digests."""
    sides = {
        "europarl-v7.de-en": corpus(150, 1),
        "commoncrawl.de-en": corpus(100, 2),
        "news-commentary-v11.de-en": corpus(50, 3),
    }

    def text(pairs: list[tuple[str, str]], position: int) -> str:
        return "".join(pair[position] + "\n" for pair in pairs)

    folders = {
        "europarl-v7.de-en": "training/",
        "commoncrawl.de-en": "",
        "news-commentary-v11.de-en": "training-parallel-nc-v11/",
    }
    paths = [upstream_path(root, a.url) for a in wmt16.WMT16_ARCHIVES]
    for index, (stem, pairs) in enumerate(sides.items()):
        members = {
            f"{folders[stem]}{stem}.{lang}": text(pairs, p) for p, lang in enumerate(("en", "de"))
        }
        if stem == "commoncrawl.de-en":
            members["commoncrawl.fr-en.fr"] = "pas pour nous\n"
        tgz(paths[index], members)
    tests = {name: corpus(0, 0)[seed : seed + 6] for seed, name in enumerate(wmt16.NEWSTESTS)}
    for index, folder in ((3, "dev/"), (4, "test/")):
        members = {}
        for name, (i, stem) in wmt16.NEWSTESTS.items():
            if i == index:
                members[f"{folder}{stem}-src.de.sgm"] = sgm(name, [de for _, de in tests[name]])
                members[f"{folder}{stem}-ref.en.sgm"] = sgm(name, [en for en, _ in tests[name]])
        tgz(paths[index], members)
    return as_served(wmt16.WMT16_ARCHIVES, root)


@pytest.fixture
def served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Served, tuple[wmt16.Archive, ...]]:
    archives = make_archives(tmp_path / "upstream")
    with mirrored(tmp_path / "upstream", "statmt", monkeypatch) as server:
        yield server, archives


def test_wmt16_is_prepared_as_the_reference_prepares_it(
    served: tuple[Served, tuple[wmt16.Archive, ...]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    server, archives = served
    data_dir = tmp_path / "data"
    monkeypatch.setattr(textfiles, "CHUNK_LINES", 64)  # several chunks, on two processes
    said: list[str] = []
    prepared = wmt16.prepare_wmt16(
        data_dir, download=True, archives=archives, say=said.append, processes=2
    )
    assert prepared.status == "converted" and not WMT16.missing(data_dir)
    folder = data_dir / WMT16.folder
    # the training text: the three corpora in the reference's order, 20 natural + generated
    train_en = lines(folder / "train.en")
    assert len(train_en) == 3 * 20 + 300 and train_en[0] == lines(MOSES / "corpus.en")[0]
    # tokenized as Moses tokenizes, cleaned as clean-corpus-n cleans and Latin-1 filtered:
    # of each natural copy, the pair with an empty side goes, and those with „“, – or €
    assert lines(folder / "train.tok.en")[:20] == [
        moses.tokenize(x, "en") for x in lines(MOSES / "corpus.en")
    ]
    tokenized = zip(lines(folder / "train.tok.en"), lines(folder / "train.tok.de"), strict=True)
    kept = list(moses.latin1_pairs(moses.clean_pairs(tokenized)))
    cleaned = lines(folder / "train.tok.clean.en")
    assert cleaned == [en for en, _ in kept] and len(cleaned) == len(train_en) - 3 * 6
    # the BPE is subword-nmt's own: learned on the same text, it gives the same codes
    reference = tmp_path / "reference.codes"
    with reference.open("w", encoding="utf-8") as out:
        text = io.StringIO(
            "".join(
                (folder / f"train.tok.clean.{lang}").read_text(encoding="utf-8")
                for lang in ("de", "en")
            )
        )
        learn_bpe(text, out, wmt16.MERGES)
    assert (folder / wmt16.CODES).read_text(encoding="utf-8") == reference.read_text(
        encoding="utf-8"
    )
    with reference.open(encoding="utf-8") as handle:
        bpe = BPE(handle)
    for stem in wmt16.SPLITS.values():  # applied in chunks on two processes, in order
        segmented = lines(folder / f"{stem}.bpe.{wmt16.MERGES}.en")
        assert segmented == [bpe.process_line(x) for x in lines(folder / f"{stem}.en")]
    vocabulary = lines(folder / wmt16.VOCABULARY)
    assert len(vocabulary) == len(set(vocabulary)) > 100
    # the workers' view: ids, and text again after BPE and Moses are undone
    bitext = load_bitext("wmt16-en-de", data_dir)
    assert len(bitext.train_source) == len(cleaned)
    assert (
        len(bitext.test_references) == 6
        and bitext.test_references[0] == lines(MOSES / "corpus.de")[0]
    )
    assert bitext.detokenize(bitext.train_target[0].tolist()) == lines(MOSES / "corpus.de")[0]
    # progress was said, per step, and a second preparation does nothing
    assert any("tokenize: done in" in line for line in said)
    assert any("lines, " in line and "to go" in line for line in said)
    again: list[str] = []
    assert wmt16.prepare_wmt16(data_dir, archives=archives, say=again.append).status == "fresh"
    assert len([r for r in server.requests]) == 5  # nothing fetched twice


def test_a_cut_download_resumes_where_it_stopped(
    served: tuple[Served, tuple[wmt16.Archive, ...]], tmp_path: Path
) -> None:
    from workers.data.archives import obtain

    server, archives = served
    path = urlsplit(archives[0].url).path
    half = archives[0].bytes // 2
    server.cuts[path] = [half]
    said: list[str] = []
    obtain(archives[0], tmp_path, download=True, say=said.append)
    asked = [r for p, r in server.requests if p == path]
    assert asked == [None, f"bytes={half}-"]
    assert any("resuming" in line for line in said)


def test_a_download_cut_too_often_is_kept_and_the_next_try_resumes_it(
    served: tuple[Served, tuple[wmt16.Archive, ...]], tmp_path: Path
) -> None:
    from workers.data.archives import obtain
    from workers.data.download import RESUMES, DownloadCut

    server, archives = served
    path = urlsplit(archives[0].url).path
    step = archives[0].bytes // (RESUMES + 3)
    server.cuts[path] = [step * (i + 1) for i in range(RESUMES + 1)]
    with pytest.raises(DownloadCut, match=f"{step * (RESUMES + 1):,} bytes kept"):
        obtain(archives[0], tmp_path, download=True, say=lambda line: None)
    partial = downloads_folder(tmp_path) / f"{archives[0].file}.part"
    assert partial.stat().st_size == step * (RESUMES + 1)
    obtain(archives[0], tmp_path, download=True, say=lambda line: None)  # the next try
    assert server.requests[-1] == (path, f"bytes={step * (RESUMES + 1)}-")
    assert not partial.exists() and (downloads_folder(tmp_path) / archives[0].file).is_file()


def test_a_wrong_checksum_names_the_file_and_keeps_nothing(
    served: tuple[Served, tuple[wmt16.Archive, ...]], tmp_path: Path
) -> None:
    _, archives = served
    wrong = replace(archives[2], sha256="0" * 64)
    with pytest.raises(
        DataSetCorrupt, match=r"wmt16-training-parallel-nc-v11.tgz .*SHA-256 .* expected 0{64}"
    ):
        wmt16.prepare_wmt16(tmp_path, download=True, archives=(*archives[:2], wrong, *archives[3:]))
    downloads = downloads_folder(tmp_path)
    assert not (downloads / wrong.file).exists() and not list(downloads.glob("*.part"))
    assert not (tmp_path / WMT16.folder).exists()


def test_without_download_a_damaged_archive_is_named_and_every_missing_one_listed(
    served: tuple[Served, tuple[wmt16.Archive, ...]], tmp_path: Path
) -> None:
    from scalebench.datasets import DataSetMissing

    _, archives = served
    with pytest.raises(DataSetMissing, match=r"5 of 5 archives are not in .*wmt16-test.tgz"):
        wmt16.prepare_wmt16(tmp_path, archives=archives)
    downloads = downloads_folder(tmp_path)
    downloads.mkdir(parents=True)
    (downloads / archives[4].file).write_bytes(b"cut short")
    with pytest.raises(DataSetCorrupt, match=r"wmt16-test.tgz .*SHA-256"):
        wmt16.prepare_wmt16(tmp_path, archives=archives)


def test_a_corrupt_archive_is_named(
    served: tuple[Served, tuple[wmt16.Archive, ...]], tmp_path: Path
) -> None:
    server, archives = served
    path = upstream_path(server.root, archives[4].url)
    path.write_bytes(path.read_bytes()[:40])  # a gzip stream cut short
    damaged = replace(archives[4], sha256=digests_of(path)[0], bytes=40)
    with pytest.raises(DataSetCorrupt, match=r"wmt16-test.tgz: not a complete tar archive"):
        wmt16.prepare_wmt16(tmp_path, download=True, archives=(*archives[:4], damaged))


def test_a_full_disk_mid_preparation_keeps_the_steps_done_and_no_half_set(
    served: tuple[Served, tuple[wmt16.Archive, ...]], small_disk: Path
) -> None:
    """A real small filesystem fills up as soon as the cleaning step is done: learning the
    BPE cannot write, the steps before it stay done, and nothing of it is left."""
    _, archives = served

    def fill_after_cleaning(line: str) -> None:
        if line.startswith("clean: done in"):
            fill(small_disk, leave=0)

    with pytest.raises(OSError) as info:
        wmt16.prepare_wmt16(small_disk, download=True, archives=archives, say=fill_after_cleaning)
    assert info.value.errno == errno.ENOSPC
    folder = small_disk / WMT16.folder
    assert WMT16.missing(small_disk) and not (folder / wmt16.CODES).exists()
    assert not list(folder.glob(".*partial*"))
    assert sorted(p.stem for p in (folder / STEPS).iterdir()) == ["clean", "text", "tokenize"]
    (small_disk / "filler").unlink()
    steps: list[str] = []
    wmt16.prepare_wmt16(small_disk, archives=archives, say=steps.append)
    assert {"text: done already", "tokenize: done already", "clean: done in"} & set(steps) == {
        "text: done already",
        "tokenize: done already",
    }
    assert not WMT16.missing(small_disk)


def test_a_full_disk_is_one_line_from_scalebench_data(
    small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import bz2

    from cli.main import main

    (small_disk / "epsilon").mkdir()
    rows = "".join(f"+1 1:0.{i} 2000:0.5\n" for i in range(50))
    (small_disk / "epsilon" / "epsilon_normalized.bz2").write_bytes(bz2.compress(rows.encode()))
    fill(small_disk, leave=0)
    assert main(["data", "epsilon", "--data-dir", str(small_disk)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"no space left on {small_disk}" in error
    assert "Traceback" not in error


def test_one_epoch_of_task4a_trains_on_the_prepared_miniature(
    served: tuple[Served, tuple[wmt16.Archive, ...]], tmp_path: Path, one_rank: None
) -> None:
    _, archives = served
    data_dir = tmp_path / "data"
    wmt16.prepare_wmt16(data_dir, download=True, archives=archives)
    train_one_epoch("task4a-gnmt-wmt16", data_dir, tmp_path / "run")
