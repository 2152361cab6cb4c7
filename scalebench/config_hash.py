"""The identity of a configuration: which runs of different sweeps may be compared.

:func:`configuration_hash` hashes the task and the request fields declared ``compared``
(:mod:`scalebench.request`); a manifest stores it as its ``config_hash``, and ingest
stores each run's beside its results.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from scalebench.rank import DEFAULT_PRECISION
from scalebench.request import FIELDS
from scalebench.request_fields import ALWAYS


def configuration_hash(config: dict) -> str:
    """Identity of a configuration whose runs may be compared across sweeps.

    The task and the request fields declared ``compared``
    (:class:`~scalebench.request_fields.RequestField`) count: what changes what is
    measured (light, backend, variant, precision, compile, device, placement,
    threads, network profile); worker counts, repeats and seeds do not. A
    field with a ``usual`` value (compile ``off``, device ``auto``, ...) counts
    only off it, so configurations recorded before the field existed keep
    their identity. ``config`` is a request's fields (a run's profile under
    ``network``, or a sweep's list of them).
    """
    key: dict[str, Any] = {"task": config.get("task")}
    for declared in FIELDS:
        if not declared.compared:
            continue
        if declared.usual == ALWAYS:
            key[declared.name] = config.get(declared.name)
            continue
        value = config.get(declared.name, declared.usual)
        value = list(value) if isinstance(value, list | tuple) else value
        if value not in (declared.usual, [declared.usual]):
            key[declared.name] = value
    key["precision"] = key["precision"] or DEFAULT_PRECISION  # recorded before it was a field
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
