"""Names of one group's Kubernetes objects: :func:`group_names` gives the Job and
its headless Service names unique per Airflow try and short enough for every
pod's hostname (:class:`GroupNames`), and :func:`label_value` turns any text,
such as a run id, into a valid label value.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from operators.kubernetes.constants import MAX_JOB_NAME


@dataclass(frozen=True)
class GroupNames:
    """Names of one group's Job and headless Service (DNS-1035 labels)."""

    job: str
    service: str


def _slug(text: str) -> str:
    """Lowercase letters, digits and single dashes only."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def group_names(
    dag_id: str, airflow_run_id: str, map_index: int, try_number: int, world_size: int
) -> GroupNames:
    """Job and Service names for one try of one (mapped) Airflow task.

    ``sb-<dag>-w<k>[-m<map index>]-t<try>-<hash>``: readable, at most
    :data:`MAX_JOB_NAME` characters, and unique per try because the hash covers
    every input (a retry never meets the leftovers of the try before it). The
    Airflow run id, full of ``:``, ``+`` and ``.``, appears only in the hash.
    The Service has the Job's name (they are different kinds).
    """
    key = "\0".join(map(str, (dag_id, airflow_run_id, map_index, try_number, world_size)))
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    tags = f"w{world_size}" + (f"-m{map_index}" if map_index >= 0 else "") + f"-t{try_number}"
    room = MAX_JOB_NAME - len("sb--") - len(tags) - len(digest) - 1
    readable = _slug(dag_id)[: max(room, 0)].strip("-")
    name = "-".join(part for part in ("sb", readable, _slug(tags), digest) if part)
    if len(name) > MAX_JOB_NAME:
        raise ValueError(
            f"cannot name a group for world size {world_size}, map index "
            f"{map_index}, try {try_number} in {MAX_JOB_NAME} characters"
        )
    return GroupNames(job=name, service=name)


def label_value(text: str) -> str:
    """``text`` as a label value (at most 63 of ``[A-Za-z0-9._-]``, alphanumeric ends).

    Too long a value keeps its start and gets a hash of the whole, so two
    values stay distinct.
    """
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text)
    if len(value) > 63:
        value = value[:52] + "-" + hashlib.sha256(text.encode()).hexdigest()[:10]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def attempt_names(names: GroupNames, attempt: int) -> GroupNames:
    """The names of attempt ``attempt`` (2 or more) of a group named ``names`` (by
    :func:`group_names`, or by this for another attempt): the last ten characters, the
    hash, become ``a<attempt>`` and a hash of the rest, so the length stays and no
    attempt meets another's leftovers."""
    stem, tag = names.job[:-10], f"a{attempt}"
    digest = hashlib.sha256(f"{stem}\0{attempt}".encode()).hexdigest()
    job = stem + tag + digest[: 10 - len(tag)]
    return GroupNames(job=job, service=job)
