"""The ``scalebench`` commands that work on the results database.

    scalebench db upgrade [--revision REV]       migrate (SQLite or PostgreSQL)
    scalebench db grant-readonly ROLE            PostgreSQL: the dashboard's login (reads; triages)
    scalebench db refit [--sweep SWEEP]          fit the all-reduce model again (Task 0 sweeps)
    scalebench ingest LOCATION                   load sweeps from a path or fsspec URI
    scalebench export SWEEP --format csv|parquet runs, evaluations, steps, scaling + official
    scalebench prices list|set|load              the dated price table used for costs
    scalebench regressions SWEEP                 compare a nightly with its baseline
    scalebench project SWEEP --allreduce SWEEP   step time, TTA and cost at other worker counts

Every command takes ``--database URL`` (default ``SCALEBENCH_DATABASE_URL``).
The work is done by :mod:`results_db.service`; this module reads the
arguments and prints the results.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sqlalchemy.engine import make_url

from results_db.database import sqlite_file
from results_db.regressions import RULE
from results_db.regressions.triage import STATES
from results_db.service import (
    CommandError,
    export,
    grant_readonly,
    ingest,
    load_price_file,
    price_values,
    project,
    reader_for,
    refit,
    regression_rule,
    regressions,
    set_prices,
    upgrade,
)
from results_db.service.nightly import (
    check_paired,
    describe_finding_row,
    describe_judgement,
    finding_link,
    findings,
    is_paired_sweep,
    triage,
)
from scalebench import config
from scalebench.whole_numbers import NotWholeNumber, parse_whole

# -- argument parsing ---------------------------------------------------------------------------


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The commands on the results database: ``db`` (upgrade, grant-readonly, refit),
    ``project``, ``ingest``, ``export``, ``prices`` and ``regressions``."""
    _add_db(commands)
    _add_project(commands)
    _add_ingest(commands)
    _add_export(commands)
    _add_prices(commands)
    _add_regressions(commands)


