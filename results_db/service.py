"""What the command line, the operators and the dashboard ask of the results database.

Migrate it, load sweeps into it (:func:`ingest`, the one entry every caller
uses, and :func:`load_quietly` for a group still running), export a sweep,
keep the price table, check a nightly for regressions, say how a sweep ended
and print its report, and say in one line what is wrong with a database that
cannot be used (:func:`database_problem`). The SQL lives in the modules
beside it (``queries`` reads, ``maintenance`` writes prices and roles,
``ingest`` loads, ``regressions`` detects); this module checks the input,
words the errors and prints the results.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from results_db.regressions import RULE, Rule
from scalebench import config
from scalebench.errors import describe


class CommandError(ValueError):
    """Bad input to a database command; the message names the field."""


def redact(url: str) -> str:
    """``url`` without its password, for printing."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def engine_for(url: str | None):  # type: ignore[no-untyped-def]
    """An engine for ``url`` (None: ``SCALEBENCH_DATABASE_URL``)."""
    from results_db.database import make_engine

    return make_engine(url or config.database_url())


def reader_for(url: str | None):  # type: ignore[no-untyped-def]
    """A read-only engine for ``url`` (None: ``SCALEBENCH_DATABASE_URL``), for the commands
    that only read (``report``, ``export``, ``prices list``): it creates no file or folder,
    and reads a SQLite file that cannot be written (see
    :func:`results_db.database.readonly_url`). A SQLite file that does not exist is
    refused naming it."""
    from results_db.database import readonly_engine, sqlite_file

    url = url or config.database_url()
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise CommandError(
            f"database: there is no results database at {path}; this command only reads "
            "(run or ingest a sweep first, or give --database)"
        )
    return readonly_engine(url, once=True)


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision``: ``head`` or one of this code's
    revisions by its id. Anything else (Alembic's relative forms such as ``0009@+3``, which
    it may read as another revision) is refused naming it before the database is touched,
    and so is a revision Alembic cannot reach from where the database is."""
    from alembic.util import CommandError as AlembicError

    from results_db.database import revisions
    from results_db.database import upgrade as migrate

    known = revisions()
    if revision != "head" and revision not in known:
        raise CommandError(
            f"revision: {revision[:40]!r} is not a schema revision of this scalebench; use "
            f"head or one of {', '.join(known)}"
        )
    try:
        migrate(url, revision)
    except AlembicError as exc:
        raise CommandError(f"revision: {exc}") from None


def printed(line: str) -> None:
    """Progress to standard output, at once (an Airflow task's log shows it as it comes)."""
    print(line, flush=True)


def close_vanished_sweeps(root: Path, say: Callable[[str], None] = printed) -> None:
    """Close the sweeps at ``root`` (a local folder) whose command line was killed, telling
    ``say`` which (see :func:`scalebench.manifest.close_vanished`)."""
    from scalebench import manifest

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
    from results_db.ingest import ingest_location
    from scalebench.manifest import as_closed_if_vanished

    tell = say or (lambda line: None)
    remote = check_location(location)
    if not remote and not read_only:
        close_vanished_sweeps(Path(location), tell)  # sweeps whose runner died
    settle = None
    if not remote and read_only:

        def settle(sweep: Any, sweep_path: str) -> Any:
            return as_closed_if_vanished(sweep, Path(sweep_path))

    upgrade(url)
    engine = engine_for(url)
    try:
        report = ingest_location(engine, location, tell, only, replace, settle)
    except FileNotFoundError as exc:
        raise CommandError(f"location: {_os_reason(exc)}") from None
    except OSError as exc:
        if not remote:
            raise
        raise CommandError(f"location: cannot read {location}: {_os_reason(exc)}") from None
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
    from traceback import walk_tb

    return any("/fsspec/" in frame.f_code.co_filename for frame, _ in walk_tb(exc.__traceback__))


def _os_reason(exc: OSError) -> str:
    """What an ``OSError`` says, as words: its reason and the path it concerns, without
    the ``[Errno n]`` of its repr."""
    if not exc.strerror:
        return str(exc)
    return exc.strerror + (f" ({exc.filename})" if exc.filename else "")


def official_result(run: Any) -> str:
    """A run in the words of the published results."""
    where = f"{run.world_size} worker(s), {run.backend}, repeat {run.repeat + 1}"
    if run.goal_metric is None:
        return f"{run.id}: {run.status} ({where})"
    target = f"{run.goal_target:g}% Top 1 Validation Accuracy"
    if run.goal_metric != "top1_accuracy":
        target = f"{run.goal_metric} {run.goal_target:g}"
    if run.goal_reached:
        return (
            f"{target} reached in {run.time_to_accuracy_s:.1f} s, compute {run.compute_s:.1f} s, "
            f"communication {run.communication_s:.1f} s ({where})"
        )
    return f"{target} not reached: {run.status} after {run.epochs} epoch(s) ({where})"


def export(url: str | None, sweep_id: str, fmt: str, out: Path) -> list[Path]:
    """Write a sweep's runs, evaluations and steps as CSV or Parquet, plus its official results;
    a training sweep also gets ``scaling``: per network profile and worker count, the time to
    accuracy by MLPerf's rule (empty when too few repeats reached the goal), the repeats it
    rests on, its spread and the speedups, with the same words as the tables."""
    from results_db.queries.export import iter_export_frames
    from results_db.queries.sweeps import sweep_runs

    if fmt not in ("csv", "parquet"):
        raise CommandError(f"format: must be csv or parquet, got {fmt!r}")
    if out.exists() and not out.is_dir():
        raise CommandError(f"out: {out} is a file; give the folder the exports go to")
    engine = reader_for(url)
    written = []
    with engine.connect() as conn:
        runs = sweep_runs(conn, sweep_id)
        if not runs:
            raise CommandError(f"sweep: no runs of sweep {sweep_id!r} in the database")
        inside(out, f"{sweep_id}-official.txt")  # before anything is written
        out.mkdir(parents=True, exist_ok=True)
        frames = list(iter_export_frames(conn, sweep_id, [r.id for r in runs]))
        if any(r.goal_metric is not None for r in runs):
            frames.append(("scaling", scaling_frame(conn, sweep_id)))
        try:
            for name, frame in frames:
                path = inside(out, f"{sweep_id}-{name}.{fmt}")
                written.append(path)
                if fmt == "csv":
                    frame.to_csv(path, index=False)
                else:
                    frame.to_parquet(path, index=False)
            official = inside(out, f"{sweep_id}-official.txt")
            written.append(official)
            text = "\n".join(official_result(r) for r in runs) + "\n"
            official.write_text(text, encoding="utf-8")
        except OSError as exc:  # a full disk or a quota, also when a file is closed
            for path in written:  # no export is left half-written
                path.unlink(missing_ok=True)
            raise CommandError(f"out: cannot write {written[-1]}: {_os_reason(exc)}") from None
    engine.dispose()
    return written


def inside(out: Path, name: str) -> Path:
    """``out / name``, refused unless it is a file directly in ``out``: a name from the
    database (a sweep id) must not climb out of the folder the exports were asked into."""
    path = out / name
    if len(Path(name).parts) != 1 or path.resolve().parent != out.resolve():
        raise CommandError(
            f"sweep: {name[:80]!r} would be written outside --out {out}; a sweep id is one "
            "file name (letters, digits, '.', '_', '-')"
        )
    return path


def scaling_frame(conn: Any, sweep_id: str) -> Any:
    """The sweep's per-configuration results as a DataFrame: ``network``, the fields of
    :class:`~results_db.analytics.ScalingRow` (seconds) and ``time_to_accuracy``, the
    tables' text ("41.20 ±1.30 (3 repeats)", "1 of 3 reached the goal")."""
    import dataclasses

    import pandas as pd

    from results_db.analytics import time_to_accuracy_text
    from results_db.queries.sweeps import scaling_by_network

    return pd.DataFrame(
        [
            {
                "network": network,
                **dataclasses.asdict(row),
                "time_to_accuracy": time_to_accuracy_text(row),
            }
            for network, row in scaling_by_network(conn, sweep_id)
        ]
    )


PRICE_COLUMNS = ("kind", "name", "regular_per_hour", "preemptible_per_hour", "source", "valid_from")


# What the price table holds (results_db.models.Price): names of up to 100 characters and
# dollars per hour as NUMERIC(12, 4); both databases are refused the same values.
MAX_PRICE_NAME = 100
MAX_PRICE_PER_HOUR = 99_999_999
PRICE_PLACES = 4
PRICE_STEP = Decimal(1).scaleb(-PRICE_PLACES)  # 0.0001 dollars per hour


def price_values(raw: dict[str, str], where: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if raw.get("kind") not in ("instance", "gpu"):
        raise CommandError(f"{where}kind: must be instance or gpu, got {raw.get('kind')!r}")
    name = (raw.get("name") or "").strip()
    if not name:
        raise CommandError(f"{where}name: must not be empty")
    if len(name) > MAX_PRICE_NAME:
        raise CommandError(f"{where}name: at most {MAX_PRICE_NAME} characters, got {len(name)}")
    if not name.isprintable():  # a line end, a tab, a NUL: the table and the CSVs would break
        raise CommandError(f"{where}name: must be one line of printable text, got {name!r}")
    values["kind"], values["name"] = raw["kind"], name
    for field in ("regular_per_hour", "preemptible_per_hour"):
        try:
            price = Decimal(str(raw[field]).strip())
        except (KeyError, TypeError, ValueError, ArithmeticError):
            raise CommandError(
                f"{where}{field}: must be dollars per hour, got {raw.get(field)!r}"
            ) from None
        if not price.is_finite() or not 0 <= price <= MAX_PRICE_PER_HOUR:
            raise CommandError(
                f"{where}{field}: must be between 0 and {MAX_PRICE_PER_HOUR:g} dollars per "
                f"hour, got {raw[field]!r}"
            )
        if price != price.quantize(PRICE_STEP):  # each database would round it its own way
            raise CommandError(
                f"{where}{field}: at most {PRICE_PLACES} decimal places (the price table keeps "
                f"dollars per hour to {PRICE_STEP}), got {raw[field]!r}"
            )
        values[field] = price.quantize(PRICE_STEP)
    try:
        valid_from = datetime.fromisoformat(raw["valid_from"])
        # One instant on both databases (SQLite keeps wall times): in UTC, within years 1-9999.
        valid_from = (
            valid_from.astimezone(UTC) if valid_from.tzinfo else valid_from.replace(tzinfo=UTC)
        )
    except (KeyError, TypeError, ValueError, OverflowError):
        raise CommandError(
            f"{where}valid_from: must be a date (YYYY-MM-DD) or a time in years 1 to 9999 "
            f"(UTC), got {str(raw.get('valid_from'))[:60]!r}"
        ) from None
    values["valid_from"] = valid_from
    values["source"] = raw.get("source") or "entered by hand"
    if "\x00" in values["source"]:  # PostgreSQL's text cannot hold it; SQLite's would
        raise CommandError(f"{where}source: must not hold a NUL character")
    return values


def set_prices(url: str | None, rows: list[dict[str, Any]]) -> int:
    """Insert or replace prices keyed by (kind, name, valid_from); returns how many."""
    from results_db.maintenance import store_prices

    engine = engine_for(url)
    count = store_prices(engine, rows)
    engine.dispose()
    return count


def load_price_file(path: Path) -> list[dict[str, Any]]:
    """Read a price CSV; its header names the columns of :data:`PRICE_COLUMNS`."""
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise CommandError(f"file: {path} {what}")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            try:
                missing = set(PRICE_COLUMNS) - set(reader.fieldnames or ()) - {"source"}
                if missing:
                    columns = ", ".join(sorted(missing))
                    raise CommandError(f"file: {path} lacks column(s) {columns}")
                return [
                    price_values(row, f"{path.name} line {n}: ") for n, row in enumerate(reader, 2)
                ]
            except csv.Error as exc:  # a field over the csv module's limit, a bad quote
                line = reader.line_num
                raise CommandError(
                    f"file: {path}: not CSV the price table reads after line {line} ({exc})"
                ) from None
    except UnicodeDecodeError:
        raise CommandError(f"file: {path} is not UTF-8 text") from None


ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def grant_readonly(url: str | None, role: str, password: str | None) -> None:
    """Create (if needed) a PostgreSQL login that can only read the results tables."""
    from results_db.maintenance import NotReadOnly, grant_readonly_role

    if not ROLE_NAME.match(role):
        raise CommandError(f"role: {role!r} is not a plain lower-case PostgreSQL name")
    engine = engine_for(url)
    if engine.dialect.name != "postgresql":
        raise CommandError("database: read-only roles exist on PostgreSQL only")
    try:
        grant_readonly_role(engine, role, password)
    except NotReadOnly as exc:
        raise CommandError(f"role: {exc}") from None
    finally:
        engine.dispose()


def check_regressions(url: str | None, sweep_id: str, rule: Rule = RULE) -> list[Any]:
    """Detect, store and print the regressions of a nightly sweep; return every finding."""
    from results_db import regressions as detector
    from results_db.queries.sweeps import sweep_info

    engine = engine_for(url)
    with engine.begin() as conn:
        if sweep_info(conn, sweep_id) is None:
            engine.dispose()
            raise CommandError(f"sweep: no sweep {sweep_id!r} in the results database")
        findings = detector.detect(conn, sweep_id, rule)
        detector.record(conn, sweep_id, findings)
    engine.dispose()
    if not findings:
        print(f"{sweep_id}: not enough earlier scheduled sweeps of this configuration to compare")
    for finding in findings:
        print(describe_finding(finding))
    return findings


def describe_finding(f: Any) -> str:
    """One line per finding, e.g. ``REGRESSION   2 worker(s) time_to_accuracy_s: 12 vs ...``."""
    verdict = "REGRESSION" if f.flagged else "ok"
    left_out = f"; {f.left_out}" if getattr(f, "left_out", "") else ""
    if f.latest_mean is None:
        return f"{verdict:10s} {f.world_size:3d} worker(s) {f.metric}: {f.reason}{left_out}"
    return (
        f"{verdict:10s} {f.world_size:3d} worker(s) {f.metric}: {f.latest_mean:.4g} vs "
        f"baseline {f.baseline_mean:.4g} ({f.change:+.1%} worse, p={f.p_value:.3g}, "
        f"{f.latest_runs} vs {f.baseline_runs} runs{left_out})"
    )


# The longest baseline a comparison may ask for: far more scheduled sweeps than years hold.
MAX_WINDOW = 10_000


def regression_rule(window: int, alpha: float, min_change: float) -> Rule:
    """The detector's rule from the command line's options, each refused by name when no
    comparison can use it: ``window`` 1 to :data:`MAX_WINDOW` earlier sweeps, ``alpha`` a
    significance level between 0 and 1, ``min_change`` a finite relative change ≥ 0."""
    if not 1 <= window <= MAX_WINDOW:
        raise CommandError(f"window: must be from 1 to {MAX_WINDOW} earlier sweeps, got {window}")
    if not 0 < alpha < 1:  # NaN fails this too
        raise CommandError(f"alpha: must be a significance level between 0 and 1, got {alpha}")
    if not 0 <= min_change < math.inf:
        raise CommandError(
            f"min_change: must be a relative change of 0 or more (0.05 = 5 %), got {min_change}"
        )
    return Rule(window=window, alpha=alpha, min_change=min_change)


def regressions(url: str | None, sweep_id: str, rule: Rule) -> int:
    """Detect and store regressions of a nightly sweep; exit status 1 when any is flagged."""
    findings = check_regressions(url, sweep_id, rule)
    return 1 if any(f.flagged for f in findings) else 0


class NoResult(RuntimeError):
    """A sweep in which no configuration produced a result."""


def sweep_outcome(sweep_id: str, url: str | None = None) -> str:
    """A loaded sweep's outcome: succeeded, partial, failed, cancelled or running."""
    from results_db.queries import sweeps as sweeps_queries

    engine = engine_for(url)
    with engine.connect() as conn:
        outcome = sweeps_queries.sweep_outcome(conn, sweep_id)
    engine.dispose()
    return str(outcome)


def summarize_sweep(sweep_id: str, url: str | None = None) -> list[dict[str, Any]]:
    """The sweep's figures as plain rows, printed as a table: per network profile and worker
    count for a training sweep, per message size for an all-reduce sweep.

    Raises :class:`NoResult` when no run of the sweep succeeded, so that a
    scheduler marks the sweep failed.
    """
    from dataclasses import asdict

    from results_db.queries.communication import allreduce_summary
    from results_db.queries.sweeps import scaling_by_network, succeeded_runs, sweep_info
    from results_db.report import sweep_report
    from scalebench.tasks import TASKS, AllReduceSpec

    engine = engine_for(url)
    with engine.connect() as conn:
        succeeded = succeeded_runs(conn, sweep_id)
        report = sweep_report(conn, sweep_id)  # LookupError: no such sweep
        info = sweep_info(conn, sweep_id)
        if info is not None and isinstance(TASKS.get(info.task), AllReduceSpec):
            rows = [asdict(r) for r in allreduce_summary(conn, sweep_id)]
        else:
            rows = [
                {"network": network, **asdict(row)}
                for network, row in scaling_by_network(conn, sweep_id)
            ]
        print(report)
    engine.dispose()
    if not succeeded:
        raise NoResult(f"sweep {sweep_id}: no configuration produced a result")
    return rows


SCHEMA_MISSING = re.compile(r"no such (table|column)|(relation|column) \S+ does not exist")
SUPPORTED_DATABASES = "sqlite:///<file> or postgresql+psycopg2://<user>@<host>:<port>/<database>"


def database_problem(exc: BaseException) -> str | None:
    """One line for a results database that cannot be used, or None for any other error.

    Shown instead of a traceback (``SCALEBENCH_DEBUG=1`` shows the traceback).
    """
    from traceback import walk_tb

    from sqlalchemy import exc as db

    from results_db.database import NoSuchFolder

    if isinstance(exc, NoSuchFolder):
        return f"database: {exc} (--database or SCALEBENCH_DATABASE_URL)"
    if isinstance(exc, db.ArgumentError | db.NoSuchModuleError):
        return (
            f"database: not a results database URL ({exc.args[0].splitlines()[0]}); use "
            f"{SUPPORTED_DATABASES} (--database or SCALEBENCH_DATABASE_URL)"
        )
    if isinstance(exc, ValueError) and any(  # the URL's parser, on a port or host it cannot read
        frame.f_code.co_filename.endswith("sqlalchemy/engine/url.py")
        for frame, _ in walk_tb(exc.__traceback__)
    ):
        return (
            f"database: not a results database URL ({exc}); use {SUPPORTED_DATABASES} "
            "(--database or SCALEBENCH_DATABASE_URL)"
        )
    if isinstance(exc, ModuleNotFoundError) and any(  # a dialect importing its driver
        "sqlalchemy" in frame.f_code.co_filename for frame, _ in walk_tb(exc.__traceback__)
    ):
        return (
            f"database: this URL needs a driver scalebench does not install ({exc.name}); "
            f"use {SUPPORTED_DATABASES} (--database or SCALEBENCH_DATABASE_URL)"
        )
    if isinstance(exc, db.DBAPIError) and SCHEMA_MISSING.search(str(exc.orig or exc)):
        return (
            "database: the results database has no scalebench schema, or an older one "
            "than this scalebench reads; run `scalebench db upgrade` (with the same "
            "--database or SCALEBENCH_DATABASE_URL)"
        )
    if isinstance(exc, db.OperationalError):
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        if reason.endswith("timeout expired"):
            from results_db.database import CONNECT_TIMEOUT_S

            reason += (
                f" (no answer within the connect timeout: {CONNECT_TIMEOUT_S} s, unless "
                "?connect_timeout=<seconds> in the URL sets another)"
            )
        return (
            f"database: cannot use the results database: {reason}. Is the server running "
            "and the URL right (--database or SCALEBENCH_DATABASE_URL)?"
        )
    if isinstance(exc, db.DatabaseError):  # e.g. SQLite: "file is not a database"
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        return (
            f"database: cannot read the results database: {reason}. Does the URL name a "
            "scalebench database (--database or SCALEBENCH_DATABASE_URL)?"
        )
    return None


def load_quietly(url: str, sweep_dir: str | Path, run_id: str) -> None:
    """Load what the ranks of run ``run_id`` wrote so far, saying nothing (its manifest entry
    has no verdict yet, so the run reads as ``running``); a later load completes it without
    duplicates."""
    ingest(url, str(sweep_dir), only=[run_id], replace=True, say=None)


def refit(url: str | None, sweep_id: str | None = None) -> int:
    """Fit the ring model again to every all-reduce configuration of one sweep (or of every
    sweep with all-reduce curves), store the fits and print them."""
    from results_db.fits import refit as refit_sweeps
    from results_db.report import fit_table

    engine = engine_for(url)
    try:
        if sweep_id is not None:
            from results_db.queries.sweeps import sweep_info

            with engine.connect() as conn:
                if sweep_info(conn, sweep_id) is None:
                    raise CommandError(f"sweep: no sweep {sweep_id!r} in the results database")
        done = refit_sweeps(engine, sweep_id)
    finally:
        engine.dispose()
    for sweep, fits in done.items():
        print(f"{sweep}: {len(fits)} fit(s)")
        if fits:
            print(fit_table(fits))
    if not done:
        print("no sweep with all-reduce curves to fit")
    return 0


def _world_sizes(text: str) -> list[int]:
    """Worker counts as ``scalebench run`` reads them (ASCII digits, 1 to the largest group)."""
    from scalebench.request import FIELD, InvalidParameter

    try:
        return list(FIELD["workers"].read(text))
    except InvalidParameter as exc:
        raise CommandError(str(exc)) from None


def _sweep_ids(text: str) -> list[str]:
    """Sweep ids from a comma-separated argument, in order, each once. An id holds no white
    space, so one with a space or a line end is refused as written, as every other command
    that looks a sweep up by id would find no such sweep."""
    spaced = [part for part in text.split(",") if part != "".join(part.split())]
    if spaced:
        raise CommandError(
            f"sweep: {spaced[0][:60]!r} holds white space, which no sweep id does; separate "
            "ids by commas alone"
        )
    ids = list(dict.fromkeys(part for part in text.split(",") if part))
    if not ids:
        raise CommandError(f"a sweep id, or several separated by commas, got {text!r}")
    return ids


def project(
    url: str | None,
    training_sweep: str,
    allreduce_sweep: str,
    workers: str | None = None,
    networks: str | None = None,
    instance: str = "n1-standard-4",
    gpu: str | None = "nvidia-tesla-t4",
) -> int:
    """Print the projection of a training sweep to ``workers`` on ``networks`` (default: the
    profiles the sweep measured) with the all-reduce fits of ``allreduce_sweep``, then the
    leave-one-out checks of the model on the sweep's measured points: the view the dashboard
    draws (:func:`results_db.queries.projection.projection_view`), with what it would leave
    out refused naming it.

    Both sweep arguments may name several sweeps, comma-separated: training sweeps of one task
    and configuration (say, one on host and one on 10mbit) are projected as one, and the fits
    of several Task 0 sweeps are pooled (where two fit the same configuration, the first
    named wins)."""
    from results_db import projection
    from results_db.queries.projection import projection_view
    from results_db.report import leave_one_out_table, projection_table
    from scalebench.network import BadProfile, parse_profiles

    sizes = (
        _world_sizes(workers) if workers is not None else list(projection.DEFAULT_PROJECTED_WORKERS)
    )
    try:
        profiles = None if networks is None else [p.name for p in parse_profiles(networks)]
    except BadProfile as exc:
        raise CommandError(f"network: {exc}") from None
    trained, fitted = _sweep_ids(training_sweep), _sweep_ids(allreduce_sweep)
    engine = engine_for(url)
    try:
        with engine.connect() as conn:
            view = projection_view(conn, trained, fitted, sizes, instance, gpu, profiles, True)
    except projection.ProjectionRefused as exc:
        raise CommandError(str(exc)) from None
    finally:
        engine.dispose()
    sweep, prices = view.sweep, view.prices
    assert sweep is not None  # strict: a sweep that cannot be read is refused
    print(
        f"projection of {training_sweep} ({sweep.task}, {sweep.backend} on {sweep.device}, "
        f"{sweep.variant}) with the all-reduce fits of {allreduce_sweep}"
    )
    print(
        "step = compute + gradient packing + all-reduce (ring model at the gradient's "
        f"{sweep.points[0].gradient_bytes:,} bytes) + wait for the slowest rank; per-worker "
        "batch fixed, so an unmeasured worker count takes the nearest measured one's compute"
    )
    if prices is None:
        print(f"no price for {instance}" + (f" and {gpu}" if gpu else "") + ": cost left out")
    else:
        print(
            f"cost at {instance}" + (f" + {gpu}" if gpu else "") + f" per worker: "
            f"${prices.regular_per_hour:.4g}/h regular, ${prices.preemptible_per_hour:.4g}/h "
            "preemptible"
        )
    print()
    print(projection_table(view.points))
    print("\nleave-one-out: each measured point predicted from the others")
    print(
        leave_one_out_table(view.held)
        if view.held
        else "no measured point could be predicted from others"
    )
    print(
        "\nleaving out its worker count: each measured point predicted without any point of "
        "its worker count (compute, packing and steps from another worker count)"
    )
    print(
        leave_one_out_table(view.across)
        if view.across
        else "no measured point could be predicted from another worker count"
    )
    return 0
