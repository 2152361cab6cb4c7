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
| ``SCALEBENCH_STATEMENT_TIMEOUT_S``| ``300``       | longest wait for a PostgreSQL answer (s) |
| ``SCALEBENCH_MLPERF_ORG``   | ``scalebench``               | MLPerf log: ``submission_org``   |
| ``SCALEBENCH_MLPERF_PLATFORM``| rank 0's hardware × ranks  | MLPerf log: ``submission_platform`` |
| ``SCALEBENCH_MLPERF_DIVISION``| ``open``                   | MLPerf log: ``open`` or ``closed`` |
| ``SCALEBENCH_MLPERF_STATUS``| ``research``                 | MLPerf log: ``submission_status`` |

The pool bounds what all sweeps together ask for: create it with as many slots
as workers there are (GPUs on a cluster, cores on one machine), counting deferred
tasks, e.g. ``airflow pools set --include-deferred scalebench_workers 32 ...``.

The ``SCALEBENCH_MLPERF_*`` settings say who ran a training run and on what, in the
``submission_*`` lines of rank 0's MLPerf log (``workers.mlperf``). Ranks read them from
their environment: the local launcher passes its own on, the Kubernetes launcher copies
those that are set into the pods'. Empty means unset.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path

from scalebench.whole_numbers import NotWholeNumber, parse_whole

VAR = Path("var")


class BadSetting(ValueError):
    """A setting from the environment that cannot be used; the message names the variable
    and what it must be (the command line says it in one line, exit status 2)."""


