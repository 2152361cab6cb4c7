"""Shared fixtures: paths and helpers for running real worker groups."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from processor_time import pytest_runtest_protocol  # noqa: F401  SCALEBENCH_TEST_CPU=1
from slow_first import (  # noqa: F401  the scheduler of scripts/test.sh's parallel run
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_xdist_make_scheduler,
)

from scalebench.request import FIELD

REPO = Path(__file__).resolve().parents[1]

# Airflow reads its configuration when first imported: give the test session
# its own home, metadata database and DAG folder before any test imports it.
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="scalebench-airflow-"))
os.environ.update(
    AIRFLOW_HOME=str(AIRFLOW_HOME),
    AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
    AIRFLOW__CORE__LOAD_EXAMPLES="False",
    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
)
# Nothing a test runs may reach the user's embedded settings under ./var/: the results
# database, results and data sets default to a folder of the session's own (for what runs
# outside a test: collection, session fixtures), and every test gets folders of its own
# (``_own_var`` below). A test that needs others sets them again (monkeypatch.setenv).
TEST_VAR = Path(tempfile.mkdtemp(prefix="scalebench-test-var-"))
os.environ.update(
    SCALEBENCH_DATABASE_URL=f"sqlite:///{TEST_VAR / 'scalebench.db'}",
    SCALEBENCH_RESULTS_URI=str(TEST_VAR / "results"),
    SCALEBENCH_DATA_DIR=str(TEST_VAR / "data"),
)
# Requests that name no compile setting run eager here: compiling costs every
# worker process seconds before it starts. The tests of compilation ask for it
# by name (tests/test_engine.py, tests/test_compiled_runs.py).
os.environ["SCALEBENCH_COMPILE"] = "off"

# A shell without job control starts a command put in the background (`./scripts/test.sh &`)
# with SIGINT ignored, and every process it starts inherits that: Python then never raises
# KeyboardInterrupt, and the tests that stop a sweep, an ingest or a duet with Ctrl-C would
# see it ignored. The suite's processes take Ctrl-C again, so that what they start does too
# (a handler, unlike an ignored signal, is reset to the default by exec).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The user's embedded state in this checkout (what the quick start made): the session
# checks that no test added, changed or removed anything there.
USER_VAR = REPO / "var"


# Task 0 at its quick size: float32 sizes up to 1,000 elements, each timed twice (a group of
# seconds, for tests whose point is not the curves' reach): its request fields, and the same as
# command-line options.
TASK0_QUICK: dict[str, Any] = {"max_elements": 1000, "dtype": "float32", "repetitions": 2}
TASK0_QUICK_ARGS: tuple[str, ...] = tuple(
    arg for name, value in TASK0_QUICK.items() for arg in FIELD[name].argv(value)
)


def light_rank_args(task: str, run_dir: Path, *extra: str) -> list[str]:
    """``python -m workers.run`` arguments of a light ``task`` rank on the CPU writing into
    ``run_dir`` (its name the run id), then ``extra``."""
    return [
        "--task",
        task,
        "--light",
        "--results",
        str(run_dir),
        "--run-id",
        run_dir.name,
        "--device",
        "cpu",
        *extra,
    ]


def folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``folder`` (relative path -> (size in bytes, modification
    time in ns); folders have size -1); empty when ``folder`` does not exist."""
    if not folder.exists():
        return {}
    state = {}
    for path in sorted(folder.rglob("*")):
        status = path.lstat()
        size = -1 if path.is_dir() and not path.is_symlink() else status.st_size
        state[str(path.relative_to(folder))] = (size, status.st_mtime_ns)
    return state


