"""Loading sweeps into the results database: :func:`ingest`, the one entry every caller
uses (the command line, the DAGs' ingest, the training-group operator), and
:func:`load_quietly` for a group still running."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from traceback import walk_tb
from typing import Any

from results_db.service.engines import CommandError, engine_for, os_reason, upgrade
from scalebench import manifest
from scalebench.errors import describe


def printed(line: str) -> None:
    """Progress to standard output, at once (an Airflow task's log shows it as it comes)."""
    print(line, flush=True)


def close_vanished_sweeps(root: Path, say: Callable[[str], None] = printed) -> None:
    """Close the sweeps at ``root`` (a local folder) whose command line was killed, telling
    ``say`` which (see :func:`scalebench.manifest.close_vanished`)."""
    if root.is_dir():
        for closed in manifest.close_vanished(root):
            say(f"closed sweep {closed.sweep_id}: {manifest.LAUNCHER_VANISHED}")


def check_location(location: str) -> bool:
    """Whether ``location`` is remote (an fsspec URL such as ``s3://…``); a scheme fsspec does
    not know, or whose package is not installed, is refused naming it."""
    import fsspec

    scheme = fsspec.core.split_protocol(location)[0]  # also ``data:...``, which has no //
    if scheme in (None, "", "file", "local"):
        return False
    try:
        fsspec.get_filesystem_class(scheme)
    except ValueError:
        raise CommandError(
            f"location: unknown scheme {scheme}://; give a local path or an fsspec URL "
            "(e.g. s3://, gs://, https://) whose package is installed"
        ) from None
    except ImportError as exc:
        raise CommandError(
            f"location: {scheme}:// needs a package that is not installed: {exc}"
        ) from None
    return True


def ingest(
    url: str,
    location: str,
    only: Collection[str] | None = None,
    replace: bool = False,
    say: Callable[[str], None] | None = printed,
    read_only: bool = False,
) -> int:
    """Migrate if needed, ingest ``location`` (``only``: just these runs; ``replace``: the
    files replace stored runs even where they hold less), telling ``say`` the progress and
    the outcome (``None``: nothing); returns an exit status (1 when a run was refused or a
    stored run kept over its files). The one way sweeps are loaded: the command line, the
    DAGs' ingest and the training-group operator all call it. ``read_only``: nothing at
    ``location`` is written (``report``'s private copy): a sweep whose runner vanished is
    loaded as if closed, and left as it is."""
    from results_db.ingest import ingest_location  # with fsspec: only when loading

    tell = say or (lambda line: None)
    remote = check_location(location)
    if not remote and not read_only:
        close_vanished_sweeps(Path(location), tell)  # sweeps whose runner died
    settle = None
    if not remote and read_only:

        def settle(sweep: Any, sweep_path: str) -> Any:
            return manifest.as_closed_if_vanished(sweep, Path(sweep_path))

    upgrade(url)
    engine = engine_for(url)
    try:
        report = ingest_location(engine, location, tell, only, replace, settle)
    except FileNotFoundError as exc:
        raise CommandError(f"location: {os_reason(exc)}") from None
    except OSError as exc:
        if not remote:
            raise
        raise CommandError(f"location: cannot read {location}: {os_reason(exc)}") from None
    except Exception as exc:
        if not remote or not _from_filesystem(exc):
            raise
        raise CommandError(f"location: cannot read {location}: {describe(exc)}") from None
    finally:
        engine.dispose()
    tell(
        f"ingested {report.runs} run(s) of {report.sweeps} sweep(s): {report.rows:,} rows "
        f"in {report.seconds:.1f} s; {report.quarantined_lines} unreadable line(s) quarantined"
    )
    for problem in report.problems[:20]:
        tell(f"  unreadable: {problem}")
    for refused in report.refused:
        tell(f"  refused: {refused}")
    for conflict in report.conflicts:
        tell(f"  kept the stored run {conflict}; `scalebench ingest --replace` loads the files")
    return 1 if report.refused or report.conflicts else 0


def _from_filesystem(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside fsspec or a filesystem it drives (a remote location's
    URL it cannot parse, a reply it cannot read), not by ingest's own code."""
    return any("/fsspec/" in frame.f_code.co_filename for frame, _ in walk_tb(exc.__traceback__))


def load_quietly(url: str, sweep_dir: str | Path, run_id: str) -> None:
    """Load what the ranks of run ``run_id`` wrote so far, saying nothing (its manifest entry
    has no verdict yet, so the run reads as ``running``); a later load completes it without
    duplicates."""
    ingest(url, str(sweep_dir), only=[run_id], replace=True, say=None)


def load_plan(url: str, sweep_dir: str | Path) -> None:
    """Store a sweep just planned, saying nothing: its row and a ``planned`` row for each of
    its groups, so that the database shows the whole sweep from its start (and a full ingest
    later replaces them with what the groups measured)."""
    ingest(url, str(sweep_dir), say=None)


def group_started(url: str, sweep_dir: str | Path, run_id: str) -> None:
    """Mark the group of run ``run_id`` as started: its row reads ``running`` (loading the
    sweep's plan first when it is not stored yet: its plan was stored while the database was
    down)."""
    from results_db.ingest import mark_running

    sweep_id = Path(sweep_dir).name
    engine = engine_for(url)
    try:
        with engine.begin() as conn:
            marked = mark_running(conn, sweep_id, run_id)
        if not marked:
            load_plan(url, sweep_dir)
            with engine.begin() as conn:
                mark_running(conn, sweep_id, run_id)
    finally:
        engine.dispose()
