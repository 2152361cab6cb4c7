"""Image and tabular data sets as NumPy arrays: read from disk, a package, or generated.

Torch-free, and NumPy is imported only when data is actually loaded, so the
file names come from the data-set registry (:mod:`scalebench.datasets`),
which validation reads without importing this module.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from scalebench.datasets import CIFAR10, CIFAR10_SOURCE, EPSILON

if TYPE_CHECKING:
    import numpy as np

CIFAR10_DIR = CIFAR10.folder
CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE = CIFAR10.files[:-1], CIFAR10.files[-1]
# A mirror of that archive (e.g. inside a network without internet access); a
# download from it is checked against the same published MD5.
CIFAR10_URL_VARIABLE = "SCALEBENCH_CIFAR10_URL"


def cifar10_url() -> str:
    """Where a download of CIFAR-10 comes from: ``SCALEBENCH_CIFAR10_URL``, else the official
    address."""
    return os.environ.get(CIFAR10_URL_VARIABLE, "").strip() or CIFAR10_SOURCE


@dataclass(frozen=True)
class ImageArrays:
    """Images as ``uint8``/``float32`` arrays shaped (N, C, H, W) with integer labels."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    with path.open("rb") as handle:
        batch = pickle.load(handle, encoding="bytes")
    data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    labels = np.asarray(batch[b"labels"], dtype=np.int64)
    return data, labels


def load_cifar10(data_dir: Path) -> ImageArrays:
    """Read the standard python-pickle CIFAR-10 batches (50,000 train, 10,000 test)."""
    import numpy as np

    CIFAR10.require(data_dir)
    folder = data_dir / CIFAR10_DIR
    parts = [_read_cifar_batch(folder / name) for name in CIFAR10_TRAIN_FILES]
    test_images, test_labels = _read_cifar_batch(folder / CIFAR10_TEST_FILE)
    return ImageArrays(
        train_images=np.concatenate([p[0] for p in parts]),
        train_labels=np.concatenate([p[1] for p in parts]),
        test_images=test_images,
        test_labels=test_labels,
    )


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> ImageArrays:
    """scikit-learn's 8×8 handwritten digits (1,797 images, values 0–16), split stratified."""
    import numpy as np
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    digits = sklearn_digits()
    images = digits.images.astype(np.float32)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=test_fraction, random_state=seed, stratify=labels
    )
    return ImageArrays(train_x, train_y, test_x, test_y)


DIGITS32_VARIANTS = 4  # training images per original digit: itself and 3 distorted copies


def load_digits32(test_fraction: float = 0.2, seed: int = 0) -> ImageArrays:
    """The digits at CIFAR-10's size, with four times the training images.

    Each 8×8 image is upscaled 4× (bilinear) to 32×32 and repeated into 3
    channels, so a network sees the full task's input shape and cost. Every
    training digit also appears in 3 copies slightly rotated (±12°), scaled
    (0.9–1.1) and sheared, drawn from a fixed seed: 5,748 training images, so
    an epoch has enough steps for batch-norm statistics and an epoch-based
    plateau rule to mean what they mean on CIFAR-10. The 360 test digits are
    only upscaled.
    """
    import numpy as np
    import torch
    from torch.nn import functional as F

    small = load_digits(test_fraction, seed)

    def upscale(images: np.ndarray) -> torch.Tensor:
        return F.interpolate(
            torch.from_numpy(images), size=(32, 32), mode="bilinear", align_corners=False
        )

    train = upscale(small.train_images)
    generator = torch.Generator().manual_seed(seed)
    copies = [train]
    for _ in range(DIGITS32_VARIANTS - 1):
        n = len(train)
        angle = (torch.rand(n, generator=generator) - 0.5) * (2 * np.pi * 12 / 180)
        scale = 0.9 + 0.2 * torch.rand(n, generator=generator)
        shear = (torch.rand(n, generator=generator) - 0.5) * 0.2
        cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
        theta = torch.stack(
            [
                torch.stack([cos, -sin + shear, torch.zeros(n)], 1),
                torch.stack([sin, cos, torch.zeros(n)], 1),
            ],
            1,
        )
        grid = F.affine_grid(theta, list(train.shape), align_corners=False)
        copies.append(F.grid_sample(train, grid, align_corners=False))
    images = torch.cat(copies).repeat(1, 3, 1, 1).numpy()
    labels = np.tile(small.train_labels, DIGITS32_VARIANTS)
    test = upscale(small.test_images).repeat(1, 3, 1, 1).numpy()
    return ImageArrays(images, labels, test, small.test_labels)


# The image sets by name: how each loads from the data directory.
IMAGE_SETS: dict[str, Callable[[Path], ImageArrays]] = {
    "cifar10": load_cifar10,
    "digits": lambda _: load_digits(),
    "digits32": lambda _: load_digits32(),
}


