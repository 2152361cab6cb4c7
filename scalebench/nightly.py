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

Paired nights (tonight's stack against a pinned reference, round by round):

- ``SCALEBENCH_NIGHTLY_REFERENCE_STACK``: the reference stack, an interpreter's path (local
  launcher) or an image (Kubernetes), or one stack as JSON, ``{"python": …, "env": {…}}``;
  unset: the stack pinned by ``scalebench nightly pin`` (none pinned: the nightly runs
  unpaired and judges tonight against earlier nights alone)
- ``SCALEBENCH_NIGHTLY_TONIGHT_STACK``: tonight's stack, the same forms; unset: the
  interpreter the Airflow worker runs (local), or ``SCALEBENCH_WORKER_IMAGE`` (Kubernetes)
- ``SCALEBENCH_NIGHTLY_BUDGET_S``: seconds of runs a task may take a night (default 900); the
  rounds are as many as fit, by the runs of earlier nights (:data:`FIRST_NIGHT_PAIRS` the
  first night), at least :data:`MIN_PAIRS`

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
    "stacks": "the nightly's stacks are tonight's and the pinned reference: set "
    f"{PREFIX}REFERENCE_STACK (or run scalebench nightly pin PYTHON_OR_IMAGE) and "
    f"{PREFIX}TONIGHT_STACK",
    "pairs": f"the nightly runs as many rounds as {PREFIX}BUDGET_S allows",
}
# The nightly's two arms, by name (a paired night's request names exactly these stacks).
from scalebench.stacks import REFERENCE, TONIGHT  # noqa: E402

DEFAULT_BUDGET_S = 900.0
# Rounds of a paired night: the fewest (a spread needs two), and the first night's, before
# any earlier night's runs say how long a round takes.
MIN_PAIRS, FIRST_NIGHT_PAIRS = 2, 3


@dataclass(frozen=True)
class NightlySettings:
    """When the nightly runs, which tasks, and the request fields it fixes (read values)."""

    schedule: str = "0 2 * * *"
    tasks: tuple[str, ...] = ("task1a-resnet20-cifar10", "task0-allreduce")
    fields: dict[str, Any] = field(default_factory=lambda: dict(NIGHTLY_DEFAULTS))
    # the paired night's stacks as a request names one ({"python": …} or {"image": …});
    # None: the pinned reference (or unpaired), the worker's own interpreter or image
    reference: dict[str, Any] | None = None
    tonight: dict[str, Any] | None = None
    budget_s: float = DEFAULT_BUDGET_S

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
        images = fields.get("launcher") == "kubernetes"
        arms = {
            arm: stack_setting(env[PREFIX + f"{arm.upper()}_STACK"], arm, images, bad)
            for arm in (REFERENCE, TONIGHT)
            if env.get(PREFIX + f"{arm.upper()}_STACK", "").strip()
        }
        budget_s = _budget(env.get(PREFIX + "BUDGET_S"), bad)
        return cls(
            schedule=schedule,
            tasks=tasks,
            fields=fields,
            reference=arms.get(REFERENCE),
            tonight=arms.get(TONIGHT),
            budget_s=budget_s,
        )

    def value(self, name: str) -> Any:
        """The value of request field ``name`` the nightly asks for (set, or the default)."""
        from scalebench.request import FIELD

        return self.fields[name] if name in self.fields else FIELD[name].read(None)

    def request(self) -> dict[str, Any]:
        """The fixed request fields of every task in the suite (without ``task``), as a
        trigger form gives them."""
        return {name: _plain(value) for name, value in self.fields.items()}


def stack_setting(text: str, arm: str, images: bool, bad: Any = None) -> dict[str, Any]:
    """One arm's stack from a setting's ``text``: an interpreter's path (an image where
    ``images``, the Kubernetes launcher), or one stack as JSON; checked as a request's
    stack is (:func:`scalebench.stacks.parse_stacks`). ``bad(name, message)`` makes the
    error (default ValueError naming the variable)."""
    from scalebench.stacks import BadStack, parse_stacks

    name = f"{arm.upper()}_STACK"
    text = text.strip()
    spec: Any = text if text.startswith("{") else {"image" if images else "python": text}
    try:
        if isinstance(spec, str):
            import json

            try:
                spec = json.loads(spec)
            except ValueError:
                raise BadStack(
                    "must be an interpreter's path, an image, or one stack as JSON like "
                    f'{{"python": "/opt/ref/bin/python"}}, got {text[:60]!r}'
                ) from None
        (stack,) = parse_stacks({arm: spec})
    except (BadStack, ValueError) as exc:
        message = str(exc).removeprefix(f"{arm}: ")
        if bad is not None:
            raise bad(name, message) from None
        raise ValueError(f"{PREFIX}{name}: {message}") from None
    return stack.to_json()


def _budget(text: str | None, bad: Any) -> float:
    if text is None or not text.strip():
        return DEFAULT_BUDGET_S
    try:
        budget = float(text)
    except ValueError:
        budget = float("nan")
    if not 60 <= budget <= 24 * 3600:  # NaN fails this too
        raise bad("BUDGET_S", f"seconds of runs a task may take a night, 60 to 86400, got {text!r}")
    return budget


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
