"""Readable numbers: seconds, bytes, bandwidths, dollars and shares as the dashboard prints them.

Every function takes the plain unit of the database (seconds, bytes,
bytes per second, US dollars, a fraction) and returns text for a table cell
or a hover label. Axis ticks use Plotly's own formats, set in
:mod:`dash_app.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

IEC = ("B", "KiB", "MiB", "GiB", "TiB")
SI = ("B", "kB", "MB", "GB", "TB")


def seconds(value: float | None) -> str:
    """``0.0123`` → ``12.3 ms``; ``95.4`` → ``95.4 s``; ``5400`` → ``1 h 30 min``."""
    if value is None or not math.isfinite(value):
        return "—"
    if value < 0:
        return "-" + seconds(-value)
    if value == 0:
        return "0 s"
    if value < 1e-3:
        return f"{value * 1e6:.3g} µs"
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    if value < 600:
        return f"{value:.3g} s" if value < 100 else f"{value:.0f} s"
    minutes = value / 60
    if minutes < 60:
        return f"{minutes:.1f} min"
    hours, rest = divmod(round(minutes), 60)
    return f"{hours} h {rest:02d} min"


def byte_size(value: float | None, binary: bool = True) -> str:
    """``4_000_000`` → ``3.81 MiB`` (IEC, powers of 1024) or ``4 MB`` (SI, powers of 1000)."""
    if value is None or not math.isfinite(value):
        return "—"
    base, names = (1024.0, IEC) if binary else (1000.0, SI)
    size = float(value)
    for name in names:
        if abs(size) < base or name == names[-1]:
            return f"{size:.0f} {name}" if name == "B" else f"{size:.3g} {name}"
        size /= base
    raise AssertionError("unreachable")


def bandwidth(value: float | None) -> str:
    """Bytes per second in GB/s (SI, as nccl-tests prints bus bandwidth)."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value / 1e9:.3g} GB/s"


def dollars(value: float | None) -> str:
    """``1.234`` → ``$1.23``; below a cent, ``$0.0042``."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"${value:,.2f}" if abs(value) >= 0.01 else f"${value:.2g}"


def percent(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage: ``0.125`` → ``12.5 %``."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value * 100:.{digits}f} %"


def signed_percent(value: float | None) -> str:
    """A relative change: ``0.081`` → ``+8.1 %``."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value * 100:+.1f} %"


def number(value: float | None, digits: int = 3) -> str:
    """A plain number with ``digits`` significant digits."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:,.{digits}g}" if abs(value) < 1e6 else f"{value:,.0f}"


def byte_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Tick positions and IEC labels for a log axis of bytes from ``low`` to ``high``.

    One tick per power of 1024 and one at 32× each (1 KiB, 32 KiB, 1 MiB, …), so
    labels stay round numbers.
    """
    values: list[float] = []
    labels: list[str] = []
    for exponent, name in enumerate(IEC):
        for factor in (1, 32):
            value = factor * 1024.0**exponent
            if low / 2 <= value <= high * 2:
                values.append(value)
                labels.append(f"{factor} {name}")
    return values, labels


def log_ticks(
    low: float, high: float, label: Callable[[float], str], steps: Sequence[float] | None = None
) -> tuple[list[float], list[str]]:
    """Tick positions covering ``low``–``high`` on a log axis, each labelled by ``label``
    (e.g. seconds as ``200 µs``, ``1 ms``). ``steps`` per power of ten default to 1, 2, 5
    over two decades or less, 1 and 3 up to four, else 1."""
    if not (low > 0 and high > 0 and math.isfinite(low) and math.isfinite(high)):
        return [], []
    decades = math.log10(high / low)
    if steps is None:
        steps = (1, 2, 5) if decades <= 2 else (1, 3) if decades <= 4 else (1,)
    values: list[float] = []
    for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1):
        for step in steps:
            value = step * 10.0**exponent
            if low / 1.5 <= value <= high * 1.5:
                values.append(value)
    return values, [label(v) for v in values]


def workers(count: int) -> str:
    """``1 worker``, ``4 workers``."""
    return f"{count} worker" if count == 1 else f"{count} workers"


# The measures a nightly is judged and trended by: the run's column, its words and unit.
MEASURES = {
    "time_to_accuracy_s": ("time to accuracy", "s"),
    "samples_per_s": ("throughput", "samples/s"),
}


# The nightly's other metrics (results_db.regressions.MEASURES), in words.
_METRIC_WORDS = {
    "steady_step_s": "steady step time",
    "allreduce_largest_s": "largest all-reduce's time",
    "time_to_accuracy_per_reference": "time to accuracy relative to the machine's reference",
    "steady_step_per_reference": "steady step time relative to the machine's reference",
    "allreduce_largest_per_reference": "largest all-reduce's time relative to the machine's "
    "reference",
}


def measure(column: str) -> str:
    """A measure's column name as words: ``time_to_accuracy_s`` → ``time to accuracy``."""
    if column in MEASURES:
        return MEASURES[column][0]
    return _METRIC_WORDS.get(column, column.replace("_", " "))
