"""The nightly regression run: what it runs, when, and whom it tells when something got slower.

Settings come from the environment (read when the DAG file is parsed; a bad
value is an import error that names the variable, shown in the Airflow UI):

- ``SCALEBENCH_NIGHTLY_SCHEDULE``: cron, UTC (default ``0 2 * * *``)
- ``SCALEBENCH_NIGHTLY_TASKS``: the suite (``task1a-resnet20-cifar10,task0-allreduce``)
- ``SCALEBENCH_NIGHTLY_<FIELD>``: any request field
  (:data:`scalebench.request.FIELDS`) by its name in capitals, read and
  checked by its declaration, e.g. ``SCALEBENCH_NIGHTLY_WORKERS=1,2``,
  ``..._REPEATS=3``, ``..._LAUNCHER=kubernetes``, ``..._BACKEND=nccl``,
  ``..._PLACEMENT=spread``, ``..._NETWORK=host,1gbit``,
  ``..._THREADS_PER_WORKER=1``. A field not set takes the request's default,
  except ``LIGHT``: the nightly runs the light tasks unless it is ``0``
  (``SCALEBENCH_NIGHTLY_FULL=1`` says the same). True and false are written
  ``1``/``true``/``yes``/``on`` and ``0``/``false``/``no``/``off``.

Whom a failure is told is :mod:`operators.notify`.

Regressions are judged by the rule :data:`results_db.regressions.RULE`
(Mann–Whitney U, ``p < 0.01`` and at least 5 % worse than the last 7
scheduled nights, unless changed there).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "SCALEBENCH_NIGHTLY_"
# Where the nightly's request differs from a manual one's defaults: light tasks.
NIGHTLY_DEFAULTS: dict[str, Any] = {"light": True}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
# Request fields the nightly does not take: it judges tonight's runs against earlier nights
# of the same configuration, and would pool the runs of several stacks into one series.
NOT_NIGHTLY = {
    "stacks": "the nightly judges one stack against its earlier nights and would pool several "
    "stacks' runs; compare stacks within one sweep instead: scalebench run TASK --stack "
    "A=PYTHON --stack B=PYTHON --pairs N, then scalebench compare SWEEP",
    "pairs": "pairs need two or more stacks, which the nightly does not take",
}


@dataclass(frozen=True)
class NightlySettings:
    """When the nightly runs, which tasks, and the request fields it fixes (read values)."""

    schedule: str = "0 2 * * *"
    tasks: tuple[str, ...] = ("task1a-resnet20-cifar10", "task0-allreduce")
    fields: dict[str, Any] = field(default_factory=lambda: dict(NIGHTLY_DEFAULTS))

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> NightlySettings:
        """Read the ``SCALEBENCH_NIGHTLY_*`` variables; a bad value raises, naming it.

        Each field is checked alone here; the full check of each task's request
        runs when the night starts (``validate``), like for a manual trigger.
        """
        from croniter import croniter

        from scalebench.request import FIELDS
        from scalebench.request_fields import InvalidParameter
        from scalebench.tasks import task_ids

        def bad(name: str, message: str) -> ValueError:
            return ValueError(f"{PREFIX}{name}: {message}")

        schedule = env.get(PREFIX + "SCHEDULE", cls.schedule).strip()
        if not croniter.is_valid(schedule):
            raise bad("SCHEDULE", f"not a cron expression: {schedule!r}")
        tasks = tuple(t.strip() for t in env.get(PREFIX + "TASKS", ",".join(cls.tasks)).split(","))
        unknown = [t for t in tasks if t not in task_ids()]
        if unknown or not tasks:
            raise bad("TASKS", f"unknown task(s) {unknown}; known: {', '.join(task_ids())}")
        fields = dict(NIGHTLY_DEFAULTS)
        if PREFIX + "FULL" in env:  # the older spelling of LIGHT, inverted
            fields["light"] = not _truth(env[PREFIX + "FULL"], lambda m: bad("FULL", m))
        for declared in FIELDS:
            name = declared.name.upper()
            text = env.get(PREFIX + name)
            if text is None:
                continue
            if declared.name in NOT_NIGHTLY:
                raise bad(name, NOT_NIGHTLY[declared.name])
            value: Any = text.strip()
            if declared.kind == "bool":
                value = _truth(value, lambda m, name=name: bad(name, m))
            try:
                fields[declared.name] = declared.read(value)
            except InvalidParameter as exc:
                raise bad(name, exc.reason) from None
        return cls(schedule=schedule, tasks=tasks, fields=fields)

    def value(self, name: str) -> Any:
        """The value of request field ``name`` the nightly asks for (set, or the default)."""
        from scalebench.request import FIELD

        return self.fields[name] if name in self.fields else FIELD[name].read(None)

    def request(self) -> dict[str, Any]:
        """The fixed request fields of every task in the suite (without ``task``), as a
        trigger form gives them."""
        return {name: _plain(value) for name, value in self.fields.items()}


def _truth(text: str, bad: Any) -> bool:
    word = text.strip().lower()
    if word not in _TRUE + _FALSE:
        raise bad(f"expected 1 or 0 (true or false), got {text!r}")
    return word in _TRUE


def _plain(value: Any) -> Any:
    """A read value as JSON: worker counts and profiles as lists, a folder as a string."""
    if isinstance(value, tuple):
        return [getattr(item, "name", item) for item in value]
    return str(value) if isinstance(value, Path) else value


def conf_refusal(conf: Mapping[str, Any] | None) -> str | None:
    """Why the nightly run refuses a trigger's ``conf`` (``None``: it does not). It takes no
    fields: what it runs is its settings (``SCALEBENCH_NIGHTLY_*``), the same every night,
    so a conf key is refused by name, as the task DAGs refuse a field they do not know."""
    unknown = sorted(conf or ())
    if not unknown:
        return None
    return (
        f"{unknown[0]}: unknown field{'s' if len(unknown) > 1 else ''} "
        f"{', '.join(map(repr, unknown))}; the nightly run takes no fields (its settings "
        f"are the {PREFIX}* variables)"
    )
