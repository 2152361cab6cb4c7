"""Configuration from the environment, with embedded defaults under ``./var/``.

| variable                  | default                      | meaning                          |
|---------------------------|------------------------------|----------------------------------|
| ``SCALEBENCH_DATA_DIR``   | ``./var/data``               | full data sets (e.g. CIFAR-10)   |
| ``SCALEBENCH_RESULTS_URI``| ``./var/results``            | where ranks write their records  |
| ``SCALEBENCH_DATABASE_URL``| ``sqlite:///./var/scalebench.db`` | the results database        |
"""

from __future__ import annotations

import os
from pathlib import Path

VAR = Path("var")


def data_dir() -> Path:
    return Path(os.environ.get("SCALEBENCH_DATA_DIR", VAR / "data"))


def results_uri() -> str:
    return os.environ.get("SCALEBENCH_RESULTS_URI", str(VAR / "results"))


def results_path(uri: str | None = None) -> Path:
    """The results location as a local path; only local paths and ``file://`` for now."""
    uri = uri if uri is not None else results_uri()
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    if "://" in uri:
        raise ValueError(
            f"SCALEBENCH_RESULTS_URI={uri!r}: workers write to a local or mounted path "
            "(or file://...); object-store URIs are not supported yet"
        )
    return Path(uri)


def database_url() -> str:
    return os.environ.get("SCALEBENCH_DATABASE_URL", f"sqlite:///{VAR / 'scalebench.db'}")
