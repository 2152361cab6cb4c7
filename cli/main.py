"""The ``scalebench`` command line.

    scalebench tasks
    scalebench run <task> --workers 1,2,4 [--light] [--backend gloo] [--repeats N]
    scalebench report <sweep directory | sweep id>
    scalebench db upgrade | scalebench ingest <location> | scalebench export <sweep>
    scalebench prices list|set|load | scalebench regressions <sweep>
    scalebench dashboard [--host 127.0.0.1] [--port 8050] [--database URL]

``run`` validates the request (nothing starts if a field is wrong; the options
are the Airflow trigger form's fields), runs one group per (worker count,
repeat) with the chosen launcher, records each group's verdict in the sweep's
manifest beside the records, and prints the results table.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from cli import database
from results_db import service
from scalebench import config, manifest
from scalebench.errors import describe
from scalebench.launchers import LAUNCHERS
from scalebench.manifest import MANIFEST
from scalebench.rank import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REFUSED,
)
from scalebench.request import FIELDS
from scalebench.request_fields import RequestField
from scalebench.sweep import (
    GroupPlan,
    InvalidParameter,
    SweepRequest,
    start_sweep,
    validate_request,
)
from scalebench.tasks import TASKS, TrainingSpec


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def cmd_tasks(_: argparse.Namespace) -> int:
    for spec in TASKS.values():
        if isinstance(spec, TrainingSpec):
            goal = f"goal {spec.goal.describe(False)} (light: {spec.goal.light_threshold:g})"
        else:
            goal = (
                f"{len(spec.sizes(light=False))} sizes × {spec.repetitions} repetitions "
                f"(light: {len(spec.sizes(light=True))} × {spec.light_repetitions})"
            )
        limits = (
            f"{_clock(spec.group_time_limit_s(False))} / {_clock(spec.group_time_limit_s(True))}"
        )
        print(f"{spec.id:28s} {spec.title} — {goal}; group time limit {limits} (full / light)")
    return 0


def run_sweep(
    request: SweepRequest,
    results_root: Path,
    publish: Callable[[GroupPlan], None] | None = None,
    stopped: Callable[[Path], None] | None = None,
) -> tuple[Path, int]:
    """Run every planned group, one after the other; returns the sweep directory and exit status.

    ``publish`` is called with each group once its verdict is recorded (the
    command line loads it into the results database, so the dashboard shows
    the sweep while it runs). Interrupted (Ctrl-C, SIGTERM), the running group
    is stopped by its launcher and recorded ``cancelled``, the groups not
    started ``skipped``, and ``stopped`` is called with the sweep's folder (the command
    line loads what was measured) before the interruption goes on. A group that found the
    results filesystem full ends the sweep: the groups after it are recorded ``failed``
    (not started) with the same reason.
    """
    from operators.group import LauncherFailed, record_verdict, run_group
    from operators.launcher import launcher_for
    from scalebench.diskspace import NO_SPACE

    service.close_vanished_sweeps(results_root)
    plan = start_sweep(request, results_root, trigger="cli", runner=manifest.this_process())
    groups = plan.groups
    print(f"sweep {plan.sweep_id}: {len(groups)} group(s) → {plan.sweep_dir}", flush=True)
    started = time.monotonic()
    exit_status = EXIT_OK
    running: str | None = None
    try:
        for index, group in enumerate(groups):
            elapsed = time.monotonic() - started
            eta = (
                f", about {_clock(elapsed / index * (len(groups) - index))} to go" if index else ""
            )
            print(
                f"── group {index + 1}/{len(groups)}: {group.world_size} worker(s), "
                f"repeat {group.repeat + 1}/{request.repeats} (elapsed {_clock(elapsed)}{eta})",
                flush=True,
            )
            if LAUNCHERS[group.request.launcher].on_this_host and group.world_size > 2:
                print(
                    f"   note: {group.world_size} processes share this machine's cores; "
                    "times reflect oversubscription, not a cluster",
                    flush=True,
                )
            running = group.run_id
            try:
                result = run_group(group, lambda group=group: launcher_for(group))
                (status, reason), seconds = record_verdict(group, result), result.seconds
            except LauncherFailed as exc:  # recorded failed; the sweep goes on
                status, reason, seconds = "failed", str(exc), 0.0
            running = None
            line = f"   {status} in {seconds:.1f} s"
            print(line + (f": {reason}" if reason else ""), flush=True)
            if publish is not None:
                publish(group)
            if status != "succeeded":
                exit_status = EXIT_FAILED
            if reason.startswith(NO_SPACE):  # the next groups would only fill it further
                later = groups[index + 1 :]
                for entry in later:
                    manifest.record_verdict(
                        plan.sweep_dir, entry.run_id, "failed", f"not started: {reason}"
                    )
                if later:
                    print(f"   the {len(later)} other group(s) not started: {reason}", flush=True)
                break
    except BaseException:
        try:
            manifest.cancel(plan.sweep_dir, running, "the sweep was interrupted")
        finally:
            manifest.finish(plan.sweep_dir)
        if stopped is not None:  # what was measured before the interruption
            stopped(plan.sweep_dir)
        raise
    manifest.finish(plan.sweep_dir)
    return plan.sweep_dir, exit_status


def load_group(url: str) -> Callable[[GroupPlan], None]:
    """A ``publish`` for :func:`run_sweep`: load the group that just ended into the results
    database at ``url``. A failure only delays it: the sweep's ingest at the end loads
    every group again."""

    def publish(group: GroupPlan) -> None:
        try:  # one line here, not the progress
            service.ingest(url, str(group.sweep_dir), only=[group.run_id], replace=True, say=None)
        except Exception as exc:  # the records are safe on disk either way
            print(
                f"   not loaded into the results database yet ({describe(exc)}); the sweep's "
                "ingest will",
                flush=True,
            )
        else:
            print("   loaded into the results database", flush=True)

    return publish


def load_interrupted(url: str) -> Callable[[Path], None]:
    """A ``stopped`` for :func:`run_sweep`: load what an interrupted sweep measured (its
    finished groups, the stopped one as cancelled, the rest skipped) before the command
    exits. A failure is said, not raised: the records stay on disk for `scalebench ingest`."""

    def load(sweep_dir: Path) -> None:
        print(f"\ninterrupted: loading what was measured into {service.redact(url)}", flush=True)
        try:
            service.ingest(url, str(sweep_dir), say=None)
        except Exception as exc:
            print(
                f"   not loaded ({describe(exc)}); `scalebench ingest {sweep_dir}` loads it",
                flush=True,
            )
        else:
            print(f"   loaded sweep {sweep_dir.name}", flush=True)

    return load


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


def cmd_run(args: argparse.Namespace) -> int:
    given = {field.name: getattr(args, field.name) for field in FIELDS}
    request = validate_request(task=args.task, **{k: v for k, v in given.items() if v is not None})
    try:
        results_root = config.results_path(args.results)
    except ValueError as exc:
        raise InvalidParameter("results", str(exc)) from None
    url = None if args.no_ingest else args.database or config.database_url()
    if url is not None:
        # Where the results go is checked (and migrated) before any worker starts, not
        # after hours of training; --no-ingest keeps them on disk only.
        service.upgrade(url)
    if request.download and not request.light and isinstance(request.spec, TrainingSpec):
        prepare_data(request.spec.data.name, request.data_dir)
    if url is None:
        sweep_dir, status = run_sweep(request, results_root)
        print_sweep_directory(sweep_dir)
        return status
    sweep_dir, status = run_sweep(
        request, results_root, publish=load_group(url), stopped=load_interrupted(url)
    )
    print(f"\ningesting into {service.redact(url)}")
    service.ingest(url, str(sweep_dir))
    print_report(url, sweep_dir.name)
    return status


def clean_network_leftovers(asked: bool = False) -> int:
    """Take down what shaped (emulated-network) groups of launchers that no longer run left
    behind: namespaces, bridges, veth pairs, ``/etc/netns`` entries, firewall rules.

    ``scalebench run`` and ``scalebench ingest`` do it first, quietly where they may not
    (not root); ``scalebench network clean`` (``asked``) says what it did or why it cannot.
    """
    from operators.shaped_network import ShapingError, remove_leftovers
    from scalebench.host import cleaning_problem

    problem = cleaning_problem()
    if problem is not None:
        if asked:
            print(f"scalebench: error: network clean {problem}", file=sys.stderr)
            return EXIT_REFUSED
        return 0
    try:
        removed = remove_leftovers()
    except ShapingError as exc:
        print(
            f"scalebench: warning: left-over emulated networks not removed: {exc}", file=sys.stderr
        )
        return EXIT_FAILED
    if removed:
        print(f"removed what ended shaped groups left: {', '.join(removed)}", flush=True)
    elif asked:
        print("nothing left over by shaped groups")
    return 0


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


def prepare_data(name: str, data_dir: Path) -> None:
    """Fetch data set ``name`` when it is missing and verify it, before a sweep starts."""
    from scalebench.datasets import DataSetCorrupt, DataSetMissing
    from workers.data.prepare import prepare

    try:
        prepared = prepare(name, data_dir, download=True)
    except (DataSetMissing, DataSetCorrupt) as exc:
        raise InvalidParameter("download", str(exc)) from None
    print(f"{prepared.name}: {prepared.status} at {prepared.location}", flush=True)


def cmd_data(args: argparse.Namespace) -> int:
    from scalebench import config
    from scalebench.datasets import DataSetMissing
    from workers.data.prepare import DataSetCorrupt, prepare

    data_dir = Path(args.data_dir) if args.data_dir else config.data_dir()
    try:
        prepared = prepare(args.name, data_dir, download=args.download)
    except (DataSetMissing, DataSetCorrupt) as exc:
        print(f"scalebench: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"{prepared.name}: {prepared.status}, {prepared.bytes / 1e6:.1f} MB at {prepared.location}"
    )
    return 0


def _check_can_listen(host: str, port: int) -> None:
    """Refuse, naming the option, a host that is no address of this machine or a port taken
    or not allowed, before the server starts (its own message would be one bare line)."""
    import errno
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InvalidParameter("host", f"{host!r} is no address to listen on ({reason})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            field = "port" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "host"
            raise InvalidParameter(
                field, f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Serve the dashboard (read-only) with Dash's own server until Ctrl-C."""
    try:
        port = int(args.port)
    except ValueError:
        raise InvalidParameter("port", f"must be a whole number, got {args.port!r}") from None
    if not 1 <= port <= 65535:
        raise InvalidParameter("port", f"must be from 1 to 65535, got {port}")
    _check_can_listen(args.host, port)
    from dash_app.app import create_app
    from results_db.database import readonly_engine

    url = args.database or config.database_url()
    readonly_engine(url).dispose()  # a URL no engine can be made of is refused here, by name
    app = create_app(url)
    problem = app.server.extensions["scalebench"].health()
    if problem:  # served anyway: the database may come up; pages say why until then
        print(f"scalebench: warning: {problem}", file=sys.stderr, flush=True)
    print(
        f"dashboard of {service.redact(url)} on http://{args.host}:{port}/ (Ctrl-C stops it)",
        flush=True,
    )
    try:
        app.run(host=args.host, port=port, debug=False)
    except KeyboardInterrupt:
        print("dashboard stopped", file=sys.stderr)
    return 0


