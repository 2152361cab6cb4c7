"""Configuration from the environment, with embedded defaults under ``./var/``.

| variable                  | default                      | meaning                          |
|---------------------------|------------------------------|----------------------------------|
| ``SCALEBENCH_DATA_DIR``   | ``./var/data``               | full data sets (e.g. CIFAR-10)   |
| ``SCALEBENCH_RESULTS_URI``| ``./var/results``            | where ranks write their records  |
| ``SCALEBENCH_DATABASE_URL``| ``sqlite:///./var/scalebench.db`` | the results database        |
| ``SCALEBENCH_MAX_WORKERS``| ``32``                       | largest group allowed (GPUs)     |
| ``SCALEBENCH_POOL``       | ``scalebench_workers``       | Airflow pool (k slots a group) |
| ``SCALEBENCH_LIVE_INGEST_S``| ``60``                     | loads of a running group (s; 0: none) |
| ``SCALEBENCH_CONTENTION_THRESHOLD``| ``0.10``     | share of a group's cores others may take |

The pool bounds what all sweeps together ask for: create it with as many slots
as workers (GPUs) there are, counting deferred tasks, e.g.
``airflow pools set --include-deferred scalebench_workers 32 ...``.
"""

from __future__ import annotations

import os
from pathlib import Path

VAR = Path("var")


class BadSetting(ValueError):
    """A setting from the environment that cannot be used; the message names the variable
    and what it must be (the command line says it in one line, exit status 2)."""


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
        raise BadSetting(
            f"SCALEBENCH_RESULTS_URI={uri!r}: workers write to a local or mounted path "
            "(or file://...); object-store URIs are not supported yet"
        )
    return Path(uri)


def max_workers() -> int:
    """The largest worker count a sweep may ask for (bad values raise, naming the variable)."""
    raw = os.environ.get("SCALEBENCH_MAX_WORKERS", "32")
    try:
        value = int(raw)
    except ValueError:
        raise BadSetting(f"SCALEBENCH_MAX_WORKERS must be a whole number, got {raw!r}") from None
    if value < 1:
        raise BadSetting(f"SCALEBENCH_MAX_WORKERS must be at least 1, got {value}")
    return value


def live_ingest_s() -> float:
    """Seconds between loads of what a running group's ranks wrote so far (0: only at its
    end); bad values raise, naming the variable."""
    raw = os.environ.get("SCALEBENCH_LIVE_INGEST_S", "60")
    try:
        value = float(raw)
    except ValueError:
        raise BadSetting(
            f"SCALEBENCH_LIVE_INGEST_S must be a number of seconds, got {raw!r}"
        ) from None
    if not 0 <= value < float("inf"):
        raise BadSetting(f"SCALEBENCH_LIVE_INGEST_S must be 0 or more seconds, got {raw!r}")
    return value


def contention_threshold() -> float:
    """The share of a group's cores (0 to 1) other processes may take while it runs before
    its run is stored as ``contended`` (``SCALEBENCH_CONTENTION_THRESHOLD``, default 0.10);
    bad values raise, naming the variable."""
    raw = os.environ.get("SCALEBENCH_CONTENTION_THRESHOLD", "0.10")
    try:
        value = float(raw)
    except ValueError:
        raise BadSetting(
            f"SCALEBENCH_CONTENTION_THRESHOLD must be a share of the cores between 0 and 1, "
            f"got {raw!r}"
        ) from None
    if not 0 <= value <= 1:
        raise BadSetting(
            f"SCALEBENCH_CONTENTION_THRESHOLD must be a share of the cores between 0 and 1, "
            f"got {raw!r}"
        )
    return value


def default_compile() -> str:
    """The compile setting of a request that names none (``SCALEBENCH_COMPILE``, default auto)."""
    from scalebench.tasks.specs import COMPILE_SETTINGS

    value = os.environ.get("SCALEBENCH_COMPILE", "auto").strip()
    if value not in COMPILE_SETTINGS:
        raise BadSetting(
            f"SCALEBENCH_COMPILE must be one of {', '.join(COMPILE_SETTINGS)}, got {value!r}"
        )
    return value


def pool() -> str:
    return os.environ.get("SCALEBENCH_POOL", "scalebench_workers")


def database_url() -> str:
    return os.environ.get("SCALEBENCH_DATABASE_URL", f"sqlite:///{VAR / 'scalebench.db'}")
