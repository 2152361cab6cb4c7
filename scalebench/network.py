"""Network profiles: the link a training group's ranks talk over, a benchmark dimension.

A profile is ``host`` (the machines' own network, not shaped) or a rate with an
optional one-way delay: ``100mbit``, ``1gbit``, ``10gbit``, any
``<number><kbit|mbit|gbit>``, and ``1gbit+2ms``. A sweep runs every worker
count at every profile it names. The local launcher emulates a shaped profile
with network namespaces and ``tc`` (``operators/shaped_network.py``); the
Kubernetes launcher asks the CNI bandwidth plugin for the rate.

Torch-free and without side effects: validation, the launchers and the ranks
(which record their profile) all read it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HOST = "host"
UNITS_BIT_PER_S = {"kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
MIN_RATE_BIT_PER_S = 10**5  # 100 kbit/s: slower links time out any collective
MAX_RATE_BIT_PER_S = 400 * 10**9  # the fastest Ethernet and InfiniBand links sold
MAX_DELAY_S = 1.0
MAX_PROFILES = 6  # profiles per sweep
_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_UNIT = "|".join(UNITS_BIT_PER_S)
_PROFILE = re.compile(rf"(?P<rate>{_NUMBER})(?P<unit>{_UNIT})(?:\+(?P<delay>{_NUMBER})ms)?")
# The same spelling as a JSON-schema pattern (the trigger form checks it as typed).
NETWORK_PATTERN = rf"^\s*(?:host|{_NUMBER}(?:{_UNIT})(?:\+{_NUMBER}ms)?)\s*$"


class BadProfile(ValueError):
    """A network profile that cannot be read; the message says what a good one looks like."""


@dataclass(frozen=True)
class NetworkProfile:
    """A link: ``rate_bit_per_s`` in bits per second (None: the host's network, unshaped)
    and a one-way ``delay_s`` in seconds added to every packet."""

    rate_bit_per_s: int | None = None
    delay_s: float = 0.0

    @property
    def shaped(self) -> bool:
        return self.rate_bit_per_s is not None

    @property
    def rate_bytes_per_s(self) -> float | None:
        """The rate in bytes per second (what bus bandwidth is compared with)."""
        return None if self.rate_bit_per_s is None else self.rate_bit_per_s / 8

    @property
    def name(self) -> str:
        """The canonical spelling, e.g. ``host``, ``100mbit``, ``1gbit+2ms``: recorded with
        every run and part of its configuration."""
        if self.rate_bit_per_s is None:
            return HOST
        # Rates are whole kbit/s and delays whole microseconds (parse_profile rounds them),
        # so the name reads back as the same profile.
        unit, scale = next(
            (unit, scale)
            for unit, scale in sorted(UNITS_BIT_PER_S.items(), key=lambda item: -item[1])
            if self.rate_bit_per_s % scale == 0
        )
        rate = f"{self.rate_bit_per_s // scale}{unit}"
        delay_ms = f"{round(self.delay_s * 1e6) / 1000:.3f}".rstrip("0").rstrip(".")
        return rate + (f"+{delay_ms}ms" if self.delay_s else "")

    @property
    def token(self) -> str:
        """The profile in a run id or a Kubernetes name (lower-case letters, digits, ``-``):
        ``""`` for ``host``, e.g. ``n100mbit``, ``n1gbit-2ms``, ``n1p5gbit``."""
        if not self.shaped:
            return ""
        return "n" + self.name.replace("+", "-").replace(".", "p")

    def __str__(self) -> str:
        return self.name


HOST_PROFILE = NetworkProfile()  # the machines' own network, unshaped


def parse_profile(text: Any) -> NetworkProfile:
    """``"host"``, ``"100mbit"``, ``"1gbit+2ms"`` → :class:`NetworkProfile`; :class:`BadProfile`
    naming what is wrong otherwise."""
    if not isinstance(text, str):
        raise BadProfile(f"a profile is text such as host, 100mbit or 1gbit+2ms, got {text!r}")
    spelled = text.strip().lower().replace(" ", "")
    if spelled == HOST:
        return NetworkProfile()
    match = _PROFILE.fullmatch(spelled)
    if match is None:
        raise BadProfile(
            f"{text!r} is not a profile: host, or a rate such as 100mbit, 1gbit or 10gbit "
            "(<number><kbit|mbit|gbit>) with an optional one-way delay, e.g. 1gbit+2ms"
        )
    shown = repr(text) if len(text) <= 40 else repr(text[:37]) + "..."
    # Kept to whole kbit/s and whole microseconds: finer than any link is shaped. A number
    # too large for a float (1e400, hundreds of digits) is out of range like any other.
    rate_bit_per_s = float(match["rate"]) * UNITS_BIT_PER_S[match["unit"]]
    if not MIN_RATE_BIT_PER_S <= rate_bit_per_s <= MAX_RATE_BIT_PER_S + 500:
        raise BadProfile(f"{shown}: the rate must be between 100kbit and 400gbit")
    rate = round(rate_bit_per_s / 1000) * 1000
    delay_ms = float(match["delay"]) if match["delay"] else 0.0
    if delay_ms > MAX_DELAY_S * 1000:
        raise BadProfile(f"{shown}: the delay must be at most {MAX_DELAY_S * 1000:g}ms")
    delay_s = round(delay_ms * 1000) / 1e6
    return NetworkProfile(rate, delay_s)


def listed(value: Any) -> Sequence[Any]:
    """What a list field was given, as its items: a comma-separated string's non-blank parts
    (``"host,1gbit"``, ``"1,2,4"``), a sequence as it is, any other value alone. The profiles
    here and the request's worker counts are read through it."""
    if isinstance(value, str):
        return [part for part in value.split(",") if part.strip()]
    if isinstance(value, Sequence):
        return value
    return [value]


def parse_profiles(value: Any) -> tuple[NetworkProfile, ...]:
    """``"host,1gbit"``, ``["host", "1gbit"]`` or ``None`` (host) → distinct profiles in the
    order given (profiles already read are taken as they are); :class:`BadProfile` on a bad
    one, an empty list or too many."""
    if value is None:
        return (HOST_PROFILE,)
    items = listed(value)
    if not items:
        raise BadProfile("give at least one profile, e.g. host or host,1gbit")
    profiles = tuple(
        dict.fromkeys(
            item if isinstance(item, NetworkProfile) else parse_profile(item) for item in items
        )
    )
    if len(profiles) > MAX_PROFILES:
        raise BadProfile(f"at most {MAX_PROFILES} profiles per sweep, got {len(profiles)}")
    return profiles