def add_request_option(parser: argparse.ArgumentParser, field: RequestField) -> None:
    """A request field as a ``scalebench run`` option, with the field's default."""
    shown = field.default
    if isinstance(shown, tuple):
        shown = ",".join(map(str, shown))
    default = "" if field.default in (None, "") else f" (default {shown})"
    choices = f" [{', '.join(field.choices)}]" if field.choices else ""
    extra: dict = {"action": argparse.BooleanOptionalAction} if field.kind == "bool" else {}
    parser.add_argument(
        field.option,
        dest=field.name,
        default=field.default,
        help=field.describe() + choices + default,
        **extra,
    )


def option_table() -> str:
    """The request fields as the Markdown table of ``docs/command-line.md`` (a test holds
    the page to it; print it with ``python -c "from cli.main import option_table as t;
    print(t())"``)."""
    rows = ["| option | meaning | default |", "|---|---|---|"]
    for field in FIELDS:
        choices = f" One of {', '.join(f'`{c}`' for c in field.choices)}." if field.choices else ""
        shown = field.default
        if isinstance(shown, tuple):
            shown = ",".join(map(str, shown))
        default = "" if shown in (None, "") else f"`{shown}`"
        meaning = field.describe().replace("|", "\\|") + choices
        rows.append(f"| `{field.option}` | {meaning} | {default} |")
    return "\n".join(rows) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scalebench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of an error (also SCALEBENCH_DEBUG=1)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    tasks = commands.add_parser("tasks", help="list the benchmark tasks")
    tasks.set_defaults(func=cmd_tasks)

    run = commands.add_parser("run", help="run a sweep: one training group per worker count")
    run.add_argument("task", help="task id (see `scalebench tasks`)")
    for field in FIELDS:
        add_request_option(run, field)
    run.add_argument("--results", default=None, help="results directory (SCALEBENCH_RESULTS_URI)")
    run.add_argument(
        "--database", default=None, help="results database URL (SCALEBENCH_DATABASE_URL)"
    )
    run.add_argument(
        "--no-ingest",
        action="store_true",
        help="leave the results database alone (the table comes from a temporary SQLite copy)",
    )
    run.set_defaults(func=cmd_run)

    report = commands.add_parser("report", help="print the table of a sweep")
    report.add_argument("sweep", help="a sweep's results directory, or the id of an ingested sweep")
    report.add_argument(
        "--database", default=None, help="results database URL (SCALEBENCH_DATABASE_URL)"
    )
    report.set_defaults(func=cmd_report)

    data = commands.add_parser(
        "data", help="download (optionally) and verify a data set: checksums and format"
    )
    data.add_argument(
        "name",
        choices=(
            "cifar10",
            "epsilon",
            "wikitext2",
            "wmt16-en-de",
            "wmt17-en-de",
            "digits",
            "digits32",
            "epsilon_like",
            "markov",
            "synthetic",
        ),
    )
    data.add_argument("--download", action="store_true", help="fetch it when missing")
    data.add_argument("--data-dir", default=None, help="data sets (SCALEBENCH_DATA_DIR)")
    data.set_defaults(func=cmd_data)

    database.add_commands(commands)

    network = commands.add_parser("network", help="emulated networks of shaped local groups")
    network_commands = network.add_subparsers(dest="network_command", required=True)
    clean = network_commands.add_parser(
        "clean", help="remove what shaped groups of killed launchers left (root)"
    )
    clean.set_defaults(func=lambda _: clean_network_leftovers(asked=True))

    dashboard = commands.add_parser("dashboard", help="serve the dashboard (read-only)")
    dashboard.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    dashboard.add_argument("--port", default="8050", help="port (default 8050)")
    dashboard.add_argument(
        "--database", default=None, help="results database URL (SCALEBENCH_DATABASE_URL)"
    )
    dashboard.set_defaults(func=cmd_dashboard)
    return parser


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stop like Ctrl-C, so every group is ended and recorded."""


def _stop(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


# What SQLite and PostgreSQL say about a table or column the schema should have.
def path_problem(exc: BaseException) -> str | None:
    """One line for a file or folder that cannot be read or written, or None."""
    if not isinstance(exc, OSError) or not exc.filename or exc.errno not in PATH_ERRORS:
        return None
    return (
        f"cannot use {exc.filename}: {exc.strerror}; choose a folder you can read and "
        "write (--results or SCALEBENCH_RESULTS_URI for results, --out for exports, "
        "--data-dir or SCALEBENCH_DATA_DIR for data sets) or fix its permissions"
    )


PATH_ERRORS = {
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOSPC,
    errno.ENOENT,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EDQUOT,
    errno.ENAMETOOLONG,
    errno.EEXIST,  # e.g. --out is a link to nothing: there is something, and not a folder
    errno.ELOOP,
}


# Options and arguments that name a place (a file, a folder, a database, a sweep): empty is
# never meant (it would fall back to a default, or mean the current folder), so it is
# refused by name. Arguments (no leading dashes) have no default to fall back to.
PLACE_OPTIONS = {
    "results": "--results",
    "database": "--database",
    "out": "--out",
    "location": "location",
    "file": "file",
    "sweep": "sweep",
}


def refuse_empty_places(args: argparse.Namespace) -> None:
    """Raise :class:`InvalidParameter` for a place of :data:`PLACE_OPTIONS` given empty."""
    places = dict(PLACE_OPTIONS)
    if args.command == "data":  # ``run``'s --data-dir is a request field, checked with it
        places["data_dir"] = "--data-dir"
    for name, shown in places.items():
        value = getattr(args, name, None)
        if value is None or str(value).strip():
            continue
        if shown.startswith("--"):
            raise InvalidParameter(
                name, f"{shown} is empty; name one, or leave it out for the default"
            )
        raise InvalidParameter(name, f"the {shown} is empty; name one")


def debugging(args: argparse.Namespace | None = None) -> bool:
    """Whether a traceback is wanted (``--debug`` or ``SCALEBENCH_DEBUG=1``)."""
    return bool(getattr(args, "debug", False)) or os.environ.get("SCALEBENCH_DEBUG") == "1"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, _stop)
    try:
        refuse_empty_places(args)
        if args.command in ("run", "ingest"):
            clean_network_leftovers()  # a killed launcher's shaped group: gone before anything
        return args.func(args)
    except (
        InvalidParameter,
        service.CommandError,
        config.BadSetting,
        manifest.BadManifest,
    ) as exc:
        if debugging(args):
            raise
        print(f"scalebench: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        print("scalebench: interrupted; every group was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        problem = service.database_problem(exc) or path_problem(exc)
        if problem is None or debugging(args):
            raise  # a genuine bug: its traceback is the report
        print(f"scalebench: error: {problem} (--debug shows the traceback)", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
