"""WikiText-2 and epsilon from their published archives, served on 127.0.0.1: checksums
(recorded, or kept from the first download), token counts, mirrors, ``scalebench data
import``, and two preparations of one set at a time."""

from __future__ import annotations

import bz2
import os
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from scalebench.datasets import DataSetCorrupt, DataSetMissing
from tests.archive_server import mirrored, serve, upstream_path
from tests.epochs import train_one_epoch
from workers.data import wikitext
from workers.data.archives import MIRRORS_VARIABLE, digests_of, downloads_folder, mirrors

TRAIN = " = Title = \n\n the cat sat <unk> \n"  # 10 tokens with <eos>, 7 distinct words
VALID = " the dog sat \n"


def wikitext_zip(root: Path) -> Path:
    path = upstream_path(root, wikitext.WIKITEXT2_ARCHIVE.url)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as packed:
        packed.writestr("wikitext-2/wiki.train.tokens", TRAIN)
        packed.writestr("wikitext-2/wiki.valid.tokens", VALID)
        packed.writestr("wikitext-2/wiki.test.tokens", " the cat \n")
    return path


def test_wikitext2_is_downloaded_checked_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = wikitext_zip(tmp_path / "upstream")
    archive = replace(wikitext.WIKITEXT2_ARCHIVE, sha256=digests_of(path)[0])
    with mirrored(tmp_path / "upstream", "wikitext", monkeypatch) as server:
        data = tmp_path / "data"
        with pytest.raises(DataSetMissing, match="pass --download"):
            wikitext.prepare_wikitext2(data, archive=archive)
        counts = {"train": 10, "valid": 4}
        with pytest.raises(DataSetCorrupt, match="10 tokens, expected 2,088,628"):
            wikitext.prepare_wikitext2(data, download=True, archive=archive)
        done = wikitext.prepare_wikitext2(data, archive=archive, tokens=counts, vocabulary=7)
        assert done.status == "verified"
        again = wikitext.prepare_wikitext2(data, archive=archive, tokens=counts, vocabulary=7)
        assert again.status == "fresh"
        assert len(server.requests) == 1


def test_a_mirror_setting_that_is_not_source_equals_address_is_refused() -> None:
    assert mirrors({MIRRORS_VARIABLE: "statmt=http://m/a, libsvm=file:///x/"}) == {
        "statmt": "http://m/a",
        "libsvm": "file:///x",
    }
    with pytest.raises(DataSetMissing, match="'statmt' is not SOURCE=BASE_ADDRESS"):
        mirrors({MIRRORS_VARIABLE: "statmt"})


def libsvm_text(rows: int, features: int, flip: bool = False) -> bytes:
    lines = []
    for row in range(rows):
        label = "+1" if (row % 2 == 0) != flip else "-1"
        lines.append(f"{label} 1:{row / rows:.3f} {features}:0.5")
    return ("\n".join(lines) + "\n").encode()


def test_epsilon_keeps_its_first_downloads_digest_and_checks_later_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.data.epsilon import EPSILON_TEXT, prepare_epsilon
    from workers.data.sources import EPSILON_SOURCES

    root = tmp_path / "upstream"
    rows = {"train": 6, "test": 4}

    def publish(flip: bool) -> None:
        for split, url in EPSILON_SOURCES.items():
            path = upstream_path(root, url)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bz2.compress(libsvm_text(rows[split], 5, flip)))

    publish(flip=False)
    with mirrored(root, "libsvm", monkeypatch):
        data = tmp_path / "data"
        assert prepare_epsilon(data, download=True, features=5, rows=rows).status == "converted"
        digests = (downloads_folder(data) / "digests.json").read_text()
        assert f"{EPSILON_TEXT['train']}.bz2" in digests
        # the files are fetched again, and the publisher now serves other bytes
        for path in [*downloads_folder(data).glob("*.bz2"), *(data / "epsilon").iterdir()]:
            path.unlink()
        publish(flip=True)
        with pytest.raises(DataSetCorrupt, match=r"epsilon_normalized.bz2 .*kept from its first"):
            prepare_epsilon(data, download=True, features=5, rows=rows)
        assert not list(downloads_folder(data).glob("epsilon_normalized.bz2*"))


def test_data_import_takes_known_archives_and_leaves_the_rest(tmp_path: Path) -> None:
    from cli.main import main

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "epsilon_normalized.t.bz2").write_bytes(bz2.compress(libsvm_text(4, 5)))
    (folder / "holiday.jpg").write_bytes(b"not a data set")
    data = tmp_path / "data"
    assert main(["data", "import", str(folder), "--data-dir", str(data)]) == 0
    assert sorted(p.name for p in downloads_folder(data).iterdir()) == [
        "digests.json",
        "epsilon_normalized.t.bz2",
    ]
    assert main(["data", "import", str(tmp_path / "nowhere"), "--data-dir", str(data)]) == 1


