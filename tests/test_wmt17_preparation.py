"""WMT17 en-de prepared as the MLPerf Transformer reference prepares it: the subword
vocabulary against the reference's own output (tests/data/subtokenizer, recorded once; its
README says how), the encoding against mlbench-core 3.0.0's, and the preparation from
miniature archives in the upstream formats served on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalebench.datasets import WMT17
from tests.archive_server import Served, as_served, mirrored, sgm, tgz, upstream_path
from tests.epochs import train_one_epoch
from workers.data import subtokenizer, wmt17
from workers.data.translation import load_bitext

RECORDED = Path(__file__).parent / "data" / "subtokenizer"
MOSES = Path(__file__).parent / "data" / "moses"
REFERENCE = json.loads((RECORDED / "reference.json").read_text(encoding="utf-8"))
# The reference's order of the six training files: the English ones, then the German ones.
FILES = [RECORDED / f"part{k}.{lang}" for lang in ("en", "de") for k in range(3)]


@pytest.mark.parametrize("setting", ["6-1000000", "2-1000000", "2-1500"])
def test_the_vocabulary_is_the_one_the_reference_builds(setting: str, tmp_path: Path) -> None:
    min_count, chars = map(int, setting.split("-"))
    vocabulary = subtokenizer.build_vocabulary(subtokenizer.count_tokens(FILES, chars), min_count)
    subtokenizer.write_vocabulary(tmp_path / "vocab", vocabulary)
    assert (tmp_path / "vocab").read_text(encoding="utf-8").split("\n")[:-1] == REFERENCE[setting]


def test_encoding_and_decoding_are_mlbench_cores() -> None:
    words = [line[1:-1] for line in REFERENCE["6-1000000"]]
    encoder = subtokenizer.Subtokenizer(words, reserved=())  # as mlbench reads such a file
    lines = [
        line.strip()
        for path in (RECORDED / "part0.en", RECORDED / "part0.de")
        for line in path.read_text(encoding="utf-8").split("\n")[:30]
    ]
    for line, ids, text in zip(lines, REFERENCE["encoded"], REFERENCE["decoded"], strict=True):
        assert encoder.encode(line) == ids[:-1]  # mlbench adds its end id
        assert encoder.decode(ids[:-1]) == text == line


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40))
def test_any_text_comes_back_from_its_subtokens(text: str) -> None:
    words = [line[1:-1] for line in REFERENCE["6-1000000"]]
    encoder = subtokenizer.Subtokenizer(words)
    assert encoder.decode(encoder.encode(text)) == text


def make_archives(root: Path) -> tuple[wmt17.Archive, ...]:
    """WMT17's five archives under ``root`` at their official paths, with these files'
    digests."""
    from workers.data.translation import synthetic_pairs

    natural = list(
        zip(
            (MOSES / "corpus.en").read_text(encoding="utf-8").split("\n")[:-1],
            (MOSES / "corpus.de").read_text(encoding="utf-8").split("\n")[:-1],
            strict=True,
        )
    )
    corpora = [natural + synthetic_pairs(n, seed) for n, seed in ((60, 1), (120, 2), (90, 3))]
    paths = [upstream_path(root, a.url) for a in wmt17.WMT17_ARCHIVES]
    folders = ("training/", "", "training/")
    for (index, stem), pairs, folder in zip(wmt17.TRAINING, corpora, folders, strict=True):
        members = {
            f"{folder}{stem}.{lang}": "".join(f" {pair[p]}\n" for pair in pairs)  # stripped later
            for p, lang in enumerate(("en", "de"))
        }
        tgz(paths[index], members)
    dev = synthetic_pairs(10, 7)
    tgz(
        paths[3],
        {
            f"dev/newstest2013.{lang}": "".join(p[i] + "\n" for p in dev)
            for i, lang in enumerate(("en", "de"))
        },
    )
    test = natural[:4]
    tgz(
        paths[4],
        {
            "test-full/newstest2014-deen-src.en.sgm": sgm("newstest2014", [en for en, _ in test]),
            "test-full/newstest2014-deen-ref.de.sgm": sgm("newstest2014", [de for _, de in test]),
        },
    )
    return as_served(wmt17.WMT17_ARCHIVES, root)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Served, tuple]]:
    archives = make_archives(tmp_path / "upstream")
    with mirrored(tmp_path / "upstream", "statmt", monkeypatch) as server:
        yield server, archives


def test_wmt17_is_prepared_as_the_reference_prepares_it(
    served: tuple[Served, tuple], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.data import textfiles

    server, archives = served
    data_dir = tmp_path / "data"
    monkeypatch.setattr(textfiles, "CHUNK_LINES", 50)  # several chunks, on two processes
    said: list[str] = []
    prepared = wmt17.prepare_wmt17(
        data_dir, download=True, archives=archives, min_count=2, say=said.append, processes=2
    )
    assert prepared.status == "converted" and not WMT17.missing(data_dir)
    folder = data_dir / WMT17.folder
    train = (folder / "train.en").read_text(encoding="utf-8").split("\n")[:-1]
    assert (
        len(train) == 3 * 20 + 60 + 120 + 90
        and train[0] == "The European Parliament met in Strasbourg on 12 May 2016."
    )
    # the vocabulary is the reference's algorithm on the six corpus files, English first
    files = wmt17.raw_files(folder)
    assert [p.name for p in files[:3]] == [f"{stem}.en" for _, stem in wmt17.TRAINING]
    expected = subtokenizer.build_vocabulary(
        subtokenizer.count_tokens(files, wmt17.SAMPLE_CHARS), 2
    )
    assert subtokenizer.read_vocabulary(folder / wmt17.VOCABULARY) == expected
    # the workers' view: ids that read back as the text, and newstest2014's references
    bitext = load_bitext("wmt17-en-de", data_dir)
    assert len(bitext.train_source) == len(train)
    assert (
        bitext.detokenize(bitext.train_target[0].tolist())
        == "Das Europäische Parlament tagte am 12. Mai 2016 in Straßburg."
    )
    assert (
        bitext.test_references[0] == "Das Europäische Parlament tagte am 12. Mai 2016 in Straßburg."
    )
    assert len(bitext.test_source) == 4 and min(min(s) for s in bitext.train_source) >= 4
    again: list[str] = []
    assert (
        wmt17.prepare_wmt17(data_dir, archives=archives, min_count=2, say=again.append).status
        == "fresh"
    )
    assert len(server.requests) == 5


def test_one_epoch_of_task4b_trains_on_the_prepared_miniature(
    served: tuple[Served, tuple], tmp_path: Path, one_rank: None
) -> None:
    _, archives = served
    data_dir = tmp_path / "data"
    wmt17.prepare_wmt17(data_dir, download=True, archives=archives, min_count=2)
    train_one_epoch("task4b-transformer-wmt17", data_dir, tmp_path / "run")
