"""The GPU check's report: one line per check (PASS, FAIL or SKIPPED, with its figure), the
advice for each failure, and the same as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASS, FAIL, SKIPPED = "PASS", "FAIL", "SKIPPED"


@dataclass
class Check:
    """One check's outcome. ``figure`` is the line a reader looks at (with units);
    ``advice`` says what to look at after a failure, or why the check was skipped;
    ``details`` holds every number measured, for the JSON report."""

    name: str
    title: str
    verdict: str
    figure: str = ""
    advice: str = ""
    seconds: float = 0.0  # how long the check took
    details: dict[str, Any] = field(default_factory=dict)


def skipped(name: str, title: str, reason: str) -> Check:
    return Check(name, title, SKIPPED, advice=reason)


def failed(name: str, title: str, figure: str, advice: str, **details: Any) -> Check:
    return Check(name, title, FAIL, figure, advice, details=details)


@dataclass
class Report:
    """The whole check: the machine, then the checks in the order they ran."""

    started_at: str
    machine: dict[str, Any]
    checks: list[Check] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == FAIL]

    def exit_code(self) -> int:
        """0 when no check failed (skipped ones included), 1 otherwise."""
        return 1 if self.failures else 0

    def render(self) -> str:
        """The report as text: the machine, a table of checks, then the advice."""
        lines = [f"GPU check, {self.started_at}, {self.wall_s:.0f} s"]
        for key, value in self.machine.items():
            lines.append(f"  {key + ':':<22}{value}")
        lines.append("")
        width = max((len(c.title) for c in self.checks), default=10)
        for check in self.checks:
            shown = check.figure or check.advice
            lines.append(f"{check.verdict:<8} {check.title:<{width}}  {shown}")
        notes = [c for c in self.checks if c.verdict != PASS and c.advice and c.figure]
        if notes:
            lines.append("")
            for check in notes:
                lines.append(f"{check.title}: {check.advice}")
        counts = {v: sum(c.verdict == v for c in self.checks) for v in (PASS, FAIL, SKIPPED)}
        lines.append("")
        lines.append(
            f"verdict: {'FAIL' if counts[FAIL] else 'PASS'} "
            f"({counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIPPED]} skipped)"
        )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, path: Path) -> None:
        """Write the JSON report (atomically: a half-written report is never left)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(self.to_json(), indent=1), encoding="utf-8")
        partial.replace(path)
