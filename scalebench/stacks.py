"""Stacks: the named ways a rank is started, a benchmark dimension as network profiles are.

A stack is what changes from one build of the training software to the next: locally a
Python interpreter and the environment variables it runs with (``PYTHONPATH`` among them:
another checkout, a ``sitecustomize``), on Kubernetes a container image and its variables.
A request names its stacks as ``{"name": {"python": "/opt/venv/bin/python", "env": {...}}}``
or ``{"name": {"image": "repo/worker:tag"}}``; the command line as ``--stack NAME=VALUE``
(an interpreter for the local launcher, an image for Kubernetes) with ``--stack-env
NAME:KEY=VALUE``. A sweep of several stacks runs every group once per stack, in rounds:
each round runs every stack once, in an order drawn from the sweep's seed, at the round's
seed (:func:`round_order`), so that the two runs of a pair meet the same machine.

Torch-free and without side effects, except :func:`probe_interpreter`, which starts the
interpreter to ask what it runs.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# A stack's name: part of run ids and Kubernetes object names, so short, lower case.
STACK_NAME = r"[a-z0-9](?:[a-z0-9-]{0,18}[a-z0-9])?"
MAX_STACKS = 4
# An environment variable's name, as POSIX shells take it.
ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
MAX_ENV_VALUE_CHARS = 4096
# Variables a stack may not set: the launcher's own, which place the rank in its group.
RESERVED_ENV = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SCALEBENCH_STACK",
    }
)
# The paired nightly's two stacks, by name: tonight's, and the pinned reference.
TONIGHT, REFERENCE = "tonight", "reference"
# What the rank is told of its stack (JSON: name and the variables the stack set).
STACK_VARIABLE = "SCALEBENCH_STACK"
# A container image reference: [registry[:port]/]name[:tag][@digest], no spaces.
IMAGE_REFERENCE = r"[a-z0-9][a-zA-Z0-9._/:-]*(@sha256:[0-9a-f]{64})?"
# One stack as a JSON schema (the trigger form checks it as typed; :func:`parse_stacks`
# checks the rest: reserved variables, lengths).
STACK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "python": {"type": "string", "minLength": 1},
        "image": {"type": "string", "pattern": f"^{IMAGE_REFERENCE}$", "maxLength": 255},
        "env": {
            "type": "object",
            "propertyNames": {"pattern": f"^{ENV_NAME}$"},
            "additionalProperties": {"type": "string", "maxLength": MAX_ENV_VALUE_CHARS},
        },
    },
    "additionalProperties": False,
    "oneOf": [{"required": ["python"]}, {"required": ["image"]}],
}
# An interpreter's first ``import torch`` on a cold disk, seconds.
PROBE_TIMEOUT_S = 120.0
# The folder holding this checkout's packages (``workers``, ``scalebench``).
_CHECKOUT = Path(__file__).resolve().parents[1]


class BadStack(ValueError):
    """Stacks that cannot be read; the message says which and what a good one looks like."""


@dataclass(frozen=True)
class Stack:
    """One stack: ``python`` (an interpreter, local launcher) or ``image`` (a container
    image, Kubernetes), exactly one of them, and ``env``, the variables it sets, in order."""

    name: str
    python: str = ""
    image: str = ""
    env: tuple[tuple[str, str], ...] = ()

    @property
    def runs(self) -> str:
        """The interpreter or the image."""
        return self.python or self.image

    def to_json(self) -> dict[str, Any]:
        """``{"python": …}`` or ``{"image": …}``, with ``"env"`` where it sets any."""
        value: dict[str, Any] = {"python": self.python} if self.python else {"image": self.image}
        if self.env:
            value["env"] = dict(self.env)
        return value

    def stored(self) -> dict[str, Any]:
        """As a manifest and the results database keep it: :meth:`to_json` with its name
        (a request's stacks are stored as a list of these, in the order asked)."""
        return {"name": self.name, **self.to_json()}

    def variable(self) -> str:
        """The value of :data:`STACK_VARIABLE` a rank of this stack is given."""
        return json.dumps({"name": self.name, "env": dict(self.env)}, sort_keys=True)


def parse_stacks(value: Any) -> tuple[Stack, ...]:
    """Stacks from a request: a mapping ``name → {"python" | "image": …, "env": {…}}``, the
    same as JSON text (a nightly setting), a list of :meth:`Stack.stored` (a stored
    request), stacks already read, or ``None`` / empty (the launcher's own interpreter or
    image, no stack named). :class:`BadStack` otherwise."""
    if value is None or value == "" or value == {} or value == ():
        return ()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise BadStack(
                'must be JSON like {"base": {"python": "/usr/bin/python3"}}, '
                f"got {_shown(value)}"
            ) from None
    if isinstance(value, tuple | list) and all(isinstance(s, Stack) for s in value):
        stacks = tuple(value)
    elif isinstance(value, list) and all(isinstance(s, Mapping) and "name" in s for s in value):
        # as stored (:meth:`Stack.stored`): a list keeps the order where JSONB would not
        stacks = tuple(
            _stack(s["name"], {k: v for k, v in s.items() if k != "name"}) for s in value
        )
        if len({stack.name for stack in stacks}) < len(stacks):
            raise BadStack("a stack's name is given twice")
    elif isinstance(value, Mapping):
        stacks = tuple(_stack(name, spec) for name, spec in value.items())
    else:
        raise BadStack(
            f'must map each stack\'s name to {{"python": …}} or {{"image": …}}, got {_shown(value)}'
        )
    if len(stacks) > MAX_STACKS:
        raise BadStack(f"at most {MAX_STACKS} stacks per sweep, got {len(stacks)}")
    return stacks


def _stack(name: Any, spec: Any) -> Stack:
    if not isinstance(name, str) or not re.fullmatch(STACK_NAME, name):
        raise BadStack(
            f"stack name {_shown(name)}: use 1 to 20 lower-case letters, digits and inner "
            "dashes, such as tonight or ref-2"
        )
    if not isinstance(spec, Mapping):
        raise BadStack(f'{name}: must be {{"python": …}} or {{"image": …}}, got {_shown(spec)}')
    unknown = sorted(str(key) for key in spec if key not in ("python", "image", "env"))
    if unknown:
        raise BadStack(f"{name}: unknown key {unknown[0]!r}; a stack has python or image, and env")
    python, image = spec.get("python"), spec.get("image")
    if (python is None) == (image is None):
        raise BadStack(
            f"{name}: give exactly one of python (an interpreter, local launcher) or image "
            f"(a container image, Kubernetes), got {'both' if python is not None else 'neither'}"
        )
    if python is not None and (not isinstance(python, str) or not python.strip()):
        raise BadStack(f"{name}: python must be an interpreter's path, got {_shown(python)}")
    if python is not None and ("\0" in python or "\n" in python):
        raise BadStack(f"{name}: python must be an interpreter's path, got {_shown(python)}")
    if image is not None and (
        not isinstance(image, str) or len(image) > 255 or not re.fullmatch(IMAGE_REFERENCE, image)
    ):
        raise BadStack(
            f"{name}: image must be a container image reference like repo/name:tag, "
            f"got {_shown(image)}"
        )
    return Stack(name, python=python or "", image=image or "", env=_env(name, spec.get("env")))


def _env(name: str, env: Any) -> tuple[tuple[str, str], ...]:
    if env is None:
        return ()
    if not isinstance(env, Mapping):
        raise BadStack(f'{name}: env must map names to values, like {{"OMP_NUM_THREADS": "1"}}')
    pairs = []
    for key, value in env.items():
        if not isinstance(key, str) or not re.fullmatch(ENV_NAME, key):
            raise BadStack(f"{name}: env name {_shown(key)} is not a variable's name")
        if key in RESERVED_ENV:
            raise BadStack(f"{name}: env {key} is set by the launcher, not by a stack")
        if not isinstance(value, str) or "\0" in value or len(value) > MAX_ENV_VALUE_CHARS:
            raise BadStack(
                f"{name}: env {key} must be text of at most {MAX_ENV_VALUE_CHARS} characters, "
                f"got {_shown(value)}"
            )
        pairs.append((key, value))
    return tuple(pairs)


def stacks_from_options(
    stacks: Sequence[str], envs: Sequence[str], image: bool
) -> dict[str, dict[str, Any]]:
    """The request's mapping from ``--stack NAME=VALUE`` (repeatable) and ``--stack-env
    NAME:KEY=VALUE`` (repeatable): VALUE is an image where ``image`` (the launcher runs
    images), else an interpreter. :class:`BadStack` on a malformed option."""
    mapping: dict[str, dict[str, Any]] = {}
    for option in stacks:
        name, equals, runs = option.partition("=")
        if not equals or not name or not runs:
            raise BadStack(
                f"--stack {_shown(option)}: write NAME=PYTHON (or NAME=IMAGE on Kubernetes), "
                "such as --stack tonight=/opt/tonight/bin/python"
            )
        if name in mapping:
            raise BadStack(f"--stack {name} is given twice")
        mapping[name] = {"image" if image else "python": runs}
    for option in envs:
        name, colon, assignment = option.partition(":")
        key, equals, value = assignment.partition("=")
        if not colon or not equals or not key:
            raise BadStack(
                f"--stack-env {_shown(option)}: write NAME:KEY=VALUE, such as "
                "--stack-env tonight:PYTHONPATH=/opt/tonight/src"
            )
        if name not in mapping:
            known = ", ".join(mapping) or "none"
            raise BadStack(
                f"--stack-env {_shown(option)}: no stack {name!r} (--stack names {known})"
            )
        mapping[name].setdefault("env", {})[key] = value
    return mapping


def round_order(stacks: Sequence[Stack], seed: int, rounds: int) -> list[tuple[Stack, ...]]:
    """Per round, the stacks in the order they run: a shuffle drawn from the sweep's
    ``seed``, so that neither arm always runs first (a machine that warms up, or a
    neighbour that starts, then touches both alike), and the same request draws the same."""
    draw = random.Random(f"scalebench-stacks-{seed}")
    order = []
    for _ in range(rounds):
        arms = list(stacks)
        draw.shuffle(arms)
        order.append(tuple(arms))
    return order


# -- what an interpreter runs ------------------------------------------------------------

# Run by the interpreter under test: its versions as one JSON line (numpy and torch may be
# missing; torch's absence is what the caller refuses).
_PROBE = """
import json, platform, sys
found = {"executable": sys.executable, "python": platform.python_version()}
try:
    import numpy
    found["numpy"] = numpy.__version__
except Exception as exc:
    found["numpy"] = None
try:
    import torch
    found["torch"] = torch.__version__
    found["cuda"] = torch.version.cuda
    try:
        found["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception:
        found["nccl"] = None
except Exception as exc:
    found["torch_error"] = f"{type(exc).__name__}: {exc}"
print("SCALEBENCH-PROBE " + json.dumps(found))
"""


def probe_interpreter(stack: Stack, env: Mapping[str, str]) -> dict[str, Any]:
    """Start ``stack.python`` with ``env`` (the rank's environment) and return what it runs:
    ``executable``, the versions of ``python``, ``torch``, ``cuda``, ``nccl`` and ``numpy``.
    :class:`BadStack` where it does not start or cannot import torch (the caller names the
    stack)."""
    import shutil
    import subprocess

    found = shutil.which(stack.python)
    if found is None:
        raise BadStack(f"no interpreter {stack.python!r} here (not a file)")
    try:
        done = subprocess.run(
            [found, "-c", _PROBE],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BadStack(f"{stack.python} did not start: {exc}") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("SCALEBENCH-PROBE ")]
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BadStack(f"{stack.python} is not a Python interpreter here ({last})")
    identity: dict[str, Any] = json.loads(lines[-1].removeprefix("SCALEBENCH-PROBE "))
    if "torch_error" in identity:
        raise BadStack(
            f"{stack.python} cannot import torch ({identity['torch_error']}); "
            "give an interpreter with torch installed"
        )
    return identity


def rank_environment(stack: Stack | None, base: Mapping[str, str]) -> dict[str, str]:
    """The environment a local rank of ``stack`` starts with: ``base`` (the launcher's), the
    stack's variables over it, and :data:`STACK_VARIABLE`. ``PYTHONPATH`` is the stack's
    first (its own checkout or ``sitecustomize`` wins), then this checkout's folder, so
    that any interpreter with torch finds ``workers``, then ``base``'s."""
    env = dict(base)
    if stack is None:
        return env
    env.update(stack.env)
    paths = [dict(stack.env).get("PYTHONPATH", ""), str(_CHECKOUT), base.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env[STACK_VARIABLE] = stack.variable()
    return env


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