def state_changes(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> list[str]:
    """What differs between two :func:`folder_state` readings, one line a path."""
    changes = [f"added {path}" for path in after.keys() - before.keys()]
    changes += [f"removed {path}" for path in before.keys() - after.keys()]
    changes += [
        f"changed {path}" for path in before.keys() & after.keys() if before[path] != after[path]
    ]
    return sorted(changes)


@pytest.fixture(scope="session", autouse=True)
def _user_var_untouched() -> Iterator[None]:
    """Fails the session, loudly, when any test wrote into the checkout's ``var/``."""
    before = folder_state(USER_VAR)
    yield
    changes = state_changes(before, folder_state(USER_VAR))
    if changes:
        pytest.fail(
            f"the tests wrote into the user's {USER_VAR}: "
            + "; ".join(changes[:20])
            + " (every test has its own results, data and database: see _own_var)",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _own_var(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's own results folder, data folder and SQLite results database (the
    ``SCALEBENCH_*`` settings that default to ``./var/``), created when first used; returns
    the folder that holds them."""
    folder = tmp_path_factory.mktemp("var")
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", f"sqlite:///{folder / 'scalebench.db'}")
    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(folder / "results"))
    monkeypatch.setenv("SCALEBENCH_DATA_DIR", str(folder / "data"))
    return folder


@pytest.fixture(scope="session")
def airflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Airflow's metadata database (dag.test needs it), each pytest-xdist process's own:
    migrated once a run (3 s of processor time), by the first process that asks, and
    copied by the others (a file lock, a folder they share)."""
    from filelock import FileLock

    shared = shared_folder(tmp_path_factory, "airflow-db")
    migrated, own = shared / "airflow.db", AIRFLOW_HOME / "airflow.db"
    with FileLock(str(shared / "migrate.lock")):
        if migrated.exists():
            shutil.copyfile(migrated, own)
        else:
            subprocess.run(
                [sys.executable, "-m", "airflow", "db", "migrate"],
                check=True,
                capture_output=True,
                timeout=300,
            )
            shutil.copyfile(own, migrated.with_suffix(".part"))
            migrated.with_suffix(".part").rename(migrated)
    return AIRFLOW_HOME


@pytest.fixture(autouse=True)
def _run_from_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers are started as ``python -m workers.run``: run from the repository root."""
    monkeypatch.chdir(REPO)


@pytest.fixture
def light_env() -> dict[str, str]:
    """Environment for worker processes: one thread each, so two ranks fit two cores."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}


POSTGRES_URL = os.environ.get(
    "SCALEBENCH_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)


@pytest.fixture(scope="session")
def postgres_admin():
    """An AUTOCOMMIT engine on the PostgreSQL server; the tests fail (never skip) without one."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    engine = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {POSTGRES_URL} ({exc.orig}). scripts/test.sh "
            "starts the local server when it can; otherwise start one or set "
            "SCALEBENCH_TEST_POSTGRES_URL."
        )
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def _migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to the newest schema, once a session: every ``engine`` on
    SQLite starts as a copy of it."""
    from results_db.database import upgrade

    path = tmp_path_factory.mktemp("migrated") / "results.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def _migrated_postgres(postgres_admin) -> Iterator[str]:
    """The name of a PostgreSQL database migrated to the newest schema, once a session:
    every ``engine`` on PostgreSQL is created from it as a template (nothing stays connected
    to it, which a template needs)."""
    from sqlalchemy.engine import make_url

    from results_db.scratch import scratch_database

    with scratch_database(POSTGRES_URL, "scalebench_template") as url:
        yield str(make_url(url).database)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of each engine, a SQLite file or a fresh PostgreSQL database: empty, or,
    when the test asks for ``engine`` too, migrated to the newest schema (a copy of one
    migrated once a session: migrating takes a fifth of a second, a copy milliseconds)."""
    migrated = "engine" in request.fixturenames
    if request.param == "sqlite":
        path = tmp_path / "results.db"
        if migrated:
            shutil.copyfile(request.getfixturevalue("_migrated_sqlite"), path)
        yield f"sqlite:///{path}"
        return
    from results_db.scratch import scratch_database

    request.getfixturevalue("postgres_admin")  # a server that answers, or a clear failure
    template = request.getfixturevalue("_migrated_postgres") if migrated else None
    with scratch_database(POSTGRES_URL, "scalebench_test", False, template) as url:
        yield url


@pytest.fixture
def engine(database_url: str):
    """A migrated results database (both engines): ``database_url``'s."""
    from results_db.database import make_engine

    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def one_rank(tmp_path: Path) -> Iterator[None]:
    """This process as rank 0 of a one-rank gloo group (what the training engine runs in)."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


# The MLPerf submitter name the shared light runs' logs carry (tests/test_mlperf_log.py).
MLPERF_ORG = "scalebench tests"


def shared_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder every pytest-xdist process of this run sees (beside their own base folders),
    for a run trained once and read by tests in any process; guard it with a file lock."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def one_epoch_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A real light run of a training task: one rank, its recorded epochs, seed 0, one thread
    (what ``tests/loss_curves.py`` records), with ``SCALEBENCH_MLPERF_ORG`` set so that its
    MLPerf log is a submission's. Each task trains once a test session, even across
    pytest-xdist's processes (a file lock, a folder they share); the tests that read it (the
    loss curve, the MLPerf log) get its folder. Read it; never write into it."""
    from filelock import FileLock
    from loss_curves import run_one_epoch

    shared = shared_folder(tmp_path_factory, "one-epoch-runs")
    settings = {"SCALEBENCH_MLPERF_ORG": MLPERF_ORG}

    def run(task_id: str) -> Path:
        run_dir = shared / task_id
        with FileLock(str(shared / f"{task_id}.lock")):
            if not (shared / f"{task_id}.done").exists():
                run_one_epoch(task_id, run_dir, settings=settings)
                (shared / f"{task_id}.done").touch()
        return run_dir

    return run


@dataclass(frozen=True)
class CliSweep:
    """A light Task 2a sweep at 1 and 2 workers run by ``scalebench run`` into SQLite."""

    status: int  # the command's exit status
    out: str  # what it printed
    stored_before_each_group: list[list[list[Any]]]  # (world_size, status) rows stored
    results: Path
    database: str

    @property
    def sweep_dir(self) -> Path:
        (sweep_dir,) = self.results.iterdir()
        return sweep_dir

    def run_dir(self, world_size: int) -> Path:
        (run_dir,) = self.sweep_dir.glob(f"*-w{world_size}-r1")
        return run_dir


@pytest.fixture(scope="session")
def light_2a_cli_sweep(tmp_path_factory: pytest.TempPathFactory) -> CliSweep:
    """``scalebench run task2a-logreg-epsilon --light --workers 1,2 --repeats 1`` into SQLite,
    once a session (one file lock across pytest-xdist's processes, as ``one_epoch_run``):
    the command line's test reads its table and database, the logistic regression's its
    2-worker run to the goal. It records what the database held as each group started (the
    dashboard's view: each group is loaded as it ends). Read it; never write into it."""
    import contextlib
    import io
    import json

    from filelock import FileLock

    import operators.launcher
    from cli import main as cli
    from results_db.database import make_engine

    shared = shared_folder(tmp_path_factory, "cli-sweep")
    results, database = shared / "results", f"sqlite:///{shared / 'results.db'}"
    done = shared / "done.json"
    with FileLock(str(shared / "sweep.lock")):
        if not done.exists():
            stored: list[list[list[Any]]] = []
            real_launcher_for = operators.launcher.launcher_for

            def launcher_for(group, **kwargs):  # type: ignore[no-untyped-def]
                from sqlalchemy import text
                from sqlalchemy.exc import OperationalError

                engine = make_engine(database)
                with engine.connect() as conn:
                    try:
                        rows = conn.execute(text("SELECT world_size, status FROM run")).all()
                    except OperationalError:  # no schema before the first load
                        rows = []
                engine.dispose()
                stored.append(sorted([r[0], r[1]] for r in rows))
                return real_launcher_for(group, **kwargs)

            printed = io.StringIO()
            with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
                patch.setenv("OMP_NUM_THREADS", "1")
                patch.setattr(operators.launcher, "launcher_for", launcher_for)
                status = cli.main(
                    [
                        *("run", "task2a-logreg-epsilon", "--light", "--workers", "1,2"),
                        *("--repeats", "1", "--results", str(results), "--database", database),
                    ]
                )
            done.write_text(json.dumps([status, printed.getvalue(), stored]))
    status, out, stored = json.loads(done.read_text())
    return CliSweep(status, out, stored, results, database)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for this test (tests/small_disk.py)."""
    from tests.small_disk import mounted

    with mounted(tmp_path) as mount:
        yield mount
