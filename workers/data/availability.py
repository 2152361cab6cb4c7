"""Whether a task's data set can be loaded, checked before any worker starts.

:func:`check_available` dispatches by data set name to the per-format
``require_*`` check, which raises :class:`~workers.data.errors.DataSetMissing`
naming the files to put where. Sets that are generated or ship with a package
need nothing on disk and always pass.

Torch-free and cheap enough for parameter validation: the text and
translation modules (which import NumPy) are imported only when their data
set is the one asked about.
"""

from __future__ import annotations

from pathlib import Path

from workers.data.sources import require_cifar10, require_epsilon

# The full data sets ``prepare(..., download=True)`` can fetch, and whether their
# publisher gives checksums to verify the download against (CIFAR-10: MD5 of the
# archive and of every batch; LIBSVM publishes none for epsilon). WikiText-2 and
# the WMT corpora are put in place by hand.
DOWNLOADABLE = {"cifar10": True, "epsilon": False}


def downloadable(name: str) -> bool:
    """True when data set ``name`` can be fetched by :func:`workers.data.prepare.prepare`."""
    return name in DOWNLOADABLE


def published_checksums(name: str) -> bool:
    """True when a download of ``name`` is checked against checksums its publisher gives."""
    return DOWNLOADABLE.get(name, False)


def check_available(name: str, data_dir: Path) -> None:
    """Raise :class:`DataSetMissing` when data set ``name`` cannot be loaded from ``data_dir``."""
    if name == "cifar10":
        require_cifar10(data_dir)
    elif name == "epsilon":
        require_epsilon(data_dir)
    elif name == "wikitext2":
        from workers.data.text import require_wikitext2

        require_wikitext2(data_dir)
    elif name.startswith("wmt"):
        from workers.data.translation import require_wmt

        require_wmt(data_dir, name)
