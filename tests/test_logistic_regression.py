"""Task 2a: the spec against the text, epsilon's LIBSVM conversion, the loss, and a light run."""

from __future__ import annotations

import bz2
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
from test_task_specs import SPEC_TEXT, needs_text

from results_db.run_summary import summarise
from scalebench.datasets import DataSetCorrupt, DataSetMissing
from scalebench.tasks import TabularData, TrainingSpec, get_task
from workers.data.epsilon import convert_libsvm, prepare_epsilon
from workers.data.sources import load_epsilon, load_epsilon_like
from workers.logistic_regression import regularised_loss
from workers.records import read_run

if TYPE_CHECKING:
    from conftest import CliSweep

TASK2A = "task2a-logreg-epsilon"


@needs_text
def test_task2a_hyperparameters_follow_the_text() -> None:
    text = SPEC_TEXT.read_text(encoding="utf-8")
    part = text[text.index("We benchmark Logistic Regression") : text.index("We benchmark the AWD")]
    spec = get_task(TASK2A)
    assert isinstance(spec, TrainingSpec) and isinstance(spec.data, TabularData)
    machines = re.search(r"k = ([\d, ]+) - minibatch size per worker", part)
    assert machines and spec.world_sizes == tuple(int(k) for k in machines.group(1).split(","))
    assert spec.batch_per_worker == int(re.search(r"b = (\d+)", part).group(1))
    assert spec.max_epochs == int(re.search(r"maximum epochs: (\d+)", part).group(1))
    assert spec.optimizer.lr == float(re.search(r"learning rate \\eta : ([\d.]+)", part).group(1))
    assert "momentum=0, nesterov=False, weight_decay=0, dampening=0" in part
    assert (spec.optimizer.momentum, spec.optimizer.nesterov) == (0.0, False)
    assert spec.optimizer.weight_decay == 0.0 and spec.optimizer.dampening == 0.0
    assert spec.l2 == float(re.search(r"L2 = ([\d.]+)", part).group(1))
    assert "from \\eta to \\eta \\times k" in part and spec.schedule.warmup == "scale-k"
    assert re.search(r"plateau in the validation loss is reached for 2 consecutive", part)
    assert spec.schedule.plateau_patience == 2
    assert "test accuracy of 89%" in text and spec.goal.threshold == 89.0


def test_the_loss_adds_half_l2_times_the_squared_weights() -> None:
    torch.manual_seed(0)
    weight = torch.randn(1, 5, requires_grad=True)
    rows, labels = torch.randn(8, 5), torch.tensor([0.0, 1.0] * 4)
    logits = (rows @ weight.T).squeeze(1)
    loss = regularised_loss(logits, labels, weight, l2=0.5)
    loss.backward()
    plain = torch.nn.functional.binary_cross_entropy_with_logits(logits.detach(), labels)
    assert loss.item() == pytest.approx(plain.item() + 0.25 * weight.detach().pow(2).sum().item())
    bce_grad = rows.T @ (torch.sigmoid(logits.detach()) - labels) / 8
    assert torch.allclose(weight.grad, bce_grad.reshape(1, -1) + 0.5 * weight.detach(), atol=1e-6)


def write_libsvm(path: Path, rows: int, features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import dump_svmlight_file  # imported where used: seconds to import

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    x[rng.random(x.shape) < 0.3] = 0.0  # sparse lines, as LIBSVM writes them
    y = np.where(rng.random(rows) < 0.5, -1, 1)
    dump_svmlight_file(x, y, str(path), zero_based=False)
    return x, y


def test_conversion_in_chunks_keeps_every_row(tmp_path: Path) -> None:
    source = tmp_path / "data.svm"
    x, y = write_libsvm(source, rows=257, features=12, seed=1)
    lines: list[str] = []
    rows = convert_libsvm(
        source, 12, tmp_path / "x.npy", tmp_path / "y.npy", chunk_bytes=1500, say=lines.append
    )
    assert rows == 257 and len(lines) > 5  # many chunks, each reported with time to go
    assert "s to go" in lines[-1]
    np.testing.assert_allclose(np.load(tmp_path / "x.npy"), x, rtol=1e-6)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), (y > 0).astype(np.float32))
    from sklearn.datasets import load_svmlight_file

    reference, _ = load_svmlight_file(str(source), n_features=12)
    np.testing.assert_allclose(np.load(tmp_path / "x.npy"), reference.toarray(), rtol=1e-6)


