"""Checks of a whole request that no one field's declaration makes.

:func:`check_stored` judges a request as a manifest stores it (ingest reads it back from
a ``sweep.json`` written by any version); :func:`check_implemented` refuses a variant or
precision the training task does not implement (for a new request as for a stored one).
The rules that tie a new request's fields together are
:func:`scalebench.sweep.validate_request`'s.
"""

from __future__ import annotations

from typing import Any

from scalebench.request import FIELD, FIELDS
from scalebench.request_fields import InvalidParameter


def check_stored(fields: dict[str, Any]) -> None:
    """Raise :class:`InvalidParameter` for a stored request (a manifest's ``request``, as
    :meth:`~scalebench.request.SweepRequest.to_fields` writes it) holding a value no
    validated request can hold: a task that does not exist, a field no request has, a
    value its declaration refuses, a variant or precision its task does not implement. A
    field missing is allowed (a sweep written before the field existed); what only the
    launching host can judge (its GPUs, its data folder) is not checked."""
    from scalebench.tasks import TrainingSpec, get_task, task_ids

    task = fields.get("task")
    if not isinstance(task, str) or task not in task_ids():
        raise InvalidParameter("task", f"unknown task {task!r}")
    stored_names = {"task", "world_sizes", *(f.name for f in FIELDS)} - {"workers"}
    unknown = sorted(set(fields) - stored_names)
    if unknown:
        raise InvalidParameter(unknown[0], "no request has this field")
    for name, value in fields.items():
        if name == "task" or value is None:
            continue
        FIELD["workers" if name == "world_sizes" else name].read(value)
    spec = get_task(task)
    if isinstance(spec, TrainingSpec):
        check_implemented(spec, fields)


def check_implemented(spec: Any, values: dict[str, Any]) -> None:
    """Raise :class:`InvalidParameter` for a variant or precision (those of ``values`` given)
    that the training task ``spec`` does not implement."""
    for name, offered in (("variant", spec.variants), ("precision", spec.precisions)):
        if name in values and values[name] not in offered:
            raise InvalidParameter(
                name, f"{spec.id} implements only {', '.join(offered)}, not {values[name]!r}"
            )
