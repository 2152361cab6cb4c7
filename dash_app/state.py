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
from dataclasses import fields
from typing import Any
from urllib.parse import urlencode

from scalebench.run_metrics import shown_on
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
    *(metric.name for metric in shown_on("runs_table")),
    "reason",
)
TREND_METRICS = tuple(MEASURES)  # the trend page's choices: scalebench/units.py names them
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
