"""Whole numbers read from text a person typed (an option, a form field, a setting).

Python refuses to convert a string of more than 4,300 digits to an integer (its
``ValueError`` names no field), and leading zeros count towards that limit: ``int`` of
``"0" * 5000 + "1"`` raises although the number is 1. :func:`parse_whole` reads only the
significant digits, after checking how many there are, so any text gives either a number
or one short :class:`NotWholeNumber` message that the caller prefixes with the field's name.
"""

from __future__ import annotations

import re

# The most significant digits a typed whole number may have: every bounded field ends far
# below it (the databases hold 64 bits, 19 digits), and Python converts at most 4,300.
MAX_DIGITS = 40

# How much of a refused text a message shows.
SHOWN_CHARACTERS = 60

_WHOLE = re.compile(r"([+-]?)0*([0-9]*)")


class NotWholeNumber(ValueError):
    """Text that is not a whole number of at most :data:`MAX_DIGITS` digits; the message says
    why in a few words (``must be a whole number, got 'x'``), for the caller to prefix with
    the field's name."""


def shown(text: str) -> str:
    """``repr(text)``, cut to about :data:`SHOWN_CHARACTERS` characters."""
    if len(text) <= SHOWN_CHARACTERS:
        return repr(text)
    return repr(text[: SHOWN_CHARACTERS - 3]) + f"... ({len(text):,} characters)"


def parse_whole(text: str, max_digits: int = MAX_DIGITS) -> int:
    """The whole number ``text`` spells in ASCII digits, with an optional sign, leading zeros
    and surrounding white space allowed; anything else, or more than ``max_digits``
    significant digits, raises :class:`NotWholeNumber`. Never converts more than
    ``max_digits`` digits, whatever the length of ``text``."""
    stripped = text.strip()
    match = _WHOLE.fullmatch(stripped)
    if match is None or not stripped.lstrip("+-"):
        raise NotWholeNumber(f"must be a whole number, got {shown(text)}")
    sign, digits = match.groups()
    if len(digits) > max_digits:
        raise NotWholeNumber(
            f"must be a whole number of at most {max_digits} digits, got one of {len(digits):,}"
        )
    number = int(digits) if digits else 0
    return -number if sign == "-" else number
