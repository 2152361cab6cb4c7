"""What the detector says about a sweep: a finding per (worker count, metric) it judged, and
what it could not judge. Plain values: the dashboard and the command line read them without
the database."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One (worker count, metric) of the latest sweep against its baseline."""

    world_size: int
    metric: str
    baseline_mean: float
    latest_mean: float | None  # None: no latest run produced this metric
    change: float | None  # relative, positive = worse
    p_value: float | None
    baseline_runs: int
    latest_runs: int
    flagged: bool
    reason: str = ""
    network: str = "host"  # the link profile the runs compared ran on
    left_out: str = ""  # the runs not compared and why, e.g. "2 contended runs left out"


@dataclass(frozen=True)
class NotJudged:
    """A worker count (or the whole sweep, ``world_size`` None) the detector could not judge,
    and why: how many runs were usable on each side, how many were left out and for what."""

    world_size: int | None
    network: str
    reason: str

    def describe(self) -> str:
        """One line, e.g. ``  1 worker(s): not judged: 0 of 15 baseline runs usable ...``."""
        where = "" if self.network == "host" else f" on the {self.network} network"
        size = "every size" if self.world_size is None else f"{self.world_size:3d} worker(s)"
        return f"not judged {size}{where}: {self.reason}"


@dataclass(frozen=True)
class Detection:
    """What the detector made of a sweep: a finding per (worker count, metric) it judged,
    and what it could not judge, with the reason."""

    findings: list[Finding]
    not_judged: list[NotJudged]
