"""The dashboard's only door to the results database: read-only, cached per sweep.

A :class:`Source` holds a read-only engine (SQLite opened with ``mode=ro``;
PostgreSQL sessions with ``default_transaction_read_only``) and calls the
named queries of :mod:`results_db.queries`. Figures of one sweep are cached
under the sweep's *version* (outcome, run count, newest ingest time): ingest
replaces runs whole and stamps them, so a cached figure is reused until the
sweep changes and the heavy per-step aggregates of a finished sweep are read
once per process.

Its one write is a nightly finding's triage (:meth:`Source.triage`, from the Nightly page):
a state and a note, through an engine of its own (:mod:`dash_app.nightly_data`).

Database trouble (no file yet, no tables yet, server down) becomes a
:class:`DataUnavailable` whose message says what to do; pages show it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from inspect import signature
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, SQLAlchemyError

from dash_app import nightly_data, stacks_data
from results_db.database import readonly_engine
from results_db.queries import communication as communication_queries
from results_db.queries import costs as costs_queries
from results_db.queries import nightly as nightly_queries
from results_db.queries import paired_nights as paired_queries
from results_db.queries import projection as projection_queries
from results_db.queries import runs as runs_queries
from results_db.queries import sweeps as sweeps_queries
from results_db.service import nightly as nightly_service
from results_db.service.engines import CommandError
from results_db.service.stacks import StackReport
from scalebench.config import BadSetting

T = TypeVar("T")

QUICKSTART = "./scripts/quickstart.sh"
FIRST_SWEEP = "scalebench run task1a-resnet20-cifar10 --light --workers 1,2"
CACHE_ENTRIES = 256
HEALTH_TTL_S = 5.0  # how long a database check is trusted before pages check again


class DataUnavailable(RuntimeError):
    """The results database cannot be read; the message is meant for the page."""


class BadInput(ValueError):
    """A query argument no page sends: a callback was given inputs of the wrong kind."""


def check_arguments(query: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Raise :class:`BadInput` for an argument a query never takes from a page: ids and
    choices are text or numbers, or lists of them."""

    def plain(value: Any) -> bool:
        return value is None or isinstance(value, str | int | float)

    name = getattr(query, "__name__", str(query))
    texts = _text_parameters(query) if callable(query) else ()
    named = [*zip(texts, args, strict=False), *kwargs.items()]
    for parameter, value in named:
        if parameter and parameter in texts and value is not None and not isinstance(value, str):
            raise BadInput(f"{name}: {parameter} must be text, got a {type(value).__name__}")
    for value in (*args, *kwargs.values()):
        if plain(value) or (isinstance(value, list | tuple) and all(map(plain, value))):
            continue
        raise BadInput(f"{name} was given a {type(value).__name__} ({str(value)[:60]})")