def load_images(name: str, data_dir: Path) -> ImageArrays:
    if name not in IMAGE_SETS:
        raise ValueError(f"unknown image data set {name!r}")
    return IMAGE_SETS[name](data_dir)


# -- tabular binary-classification sets (Task 2a) -----------------------------------------------

EPSILON_DIR = EPSILON.folder
EPSILON_SOURCES = {
    "train": "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/epsilon_normalized.bz2",
    "test": "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/epsilon_normalized.t.bz2",
}


@dataclass(frozen=True)
class TabularArrays:
    """Dense ``float32`` feature rows (N, F) and ``float32`` labels 0/1, train and test."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray


def epsilon_files(data_dir: Path) -> dict[str, Path]:
    """The prepared arrays of epsilon (written by ``workers.data.prepare``)."""
    folder = data_dir / EPSILON_DIR
    return {name.removesuffix(".npy"): folder / name for name in EPSILON.files}


def load_epsilon(data_dir: Path) -> TabularArrays:
    """The prepared epsilon arrays, memory-mapped (3.2 GB of training features)."""
    import numpy as np

    EPSILON.require(data_dir)
    files = epsilon_files(data_dir)
    return TabularArrays(**{key: np.load(path, mmap_mode="r") for key, path in files.items()})


# The generated stand-in for epsilon (Task 2a's light variant): row counts, and the
# label noise as a fraction of the clean score's spread.
EPSILON_LIKE_ROWS = {"train": 40_000, "test": 10_000}
EPSILON_LIKE_NOISE = 0.1
EPSILON_LIKE_DECAY = 0.65
NORMALISED_ROWS = 1024  # rows scaled to unit length at a time (a few MB)


def load_epsilon_like(features: int = 2000, seed: int = 0) -> TabularArrays:
    """Generated rows shaped like epsilon's: dense, ``features`` wide, unit length.

    Each row is drawn from a standard normal and scaled to unit length (epsilon's
    rows are unit length too); its label says on which side of a fixed random
    hyperplane the row lies once Gaussian noise of ``EPSILON_LIKE_NOISE`` × the
    clean score's spread is added. So the best linear model scores about 92 %,
    not 100 %, and 2,000 weights must be learned from 40,000 rows: like epsilon,
    where linear models top out near 90 %, the last points of accuracy take
    most of the epochs. Drawn from ``seed``; the same arrays on every rank.

    The rows' normal draws come from torch's CPU generator (its own seeded
    ``Generator``, so no global state is touched): 100 million of them in about 0.8 s,
    against 2.2 s for numpy's (a 2-core Intel Xeon, family 6, model 167), and every
    rank of a light Task 2a run draws them before it starts. They are the same bit for
    bit at any thread count and with torch's AVX2 or AVX-512 kernels; its kernel for
    processors without AVX2 (``ATEN_CPU_CAPABILITY=default``) turns the same random
    bits into normals that differ by up to 2.5e-6. The hyperplane, which decides how
    hard the task is, and the label noise come from numpy's generator.
    """
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    hyperplane = rng.standard_normal(features).astype(np.float32)
    generator = torch.Generator().manual_seed(seed)
    spread = (np.arange(1, features + 1) ** -EPSILON_LIKE_DECAY).astype(np.float32)

    def draw(rows: int) -> tuple[np.ndarray, np.ndarray]:
        x = torch.randn((rows, features), generator=generator, dtype=torch.float32).numpy()
        # Scaled and normalised a block of rows at a time, in place: the same arithmetic
        # row by row as on the whole array (np.linalg.norm's sum of squares), without
        # copies of it.
        for block in range(0, rows, NORMALISED_ROWS):
            part = x[block : block + NORMALISED_ROWS]
            part *= spread
            part /= np.sqrt(np.add.reduce(part * part, axis=1, keepdims=True))
        score = x @ hyperplane
        noisy = score + rng.standard_normal(rows).astype(np.float32) * (
            EPSILON_LIKE_NOISE * score.std()
        )
        return x, (noisy > 0).astype(np.float32)

    train_x, train_y = draw(EPSILON_LIKE_ROWS["train"])
    test_x, test_y = draw(EPSILON_LIKE_ROWS["test"])
    return TabularArrays(train_x, train_y, test_x, test_y)


TABULAR_SETS: dict[str, Callable[[Path], TabularArrays]] = {
    "epsilon": load_epsilon,
    "epsilon_like": lambda _: load_epsilon_like(),
}


def load_tabular(name: str, data_dir: Path) -> TabularArrays:
    if name not in TABULAR_SETS:
        raise ValueError(f"unknown tabular data set {name!r}")
    return TABULAR_SETS[name](data_dir)
