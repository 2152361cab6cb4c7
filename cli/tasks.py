"""``scalebench tasks``: the benchmark tasks, their goals and their groups' time limits."""

from __future__ import annotations

import argparse

from scalebench.tasks import TASKS, TrainingSpec


def clock(seconds: float) -> str:
    """``seconds`` as ``mm:ss``, or ``h:mm:ss`` from an hour on."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def cmd_tasks(_: argparse.Namespace) -> int:
    """Print each task: its goal (or its sizes) and its groups' time limits, full and light."""
    for spec in TASKS.values():
        if isinstance(spec, TrainingSpec):
            goal = f"goal {spec.goal.describe(False)} (light: {spec.goal.light_threshold:g})"
        else:
            goal = (
                f"{len(spec.sizes(light=False))} sizes × {spec.repetitions} repetitions "
                f"(light: {len(spec.sizes(light=True))} × {spec.light_repetitions})"
            )
        limits = f"{clock(spec.group_time_limit_s(False))} / {clock(spec.group_time_limit_s(True))}"
        print(f"{spec.id:28s} {spec.title} — {goal}; group time limit {limits} (full / light)")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``tasks`` command."""
    tasks = commands.add_parser("tasks", help="list the benchmark tasks")
    tasks.set_defaults(func=cmd_tasks)
