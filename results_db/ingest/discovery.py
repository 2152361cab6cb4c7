"""Finding the sweeps at a results location and checking what their manifests name: the
sweep folders (:func:`find_sweeps`), the run folders no manifest lists
(:func:`unlisted_runs`), and why a manifest's sweep or one of its run ids cannot be stored
(:func:`sweep_problems`, :func:`run_id_problem`)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from results_db.ingest.sweep_rows import sweep_values
from results_db.ingest.times import parse_time
from results_db.models import Run, Sweep
from results_db.schema_limits import row_problems, value_problem
from scalebench import folders, quantities
from scalebench.manifest import MANIFEST, TRIGGERS, GroupEntry, Manifest
from scalebench.request_checks import check_stored
from scalebench.request_fields import InvalidParameter
from scalebench.tasks import TASKS

# A run id names a directory inside its sweep's: one path component, nothing that climbs out.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def find_sweeps(fs: Any, root: str) -> list[str]:
    """Sweep directories at ``root``: ``root`` itself, or its sub-directories with a manifest,
    and those whose manifest this process is not allowed to look for (a folder it may not
    enter): reading one then refuses it by name (``cannot be read``), where skipping it
    would lose a sweep without a word. ``root`` is a path, never a pattern: ``exp[1]`` is
    the folder of that name."""
    root = root.rstrip("/") or "/"
    if _manifest_there(fs, f"{root}/{MANIFEST}"):
        return [root]
    return [
        f"{root}/{name}"
        for name in folders.names(fs, root)
        if _manifest_there(fs, f"{root}/{name}/{MANIFEST}")
    ]


def _manifest_there(fs: Any, path: str) -> bool:
    """Whether there is an entry at ``path``, or may be one that this process is not allowed
    to see (on this machine: a folder on its way it may not search, where ``lexists`` says
    no)."""
    if folders.lexists(fs, path):
        return True
    if not folders.is_local(fs):
        return False
    try:
        os.lstat(path)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def unlisted_runs(fs: Any, sweep_path: str, groups: Sequence[GroupEntry]) -> list[str]:
    """Folders of the sweep that hold rank files but are no group of its manifest (a
    manifest that lies, or records copied into the wrong sweep): never read, but said; and
    so are those this process may not list, which may hold some."""
    listed = {group.run_id for group in groups}
    return [
        name
        for name in folders.names(fs, sweep_path)
        if name not in listed
        and fs.isdir(f"{sweep_path}/{name}")
        and _may_hold_rank_files(fs, f"{sweep_path}/{name}")
    ]


def _may_hold_rank_files(fs: Any, folder: str) -> bool:
    """Whether ``folder`` holds files named like rank files, or may: it cannot be listed."""
    try:
        names = folders.names(fs, folder)
    except PermissionError:
        return True
    return any(f.startswith("rank-") and f.endswith(".jsonl") for f in names)


def run_id_problem(run_id: Any) -> str | None:
    """Why ``run_id`` from a manifest cannot name a run of its sweep (``None``: it can)."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        return (
            "a run id is one directory name inside the sweep's (letters, digits, '.', "
            "'_', '-'), so this manifest entry is not read"
        )
    return value_problem(Run.__table__, "id", run_id)


def sweep_problems(manifest: Manifest) -> list[str]:
    """Why a manifest's sweep cannot be stored (empty: it can): its id must name one
    directory, as a run id does (an id that climbs out of a folder would later be written
    out of one by ``export``); its task must be one this scalebench knows, its trigger one
    of :data:`~scalebench.manifest.TRIGGERS`, its request's values ones a request can hold
    (:func:`~scalebench.request_checks.check_stored`), every value must fit its column, and its runs
    must be named after it."""
    sweep_id = manifest.sweep_id
    if not RUN_ID.fullmatch(sweep_id):
        return [
            "a sweep id is one directory name (letters, digits, '.', '_', '-'), so this "
            "manifest is not read"
        ]
    task = manifest.request["task"]
    if task not in TASKS:
        return [f"its request names task {task[:60]!r}, which this scalebench does not know"]
    if manifest.trigger not in TRIGGERS:
        return [f"its trigger must be one of {', '.join(TRIGGERS)}, not {manifest.trigger[:60]!r}"]
    try:
        check_stored(manifest.request)
    except InvalidParameter as exc:
        return [f"its request holds what no request can: {exc}"]
    problems = row_problems(Sweep.__table__, {"id": sweep_id, **sweep_values(manifest)})
    if problems:
        return problems
    for group in manifest.groups:
        problem = quantities.FIELDS[("any", "world_size")].problem(group.world_size)
        if problem:
            return [f"group {group.run_id[:60]!r}: {problem}"]
    created, finished = parse_time(manifest.created_at), parse_time(manifest.finished_at)
    if created is not None and finished is not None and finished < created:
        return [
            f"it finished ({manifest.finished_at}) before it was created ({manifest.created_at})"
        ]
    strangers = [  # a run id that names no folder is refused run by run, with its reason
        g.run_id
        for g in manifest.groups
        if RUN_ID.fullmatch(g.run_id) and not g.run_id.startswith(sweep_id + "-")
    ]
    if strangers:
        return [
            f"run {strangers[0][:60]!r} is not one of this sweep's (they are named {sweep_id}-…)"
        ]
    return []