def test_a_file_given_by_hand_never_becomes_the_digest_downloads_must_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """epsilon has no published checksum: a wrong file imported under its name is taken (it
    is checked when converted), but a later download of the real file is not refused for
    differing from it."""
    from workers.data.archives import obtain
    from workers.data.catalogue import archives_by_set

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "epsilon_normalized.t.bz2").write_bytes(b"not the LIBSVM file")
    data = tmp_path / "data"
    from cli.main import main

    assert main(["data", "import", str(folder), "--data-dir", str(data)]) == 0
    archive = archives_by_set()["epsilon"][1]
    (downloads_folder(data) / archive.file).unlink()  # the user sees it was wrong
    upstream = upstream_path(tmp_path / "upstream", archive.url)
    upstream.parent.mkdir(parents=True)
    upstream.write_bytes(bz2.compress(libsvm_text(4, 5)))
    with mirrored(tmp_path / "upstream", "libsvm", monkeypatch):
        path = obtain(archive, data, download=True, say=lambda line: None)
    assert path.read_bytes() == upstream.read_bytes()


def test_two_preparations_of_one_set_at_once_take_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes prepare WikiText-2 into one data folder while the server is slow: the
    second waits for the first's lock, and both end with the set ready."""
    path = wikitext_zip(tmp_path / "upstream")
    with serve(tmp_path / "upstream") as server:
        server.delay_s = 1.0
        data = tmp_path / "data"
        code = (
            "import sys\n"
            "from dataclasses import replace\n"
            "from pathlib import Path\n"
            "from workers.data import wikitext\n"
            "from workers.data.steps import preparation_lock\n"
            f"archive = replace(wikitext.WIKITEXT2_ARCHIVE, sha256={digests_of(path)[0]!r})\n"
            "with preparation_lock(Path(sys.argv[1]), 'wikitext2'):\n"
            "    p = wikitext.prepare_wikitext2(Path(sys.argv[1]), download=True, "
            "archive=archive, tokens={'train': 10, 'valid': 4}, vocabulary=7)\n"
            "print('status', p.status)\n"
        )
        env = {**os.environ, MIRRORS_VARIABLE: f"wikitext={server.base}"}
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", code, str(data)],
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [run.communicate(timeout=120)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    text = "".join(outputs)
    assert "waiting for it to end" in text
    assert sorted(line for line in text.splitlines() if line.startswith("status")) == [
        "status downloaded",
        "status fresh",
    ]
    assert len(server.requests) == 1  # the second found the first's download


def test_one_epoch_of_task3a_trains_on_a_prepared_wikitext2_miniature(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_rank: None
) -> None:
    import random

    words = [f"w{i}" for i in range(50)]
    draw = random.Random(0)
    text = {
        name: "".join(" " + " ".join(draw.choices(words, k=12)) + " \n" for _ in range(lines))
        for name, lines in (("train", 400), ("valid", 60), ("test", 60))
    }
    path = upstream_path(tmp_path / "upstream", wikitext.WIKITEXT2_ARCHIVE.url)
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as packed:
        for name, body in text.items():
            packed.writestr(f"wikitext-2/wiki.{name}.tokens", body)
    archive = replace(wikitext.WIKITEXT2_ARCHIVE, sha256=digests_of(path)[0])
    with mirrored(tmp_path / "upstream", "wikitext", monkeypatch):
        counts = {"train": 400 * 13, "valid": 60 * 13}
        data = tmp_path / "data"
        wikitext.prepare_wikitext2(
            data, download=True, archive=archive, tokens=counts, vocabulary=51
        )
    train_one_epoch("task3a-awdlstm-wikitext2", data, tmp_path / "run")


def test_one_epoch_of_task2a_trains_on_a_prepared_epsilon_miniature(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_rank: None
) -> None:
    """Rows of epsilon's 2,000 features, fetched, kept, converted and trained on."""
    import random

    from workers.data.epsilon import prepare_epsilon
    from workers.data.sources import EPSILON_SOURCES

    draw = random.Random(0)
    rows = {"train": 600, "test": 200}
    for split, url in EPSILON_SOURCES.items():
        lines = "".join(
            f"{'+1' if i % 2 else '-1'} {draw.randrange(1, 2000)}:{draw.random():.3f} 2000:0.5\n"
            for i in range(rows[split])
        )
        path = upstream_path(tmp_path / "upstream", url)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bz2.compress(lines.encode()))
    with mirrored(tmp_path / "upstream", "libsvm", monkeypatch):
        data = tmp_path / "data"
        prepare_epsilon(data, download=True, rows=rows, say=lambda line: None)
    train_one_epoch("task2a-logreg-epsilon", data, tmp_path / "run")