def _location(name: str, default: str) -> str:
    """Setting ``name``, a URL or a path (``default`` when unset), refused by name when it
    holds what no location the user meant has: white space at either end, or a control or
    formatting character anywhere (a line end copied with the value, a NUL, a zero-width
    space). Taken as it is, such a value names another file or folder (``results.db\n``),
    which would be created without a word."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    problem = location_problem(raw)
    if problem is None:
        return raw
    raise BadSetting(
        f"{name}={shown_location(raw)} {problem}, which would name another location than the "
        f"one meant; set it without, or unset it for {default}"
    )


def location_problem(raw: str) -> str | None:
    """What is wrong with ``raw`` as a URL or a path a user meant (white space at either end,
    a control or formatting character anywhere), or None: the same rule for a setting and for
    a command-line option."""
    odd = next((c for c in raw if unicodedata.category(c) in ("Cc", "Cf", "Cs")), None)
    if odd is not None:
        return f"holds the control character U+{ord(odd):04X}"
    if raw != raw.strip():
        return "begins or ends with white space"
    return None


def shown_location(raw: str) -> str:
    """``raw`` as a message shows it: quoted, its password left out, at most 200 characters."""
    shown = _PASSWORD.sub(r"\1***@", raw)
    return repr(shown) if len(shown) <= 200 else repr(shown[:197]) + "..."


# A URL's password (``scheme://user:password@host``), left out of messages.
_PASSWORD = re.compile(r"(://[^/@:]*:)[^/@]*@")


def dashboard_url() -> str:
    """``SCALEBENCH_DASHBOARD_URL``: where people open the dashboard, for the links a
    nightly's messages carry (default ``http://localhost:8050``, ``scalebench dashboard``'s)."""
    return _location("SCALEBENCH_DASHBOARD_URL", "http://localhost:8050").rstrip("/")


def data_dir() -> Path:
    """Where full data sets are kept. Empty is refused: it would mean whatever folder the
    process runs in; so is a path with white space at its ends or a control character."""
    raw = os.environ.get("SCALEBENCH_DATA_DIR")
    if raw is None:
        return VAR / "data"
    if not raw.strip() or "\0" in raw:
        raise BadSetting(
            f"SCALEBENCH_DATA_DIR={raw!r} names no folder; name the folder data sets are kept "
            f"in, or unset it for {VAR / 'data'}"
        )
    return Path(_location("SCALEBENCH_DATA_DIR", str(VAR / "data")))


def results_uri() -> str:
    """Where ranks write their records (``SCALEBENCH_RESULTS_URI``, default ``var/results``);
    white space at its ends or a control character is refused, naming the setting."""
    return _location("SCALEBENCH_RESULTS_URI", str(VAR / "results"))


def results_path(uri: str | None = None) -> Path:
    """The results location as a local path; only local paths and ``file://`` for now.
    Empty is refused: it would put sweeps into whatever folder the process runs in."""
    uri = uri if uri is not None else results_uri()
    if not uri.strip() or uri.strip() == "file://":
        raise BadSetting(
            "SCALEBENCH_RESULTS_URI is empty; name the folder results go to, or unset it "
            f"for {VAR / 'results'}"
        )
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
        value = parse_whole(raw)
    except NotWholeNumber as exc:
        raise BadSetting(f"SCALEBENCH_MAX_WORKERS {exc}") from None
    if value < 1:
        raise BadSetting(f"SCALEBENCH_MAX_WORKERS must be at least 1, got {value}")
    return value


def _number(name: str, default: str, lowest: float, highest: float, what: str) -> float:
    """Setting ``name`` as a number from ``lowest`` to ``highest`` (bounds included); a bad
    value raises, saying it must be ``what``."""
    raw = os.environ.get(name, default)
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not lowest <= value <= highest:  # NaN fails this too
        raise BadSetting(f"{name} must be {what}, got {raw!r}")
    return value


def live_ingest_s() -> float:
    """Seconds between loads of what a running group's ranks wrote so far (0: only at its
    end); bad values raise, naming the variable."""
    return _number("SCALEBENCH_LIVE_INGEST_S", "60", 0, 1e9, "0 or more seconds")


def statement_timeout_s() -> float:
    """Seconds one PostgreSQL statement (a commit or a COPY included) may take before it is
    given up on (``SCALEBENCH_STATEMENT_TIMEOUT_S``, default 300); bad values raise, naming
    the variable."""
    return _number("SCALEBENCH_STATEMENT_TIMEOUT_S", "300", 1, 86400, "1 to 86400 seconds")


def contention_threshold() -> float:
    """The share of a group's cores (0 to 1) other processes may take while it runs before
    its run is stored as ``contended`` (``SCALEBENCH_CONTENTION_THRESHOLD``, default 0.10);
    bad values raise, naming the variable."""
    return _number(
        "SCALEBENCH_CONTENTION_THRESHOLD", "0.10", 0, 1, "a share of the cores from 0 to 1"
    )


def default_compile() -> str:
    """The compile setting of a request that names none (``SCALEBENCH_COMPILE``, default auto)."""
    from scalebench.tasks.specs import COMPILE_SETTINGS

    value = os.environ.get("SCALEBENCH_COMPILE", "auto").strip()
    if value not in COMPILE_SETTINGS:
        raise BadSetting(
            f"SCALEBENCH_COMPILE must be one of {', '.join(COMPILE_SETTINGS)}, got {value!r}"
        )
    return value


MLPERF_DIVISIONS: tuple[str, ...] = ("open", "closed")
# MLPerf's availability categories; "research": research, development or internal (RDI).
MLPERF_STATUSES: tuple[str, ...] = ("cloud", "onprem", "preview", "research")
MLPERF_VARIABLES: tuple[str, ...] = (
    "SCALEBENCH_MLPERF_ORG",
    "SCALEBENCH_MLPERF_PLATFORM",
    "SCALEBENCH_MLPERF_DIVISION",
    "SCALEBENCH_MLPERF_STATUS",
)


def mlperf_org() -> str:
    """Who ran the benchmark, as the MLPerf log's ``submission_org`` (default ``scalebench``:
    the same name on every host and pod, unlike a host name)."""
    return os.environ.get("SCALEBENCH_MLPERF_ORG", "").strip() or "scalebench"


def mlperf_platform() -> str:
    """The system, as the MLPerf log's ``submission_platform``; empty (the default) lets
    rank 0 describe its own hardware (see :func:`workers.mlperf.default_platform`)."""
    return os.environ.get("SCALEBENCH_MLPERF_PLATFORM", "").strip()


def mlperf_division() -> str:
    """The MLPerf division the log claims, ``open`` (the default) or ``closed``; anything else
    raises, naming the variable."""
    return _one_of("SCALEBENCH_MLPERF_DIVISION", "open", MLPERF_DIVISIONS)


def mlperf_status() -> str:
    """The MLPerf log's ``submission_status``: ``research`` (the default: research,
    development or internal), ``onprem``, ``cloud`` or ``preview``; anything else raises."""
    return _one_of("SCALEBENCH_MLPERF_STATUS", "research", MLPERF_STATUSES)


def check_mlperf_settings() -> None:
    """Check the MLPerf settings that can be wrong (division and status): a bad one raises
    :class:`BadSetting` naming it."""
    mlperf_division()
    mlperf_status()


def mlperf_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The MLPerf settings that are set (non-empty) in ``env`` (default: this process's), for
    ranks that do not inherit this process's environment (Kubernetes pods)."""
    env = os.environ if env is None else env
    return {name: env[name] for name in MLPERF_VARIABLES if env.get(name, "").strip()}


def _one_of(variable: str, default: str, allowed: tuple[str, ...]) -> str:
    value = os.environ.get(variable, "").strip() or default
    if value not in allowed:
        raise BadSetting(f"{variable} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def pool() -> str:
    return os.environ.get("SCALEBENCH_POOL", "scalebench_workers")


def database_url() -> str:
    """The results database (``SCALEBENCH_DATABASE_URL``, default the SQLite file
    ``var/scalebench.db``); white space at its ends or a control character is refused,
    naming the setting (its password left out)."""
    return _location("SCALEBENCH_DATABASE_URL", f"sqlite:///{VAR / 'scalebench.db'}")