def _with_database(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with the ``--database`` option every command here takes."""
    parser.add_argument("--database", help="database URL (default SCALEBENCH_DATABASE_URL)")
    return parser


def _add_db(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``db upgrade``, ``db grant-readonly`` and ``db refit``."""
    db = commands.add_parser("db", help="results database schema and roles")
    db_commands = db.add_subparsers(dest="db_command", required=True)
    up = _with_database(db_commands.add_parser("upgrade", help="migrate to the newest schema"))
    up.add_argument("--revision", default="head")
    up.set_defaults(func=run_upgrade)
    grant = _with_database(
        db_commands.add_parser("grant-readonly", help="PostgreSQL: a read-only login role")
    )
    grant.add_argument("role")
    grant.add_argument("--password", default=None)
    grant.set_defaults(func=lambda a: grant_readonly(a.database, a.role, a.password) or 0)

    refit_parser = _with_database(
        db_commands.add_parser(
            "refit", help="fit the all-reduce model (latency α, bandwidth β) again and store it"
        )
    )
    refit_parser.add_argument("--sweep", default=None, help="one sweep (default: every one)")
    refit_parser.set_defaults(func=lambda a: refit(a.database, a.sweep))


def _add_project(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``project``: a training sweep's step time, TTA and cost at other worker counts."""
    projection = _with_database(
        commands.add_parser(
            "project",
            help="project a training sweep's step time, TTA and cost to other worker counts "
            "and links, with a Task 0 sweep's all-reduce fits",
        )
    )
    projection.add_argument(
        "sweep",
        help="the training sweep, or several of one task and configuration, comma-separated "
        "(e.g. one on host and one on 10mbit)",
    )
    projection.add_argument(
        "--allreduce",
        required=True,
        help="the Task 0 sweep whose fits give communication, or several, comma-separated "
        "(the first to fit a configuration wins)",
    )
    projection.add_argument(
        "--workers", default=None, help="worker counts, e.g. 4,8,16,32,64 (default 1,2,…,64)"
    )
    projection.add_argument(
        "--network", default=None, help="link profiles, e.g. 1gbit,10gbit (default: the sweep's)"
    )
    projection.add_argument("--instance", default="n1-standard-4", help="priced machine type")
    projection.add_argument(
        "--gpu", default="nvidia-tesla-t4", help="priced GPU type ('none': no GPU)"
    )
    projection.set_defaults(func=run_project)


def run_project(a: argparse.Namespace) -> int:
    """``project``: ``--gpu none`` prices no GPU."""
    return project(
        a.database,
        a.sweep,
        a.allreduce,
        a.workers,
        a.network,
        a.instance,
        None if a.gpu == "none" else a.gpu,
    )


def _add_ingest(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``ingest``: load sweeps from a path or fsspec URI."""
    ingest_parser = _with_database(commands.add_parser("ingest", help="load sweeps' records"))
    ingest_parser.add_argument("location", help="a sweep directory or a folder of sweeps (fsspec)")
    ingest_parser.add_argument(
        "--replace",
        action="store_true",
        help="load the files even where they now hold less than the stored run "
        "(fewer records, a worse verdict); without it the stored run is kept",
    )
    ingest_parser.set_defaults(
        func=lambda a: ingest(a.database or config.database_url(), a.location, replace=a.replace)
    )


def _add_export(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``export``: a sweep's tables as CSV or Parquet files."""
    export_parser = _with_database(commands.add_parser("export", help="export a sweep"))
    export_parser.add_argument("sweep")
    export_parser.add_argument("--format", default="csv", help="csv or parquet")
    export_parser.add_argument(
        "--out", default="var/exports", help="the folder (created when missing)"
    )
    export_parser.set_defaults(func=run_export)


def run_export(a: argparse.Namespace) -> int:
    """``export``: print the path of each file written."""
    for path in export(a.database, a.sweep, a.format, Path(a.out)):
        print(path)
    return 0


def _add_prices(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``prices list``, ``prices set`` and ``prices load``."""
    prices = commands.add_parser("prices", help="the dated price table")
    price_commands = prices.add_subparsers(dest="price_command", required=True)
    listing = _with_database(price_commands.add_parser("list", help="prices in force"))
    listing.set_defaults(func=list_prices)
    setter = _with_database(price_commands.add_parser("set", help="add or replace one price"))
    setter.add_argument("kind", help="instance or gpu")
    setter.add_argument("name", help="e.g. n1-standard-4, nvidia-tesla-t4")
    setter.add_argument("--regular", required=True, help="dollars per hour")
    setter.add_argument("--preemptible", required=True, help="dollars per hour")
    setter.add_argument("--valid-from", required=True, help="YYYY-MM-DD")
    setter.add_argument("--source", default="entered by hand")
    setter.set_defaults(func=set_price)
    loader = _with_database(price_commands.add_parser("load", help="load prices from a CSV file"))
    loader.add_argument("file")
    loader.set_defaults(
        func=lambda a: print_count(set_prices(a.database, load_price_file(Path(a.file))))
    )


def set_price(a: argparse.Namespace) -> int:
    """``prices set``: the one price of the arguments, checked as a file's row would be."""
    row = {
        "kind": a.kind,
        "name": a.name,
        "regular_per_hour": a.regular,
        "preemptible_per_hour": a.preemptible,
        "source": a.source,
        "valid_from": a.valid_from,
    }
    return print_count(set_prices(a.database, [price_values(row, "")]))


def _whole_number(text: str) -> int:
    """An option's whole number, leading zeros and all (``int`` refuses more than 4,300
    digits, and argparse would then print them all): its number, or one short reason."""
    try:
        return parse_whole(text)
    except NotWholeNumber as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_regressions(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``regressions``: a nightly compared with its baseline."""
    detect = _with_database(
        commands.add_parser(
            "regressions",
            help="nightly vs its baseline; without a sweep, the paired nightly's findings",
        )
    )
    detect.add_argument("sweep", nargs="?", help="judge this nightly sweep (omit: list findings)")
    detect.add_argument("--finding", type=_whole_number, help="the finding --state sets")
    detect.add_argument("--state", choices=STATES, help="give --finding this triage state")
    detect.add_argument("--note", help="with --state: why (kept with the finding)")
    detect.add_argument(
        "--states",
        default=",".join(s for s in STATES if s not in ("fixed", "false-alarm")),
        help="the findings listed, by state (default: those still open to triage; 'all')",
    )
    detect.add_argument("--task", help="only the findings with a series of this task")
    detect.add_argument(
        "--window", type=_whole_number, default=RULE.window, help="earlier nightlies"
    )
    detect.add_argument("--alpha", type=float, default=RULE.alpha, help="significance level")
    detect.add_argument(
        "--min-change",
        type=float,
        default=RULE.min_change,
        help="relative worsening of the mean, e.g. 0.05 = 5 %% worse",
    )
    detect.set_defaults(func=run_regressions)


def run_regressions(args: argparse.Namespace) -> int:
    """``regressions``: judge a sweep, list the paired nightly's findings, or triage one."""
    if args.finding is not None or args.state is not None:
        if args.sweep is not None or args.finding is None or args.state is None:
            raise CommandError(
                "regressions: --finding ID --state STATE together, without a sweep, "
                "e.g. scalebench regressions --finding 3 --state acknowledged"
            )
        print(triage(args.database, args.finding, args.state, args.note))
        return 0
    if args.sweep is not None:
        rule = regression_rule(args.window, args.alpha, args.min_change)
        if is_paired_sweep(args.database, args.sweep):
            return judge_paired(args.database, args.sweep)
        return regressions(args.database, args.sweep, rule)
    states = None if args.states == "all" else tuple(s.strip() for s in args.states.split(","))
    unknown = [s for s in states or () if s not in STATES]
    if unknown:
        raise CommandError(f"states: unknown state {unknown[0]!r}; use {', '.join(STATES)} or all")
    shown = findings(args.database, states, args.task)
    for finding in shown:
        print(describe_finding_row(finding, finding_link(finding.id)))
    if not shown:
        print("no finding" + (f" in state {', '.join(states)}" if states else ""))
    return 0


def judge_paired(url: str | None, sweep_id: str) -> int:
    """A paired night judged from the command line; exit status 1 where a series moved."""
    checked = check_paired(url, sweep_id)
    for judged in checked.judgements:
        print(describe_judgement(judged))
    for finding in checked.new + checked.updated:
        print(describe_finding_row(finding, finding_link(finding.id)))
    return 1 if any(j.flagged for j in checked.judgements) else 0


def run_upgrade(args: argparse.Namespace) -> int:
    """``db upgrade``: an in-memory database is refused, since the schema would be gone
    when the command ends."""
    url = args.database or config.database_url()
    if make_url(url).get_backend_name() == "sqlite" and sqlite_file(url) is None:
        raise CommandError(
            f"database: {url} is an in-memory SQLite database, gone when this command ends; "
            "name a file, sqlite:///<file> (--database or SCALEBENCH_DATABASE_URL)"
        )
    upgrade(url, args.revision)
    return 0


def print_count(count: int) -> int:
    print(f"{count} price(s) stored")
    return 0


def list_prices(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from results_db.queries.costs import prices_in_force

    engine = reader_for(args.database)
    with engine.connect() as conn:
        rows = prices_in_force(conn)
    engine.dispose()
    print(
        tabulate(
            [
                (
                    r.kind,
                    r.name,
                    f"{r.regular_per_hour:.4f}",
                    f"{r.preemptible_per_hour:.4f}",
                    r.valid_from.date().isoformat(),
                    r.source,
                )
                for r in rows
            ],
            headers=["kind", "name", "regular $/h", "preemptible $/h", "valid from", "source"],
        )
    )
    return 0
