"""Page state in the URL query string: parsed and checked, never trusted.

Every page keeps its filters in the query string, so a link shows exactly
what its sender saw. A page's layout receives the raw parameters (Dash passes
them as keyword arguments: a string, or a list when a name repeats) and
parses them here into a small frozen dataclass plus a list of *problems*:
friendly sentences shown above the page. A bad value never raises; it is
replaced by the default and named in a problem. :func:`to_search` writes a
state back as the canonical query string (defaults left out), which the page
puts into the address bar whenever a control changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlencode

from results_db.models import RUN_STATUSES
from scalebench.units import MEASURES

# Sweep and run ids, task ids, machine and GPU type names: printable, no spaces.
IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+@-]{0,249}")
MAX_SEARCH = 100
MAX_OVERLAID = 6  # all-reduce sweeps drawn together on the Communication page
SORTABLE_RUN_COLUMNS = (
    "started",
    "run",
    "sweep",
    "task",
    "workers",
    "repeat",
    "status",
    "time_to_accuracy_s",
    "samples_per_s",
    "communication_ratio",
    "reason",
)
TREND_METRICS = tuple(MEASURES)  # the trend page's choices: dash_app/units.py names them
# Short names older addresses used for the same quantities; still understood.
FORMER_NAMES = {
    "tta": "time_to_accuracy_s",
    "throughput": "samples_per_s",
    "comm": "communication_ratio",
}


def _shown(value: object) -> str:
    """A user-supplied value, shortened, for a message."""
    text = str(value)
    return repr(text if len(text) <= 40 else text[:37] + "...")


class Query:
    """Reads named URL parameters, collecting problems instead of raising.

    Call the typed readers for every parameter the page knows, then
    :meth:`problems`, which also names any parameter nobody read.
    """

    def __init__(self, params: Mapping[str, Any]) -> None:
        self._params = dict(params)
        self._read: set[str] = set()
        self._problems: list[str] = []

    def _raw(self, name: str) -> str | None:
        self._read.add(name)
        value = self._params.get(name)
        if isinstance(value, list | tuple):
            self._problems.append(f"{name}: given {len(value)} times; the first one is used.")
            value = value[0] if value else None
        if value is None:
            return None
        return str(value).strip()

    def identifier(self, name: str, what: str) -> str | None:
        """An id (sweep, run, task, price name), or None when absent or malformed."""
        value = self._raw(name)
        if not value:
            return None
        if not IDENTIFIER.fullmatch(value):
            self._problems.append(f"{name}: {_shown(value)} is not a valid {what} id.")
            return None
        return value

    def identifiers(self, name: str, what: str, limit: int) -> tuple[str, ...]:
        """Comma-separated ids, each checked as :meth:`identifier` does; repeats dropped,
        at most ``limit`` kept."""
        value = self._raw(name)
        kept: list[str] = []
        for item in (value or "").split(","):
            item = item.strip()
            if not item or item in kept:
                continue
            if not IDENTIFIER.fullmatch(item):
                self._problems.append(f"{name}: {_shown(item)} is not a valid {what} id.")
            elif len(kept) == limit:
                self._problems.append(f"{name}: at most {limit} are shown; {_shown(item)} is not.")
            else:
                kept.append(item)
        return tuple(kept)

    def choice(self, name: str, options: Sequence[str], default: str) -> str:
        """One of ``options``; the default when absent or not one of them."""
        value = self._raw(name)
        if value is None or value == "":
            return default
        value = FORMER_NAMES.get(value, value)
        if value not in options:
            self._problems.append(
                f"{name}: {_shown(value)} is not one of {', '.join(options)}; using {default}."
            )
            return default
        return value

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        """A whole number from ``low`` to ``high``; the default otherwise."""
        value = self._raw(name)
        if value is None or value == "":
            return default
        if not re.fullmatch(r"[0-9]{1,9}", value) or not low <= int(value) <= high:
            self._problems.append(
                f"{name}: {_shown(value)} is not a whole number from {low} to {high}; "
                f"using {default}."
            )
            return default
        return int(value)

    def text(self, name: str, max_length: int = MAX_SEARCH) -> str:
        """Free text (a search), without control characters, at most ``max_length`` long."""
        value = self._raw(name) or ""
        cleaned = "".join(ch for ch in value if ch.isprintable())
        if cleaned != value:
            self._problems.append(f"{name}: control characters were removed.")
        if len(cleaned) > max_length:
            self._problems.append(f"{name}: shortened to {max_length} characters.")
            cleaned = cleaned[:max_length]
        return cleaned

    def problems(self) -> list[str]:
        """Problems found so far, and one for every parameter the page does not know."""
        unknown = [name for name in self._params if name not in self._read]
        if unknown:
            names = ", ".join(_shown(name) for name in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            self._problems.append(f"Ignored unknown parameter(s) {names}{more}.")
        return list(self._problems)


def to_search(state: Any) -> str:
    """The canonical query string of a page state: ``?name=value&…``, defaults left out."""
    pairs = []
    for item in fields(state):
        value = getattr(state, item.name)
        if value is None or value == "" or value == item.default:
            continue
        pairs.append((item.name, ",".join(value) if isinstance(value, tuple) else str(value)))
    return "?" + urlencode(pairs, safe=",") if pairs else ""


# -- one state per page ----------------------------------------------------------------------


@dataclass(frozen=True)
class OverviewState:
    """The overview has no filters."""


@dataclass(frozen=True)
class SweepState:
    """Scaling: one training sweep (None: the newest), with the published results overlaid
    or not, on one of its network profiles (None: every profile, a curve each)."""

    sweep: str | None = None
    published: str = "off"
    network: str | None = None


@dataclass(frozen=True)
class CommunicationState:
    """Communication: a training sweep (None: the newest) and the all-reduce sweeps whose
    curves are overlaid (none: the newest one)."""

    sweep: str | None = None
    allreduce: tuple[str, ...] = ()
    dtype: str = "all"
    network: str | None = None  # the training sweep's profile shown (None: all, a curve each)


@dataclass(frozen=True)
class CostState:
    """Cost: a training sweep and the instance and GPU types priced (``gpu="none"``: CPU
    only; ``None``: follow the sweep's device, a T4 for GPU runs and none for CPU runs)."""

    sweep: str | None = None
    instance: str = "n1-standard-4"
    gpu: str | None = None
    published: str = "off"
    network: str | None = None  # one network profile of the sweep (None: all, each apart)


@dataclass(frozen=True)
class RunsState:
    """Runs table: a search text, status and task filters, a sort and a page (0-based)."""

    q: str = ""
    status: str = "all"
    task: str | None = None
    sort: str = "started"
    order: str = "desc"
    page: int = 0


@dataclass(frozen=True)
class RunState:
    """A run's page (None: the newest run)."""

    id: str | None = None


@dataclass(frozen=True)
class CompareState:
    """Two sweeps: ``a`` (e.g. last night) against ``b`` (its baseline)."""

    a: str | None = None
    b: str | None = None


@dataclass(frozen=True)
class TrendState:
    """Nightly trend of one task: a metric over the newest ``nights`` scheduled sweeps."""

    task: str | None = None
    metric: str = "time_to_accuracy_s"
    nights: int = 90


def parse_overview(params: Mapping[str, Any]) -> tuple[OverviewState, list[str]]:
    return OverviewState(), Query(params).problems()


def parse_sweep(params: Mapping[str, Any]) -> tuple[SweepState, list[str]]:
    query = Query(params)
    state = SweepState(
        sweep=query.identifier("sweep", "sweep"),
        published=query.choice("published", ("off", "on"), "off"),
        network=query.identifier("network", "network profile"),
    )
    return state, query.problems()


def parse_communication(params: Mapping[str, Any]) -> tuple[CommunicationState, list[str]]:
    query = Query(params)
    state = CommunicationState(
        sweep=query.identifier("sweep", "sweep"),
        allreduce=query.identifiers("allreduce", "sweep", MAX_OVERLAID),
        dtype=query.choice("dtype", ("all", "float32", "float16", "bfloat16"), "all"),
        network=query.identifier("network", "network profile"),
    )
    return state, query.problems()


def parse_cost(params: Mapping[str, Any]) -> tuple[CostState, list[str]]:
    query = Query(params)
    state = CostState(
        sweep=query.identifier("sweep", "sweep"),
        instance=query.identifier("instance", "instance type") or CostState.instance,
        gpu=query.identifier("gpu", "GPU type"),
        published=query.choice("published", ("off", "on"), "off"),
        network=query.identifier("network", "network profile"),
    )
    return state, query.problems()


def parse_runs(params: Mapping[str, Any]) -> tuple[RunsState, list[str]]:
    query = Query(params)
    state = RunsState(
        q=query.text("q"),
        status=query.choice("status", ("all", *RUN_STATUSES), "all"),
        task=query.identifier("task", "task"),
        sort=query.choice("sort", SORTABLE_RUN_COLUMNS, "started"),
        order=query.choice("order", ("asc", "desc"), "desc"),
        page=query.integer("page", 0, 0, 100_000),
    )
    return state, query.problems()


def parse_run(params: Mapping[str, Any]) -> tuple[RunState, list[str]]:
    query = Query(params)
    return RunState(id=query.identifier("id", "run")), query.problems()


def parse_compare(params: Mapping[str, Any]) -> tuple[CompareState, list[str]]:
    query = Query(params)
    state = CompareState(a=query.identifier("a", "sweep"), b=query.identifier("b", "sweep"))
    return state, query.problems()


def parse_trend(params: Mapping[str, Any]) -> tuple[TrendState, list[str]]:
    query = Query(params)
    state = TrendState(
        task=query.identifier("task", "task"),
        metric=query.choice("metric", TREND_METRICS, TrendState.metric),
        nights=query.integer("nights", 90, 2, 3650),
    )
    return state, query.problems()
