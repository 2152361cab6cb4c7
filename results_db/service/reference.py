"""The nightly's reference stack: its pin, and the stacks and rounds a paired night runs.

- :func:`pin_reference`, :func:`unpin_reference`, :func:`shown_pin`: ``scalebench nightly
  pin|unpin|show``, the reference stack stored in the results database;
- :func:`nightly_arms`: what the nightly's ``validate`` adds to its request: tonight's stack,
  the pinned reference, and as many rounds as the budget holds.

Apart from :mod:`results_db.service.nightly` (the judgement and the findings, which the
dashboard reads) because these validate requests and read the nightly's settings
(:mod:`scalebench.sweep`, :mod:`scalebench.nightly`), which the dashboard's image does not
carry.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import update

from results_db.models import ReferencePin
from results_db.queries.paired_nights import pinned_reference, round_seconds
from results_db.service.engines import CommandError, engine_for, reader_for
from scalebench.nightly import (
    FIRST_NIGHT_PAIRS,
    MIN_PAIRS,
    REFERENCE,
    TONIGHT,
    NightlySettings,
    stack_setting,
)


def pin_reference(url: str | None, value: str, env: list[str], images: bool, note: str) -> str:
    """Pin ``value`` (an interpreter, an image where ``images``, or one stack as JSON) with
    the variables ``env`` (``KEY=VALUE``) as the nightly's reference stack; returns the
    sentence the command line prints. The interpreter is probed first: one that is not
    there or cannot import torch is refused, and nothing is stored."""
    text = value
    if env:
        variables = {}
        for assignment in env:
            key, equals, content = assignment.partition("=")
            if not equals or not key:
                raise CommandError(
                    f"--env {assignment!r}: write KEY=VALUE, such as PYTHONPATH=/src"
                )
            variables[key] = content
        base = stack_setting(value, REFERENCE, images, _refusal)
        text = json.dumps({**base, "env": {**base.get("env", {}), **variables}})
    stack = stack_setting(text, REFERENCE, images, _refusal)
    if "python" in stack:
        _probe(stack)
    engine = engine_for(url)
    try:
        with engine.begin() as conn:
            now = datetime.now(UTC)
            conn.execute(
                update(ReferencePin)
                .where(ReferencePin.unpinned_at.is_(None))
                .values(unpinned_at=now)
            )
            conn.execute(
                ReferencePin.__table__.insert().values(stack=stack, note=note, pinned_at=now)
            )
    finally:
        engine.dispose()
    return f"pinned the nightly's reference stack: {_shown(stack)}"


def _refusal(name: str, message: str) -> CommandError:
    return CommandError(f"reference stack: {message}")


def _probe(stack: Mapping[str, Any]) -> dict[str, Any]:
    """What the stack's interpreter runs; :class:`CommandError` where it does not start or
    cannot import torch."""
    import os

    from scalebench.stacks import BadStack, Stack, probe_interpreter, rank_environment

    found = Stack(REFERENCE, python=stack["python"], env=tuple(stack.get("env", {}).items()))
    try:
        return probe_interpreter(found, rank_environment(found, os.environ))
    except BadStack as exc:
        raise CommandError(f"reference stack: {exc}") from None


def unpin_reference(url: str | None) -> str:
    """Unpin the reference stack: the nightly runs unpaired from the next night."""
    engine = engine_for(url)
    try:
        with engine.begin() as conn:
            done = conn.execute(
                update(ReferencePin)
                .where(ReferencePin.unpinned_at.is_(None))
                .values(unpinned_at=datetime.now(UTC))
            )
    finally:
        engine.dispose()
    if done.rowcount == 0:
        return "no reference stack was pinned"
    return "unpinned the nightly's reference stack: the nightly runs unpaired from the next night"


def shown_pin(url: str | None, env: Mapping[str, str] | None = None) -> str:
    """The reference stack the next night runs, and where it comes from."""
    settings = NightlySettings.from_env(env) if env is not None else NightlySettings.from_env()
    if settings.reference is not None:
        return f"reference stack (SCALEBENCH_NIGHTLY_REFERENCE_STACK): {_shown(settings.reference)}"
    engine = reader_for(url)
    try:
        with engine.connect() as conn:
            pinned = pinned_reference(conn)
    finally:
        engine.dispose()
    if pinned is None:
        return (
            "no reference stack pinned: the nightly runs unpaired; pin one with "
            "scalebench nightly pin PYTHON_OR_IMAGE"
        )
    return f"reference stack (pinned): {_shown(pinned)}"


def _shown(stack: Mapping[str, Any]) -> str:
    runs = stack.get("python") or stack.get("image")
    env = stack.get("env") or {}
    variables = "".join(f" {k}={v}" for k, v in env.items())
    return f"{runs}{variables}"


def nightly_arms(
    url: str | None,
    task: str,
    fields: Mapping[str, Any],
    settings: NightlySettings,
    this_stack: Mapping[str, Any],
) -> dict[str, Any]:
    """The fields tonight's sweep of ``task`` adds to the nightly's request: its stacks,
    ``tonight`` and ``reference``, and ``pairs``, as many rounds as
    ``settings.budget_s`` holds by the recent nights' rounds (at least :data:`MIN_PAIRS`;
    :data:`FIRST_NIGHT_PAIRS` before any). Tonight's stack is ``settings.tonight``, else
    ``this_stack`` (what the launcher runs where no stack is named). Empty where no
    reference is set or pinned."""
    from sqlalchemy.exc import SQLAlchemyError

    from scalebench.config_hash import configuration_hash
    from scalebench.errors import describe
    from scalebench.request import FIELD
    from scalebench.sweep import request_from_form

    reference, round_s = settings.reference, None
    request = request_from_form(task, fields)  # a bad field is refused by validate itself
    config_hash = configuration_hash(request.to_fields())
    workers = list(request.world_sizes)
    try:
        engine = reader_for(url)
        try:
            with engine.connect() as conn:
                if reference is None:
                    reference = pinned_reference(conn)
                if reference is not None:
                    round_s = round_seconds(conn, task, config_hash, workers)
        finally:
            engine.dispose()
    except (SQLAlchemyError, CommandError) as exc:  # no history to size the night by
        print(
            f"the results database cannot be read now ({describe(exc)}): no pinned "
            "reference and no earlier round to size the night by"
        )
    if reference is None:
        return {}
    tonight = settings.tonight or dict(this_stack)
    most = FIELD["pairs"].maximum or 50
    pairs = (
        FIRST_NIGHT_PAIRS
        if round_s is None or round_s <= 0
        else max(MIN_PAIRS, min(int(most), math.floor(settings.budget_s / round_s)))
    )
    # the reference first: scalebench compare gives every stack against the first
    return {"stacks": {REFERENCE: dict(reference), TONIGHT: tonight}, "pairs": pairs}
