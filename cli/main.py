"""The ``scalebench`` command line.

    scalebench tasks
    scalebench run <task> --workers 1,2,4 [--light] [--backend gloo] [--repeats N]
    scalebench report <sweep directory | sweep id>
    scalebench db upgrade | scalebench ingest <location> | scalebench export <sweep>
    scalebench prices list|set|load | scalebench regressions [<sweep>]
    scalebench nightly pin|unpin|show
    scalebench cluster check [--no-pull-check]
    scalebench dashboard [--host 127.0.0.1] [--port 8050] [--database URL]

``run`` validates the request (nothing starts if a field is wrong; the options
are the Airflow trigger form's fields), runs one group per (worker count,
repeat) with the chosen launcher, records each group's verdict in the sweep's
manifest beside the records, and prints the results table.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from cli import (
    cluster,
    compare,
    dashboard,
    data,
    database,
    network,
    nightly,
    report,
    run,
    tasks,
)
from cli.errors import debugging, path_problem, refuse_empty_places
from cli.network import clean_network_leftovers
from results_db import service
from scalebench import config, manifest
from scalebench.rank import EXIT_INTERRUPTED, EXIT_REFUSED
from scalebench.request_fields import InvalidParameter


def build_parser() -> argparse.ArgumentParser:
    """The ``scalebench`` command's parser: each command's module adds its own."""
    parser = argparse.ArgumentParser(
        prog="scalebench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of an error (also SCALEBENCH_DEBUG=1)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    tasks.add_commands(commands)
    run.add_commands(commands)
    report.add_commands(commands)
    compare.add_commands(commands)
    data.add_commands(commands)
    database.add_commands(commands)
    network.add_commands(commands)
    cluster.add_commands(commands)
    nightly.add_commands(commands)
    dashboard.add_commands(commands)
    return parser


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: stop like Ctrl-C, so every group is ended and recorded."""


def _stop(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` asks for (default: the process's arguments); return its exit
    status, a refusal or an expected failure said in one line."""
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
