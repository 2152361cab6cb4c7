"""One Kubernetes setting: how it is declared, and how its variable's text is read and
checked.

:class:`Setting` is the declaration (:mod:`operators.kubernetes.settings` declares every
field of :class:`~operators.kubernetes.settings.KubernetesSettings` with :func:`env_var`):
its variable, its kind (:data:`KINDS`), what a value must be and its meaning.
:meth:`Setting.read` reads the variable's text by kind and :meth:`Setting.check` checks a
value, raising :class:`ValueError` naming the variable. :func:`quantity` and :func:`times`
compute with Kubernetes quantities (``500m``, ``2Gi``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scalebench.whole_numbers import NotWholeNumber, parse_whole, shown

# What each suffix of a Kubernetes quantity multiplies by.
_SUFFIXES = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}

# What a setting holds, and so how its text is read and what every value of it must be:
# free text, one of ``choices``, a Kubernetes quantity (``2Gi``, ``500m``), a positive
# number of seconds, a whole number, true/false, comma-separated names, a JSON object or
# a JSON list.
KINDS = ("text", "choice", "quantity", "seconds", "whole", "flag", "names", "object", "list")


@dataclass(frozen=True)
class Setting:
    """One environment variable of :class:`~operators.kubernetes.settings.KubernetesSettings`.

    ``variable`` is its name (``SCALEBENCH_K8S_`` and the field's name in capitals, but for
    the exceptions :mod:`operators.kubernetes.settings` declares; it is given as the table of
    settings is made) and ``meaning`` its sentence in the docs table. ``kind``
    (:data:`KINDS`) says how its text is read and the rule every value of it keeps (seconds
    positive, a whole number within ``minimum`` and ``maximum``, a choice among ``choices``,
    a JSON object of string values); ``valid`` is this setting's own rule on top (for
    ``names``, on each name), ``empty_ok`` lets an empty text through it (empty meaning
    none). ``expected`` completes "must be ..." in the error (each kind but text,
    quantity and names has its own words). ``inspect(variable, value)`` checks the parts
    of a JSON value, raising its own message.
    """

    kind: str
    meaning: str
    variable: str = ""  # given from the field's name (operators.kubernetes.settings.SETTINGS)
    expected: str = ""
    valid: Callable[[Any], object] | None = None
    empty_ok: bool = False
    choices: tuple[str, ...] = ()
    minimum: int = 0
    maximum: int = 0
    inspect: Callable[[str, Any], None] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.meaning!r}: unknown kind {self.kind!r}")
        if not self.must_be:
            raise ValueError(f"{self.meaning!r}: a {self.kind} setting must say what it expects")

    @property
    def must_be(self) -> str:
        """What a value must be, completing "must be ..." in the error."""
        if self.expected:
            return self.expected
        return {
            "choice": "one of " + ", ".join(self.choices),
            "seconds": "a positive number of seconds",
            "whole": f"a whole number from {self.minimum} to {self.maximum}",
            "flag": "true or false",
            "object": "a JSON object of strings",
            "list": "a JSON list",
        }.get(self.kind, "")

    def read(self, raw: str) -> Any:
        """The value of the variable's (stripped, non-empty) text ``raw``; checked later,
        as the settings are built, except that it must parse as its kind."""
        return _READERS[self.kind](self, raw)

    def check(self, value: Any) -> None:
        """Raise :class:`ValueError` naming the variable unless ``value`` is one it takes."""
        ok = _RULES[self.kind](self, value) and (
            self.valid is None
            or (self.empty_ok and value == "")
            or (
                all(self.valid(name) for name in value)
                if self.kind == "names"
                else self.valid(value)
            )
        )
        if not ok:
            shown = ",".join(value) if self.kind == "names" else value
            raise ValueError(f"{self.variable}={shown!r}: must be {self.must_be}")
        if self.inspect is not None:
            self.inspect(self.variable, value)


def env_var(default: Any, **declaration: Any) -> Any:
    """A :class:`~operators.kubernetes.settings.KubernetesSettings` field declared by a
    :class:`Setting`, ``default`` when its variable is unset or empty (a dict default is
    copied for each instance)."""
    metadata = {"setting": Setting(**declaration)}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def times(text: str, factor: int) -> str:
    """A Kubernetes quantity ``factor`` times over, in its own unit (``500m`` × 4 → ``2000m``,
    ``8Gi`` × 2 → ``16Gi``); ``text`` as it is for 1."""
    if factor == 1:
        return text
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", text)
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, unit = float(match.group(1)) * factor, match.group(2)
    return f"{int(number)}{unit}" if number == int(number) else f"{number:g}{unit}"


def quantity(text: str) -> float:
    """The number a Kubernetes quantity stands for (``500m`` → 0.5, ``2Gi`` → 2**31)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)", text)
    if match is None or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a quantity: {text!r}")
    return float(match.group(1)) * _SUFFIXES[match.group(2)]


def _read_text(setting: Setting, raw: str) -> str:
    return raw


def _read_seconds(setting: Setting, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{setting.variable}={raw!r}: must be {setting.must_be}") from None


def _read_whole(setting: Setting, raw: str) -> int:
    try:
        return parse_whole(raw)
    except NotWholeNumber:
        raise ValueError(f"{setting.variable}={shown(raw)}: must be {setting.must_be}") from None


def _read_flag(setting: Setting, raw: str) -> bool:
    """true/false, also 1/0, yes/no, on/off."""
    if raw.lower() in ("true", "1", "yes", "on"):
        return True
    if raw.lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{setting.variable}={raw!r}: must be {setting.must_be}")


def _read_names(setting: Setting, raw: str) -> tuple[str, ...]:
    """A comma-separated list, spaces around the names ignored."""
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _read_object(setting: Setting, raw: str) -> dict[str, Any]:
    return _json(setting.variable, raw, dict, "a JSON object")


def _read_list(setting: Setting, raw: str) -> tuple[Any, ...]:
    return tuple(_json(setting.variable, raw, list, "a JSON list"))


def _json(variable: str, raw: str, kind: type, what: str) -> Any:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{variable}={raw!r}: must be {what} ({exc})") from None
    except RecursionError:  # the json module's parser recurses once per nested list or object
        raise ValueError(
            f"{variable}: must be {what} (its JSON is nested too deep to read)"
        ) from None
    if not isinstance(value, kind):
        raise ValueError(f"{variable}={raw!r}: must be {what}")
    return value


_READERS: dict[str, Callable[[Setting, str], Any]] = {
    "text": _read_text,
    "choice": _read_text,
    "quantity": _read_text,
    "seconds": _read_seconds,
    "whole": _read_whole,
    "flag": _read_flag,
    "names": _read_names,
    "object": _read_object,
    "list": _read_list,
}
# The rule of each kind, before a setting's own (``valid``).
_RULES: dict[str, Callable[[Setting, Any], bool]] = {
    "text": lambda s, value: isinstance(value, str),
    "choice": lambda s, value: value in s.choices,
    "quantity": lambda s, value: isinstance(value, str),
    "seconds": lambda s, value: (
        isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    ),
    "whole": lambda s, value: type(value) is int and s.minimum <= value <= s.maximum,
    "flag": lambda s, value: type(value) is bool,
    "names": lambda s, value: isinstance(value, tuple) and all(isinstance(n, str) for n in value),
    "object": lambda s, value: isinstance(value, Mapping),
    "list": lambda s, value: isinstance(value, (tuple, list)),
}
assert set(_READERS) == set(_RULES) == set(KINDS)
