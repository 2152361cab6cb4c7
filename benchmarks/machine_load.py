"""What else the machine did while a benchmark ran: figures are only as quiet as the machine."""

from __future__ import annotations

import os
from pathlib import Path


class OtherCpuUse:
    """How much CPU other processes took while this benchmark ran (Linux ``/proc/stat``)."""

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        """(busy s, total s) of all cores since boot, and this process's CPU s (children too)."""
        try:
            line = Path("/proc/stat").read_text(encoding="ascii").split("\n", 1)[0]
            ticks = [int(field) for field in line.split()[1:9]]  # user … steal
        except (OSError, ValueError):
            return None
        per_s = os.sysconf("SC_CLK_TCK")
        own = os.times()
        own_s = own.user + own.system + own.children_user + own.children_system
        # user, nice, system and steal (other VMs); idle, iowait and interrupts are not
        # "busy" (loopback traffic's softirq time belongs to no process).
        busy = ticks[0] + ticks[1] + ticks[2] + ticks[7]
        return busy / per_s, sum(ticks) / per_s, own_s

    def describe(self) -> str:
        """Other processes' share of all cores since construction, in percent."""
        end = self._read()
        if self._start is None or end is None:
            return "other processes' CPU use unknown"
        busy, total, own = (b - a for a, b in zip(self._start, end, strict=True))
        share = max(0.0, busy - own) / total if total > 0 else 0.0
        note = f"other processes used {100 * share:.0f} % of the {os.cpu_count()} cores meanwhile"
        if share > 0.05:
            note += " (the figures are noisier for it)"
        return note
