"""A sweep's manifest: what was asked, which groups were planned, what became of each.

Two files sit beside a sweep's run directories:

    <sweep>/sweep.json       the plan, written once (atomically) when the sweep starts
                             and once more, with every verdict folded in, when it finishes
    <sweep>/verdicts.jsonl   one line per verdict, appended as groups end

So recording a verdict costs one appended line, whatever the sweep's size, and
a reader (ingest, the next group's cancellation check) folds the lines into
the plan: the last verdict of a group wins. A group's ``status`` is
``planned`` until a verdict arrives; then the launcher's verdict
(``succeeded``, ``failed``, ``diverged``, ``timed_out``; on Kubernetes also
``preempted`` and ``not_admitted``), ``cancelled`` (it
was running when the sweep was stopped) or ``skipped`` (it never started
because the sweep was stopped). Used by the command line's runner and by the
Airflow operators alike; torch-free.

A full disk must not lose the verdicts: the sweep starts by setting aside
:data:`RESERVE_BYTES` in a file of its own (``.space-reserve``); a verdict or
the final ``sweep.json`` that meets a full filesystem frees it and is written
again. A verdict line is written whole or not at all, and ``sweep.json`` is
replaced atomically, so no reader ever sees half of either.

One module per subject:

- :mod:`scalebench.manifest.contents`: the :class:`Manifest` and its :class:`GroupEntry`
  values, and how the two files' text reads into them;
- :mod:`scalebench.manifest.files`: the files written and read, and the reserve of space;
- :mod:`scalebench.manifest.recording`: verdicts and attempts appended as groups end;
- :mod:`scalebench.manifest.closing`: settling the groups of a sweep that ended without
  their verdicts, and the sweeps whose launcher vanished;
- :mod:`scalebench.manifest.processes`: which process runs a sweep, and whether it ended.

Every public name is importable from this package.
"""

from __future__ import annotations

from scalebench.manifest.closing import (
    LAUNCHER_VANISHED,
    as_closed_if_vanished,
    close,
    close_vanished,
)
from scalebench.manifest.contents import (
    MANIFEST,
    MAX_WORLD_SIZE,
    TRIGGERS,
    VERDICTS,
    BadManifest,
    GroupEntry,
    Manifest,
)
from scalebench.manifest.files import (
    RESERVE,
    RESERVE_BYTES,
    append_verdicts,
    create,
    finish,
    load,
    parse,
    read,
)
from scalebench.manifest.processes import (
    launcher_gone,
    still_running,
    this_or_gone,
    this_process,
)
from scalebench.manifest.recording import (
    cancel,
    record_attempt,
    record_verdict,
    start_attempt,
)

__all__ = [
    "LAUNCHER_VANISHED",
    "MANIFEST",
    "MAX_WORLD_SIZE",
    "RESERVE",
    "RESERVE_BYTES",
    "TRIGGERS",
    "VERDICTS",
    "BadManifest",
    "GroupEntry",
    "Manifest",
    "append_verdicts",
    "as_closed_if_vanished",
    "cancel",
    "close",
    "close_vanished",
    "create",
    "finish",
    "launcher_gone",
    "load",
    "parse",
    "read",
    "record_attempt",
    "record_verdict",
    "start_attempt",
    "still_running",
    "this_or_gone",
    "this_process",
]