def write_epsilon_like(folder: Path, compress: bool) -> None:
    folder.mkdir(parents=True)
    for name, rows, seed in (("epsilon_normalized", 60, 2), ("epsilon_normalized.t", 20, 3)):
        write_libsvm(folder / name, rows, 8, seed)
        if compress:
            packed = (folder / name).read_bytes()
            (folder / f"{name}.bz2").write_bytes(bz2.compress(packed))
            (folder / name).unlink()


def test_epsilon_is_converted_once_then_fresh(tmp_path: Path) -> None:
    write_epsilon_like(tmp_path / "epsilon", compress=True)
    rows = {"train": 60, "test": 20}
    first = prepare_epsilon(tmp_path, features=8, rows=rows, say=lambda line: None)
    assert first.status == "converted"
    again = prepare_epsilon(tmp_path, features=8, rows=rows)
    assert again.status == "fresh"
    arrays = load_epsilon(tmp_path)
    assert arrays.train_x.shape == (60, 8) and arrays.test_y.shape == (20,)
    with pytest.raises(DataSetCorrupt, match=r"expected 61 rows of 8 features"):
        (tmp_path / "epsilon" / ".scalebench-verified.json").unlink()
        prepare_epsilon(tmp_path, features=8, rows={"train": 61, "test": 20})


def test_epsilon_can_be_downloaded(tmp_path: Path) -> None:
    write_epsilon_like(tmp_path / "mirror" / "epsilon", compress=True)
    mirror = tmp_path / "mirror" / "epsilon"
    sources = {
        "train": (mirror / "epsilon_normalized.bz2").as_uri(),
        "test": (mirror / "epsilon_normalized.t.bz2").as_uri(),
    }
    data = tmp_path / "data"
    with pytest.raises(DataSetMissing, match="pass --download"):
        prepare_epsilon(data, features=8, rows={"train": 60, "test": 20}, sources=sources)
    done = prepare_epsilon(
        data,
        download=True,
        features=8,
        rows={"train": 60, "test": 20},
        sources=sources,
        say=lambda line: None,
    )
    assert done.status == "converted"


def test_an_epsilon_source_larger_than_its_rows_can_take_is_stopped(tmp_path: Path) -> None:
    """A download that goes on past what 60 rows of 8 features can take (a source that never
    ends) is stopped, and so is a .bz2 that unpacks to more: nothing fills the disk, nothing
    is left that looks prepared."""
    from workers.data.epsilon import libsvm_bound

    bound = libsvm_bound(60, 8)
    assert bound == 60 * (8 * 32 + 8)
    sources = {"train": "file:///dev/zero", "test": "file:///dev/zero"}
    with pytest.raises(DataSetCorrupt, match=f"more than {bound:,} bytes, where no such file"):
        prepare_epsilon(
            tmp_path,
            download=True,
            features=8,
            rows={"train": 60, "test": 20},
            sources=sources,
            say=lambda line: None,
        )
    # the partial download went with the error
    assert not list((tmp_path / "downloads").iterdir())
    folder = tmp_path / "epsilon"
    folder.mkdir()
    (folder / "epsilon_normalized.bz2").write_bytes(bz2.compress(b"+1 1:0.5\n" * 100_000))
    with pytest.raises(DataSetCorrupt, match=f"unpacks to more than {bound:,} bytes"):
        prepare_epsilon(tmp_path, features=8, rows={"train": 60, "test": 20}, say=print)
    assert sorted(p.name for p in folder.iterdir()) == ["epsilon_normalized.bz2"]


