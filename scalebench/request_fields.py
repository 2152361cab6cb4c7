"""One field of a sweep request: how it is declared and how a value of it is read.

:class:`RequestField` is the declaration (:mod:`scalebench.request` declares every field
of :class:`~scalebench.request.SweepRequest` with :func:`ask`): the name users type, a
title, one sentence of help, its kind (:data:`KINDS`), default, choices and bounds.
:meth:`RequestField.read` reads a value of each kind, strings as the command line gives
them, JSON values as a form gives them, ``None`` for "not given" (the default); a bad
value raises :class:`InvalidParameter` naming the field.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalebench.network import BadProfile, NetworkProfile, listed, parse_profiles
from scalebench.quantities import MAX_WORLD_SIZE
from scalebench.stacks import BadStack, Stack, parse_stacks
from scalebench.whole_numbers import MAX_DIGITS, NotWholeNumber, parse_whole


class InvalidParameter(ValueError):
    """A request field with a value that cannot run; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


# What a field holds, and so how a value is read and how the form and the command line ask
# for it: a whole number, seconds, true/false, one of ``choices``, free text (matching
# ``pattern``), a folder, worker counts ("1,2,4"), network profiles ("host,1gbit") or stacks
# (``{"tonight": {"python": "/opt/tonight/bin/python"}}``).
KINDS = ("int", "seconds", "bool", "choice", "text", "path", "counts", "profiles", "stacks")


# The value of a number field declared ``takes_auto`` that validation resolves.
AUTO = "auto"

# The ``usual`` of a compared field without one: the field enters every configuration hash.
ALWAYS = "(always)"


@dataclass(frozen=True)
class RequestField:
    """One field of a request. ``name`` is what users type (form key, ``--name-with-dashes``
    unless ``flag`` says otherwise); ``default`` None means decided when validated (the help
    says how). ``minimum``/``maximum`` bound numbers (seconds for ``seconds``);
    ``training_only`` fields are not asked of the all-reduce task, ``allreduce_only`` ones only
    of it, nor ``in_form`` false ones
    in the trigger form (they are still accepted there); ``needs`` names the
    launcher capability (:class:`~scalebench.launchers.LauncherSpec`) a value other than the
    default requires. ``to_ranks``: every rank is given the value (its option in
    ``python -m workers.run`` is ``option``). ``compared``: runs with different values are
    different configurations (they enter the configuration hash), except ``usual``, the value
    every run had before the field existed, which is left out so older runs keep their
    identity (:data:`ALWAYS`: no such value, the field always enters). ``takes_auto``: a
    number field that also takes the word ``auto`` (:data:`AUTO`), which validation
    resolves."""

    name: str
    title: str
    help: str
    kind: str
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    flag: str = ""
    training_only: bool = False
    allreduce_only: bool = False
    needs: str = ""
    in_form: bool = True
    pattern: str = ""
    pattern_help: str = ""
    to_ranks: bool = False
    compared: bool = False
    usual: Any = ALWAYS
    meanings: tuple[tuple[str, str], ...] = ()  # (choice, what it means or needs)
    takes_auto: bool = False  # a number, or the word auto (resolved when validated)
    # What a request built without validation (a rank not told) takes where the default is
    # resolved when validated (auto): what auto means with nothing to read. None: the default.
    built_default: Any = None
    allreduce_help: str = ""  # the all-reduce task's words, where ``help`` speaks of training

    def describe(self, offered: Sequence[str] | None = None, allreduce: bool = False) -> str:
        """The field's help for a form or an option: the all-reduce task's own words where
        it has them (``allreduce``), then what each choice means, for the ``offered``
        choices only (``None``: every choice)."""
        text = self.allreduce_help if allreduce and self.allreduce_help else self.help
        shown = [(c, m) for c, m in self.meanings if offered is None or c in offered]
        if shown:
            text += " " + "; ".join(f"{choice}: {meaning}" for choice, meaning in shown) + "."
        return text

    @property
    def unvalidated_default(self) -> Any:
        """The value where nothing validated it: ``built_default``, or else the default."""
        return self.default if self.built_default is None else self.built_default

    @property
    def resolved_choices(self) -> tuple[str, ...]:
        """The choices a validated request can hold: ``auto`` resolved away where validation
        resolves it (a field with a ``built_default``; ``device: auto`` is the rank's own)."""
        if self.built_default is None:
            return self.choices
        return tuple(c for c in self.choices if c != AUTO)

    def asked_of(self, training: bool) -> bool:
        """Whether a training task (``training``) or the all-reduce task takes this field."""
        return not ((self.training_only and not training) or (self.allreduce_only and training))

    @property
    def option(self) -> str:
        """The command-line option."""
        return self.flag or "--" + self.name.replace("_", "-")

    def argv(self, value: Any) -> list[str]:
        """``value`` as this field's option in a command line (a flag alone for true,
        nothing for false); :meth:`read` reads it back."""
        if self.kind == "bool":
            return [self.option] if value else []
        if self.kind == "seconds":
            return [self.option, f"{value:g}"]
        return [self.option, str(value)]

    def read(self, value: Any) -> Any:
        """The value, checked and converted; ``None`` gives the default."""
        if value is None:
            value = self.default
        if value is None:
            return None  # decided when validated (the help says how)
        if self.takes_auto and isinstance(value, str) and value.strip() == AUTO:
            return AUTO  # resolved when validated (the help says how)
        return _READERS[self.kind](self, value)


