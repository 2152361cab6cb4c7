"""``scalebench report``: a sweep's results table, from the results database or from the
sweep's own folder (through a private SQLite copy)."""

from __future__ import annotations

import argparse
import contextlib
import errno
from pathlib import Path

from results_db import service
from scalebench import config, manifest
from scalebench.manifest import MANIFEST
from scalebench.request_fields import InvalidParameter


def print_report(url: str, sweep_id: str) -> None:
    """Print an ingested sweep's report from the results database at ``url`` (read only:
    a database that does not exist is refused, a read-only one is read)."""
    from results_db.report import sweep_report

    engine = service.reader_for(url)
    try:
        with engine.connect() as conn:
            report = sweep_report(conn, sweep_id)
    except LookupError as exc:
        raise InvalidParameter(
            "sweep", f"{exc.args[0]}; ingest it with `scalebench ingest`"
        ) from None
    finally:
        engine.dispose()
    print("\n" + report)


def print_sweep_directory(sweep_dir: Path) -> None:
    """Ingest a sweep directory into a temporary SQLite database and print its report there."""
    import io
    import tempfile

    sweep_id = manifest.load(sweep_dir).sweep_id  # a damaged manifest: refused, named
    with tempfile.TemporaryDirectory(prefix="scalebench-report-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'report.db'}"
        progress = io.StringIO()
        with contextlib.redirect_stdout(progress):  # the progress of a private copy
            service.ingest(url, str(sweep_dir), read_only=True)
        refused = [
            line.strip().removeprefix("refused: sweep ")
            for line in progress.getvalue().splitlines()
            if line.strip().startswith("refused: sweep ")
        ]
        if refused:  # the sweep itself could not be read: nothing to report
            raise InvalidParameter("sweep", refused[0])
        print_report(url, sweep_id)


def cmd_report(args: argparse.Namespace) -> int:
    """A sweep directory is read through a private SQLite copy; a sweep id from the database."""
    target = Path(args.sweep)
    if is_folder(target):
        if not (target / MANIFEST).is_file():
            raise InvalidParameter("sweep", f"no {MANIFEST} in {target}")
        print_sweep_directory(target)
    else:
        print_report(args.database or config.database_url(), args.sweep)
    return 0


def is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder; a name no file system can hold (too long) is none,
    so a long sweep id is looked up in the database rather than refused as a path."""
    try:
        return path.is_dir()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return False
        raise


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``report`` command."""
    report = commands.add_parser("report", help="print the table of a sweep")
    report.add_argument("sweep", help="a sweep's results directory, or the id of an ingested sweep")
    report.add_argument(
        "--database", default=None, help="results database URL (SCALEBENCH_DATABASE_URL)"
    )
    report.set_defaults(func=cmd_report)