def test_labels_other_than_plus_minus_one_are_refused(tmp_path: Path) -> None:
    source = tmp_path / "bad.svm"
    source.write_text("0 1:0.5 2:0.25\n2 1:0.1\n")
    with pytest.raises(DataSetCorrupt, match="labels other than -1 and \\+1"):
        convert_libsvm(source, 2, tmp_path / "x.npy", tmp_path / "y.npy", say=lambda line: None)


def test_the_light_set_is_shaped_like_epsilon_and_the_same_on_every_load() -> None:
    data = load_epsilon_like()
    assert data.train_x.shape == (40_000, 2000) and data.test_x.shape == (10_000, 2000)
    assert data.train_x.dtype == np.float32 and data.train_y.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(data.test_x, axis=1), 1.0, rtol=1e-5)
    assert set(np.unique(data.train_y).tolist()) == {0.0, 1.0}
    assert abs(data.train_y.mean() - 0.5) < 0.02 and abs(data.test_y.mean() - 0.5) < 0.02
    # Every rank draws the same rows: one seed, no state shared between loads.
    np.testing.assert_array_equal(load_epsilon_like().test_x[:5], data.test_x[:5])


@pytest.mark.slow
def test_two_workers_reach_the_light_target(light_2a_cli_sweep: CliSweep) -> None:
    """The command line's light sweep's 2-worker group (one real run, read by its test
    too): both ranks stop at the first evaluation at or above the light goal."""
    target = get_task(TASK2A).goal.light_threshold
    run_dir = light_2a_cli_sweep.run_dir(2)
    ranks = read_run(run_dir)
    assert len(ranks) == 2
    for rank in ranks:
        assert rank.events() == ["start", "goal_reached", "finished"]
        goal = [e for e in rank.of_kind("event") if e["event"] == "goal_reached"]
        assert goal[0]["value"] >= target
        evals = rank.of_kind("eval")
        assert all(e["metrics"]["accuracy"] < target for e in evals[:-1])  # it stopped at once
        steps = rank.of_kind("step")
        assert steps and all(s["phases"]["communication"] > 0 for s in steps)
    summary = summarise(read_run(run_dir), run_dir.name, 2, "succeeded")
    assert summary.status == "succeeded" and summary.goal_reached
    assert summary.epochs == len(ranks[0].of_kind("eval"))
    assert 0 < summary.time_to_accuracy_without_eval_s < summary.time_to_accuracy_s


def test_a_corrupt_archive_leaves_nothing_that_looks_prepared(tmp_path: Path) -> None:
    """A .bz2 cut short is refused, leaves no half-unpacked text and no arrays, and the
    next attempt is refused the same way (never a 0-row data set reported as converted)."""
    folder = tmp_path / "epsilon"
    write_epsilon_like(folder, compress=True)
    packed = folder / "epsilon_normalized.bz2"
    packed.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    for _ in range(2):
        with pytest.raises(DataSetCorrupt, match="not a complete bzip2 file"):
            prepare_epsilon(
                tmp_path, features=8, rows={"train": 60, "test": 20}, say=lambda line: None
            )
        assert not (folder / "epsilon_normalized").exists()
        assert not list(folder.glob("*.npy")) and not list(folder.glob(".*partial*"))


@pytest.mark.parametrize("text", ["", "+1 1:0.5\n"])
def test_a_text_file_without_the_expected_rows_is_refused_before_converting(
    tmp_path: Path, text: str
) -> None:
    folder = tmp_path / "epsilon"
    write_epsilon_like(folder, compress=False)
    (folder / "epsilon_normalized").write_text(text)
    for _ in range(2):
        with pytest.raises(DataSetCorrupt, match=r"expected 60 rows"):
            prepare_epsilon(
                tmp_path, features=8, rows={"train": 60, "test": 20}, say=lambda line: None
            )
        assert not list(folder.glob("*.npy"))