def ask(**declaration: Any) -> Any:
    """A :class:`~scalebench.request.SweepRequest` attribute declared by a
    :class:`RequestField`. A field whose default validation resolves (``auto``) gives a
    request built directly, without validation, its ``built_default``: what ``auto`` means
    with nothing to read (a validated request never holds ``auto``)."""
    field = RequestField(**declaration)
    return dataclasses.field(default=field.unvalidated_default, metadata={"request_field": field})


# -- reading one value ----------------------------------------------------------------------


def _whole_number(field: RequestField, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidParameter(field.name, f"must be a whole number, got {value!r}")
    if isinstance(value, int):
        if abs(value) >= 10**MAX_DIGITS:  # str() of one of 4,300 digits or more raises
            raise InvalidParameter(
                field.name,
                f"must be a whole number of at most {MAX_DIGITS} digits, got one of "
                f"{value.bit_length():,} bits",
            )
        return value
    if isinstance(value, float) and value.is_integer():
        return _whole_number(field, int(value))
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
        try:  # only the significant digits are converted: leading zeros are never counted
            return parse_whole(value, MAX_DIGITS)
        except NotWholeNumber as exc:
            raise InvalidParameter(field.name, str(exc)) from None
    shown = (
        repr(value) if not isinstance(value, str) or len(value) < 60 else repr(value[:57]) + "..."
    )
    raise InvalidParameter(field.name, f"must be a whole number, got {shown}")


def _within(field: RequestField, number: float, unit: str = "") -> None:
    def shown(value: float) -> str:
        return f"{value:g}{unit}" if unit else str(value)

    if field.minimum is not None and number < field.minimum:
        raise InvalidParameter(
            field.name, f"must be at least {shown(field.minimum)}, got {shown(number)}"
        )
    if field.maximum is not None and number > field.maximum:
        raise InvalidParameter(
            field.name, f"must be at most {shown(field.maximum)}, got {shown(number)}"
        )


def _read_int(field: RequestField, value: Any) -> int:
    number = _whole_number(field, value)
    _within(field, number)
    return number


def _read_seconds(field: RequestField, value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidParameter(field.name, f"must be a number of seconds, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidParameter(field.name, f"must be a number of seconds, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise InvalidParameter(field.name, f"must be positive and finite, got {value!r}")
    _within(field, number, " s")
    return number


def _read_bool(field: RequestField, value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InvalidParameter(field.name, f"must be true or false, got {value!r}")


def _read_choice(field: RequestField, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value in field.choices):
        return value
    raise InvalidParameter(field.name, f"must be one of {', '.join(field.choices)}, got {value!r}")


def _read_text(field: RequestField, value: Any) -> str:
    if not isinstance(value, str) or (
        value and field.pattern and not re.fullmatch(field.pattern, value)
    ):
        raise InvalidParameter(field.name, f"must be {field.pattern_help}, got {value!r}")
    return value


def _read_path(field: RequestField, value: Any) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str | Path) or not str(value).strip() or "\0" in str(value):
        raise InvalidParameter(field.name, f"must be a folder's path, got {value!r}")
    return Path(value)


def read_counts(field: RequestField, value: Any) -> tuple[int, ...]:
    """``"1,2,4"``, ``[1, 2, 4]`` or ``4`` → (1, 2, 4): distinct, ascending, each ≥ 1."""
    items = listed(value)
    if not items:
        raise InvalidParameter(field.name, "give at least one worker count, e.g. 1,2,4")
    sizes = [_whole_number(field, item) for item in items]
    for size in sizes:
        if size < 1:
            raise InvalidParameter(field.name, f"worker counts must be at least 1, got {size}")
        if size > MAX_WORLD_SIZE:
            raise InvalidParameter(
                field.name, f"worker counts must be at most {MAX_WORLD_SIZE}, got {size}"
            )
    return tuple(sorted(set(sizes)))


def _read_profiles(field: RequestField, value: Any) -> tuple[NetworkProfile, ...]:
    try:
        return parse_profiles(value)
    except BadProfile as exc:
        raise InvalidParameter(field.name, str(exc)) from None


def _read_stacks(field: RequestField, value: Any) -> tuple[Stack, ...]:
    try:
        return parse_stacks(value)
    except BadStack as exc:
        raise InvalidParameter(field.name, str(exc)) from None


_READERS = {
    "int": _read_int,
    "seconds": _read_seconds,
    "bool": _read_bool,
    "choice": _read_choice,
    "text": _read_text,
    "path": _read_path,
    "counts": read_counts,
    "profiles": _read_profiles,
    "stacks": _read_stacks,
}
assert set(_READERS) == set(KINDS)