@functools.lru_cache(maxsize=256)
def _text_parameters(query: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters of ``query`` after its connection, in order, annotated as text (``str``
    or ``str | None``); the others as empty names, so positions still line up."""
    parameters = list(signature(query).parameters.values())[1:]
    return tuple(p.name if str(p.annotation) in ("str", "str | None") else "" for p in parameters)


class Source:
    """Read-only access to one results database, with a small per-sweep cache."""

    def __init__(self, database_url: str) -> None:
        self.url = database_url
        self.engine: Engine | None = None
        self.configuration_problem: str | None = None  # a URL no engine can be made of
        try:
            self.engine = readonly_engine(database_url)
        except BadSetting as exc:
            self.configuration_problem = str(exc)
        except (ArgumentError, NoSuchModuleError, ModuleNotFoundError, ValueError) as exc:
            self.configuration_problem = (
                f"SCALEBENCH_DATABASE_URL is not a results database URL this dashboard can "
                f"open ({str(exc).splitlines()[0][:200]}); use sqlite:///<file> or "
                "postgresql+psycopg2://<user>@<host>:<port>/<database>."
            )
        self._cache: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        self._health: tuple[float, str | None] = (-HEALTH_TTL_S, None)

    def describe(self) -> str:
        """The database URL without its password."""
        try:
            return make_url(self.url).render_as_string(hide_password=True)
        except ArgumentError:
            return "(an unreadable URL)"

    def dispose(self) -> None:
        if self.engine is not None:
            self.engine.dispose()

    def health(self) -> str | None:
        """What keeps the dashboard from reading its database (``None``: nothing), checked
        at most every :data:`HEALTH_TTL_S` seconds: a bad URL, a server that does not
        answer, a database without the results schema."""
        checked_at, problem = self._health
        if time.monotonic() - checked_at < HEALTH_TTL_S:
            return problem
        try:
            with self.connect() as conn:
                sweeps_queries.schema_ready(conn)
            problem = None
        except DataUnavailable as exc:
            problem = str(exc)
        self._health = (time.monotonic(), problem)
        return problem

    # -- plumbing --------------------------------------------------------------------------

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A connection; database errors become :class:`DataUnavailable` with advice."""
        if self.engine is None:
            raise DataUnavailable(self.configuration_problem or "no results database")
        try:
            with self.engine.connect() as conn:
                yield conn
        except (DBAPIError, SQLAlchemyError) as exc:
            raise DataUnavailable(self._advice(exc)) from exc

    def _advice(self, exc: Exception) -> str:
        text = str(getattr(exc, "orig", exc) or exc).strip().splitlines()[0][:200]
        parsed = make_url(self.url)
        if parsed.get_backend_name() == "sqlite":
            path = parsed.database or ""
            if path and not path.startswith("file:") and not Path(path).exists():
                return (
                    f"There is no results database at {path} yet. Run {QUICKSTART}, or "
                    f"`{FIRST_SWEEP}`, then reload this page."
                )
        lowered = text.lower()
        missing_table = "no such table" in lowered or (
            "relation" in lowered and "does not exist" in lowered
        )
        if missing_table and not self._has_sweeps_table():
            return (
                f"The database {self.describe()} has no scalebench tables yet. Run "
                f"`scalebench db upgrade` or `{FIRST_SWEEP}`, then reload this page."
            )
        missing_column = "no such column" in lowered or (
            "column" in lowered and "does not exist" in lowered
        )
        if missing_table or missing_column:  # a table or column a later migration adds
            return (
                f"The database {self.describe()} has an older scalebench schema than this "
                "dashboard reads. Run `scalebench db upgrade` with the same database URL, "
                "then reload this page."
            )
        return f"Cannot read the results database {self.describe()}: {text}"

    def _has_sweeps_table(self) -> bool:
        """Whether the database has the first table of the results schema (then a missing
        table is one a later migration adds)."""
        if self.engine is None:
            return False
        try:
            with self.engine.connect() as conn:
                return inspect(conn).has_table("sweep")
        except (DBAPIError, SQLAlchemyError):
            return False

    def per_sweep(self, name: str, sweep_id: str, compute: Callable[[Connection], T]) -> T:
        """``compute(conn)`` for figures of one sweep, cached until the sweep changes."""
        check_arguments(name, (sweep_id,), {})
        with self.connect() as conn:
            key = (name, sweep_id, sweeps_queries.sweep_version(conn, sweep_id))
            with self._lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    return self._cache[key]
            value = compute(conn)
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return value

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def call(self, query: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``query(conn, *args, **kwargs)`` on a fresh connection, uncached; an argument
        no page sends (a dict, a list of lists) is refused with :class:`BadInput`."""
        check_arguments(query, args, kwargs)
        with self.connect() as conn:
            return query(conn, *args, **kwargs)

    # -- what the pages read ---------------------------------------------------------------

    def sweeps(
        self, task: str | None = None, trigger: str | None = None, limit: int = 500
    ) -> list[sweeps_queries.SweepInfo]:
        return self.call(sweeps_queries.sweep_infos, task=task, trigger=trigger, limit=limit)

    def sweep(self, sweep_id: str) -> sweeps_queries.SweepInfo | None:
        return self.call(sweeps_queries.sweep_info, sweep_id)

    def with_results(self, sweep_ids: Sequence[str]) -> set[str]:
        """Those of ``sweep_ids`` with at least one succeeded run."""
        return self.call(sweeps_queries.sweeps_with_results, sweep_ids)

    def latest_per_task(self, trigger: str | None = None) -> list[sweeps_queries.SweepInfo]:
        return self.call(sweeps_queries.latest_sweep_per_task, trigger)

    def baseline_of(self, sweep_id: str) -> str | None:
        return self.call(sweeps_queries.baseline_of, sweep_id)

    def tasks(self) -> list[str]:
        return self.call(sweeps_queries.task_names)

    def networks(self, sweep_id: str) -> list[str]:
        """The sweep's network profiles, in the order its request names them."""
        return self.per_sweep(
            "networks", sweep_id, lambda c: sweeps_queries.sweep_networks(c, sweep_id)
        )

    def scaling(self, sweep_id: str, network: str | None = None) -> list[Any]:
        return self.per_sweep(
            f"scaling:{network}", sweep_id, lambda c: sweeps_queries.scaling(c, sweep_id, network)
        )

    def sweep_runs(self, sweep_id: str) -> list[runs_queries.RunInfo]:
        return self.per_sweep(
            "runs", sweep_id, lambda c: runs_queries.run_infos(c, sweep_id=sweep_id)
        )

    def phases(
        self, sweep_id: str, network: str | None = None
    ) -> list[communication_queries.PhaseRow]:
        return self.per_sweep(
            f"phases:{network}",
            sweep_id,
            lambda c: communication_queries.phase_means(c, sweep_id, network),
        )

    def phase_totals(
        self, sweep_id: str, network: str | None = None
    ) -> list[communication_queries.PhaseRow]:
        return self.per_sweep(
            f"phase_totals:{network}",
            sweep_id,
            lambda c: communication_queries.phase_totals(c, sweep_id, network),
        )

    def allreduce(self, sweep_id: str) -> list[communication_queries.AllReduceRow]:
        return self.per_sweep(
            "allreduce", sweep_id, lambda c: communication_queries.allreduce_curves(c, sweep_id)
        )

    def run_allreduce(self, sweep_id: str, run_id: str) -> list[communication_queries.AllReduceRow]:
        """One all-reduce run's curves (latency in seconds, bandwidths in bytes per second)."""
        return self.call(communication_queries.allreduce_curves, sweep_id, run_id)

    def allreduce_fits(self, sweep_id: str) -> list[Any]:
        """The ring model's fits of an all-reduce sweep (``results_db.projection.RingFit``)."""
        return self.per_sweep(
            "fits", sweep_id, lambda c: projection_queries.allreduce_fits(c, sweep_id)
        )

    def projection(
        self,
        sweep_ids: Sequence[str],
        allreduce_sweeps: Sequence[str],
        instance: str | None = None,
        gpu: str | None = None,
    ) -> Any:
        """Training sweeps of one task and configuration projected with all-reduce sweeps'
        fits, costed at ``instance`` (and ``gpu``) per worker where one is named
        (``results_db.queries.projection.ProjectionView``); uncached, as it reads sweeps
        that change apart."""
        return self.call(
            projection_queries.projection_view,
            list(sweep_ids),
            list(allreduce_sweeps),
            instance=instance,
            gpu=gpu,
        )

    def costs(
        self, sweep_id: str, instance: str, gpu: str | None, network: str | None = None
    ) -> list[costs_queries.CostRow]:
        """Raises :class:`results_db.queries.costs.PriceMissing` when a price is missing."""
        return self.call(costs_queries.costs, sweep_id, instance=instance, gpu=gpu, network=network)

    def prices(self) -> list[costs_queries.PriceRow]:
        return self.call(costs_queries.prices_in_force)

    def running(self) -> list[sweeps_queries.RunProgress]:
        return self.call(sweeps_queries.running_runs)

    def runs(self, **filters: Any) -> list[runs_queries.RunInfo]:
        return self.call(runs_queries.run_infos, **filters)

    def run(self, run_id: str) -> runs_queries.RunInfo | None:
        return self.call(runs_queries.run_info, run_id)

    def events(self, run_id: str) -> list[runs_queries.EventRow]:
        return self.call(runs_queries.run_events, run_id)

    def environments(self, run_id: str) -> list[runs_queries.EnvironmentRow]:
        return self.call(runs_queries.run_environments, run_id)

    def curves(
        self, sweep_id: str, runs: list[runs_queries.RunInfo], points: int = 500
    ) -> dict[str, tuple[list[runs_queries.CurvePoint], list[runs_queries.EvalPoint]]]:
        """Training loss (bucketed to ≤ ``points``) and evaluations of each of ``runs``."""

        def read(conn: Connection) -> dict[str, Any]:
            return {
                run.id: (
                    runs_queries.loss_curve(conn, run.id, points),
                    runs_queries.eval_curve(conn, run.id),
                )
                for run in runs
            }

        key = "curves:" + ",".join(sorted(run.id for run in runs))
        return self.per_sweep(key, sweep_id, read)

    def regressions(self, **filters: Any) -> list[nightly_queries.RegressionRow]:
        return self.call(nightly_queries.regression_flags, **filters)

    def trend(self, task: str, nights: int) -> list[nightly_queries.TrendPoint]:
        return self.call(nightly_queries.nightly_trend, task, nights)

    def stack_report(self, sweep_id: str) -> StackReport:
        """A sweep's stacks, each against its first with 95 % intervals
        (:func:`dash_app.stacks_data.stack_report`; fewer than two stacks: nothing compared),
        cached until the sweep changes; LookupError for a sweep not stored."""
        return self.per_sweep("stacks", sweep_id, lambda c: stacks_data.stack_report(c, sweep_id))

    # -- the paired nightly ----------------------------------------------------------------

    def paired_tasks(self) -> list[str]:
        """The tasks with a paired night, the newest night's first."""
        return self.call(nightly_data.paired_tasks)

    def findings(
        self,
        states: tuple[str, ...] | None = None,
        task: str | None = None,
        finding_id: int | None = None,
    ) -> list[paired_queries.FindingRow]:
        """The paired nightly's findings, newest first night first: of ``states`` (None:
        any), with a series of ``task``, or the one ``finding_id``."""
        return self.call(
            paired_queries.nightly_findings, states=states, task=task, finding_id=finding_id
        )

    def nightly_history(self, task: str) -> list[nightly_service.SeriesHistory]:
        """Every paired series of ``task`` over its nights with the newest reference stack
        (:func:`results_db.service.nightly.nightly_history`, on a read-only engine of its
        own); uncached, as a night may be judged at any time."""
        check_arguments(nightly_service.nightly_history, (task,), {})
        if self.engine is None:
            raise DataUnavailable(self.configuration_problem or "no results database")
        try:
            return nightly_service.nightly_history(self.url, task)
        except CommandError as exc:  # a SQLite file that is not there
            raise DataUnavailable(str(exc)) from exc
        except (DBAPIError, SQLAlchemyError) as exc:
            raise DataUnavailable(self._advice(exc)) from exc

    def triage(self, finding_id: int, state: str, note: str | None) -> str:
        """Store finding ``finding_id``'s triage ``state`` and ``note`` (the dashboard's one
        write, :func:`dash_app.nightly_data.write_triage`); the sentence to show.
        :class:`~dash_app.nightly_data.TriageRefused` says why it was not stored."""
        if self.engine is None:
            raise DataUnavailable(self.configuration_problem or "no results database")
        try:
            return nightly_data.write_triage(self.url, finding_id, state, note)
        except (DBAPIError, SQLAlchemyError) as exc:
            raise DataUnavailable(self._advice(exc)) from exc


def current() -> Source:
    """The :class:`Source` of the app serving this request (set by ``create_app``)."""
    import flask

    return flask.current_app.extensions["scalebench"]
