"""Real Airflow, real endings: run the scenarios a user meets under a running Airflow and
check, twice a second, that the results database tells the truth at every moment.

It starts what ``airflow standalone`` starts (api-server, scheduler, dag-processor and
triggerer, with the LocalExecutor), each as its own process so that the scheduler can be
killed and started again. Airflow's metadata live in a scratch PostgreSQL database (the
LocalExecutor runs tasks side by side); scalebench's results in SQLite, all under one
temporary folder. The scenarios, each a real DAG run triggered through the REST API:

1. ``success``: light Task 2a at 1 and 2 workers;
2. ``refusals``: a conf the form's schema refuses (HTTP 400 naming the field, no run), and one
   ``validate`` refuses (the run fails; the task log's first error line is the refusal);
3. ``mark failed``: light Task 1a, 3 repeats, the run marked failed while the second trains;
4. ``scheduler killed``: the scheduler killed (SIGKILL) while a group trains, and started again;
5. ``clear and rerun``: the ``success`` run's 1-worker group and its teardowns cleared and run
   again;
6. ``nightly``: ``scalebench_nightly``, its suite shrunk to light Task 2a at 1 worker;
7. ``two sweeps, 2 slots``: two sweeps at 1 and 2 workers at once on a pool of 2 slots;
8. ``UI endpoints``: the REST and UI endpoints the web UI reads for the runs above;
9. ``stop a repeat``: light Task 1a at 2 workers, 3 repeats, on a pool of 2 slots; about 20 s
   after its ranks appear, the running repeat's task instance is PATCHed ``failed`` (as a person
   marks one task failed): the other two repeats never start, never more than 2 ranks at once
   (light Task 2a, where this was first seen, now reaches its goal in seconds at 2 workers,
   before anyone could stop it);
10. ``duet``: light Task 2a at 1 and 2 workers, two stacks in 2 paired rounds, one thread a
    rank: each 1-worker round is one task running both arms at once (their runs overlap), each
    2-worker arm a task of its own;
11. ``stop a duet``: light Task 1a at 1 worker, the same stacks: the running duet's task is
    PATCHed ``failed``; both arms are cancelled, the next round skipped, no rank left;
12. ``planned rows``: light Task 2a at 1 and 2 workers, 2 repeats: every group is a ``planned``
    row within a second of the plan, and the 2-worker groups stay rows while the 1-worker ones
    train;
13. ``nightly backfill``: ``airflow backfill create`` of six nights of ``scalebench_nightly``
    (its suite shrunk to light Task 2a at 1 worker) with Airflow's defaults: the nights run one
    at a time in the order of their logical dates, and the sixth night's regression check says
    what it judged, or how many runs were usable and why the others were left out;
14. ``paired backfill``: ``scalebench nightly pin`` of this interpreter, then four nights
    backfilled (a minute of runs a night, one thread a rank): each night a paired sweep with
    both arms in every round (duets at 1 worker, on 2 cores or more), the nights one at a time
    in order, and the fourth night's check judges each paired series or says how many nights
    it needs; the reference is unpinned after.

What is checked, while it runs (sampled every 0.5 s):

- a group whose ranks are alive is never stored with a final status (it is ``planned`` or
  ``running``; a superseded try's late ``cancelled`` must not show);
- a sweep is stored ``cancelled`` only when its record has a cancelled or skipped group;

- every group of a sweep's record is a row of the database within ``grace_s`` of its plan;
- a sweep is stored as ended (any outcome but ``running``) only with its ``finished_at``;

and once each DAG run ended and its teardowns ran: the sweep is closed (``finished_at``) in
its record and in the database, every group of the record is a row, with the record's status
and reason, and no row is still ``planned`` or ``running``.

Usage (from the repository root; about 15 minutes on 2 cores)::

    .venv/bin/python benchmarks/airflow_endings.py [--only success,mark-failed] [--keep DIR]

Exit status 1 when a scenario fails or a check is broken.

``--smoke`` starts the same Airflow and runs one ending, ``refusals`` (nothing trains): about
a minute on 2 cores; it exits 1 only when the scenario could not run (an error other than a
failed check), and prints a failed check without judging it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the product's modules, imported where a check needs one
FINAL = {"succeeded", "failed", "diverged", "timed_out", "cancelled", "skipped"}
TASK2A = "task2a_logreg_epsilon"
TASK1A = "task1a_resnet20_cifar10"
# Two stacks of this interpreter in paired rounds, one thread a rank: where the cores allow,
# each round's arms at once (a duet)
PAIRED = {
    "light": True,
    "stacks": {"a": {"python": sys.executable}, "b": {"python": sys.executable}},
    "pairs": 2,
    "threads_per_worker": 1,
    "device": "cpu",
}
SMOKE_SCENARIO = "refusals"  # the cheapest ending: no group trains


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _group_alive(group: int) -> bool:
    """Whether a process of process group ``group`` still runs."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Airflow:
    """Airflow's components on this machine, and a small REST client of its API."""

    home: Path
    env: dict[str, str]
    port: int
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    user: str = "probe"  # the simple auth manager's admin the REST calls sign in as
    password: str = ""
    token: str = ""  # its JWT, from /auth/token, renewed when the API answers 401
    # Process groups of killed components: their children (a scheduler's LocalExecutor
    # workers, its log server) live on, as on a machine whose scheduler died, until stop().
    killed_groups: list[int] = field(default_factory=list)

    def start(self, component: str) -> None:
        log = (self.home / f"{component}.log").open("a")
        self.processes[component] = subprocess.Popen(
            [sys.executable, "-m", "airflow", component],
            env=self.env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, component: str) -> None:
        """SIGKILL the component alone (the task processes it started live on); what is left
        of its process group is ended by :meth:`stop`."""
        process = self.processes.pop(component)
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.killed_groups.append(process.pid)  # its session: it was started as its leader

    def stop(self) -> None:
        """End every component and whatever a killed one left running (SIGTERM, then
        SIGKILL after 30 s)."""
        groups = [process.pid for process in self.processes.values()] + self.killed_groups
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        for group in self.killed_groups:
            while _group_alive(group) and time.monotonic() < deadline:
                time.sleep(0.2)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def scalebench(self, *args: str) -> subprocess.CompletedProcess:
        """The command-line tool, with the settings the Airflow components have."""
        return subprocess.run(
            [str(Path(sys.executable).with_name("scalebench")), *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """The REST API's answer (status, JSON), as a person's script gets it: with a JWT of
        the admin user, asked for at /auth/token (again when it has expired)."""
        if not self.token and path != "/auth/token":
            self.sign_in()
        status, answer = self._send(method, path, body)
        if status == 401 and path != "/auth/token":
            self.sign_in()
            status, answer = self._send(method, path, body)
        return status, answer

    def sign_in(self) -> None:
        """A JWT for :attr:`user` (none while the API is not up: the next call asks again)."""
        status, answer = self._send(
            "POST", "/auth/token", {"username": self.user, "password": self.password}
        )
        self.token = answer.get("access_token", "") if status == 201 else ""

    def _send(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token and path != "/auth/token":
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                text = answer.read().decode()
                status = answer.status
        except urllib.error.HTTPError as error:
            text, status = error.read().decode(), error.code
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            return 0, str(error)  # not up yet, or restarting
        try:
            return status, json.loads(text)
        except json.JSONDecodeError:
            return status, text

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        status, answer = self.call(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf}
        )
        if status != 200:
            raise RuntimeError(f"triggering {dag_id} answered {status}: {answer}")
        return str(answer["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        status, answer = self.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}")
        return str(answer.get("state")) if status == 200 else f"http {status}"

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        _, answer = self.call(
            "GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}/taskInstances?limit=100"
        )
        return {
            f"{ti['task_id']}[{ti['map_index']}]": str(ti["state"])
            for ti in answer.get("task_instances", [])
        }

    def wait_for_run(self, dag_id: str, run_id: str, timeout_s: float = 900) -> str:
        """The run's final state, once its teardowns are done too (ended, or still not
        scheduled 20 s after the run ended: after a refusal they never run)."""
        from operators.night_gate import ENDED_TASK_STATES

        deadline = time.monotonic() + timeout_s
        final_since = None
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                final_since = final_since or time.monotonic()
                tasks = self.task_states(dag_id, run_id)
                ending = [s for t, s in tasks.items() if t.split("[")[0] in ("ingest", "summarize")]
                waiting = [s for s in ending if s not in ENDED_TASK_STATES]
                if not waiting or (
                    all(s == "None" for s in waiting) and time.monotonic() - final_since > 20
                ):
                    return state
            else:
                final_since = None
            time.sleep(0.5)
        raise TimeoutError(f"{dag_id} {run_id} did not end in {timeout_s:.0f} s")


def quote(text: str) -> str:
    return urllib.request.quote(text, safe="")


class Watcher:
    """Samples the results database, the sweeps' records and the live ranks every 0.5 s,
    and keeps what broke the truth (persisting over ``grace_s`` seconds)."""

    def __init__(self, database: Path, results: Path, grace_s: float = 3.0) -> None:
        self.database = database
        self.results = results
        self.grace_s = grace_s
        self.broken: list[str] = []
        self.samples = 0
        self.most_ranks_alive = 0
        self._since: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.sample()
            except (sqlite3.Error, OSError, ValueError):
                continue  # a database or record being written: the next sample reads it

    def sample(self) -> None:
        alive = ranks_alive(self.results)
        self.most_ranks_alive = max(self.most_ranks_alive, len(alive))
        if not self.database.exists():
            return
        readonly = sqlite3.connect(f"file:{self.database}?mode=ro", uri=True)
        with contextlib.closing(readonly) as db, contextlib.suppress(sqlite3.OperationalError):
            runs = db.execute("select id, status from run").fetchall()  # no tables yet: raises
            sweeps = db.execute("select id, outcome, finished_at from sweep").fetchall()
            self.check(alive, dict(runs), {s[0]: (s[1], s[2]) for s in sweeps})
        self.samples += 1

    def check(
        self, alive: list[str], runs: dict[str, str], sweeps: dict[str, tuple[str, str | None]]
    ) -> None:
        now = time.monotonic()
        problems = set()
        for run_id, status in runs.items():
            if status in FINAL and any(run_id in cmdline for cmdline in alive):
                problems.add(f"{run_id} is stored {status} while its ranks run")
        for sweep_id, (outcome, finished_at) in sweeps.items():
            if outcome not in (None, "running") and not finished_at:
                problems.add(f"sweep {sweep_id} is stored {outcome} without its finished_at")
        for sweep_dir in self.results.glob("*"):
            if not (sweep_dir / "sweep.json").exists():
                continue
            groups = group_statuses(sweep_dir)
            missing = sorted(set(groups) - set(runs))
            if missing:
                problems.add(f"sweep {sweep_dir.name}: group(s) {', '.join(missing)} have no row")
            if sweeps.get(sweep_dir.name, ("",))[0] == "cancelled":
                statuses = {status for status, _ in groups.values()}
                if statuses and not {"cancelled", "skipped"} & statuses:
                    problems.add(f"sweep {sweep_dir.name} is stored cancelled; no group of it was")
        for problem in problems:
            began = self._since.setdefault(problem, now)
            if now - began > self.grace_s and problem not in self.broken:
                self.broken.append(problem)
        for problem in list(self._since):
            if problem not in problems:
                del self._since[problem]


def ranks_alive(results: Path) -> list[str]:
    """The command lines of this benchmark's ranks (``python -m workers.run`` writing under
    ``results``): other ranks on the machine are not its own."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "workers.run" in cmdline and "--results" in cmdline and str(results) in cmdline:
            found.append(cmdline)
    return found


def manifest_groups(sweep_dir: Path) -> tuple[Any, ...]:
    """The groups of a sweep's record, every verdict folded in."""
    from scalebench import manifest

    return manifest.load(sweep_dir).groups


def group_statuses(sweep_dir: Path) -> dict[str, tuple[str, str]]:
    return {g.run_id: (g.status, g.reason) for g in manifest_groups(sweep_dir)}


def ended_truthfully(database: Path, results: Path, sweep_ids: list[str]) -> list[str]:
    """What the database and the sweeps' records disagree on, once the runs ended."""
    problems = []
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        for sweep_id in sweep_ids:
            sweep = db.execute(
                "select outcome, finished_at from sweep where id = ?", (sweep_id,)
            ).fetchone()
            record = json.loads((results / sweep_id / "sweep.json").read_text())
            if sweep is None:
                problems.append(f"sweep {sweep_id} is not in the database")
                continue
            if not sweep[1] or not record.get("finished_at"):
                problems.append(f"sweep {sweep_id} is not closed ({sweep[0]})")
            rows = {
                r[0]: (r[1], r[2] or "")
                for r in db.execute(
                    "select id, status, reason from run where sweep_id = ?", (sweep_id,)
                )
            }
            for run_id, (status, reason) in group_statuses(results / sweep_id).items():
                stored = rows.get(run_id)
                if stored is None:
                    problems.append(f"{run_id} ({status}) has no row")
                elif stored[0] != status or (reason and reason not in stored[1]):
                    problems.append(f"{run_id}: record {status} {reason!r}, row {stored}")
            problems += [
                f"{run_id} still {s}"
                for run_id, (s, _) in rows.items()
                if s in ("planned", "running")
            ]
    return problems


def error_lines(log: Any) -> list[str]:
    """The error records of a task log as the REST API returns it (structured entries, or
    text)."""
    content = log.get("content", log) if isinstance(log, dict) else log
    if isinstance(content, list):
        return [
            str(entry.get("event", ""))
            for entry in content
            if isinstance(entry, dict) and str(entry.get("level", "")).lower() == "error"
        ]
    return [line for line in str(content).splitlines() if "error" in line.lower()]


def log_lines(log: Any) -> list[str]:
    """Every record of a task log as the REST API returns it, as text."""
    content = log.get("content", log) if isinstance(log, dict) else log
    if isinstance(content, list):
        return [str(e.get("event", "")) if isinstance(e, dict) else str(e) for e in content]
    return str(content).splitlines()


def sweeps_of(results: Path) -> set[str]:
    return {p.parent.name for p in results.glob("*/sweep.json")}


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")


def training(results: Path, old: set[str], after: int = 0) -> Path | None:
    """A run directory of a sweep not in ``old`` whose rank 0 is between steps, once
    ``after`` groups of those sweeps finished."""
    files = [
        (f, f.read_text(errors="replace"))
        for f in results.glob("*/*/rank-0.jsonl")
        if f.parent.parent.name not in old
    ]
    finished = sum('"finished"' in text for _, text in files)
    for path, text in files:
        if finished >= after and '"kind":"step"' in text and '"finished"' not in text:
            return path.parent
    return None


@dataclass
class Outcome:
    name: str
    ok: bool
    seconds: float
    detail: str
    ran: bool = True  # False: the scenario stopped on an error, not on one of its checks


class Probe:
    def __init__(self, airflow: Airflow, root: Path, watcher: Watcher) -> None:
        self.airflow = airflow
        self.watcher = watcher
        self.results = root / "results"
        self.database = root / "results.db"
        self.runs: dict[str, tuple[str, str]] = {}  # scenario -> (dag id, run id)
        self.sweeps: dict[str, str] = {}  # scenario -> its sweep

    def new_sweeps(self, before: set[str]) -> list[str]:
        return sorted(sweeps_of(self.results) - before)

    def ended(self, sweep_ids: list[str]) -> list[str]:
        return ended_truthfully(self.database, self.results, sweep_ids)

    def success(self) -> str:
        before = sweeps_of(self.results)
        run_id = self.airflow.trigger(TASK2A, {"workers": [1, 2], "light": True, "repeats": 1})
        self.runs["success"] = (TASK2A, run_id)
        state = self.airflow.wait_for_run(TASK2A, run_id)
        sweeps = self.new_sweeps(before)
        problems = self.ended(sweeps)
        assert state == "success", f"run ended {state}"
        assert len(sweeps) == 1 and not problems, problems
        self.sweeps["success"] = sweeps[0]
        return f"run success, sweep {sweeps[0]} closed, 2 groups succeeded"

    def refusals(self) -> str:
        status, answer = self.airflow.call(
            "POST",
            f"/api/v2/dags/{TASK2A}/dagRuns",
            {"logical_date": None, "conf": {"workers": [3]}},
        )
        assert status == 400 and "workers" in str(answer), (status, answer)
        before = sweeps_of(self.results)
        run_id = self.airflow.trigger(TASK1A, {"workers": [1], "light": False, "download": False})
        state = self.airflow.wait_for_run(TASK1A, run_id)
        assert state == "failed", state
        _, log = self.airflow.call(
            "GET", f"/api/v2/dags/{TASK1A}/dagRuns/{quote(run_id)}/taskInstances/validate/logs/1"
        )
        errors = error_lines(log)
        assert errors and "request refused: data_dir" in errors[0], errors[:2] or str(log)[:2000]
        assert not self.new_sweeps(before), "a refused request planned a sweep"
        return f"HTTP 400 naming workers; validate failed, first error line: {errors[0][:60]}…"

    def mark_failed(self) -> str:
        before = sweeps_of(self.results)
        run_id = self.airflow.trigger(TASK1A, {"workers": [1], "light": True, "repeats": 3})
        wait_until(lambda: training(self.results, before, after=1) is not None, 600, "group 2")
        status, _ = self.airflow.call(
            "PATCH", f"/api/v2/dags/{TASK1A}/dagRuns/{quote(run_id)}", {"state": "failed"}
        )
        assert status == 200, status
        self.airflow.wait_for_run(TASK1A, run_id)
        (sweep,) = self.new_sweeps(before)
        problems = self.ended([sweep])
        assert not problems, problems
        statuses = sorted(s for s, _ in group_statuses(self.results / sweep).values())
        assert statuses == ["cancelled", "skipped", "succeeded"], statuses
        return "succeeded, cancelled and skipped groups, each a row with its reason"

    def scheduler_killed(self) -> str:
        before = sweeps_of(self.results)
        run_id = self.airflow.trigger(TASK1A, {"workers": [2], "light": True, "repeats": 1})
        wait_until(lambda: training(self.results, before) is not None, 600, "the group training")
        self.airflow.kill("scheduler")
        time.sleep(5)
        self.airflow.start("scheduler")
        state = self.airflow.wait_for_run(TASK1A, run_id, timeout_s=1200)
        (sweep,) = self.new_sweeps(before)
        problems = self.ended([sweep])
        assert not problems, problems
        (group,) = manifest_groups(self.results / sweep)
        owner = (group.owner or {}).get("attempt", "no try")
        assert group.status == "succeeded", (group.status, group.reason)
        return f"run {state}; group {group.status}, its verdict by {owner}"

    def clear_and_rerun(self) -> str:
        dag_id, run_id = self.runs["success"]
        sweep = self.sweeps["success"]
        status, answer = self.airflow.call(
            "POST",
            f"/api/v2/dags/{dag_id}/clearTaskInstances",
            {
                "dry_run": False,
                "dag_run_id": run_id,
                "task_ids": [["workers_01.train", 0], "ingest", "summarize"],
                "reset_dag_runs": True,
                "only_failed": False,
            },
        )
        assert status == 200, (status, answer)
        time.sleep(3)
        state = self.airflow.wait_for_run(dag_id, run_id)
        assert state == "success", state
        assert list((self.results / sweep).glob("*.attempt-1")), "the group did not run again"
        problems = self.ended([sweep])
        assert not problems, problems
        return f"run {state} again; the earlier attempt kept beside it"

    def nightly(self) -> str:
        before = sweeps_of(self.results)
        run_id = self.airflow.trigger("scalebench_nightly", {})
        state = self.airflow.wait_for_run("scalebench_nightly", run_id)
        sweeps = self.new_sweeps(before)
        problems = self.ended(sweeps)
        assert sweeps and not problems, (sweeps, problems)
        return f"run {state}, {len(sweeps)} sweep(s) closed and loaded"

    def two_sweeps(self) -> str:
        self.airflow.cli("pools", "set", "--include-deferred", "scalebench_workers", "2", "probe")
        self.watcher.most_ranks_alive = 0
        before = sweeps_of(self.results)
        conf = {"workers": [1, 2], "light": True, "repeats": 1}
        runs = [self.airflow.trigger(TASK2A, conf) for _ in range(2)]
        states = [self.airflow.wait_for_run(TASK2A, r) for r in runs]
        sweeps = self.new_sweeps(before)
        problems = self.ended(sweeps)
        assert states == ["success", "success"] and len(sweeps) == 2 and not problems, (
            states,
            problems,
        )
        most = self.watcher.most_ranks_alive
        assert most <= 2, f"{most} ranks ran at once on a pool of 2 slots"
        return f"both succeeded, at most {most} ranks at once"

    def ui_endpoints(self) -> str:
        dag_id, run_id = self.runs["success"]
        paths = [
            "/api/v2/dags",
            f"/api/v2/dags/{dag_id}",
            f"/api/v2/dags/{dag_id}/details",
            f"/api/v2/dags/{dag_id}/dagRuns",
            f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}/taskInstances",
            f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id)}/taskInstances/validate/logs/1",
            f"/ui/grid/runs/{dag_id}",
            f"/ui/grid/structure/{dag_id}",
            "/api/v2/pools",
            "/api/v2/monitor/health",
        ]
        answers = {path: self.airflow.call("GET", path)[0] for path in paths}
        bad = {p: s for p, s in answers.items() if s != 200}
        assert not bad, bad
        return f"{len(paths)} endpoints answered 200"

    def stop_a_repeat(self) -> str:
        """A person marks the running repeat's task failed (not the DAG run): the sweep stops,
        its other repeats never start, and no more ranks run than the pool has slots."""
        self.airflow.cli("pools", "set", "--include-deferred", "scalebench_workers", "2", "probe")
        self.watcher.most_ranks_alive = 0
        before = sweeps_of(self.results)
        run_id = self.airflow.trigger(TASK1A, {"workers": [2], "light": True, "repeats": 3})
        wait_until(lambda: len(self.new_sweeps(before)) == 1, 300, "the sweep planned")
        (sweep,) = self.new_sweeps(before)
        mine = lambda: [c for c in ranks_alive(self.results) if sweep in c]  # noqa: E731
        wait_until(lambda: bool(mine()), 300, "the first repeat's ranks")
        appeared = time.monotonic()
        # About 20 s after the ranks appeared (sooner if the light group nears its end).
        wait_until(
            lambda: time.monotonic() - appeared >= 20 or epochs_done(self.results / sweep) >= 10,
            60,
            "20 s of training",
        )
        assert mine(), "the first repeat ended before it could be stopped"
        task = "workers_02.train"
        states = self.airflow.task_states(TASK1A, run_id)
        assert states.get(f"{task}[0]") == "running", states
        status, answer = self.airflow.call(
            "PATCH",
            f"/api/v2/dags/{TASK1A}/dagRuns/{quote(run_id)}/taskInstances/{task}/0",
            {"new_state": "failed"},
        )
        patched = time.monotonic()
        assert status == 200, (status, answer)
        state = self.airflow.wait_for_run(TASK1A, run_id)
        groups = manifest_groups(self.results / sweep)
        statuses = [g.status for g in sorted(groups, key=lambda g: g.repeat)]
        assert statuses == ["cancelled", "skipped", "skipped"], statuses
        started = [
            g.run_id for g in groups[1:] if list((self.results / sweep).glob(f"{g.run_id}/rank-*"))
        ]
        assert not started, f"repeat(s) started after the stop: {started}"
        most = self.watcher.most_ranks_alive
        assert most <= 2, f"{most} ranks ran at once on a pool of 2 slots"
        problems = self.ended([sweep])
        assert not problems, problems
        return (
            f"run {state}; PATCHed {patched - appeared:.0f} s after the ranks appeared: repeat 1 "
            f"cancelled, 2 and 3 skipped, none started; at most {most} ranks at once"
        )

    def duet(self) -> str:
        """A paired sweep of two stacks at one thread a rank: each 1-worker round is one task
        that runs both arms at once, the 2-worker rounds a task an arm; every run succeeds,
        is stored with how its round ran, and a duet's two arms trained at the same time."""
        before = sweeps_of(self.results)
        run_id = self.airflow.trigger(TASK2A, {**PAIRED, "workers": [1, 2]})
        self.runs["duet"] = (TASK2A, run_id)
        state = self.airflow.wait_for_run(TASK2A, run_id)
        (sweep,) = self.new_sweeps(before)
        states = self.airflow.task_states(TASK2A, run_id)
        ones = sorted(k for k in states if k.startswith("workers_01.train["))
        twos = sorted(k for k in states if k.startswith("workers_02.train["))
        assert state == "success", f"run ended {state}: {states}"
        assert (len(ones), len(twos)) == (2, 4), (ones, twos)
        rows = stored_rows(self.database, sweep, "stack, repeat, world_size, pairing")
        assert all(r["status"] == "succeeded" for r in rows), rows
        ways = {(r["world_size"], r["pairing"]) for r in rows}
        assert ways == {(1, "duet"), (2, "interleaved")}, ways
        for repeat in (0, 1):
            a, b = (r for r in rows if r["world_size"] == 1 and r["repeat"] == repeat)
            assert a["started_at"] < b["ended_at"] and b["started_at"] < a["ended_at"], (a, b)
        problems = self.ended([sweep])
        assert not problems, problems
        return (
            f"run success; 2 duet tasks at 1 worker (both arms trained at once), 4 tasks at 2; "
            f"sweep {sweep} closed, its 8 runs succeeded"
        )

    def stop_a_duet(self) -> str:
        """A person marks a running duet's task failed: both of its arms are stopped and
        recorded cancelled, the next round never starts, no rank is left."""
        before = sweeps_of(self.results)
        run_id = self.airflow.trigger(TASK1A, {**PAIRED, "workers": [1]})
        wait_until(lambda: len(self.new_sweeps(before)) == 1, 300, "the sweep planned")
        (sweep,) = self.new_sweeps(before)
        mine = lambda: [c for c in ranks_alive(self.results) if sweep in c]  # noqa: E731
        wait_until(lambda: len(mine()) == 2, 300, "both arms' ranks")
        time.sleep(5.0)  # training (a light Task 1a run at 1 worker trains for 30 s or more)
        assert len(mine()) == 2, "the duet ended before it could be stopped"
        task = "workers_01.train"
        states = self.airflow.task_states(TASK1A, run_id)
        assert states.get(f"{task}[0]") == "running", states
        status, answer = self.airflow.call(
            "PATCH",
            f"/api/v2/dags/{TASK1A}/dagRuns/{quote(run_id)}/taskInstances/{task}/0",
            {"new_state": "failed"},
        )
        assert status == 200, (status, answer)
        state = self.airflow.wait_for_run(TASK1A, run_id)
        wait_until(lambda: not mine(), 60, "every rank gone")
        groups = sorted(manifest_groups(self.results / sweep), key=lambda g: g.repeat)
        statuses = [(g.repeat, g.status) for g in groups]
        assert statuses == [(0, "cancelled"), (0, "cancelled"), (1, "skipped"), (1, "skipped")], (
            statuses
        )
        problems = self.ended([sweep])
        assert not problems, problems
        return f"run {state}; both arms of round 1 cancelled, round 2 skipped, no rank left"

    def planned_rows(self) -> str:
        """Every group a row within a second of the plan, and still a row while others train."""
        before = sweeps_of(self.results)
        run_id = self.airflow.trigger(TASK2A, {"workers": [1, 2], "light": True, "repeats": 2})
        deadline = time.monotonic() + 300
        while not self.new_sweeps(before) and time.monotonic() < deadline:
            time.sleep(0.02)
        (sweep,) = self.new_sweeps(before)
        planned_at = (self.results / sweep / "sweep.json").stat().st_mtime
        groups = set(group_statuses(self.results / sweep))
        while time.monotonic() < deadline:
            rows = stored_runs(self.database, sweep)
            if groups <= set(rows):
                break
            time.sleep(0.02)
        delay_s = time.time() - planned_at
        later = {g.run_id for g in manifest_groups(self.results / sweep) if g.world_size == 2}
        seen_while_training = False
        while self.airflow.run_state(TASK2A, run_id) not in ("success", "failed"):
            training_now = [c for c in ranks_alive(self.results) if sweep in c]
            if training_now and all("-w1-" in c for c in training_now):
                rows = stored_runs(self.database, sweep)
                assert later <= set(rows), f"2-worker groups without a row: {later - set(rows)}"
                seen_while_training = True
            time.sleep(0.5)
        state = self.airflow.wait_for_run(TASK2A, run_id)
        problems = self.ended([sweep])
        assert not problems, problems
        assert delay_s <= 1.0, f"the groups were rows {delay_s:.2f} s after the plan"
        assert seen_while_training, "never sampled while a 1-worker group trained"
        return (
            f"run {state}; {len(groups)} planned rows {delay_s:.2f} s after the plan; the "
            "2-worker groups were rows while the 1-worker ones trained"
        )

    def backfill(
        self, first: str, last: str, nights: int, meanwhile: Callable[[], None] | None = None
    ) -> tuple[list[dict], list[dict]]:
        """``airflow backfill create`` of the nightly's nights from ``first`` to ``last`` with
        Airflow's defaults, waited for (``meanwhile`` called once it is created): its DAG runs
        and the sweeps they made (each ``sweep.json``), both in the order of their nights; the
        sweeps checked to have run one at a time, in that order, and to have ended
        truthfully."""
        dag = "scalebench_nightly"
        before = sweeps_of(self.results)
        # One backfill a DAG at a time: an earlier one stays running until the scheduler
        # marks it completed, a while after its last run ended.
        deadline = time.monotonic() + 180
        while True:
            done = self.airflow.cli(
                "backfill", "create", "--dag-id", dag, "--from-date", first, "--to-date", last,
            )  # fmt: skip
            busy = "AlreadyRunningBackfill" in done.stderr + done.stdout
            if not (done.returncode and busy and time.monotonic() < deadline):
                break
            time.sleep(5.0)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        if meanwhile is not None:
            meanwhile()

        def backfilled() -> list[dict[str, Any]]:
            _, answer = self.airflow.call("GET", f"/api/v2/dags/{dag}/dagRuns?limit=100")
            runs = [
                r
                for r in answer.get("dag_runs", [])
                if r.get("run_type") == "backfill" and first <= r["logical_date"][:19] <= last
            ]
            return sorted(runs, key=lambda r: r["logical_date"])

        wait_until(lambda: len(backfilled()) == nights, 120, "the backfill's runs")
        wait_until(
            lambda: all(r["state"] in ("success", "failed") for r in backfilled()),
            nights * 600,
            "the backfilled nights",
        )
        sweeps = [
            json.loads((self.results / s / "sweep.json").read_text())
            for s in self.new_sweeps(before)
        ]
        # the backfill's own nights (a night started by hand may run before or after them)
        sweeps = sorted(
            (s for s in sweeps if first <= (s.get("night") or "")[:19] <= last),
            key=lambda s: s["created_at"],
        )
        assert len(sweeps) == nights, [(s["sweep_id"], s.get("night")) for s in sweeps]
        order = [s["night"] for s in sweeps]
        assert order == sorted(order), f"sweeps created in another order than their nights: {order}"
        for earlier, later in itertools.pairwise(sweeps):
            assert earlier["finished_at"] <= later["created_at"], (
                f"{earlier['sweep_id']} and {later['sweep_id']} ran at once"
            )
        problems = self.ended([s["sweep_id"] for s in sweeps])
        assert not problems, problems
        return backfilled(), sweeps

    def check_lines(self, dag_run_id: str) -> list[str]:
        """What a night's regression check printed of what it judged."""
        _, log = self.airflow.call(
            "GET",
            f"/api/v2/dags/scalebench_nightly/dagRuns/{quote(dag_run_id)}/taskInstances/"
            "task2a_logreg_epsilon.check_regressions/logs/1",
        )
        lines = [line for line in log_lines(log) if "worker(s)" in line or "judge" in line]
        assert lines, f"the night's check printed nothing about what it judged: {log}"[:2000]
        return lines

    def nightly_backfill(self) -> str:
        """Six nights backfilled with Airflow's defaults run one at a time, in the order of
        their nights; the sixth night's check says what it judged or what was missing."""
        runs, _ = self.backfill(BACKFILL_FROM, BACKFILL_TO, BACKFILL_NIGHTS)
        lines = self.check_lines(runs[-1]["dag_run_id"])
        wrong = [line for line in lines if "not enough earlier" in line]
        assert not wrong, wrong
        return f"{BACKFILL_NIGHTS} nights one at a time, in order; the sixth: {lines[0][:110]}"

    def paired_backfill(self) -> str:
        """With a reference pinned (``scalebench nightly pin``: this interpreter), four nights
        backfilled: each a paired sweep, both arms in every round (one thread a rank: at one
        worker a duet where two cores are there), the nights one at a time in order; the
        fourth night's check judges each paired series, or says how many nights it needs."""
        with self.reference_pinned():
            runs, sweeps = self.backfill(PAIRED_FROM, PAIRED_TO, PAIRED_NIGHTS)
        duet = len(os.sched_getaffinity(0)) >= 2
        for sweep in sweeps:
            rows = stored_rows(self.database, sweep["sweep_id"], "stack, pairing, repeat")
            succeeded = [r for r in rows if r["status"] == "succeeded"]
            arms = collections.Counter(r["stack"] for r in succeeded)
            assert set(arms) == {"tonight", "reference"} and len(set(arms.values())) == 1, (
                sweep["sweep_id"],
                rows,
            )
            ways = {r["pairing"] for r in succeeded}
            assert ways == {"duet" if duet else "interleaved"}, (sweep["sweep_id"], ways)
        lines = self.check_lines(runs[-1]["dag_run_id"])
        paired = [line for line in lines if "tonight/reference" in line or "paired night" in line]
        assert paired, f"the fourth night's check judged no paired series: {lines}"
        rounds = [len(stored_rows(self.database, s["sweep_id"], "id")) // 2 for s in sweeps]
        return (
            f"{PAIRED_NIGHTS} paired nights one at a time, in order, rounds {rounds}, "
            f"{'duets' if duet else 'interleaved'}; the fourth: {paired[0][:100]}"
        )

    def beside_a_backfill(self) -> str:
        """Airflow counts a backfill's runs apart from ``max_active_runs``: a night started
        by hand (or the scheduler's: the gate treats them alike) could run beside it, and only
        the gate keeps them apart. A paired night started by hand measures; two nights are
        backfilled meanwhile; while the first of them measures, another night is started by
        hand. No two nights' sweeps overlap (the scheduler's own night among them, where it
        came due), and the backfill's first night said whom it waited for."""
        dag = "scalebench_nightly"
        before = sweeps_of(self.results)
        later: list[str] = []

        def start_another_by_hand() -> None:
            # once the backfill's first night has its sweep (the first by hand ended)
            wait_until(lambda: len(self.new_sweeps(before)) >= 2, 600, "the backfill's sweep")
            later.append(self.airflow.trigger(dag, {}))

        # Paired (a reference pinned), a night measures for a minute: long enough for the
        # other nights to reach their gates while it has the machines.
        with self.reference_pinned():
            # An earlier backfill stays running until the scheduler marks it completed, and a
            # new one is refused until then: the night by hand would end before it came.
            wait_until(self.no_backfill_running, 240, "the earlier backfill marked completed")
            first = self.airflow.trigger(dag, {})
            wait_until(lambda: bool(self.new_sweeps(before)), 300, "the first night's sweep")
            runs, _ = self.backfill(
                BESIDE_FROM, BESIDE_TO, BESIDE_NIGHTS, meanwhile=start_another_by_hand
            )
            states = [self.airflow.wait_for_run(dag, r) for r in (first, *later)]
        sweeps = [json.loads((self.results / s / "sweep.json").read_text()) for s in
                  self.new_sweeps(before)]  # fmt: skip
        sweeps.sort(key=lambda s: s["created_at"])
        # the scheduler's own night may join them (due once the DAG is unpaused)
        assert len(sweeps) >= 2 + BESIDE_NIGHTS, [s["sweep_id"] for s in sweeps]
        for earlier, next_one in itertools.pairwise(sweeps):
            assert earlier["finished_at"] <= next_one["created_at"], (
                f"{earlier['sweep_id']} (finished {earlier['finished_at']}) and "
                f"{next_one['sweep_id']} (created {next_one['created_at']}) ran at once"
            )
        problems = self.ended([s["sweep_id"] for s in sweeps])
        assert not problems, problems
        # The backfill came while a night measured: the night by hand, or the scheduler's
        # own where it came due first (the one by hand then queued behind it by
        # max_active_runs). Its first night's gate says whom it waited for.
        lines = self.gate_lines(runs[0]["dag_run_id"])
        assert lines, "the backfill's first night never said whom it waited for"

        def kind(sweep: dict[str, Any]) -> str:
            night = (sweep.get("night") or "")[:19]
            if not night:
                return "by hand"
            return "backfill" if BESIDE_FROM <= night <= BESIDE_TO else "scheduled"

        order = " → ".join(kind(s) for s in sweeps)
        return f"{len(sweeps)} nights one at a time ({order}), runs {states}; {lines[0][:90]}"

    @contextlib.contextmanager
    def reference_pinned(self) -> Iterator[None]:
        """The nightly's reference stack pinned to this interpreter while the block runs
        (the schema made first: no sweep may have been loaded yet), unpinned after."""
        self.airflow.scalebench("db", "upgrade")
        pinned = self.airflow.scalebench("nightly", "pin", sys.executable, "--note", "probe")
        assert pinned.returncode == 0, pinned.stdout[-2000:] + pinned.stderr[-2000:]
        try:
            yield
        finally:
            self.airflow.scalebench("nightly", "unpin")

    def no_backfill_running(self) -> bool:
        """Whether every backfill of the nightly has been marked completed."""
        status, answer = self.airflow.call("GET", "/api/v2/backfills?dag_id=scalebench_nightly")
        return status == 200 and all(b.get("completed_at") for b in answer.get("backfills", []))

    def gate_lines(self, dag_run_id: str) -> list[str]:
        """What a night's gate said while it waited, over all its looks."""
        lines = []
        for attempt in range(1, 40):
            status, log = self.airflow.call(
                "GET",
                f"/api/v2/dags/scalebench_nightly/dagRuns/{quote(dag_run_id)}/taskInstances/"
                f"earlier_night_done/logs/{attempt}",
            )
            if status != 200:
                break
            lines += [line for line in log_lines(log) if "waiting" in line]
        return lines


# Six nights of the nightly's 02:00 schedule: the backfill's window, both ends included.
BACKFILL_FROM, BACKFILL_TO, BACKFILL_NIGHTS = "2026-10-01T00:00:00", "2026-10-06T03:00:00", 6
# Four later nights, run paired.
PAIRED_FROM, PAIRED_TO, PAIRED_NIGHTS = "2026-10-11T00:00:00", "2026-10-14T03:00:00", 4
# Two more, backfilled while a night started by hand measures.
BESIDE_FROM, BESIDE_TO, BESIDE_NIGHTS = "2026-10-21T00:00:00", "2026-10-22T03:00:00", 2


def epochs_done(sweep_dir: Path) -> int:
    """The most epochs any rank 0 of the sweep has evaluated."""
    most = 0
    for path in sweep_dir.glob("*/rank-0.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            if '"kind":"eval"' in line:
                with contextlib.suppress(ValueError):
                    most = max(most, int(json.loads(line).get("epoch", 0)))
    return most


def stored_rows(database: Path, sweep_id: str, columns: str) -> list[dict[str, Any]]:
    """The stored runs of a sweep: their status, start and end and ``columns``."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        db.row_factory = sqlite3.Row
        query = f"select status, started_at, ended_at, {columns} from run where sweep_id = ?"
        return [dict(row) for row in db.execute(query, (sweep_id,))]


def stored_runs(database: Path, sweep_id: str) -> dict[str, str]:
    """The stored runs of a sweep and their status (none while the database is not there)."""
    if not database.exists():
        return {}
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            rows = db.execute("select id, status from run where sweep_id = ?", (sweep_id,))
            return dict(rows.fetchall())
    except sqlite3.Error:
        return {}


SCENARIOS = {
    "success": Probe.success,
    "refusals": Probe.refusals,
    "mark-failed": Probe.mark_failed,
    "scheduler-killed": Probe.scheduler_killed,
    "clear-and-rerun": Probe.clear_and_rerun,
    "nightly": Probe.nightly,
    "two-sweeps": Probe.two_sweeps,
    "ui-endpoints": Probe.ui_endpoints,
    "stop-a-repeat": Probe.stop_a_repeat,
    "planned-rows": Probe.planned_rows,
    "duet": Probe.duet,
    "stop-a-duet": Probe.stop_a_duet,
    "nightly-backfill": Probe.nightly_backfill,
    "paired-backfill": Probe.paired_backfill,
    "beside-a-backfill": Probe.beside_a_backfill,
}


def scratch_postgres() -> tuple[str, Callable[[], None]]:
    from sqlalchemy import create_engine, text

    admin_url = os.environ.get(
        "SCALEBENCH_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
    )
    name = f"airflow_probe_{os.getpid()}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"create database {name}"))

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f"drop database if exists {name} with (force)"))
        admin.dispose()

    return admin_url.rsplit("/", 1)[0] + f"/{name}", drop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--keep", type=Path, help="keep everything in this folder")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"one ending ({SMOKE_SCENARIO}) under the same Airflow: minutes, no goal judged",
    )
    args = parser.parse_args()
    if args.smoke and (args.only or args.keep):
        parser.error(f"--smoke runs {SMOKE_SCENARIO} in a temporary folder: no --only, --keep")
    started = time.monotonic()
    chosen = [s for s in args.only.split(",") if s] or list(SCENARIOS)
    if args.smoke:
        chosen = [SMOKE_SCENARIO]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    root = Path(args.keep or tempfile.mkdtemp(prefix="airflow-endings-"))
    root.mkdir(parents=True, exist_ok=True)
    metadata_url, drop = scratch_postgres()
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "AIRFLOW_HOME": str(root / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_url,
        # The REST API as a person reaches it: a user of the simple auth manager, a JWT.
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "probe:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(root / "passwords.json"),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "15",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
        "SCALEBENCH_RESULTS_URI": str(root / "results"),
        "SCALEBENCH_DATABASE_URL": f"sqlite:///{root / 'results.db'}",
        "SCALEBENCH_DATA_DIR": str(root / "data"),
        "SCALEBENCH_LIVE_INGEST_S": "3",
        "SCALEBENCH_NIGHTLY_TASKS": "task2a-logreg-epsilon",
        "SCALEBENCH_NIGHTLY_WORKERS": "1",
        "SCALEBENCH_NIGHTLY_REPEATS": "1",
        # A paired night (a reference pinned) in a minute of runs, one thread a rank.
        "SCALEBENCH_NIGHTLY_BUDGET_S": "60",
        "SCALEBENCH_NIGHTLY_THREADS_PER_WORKER": "1",
    }
    (root / "airflow").mkdir(exist_ok=True)
    password = secrets.token_urlsafe(16)
    (root / "passwords.json").write_text(json.dumps({"probe": password}))
    airflow = Airflow(home=root / "airflow", env=env, port=port, password=password)
    outcomes: list[Outcome] = []
    watcher = Watcher(root / "results.db", root / "results")
    try:
        print(f"starting Airflow in {root} (api on port {port}) ...", flush=True)
        done = airflow.cli("db", "migrate")
        if done.returncode:
            print(done.stdout[-2000:], done.stderr[-2000:])
            return 1
        for component in ("api-server", "scheduler", "dag-processor", "triggerer"):
            airflow.start(component)
        wait_until(lambda: airflow.call("GET", "/api/v2/monitor/health")[0] == 200, 180, "api")
        # the workers' pool, through the API that is up now (no command line to start)
        pool = {"name": "scalebench_workers", "slots": 32, "description": "probe"}
        status, answer = airflow.call("POST", "/api/v2/pools", pool | {"include_deferred": True})
        if status != 201:
            print(f"creating the pool answered {status}: {answer}")
            return 1
        # Only the nightly endings unpause the nightly DAG. Unpaused with no run yet, a cron
        # trigger timetable waits for its next night, hours away; once nights exist (backfilled
        # or by hand) the scheduler may run the latest night due, which beside-a-backfill
        # allows for (seen on 3 December: scheduled__2026-12-03T02:00 among its nights).
        nightly_endings = {
            "nightly",
            "nightly-backfill",
            "paired-backfill",
            "beside-a-backfill",
        }
        nightly = ("scalebench_nightly",) if nightly_endings & set(chosen) else ()
        for dag_id in (TASK2A, TASK1A, *nightly):
            wait_until(
                lambda d=dag_id: airflow.call("GET", f"/api/v2/dags/{d}")[0] == 200,
                180,
                f"DAG {dag_id} parsed",
            )
            airflow.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        probe = Probe(airflow, root, watcher)
        with watcher:
            for index, name in enumerate(chosen, start=1):
                began = time.monotonic()
                print(f"[{index}/{len(chosen)}] {name} ...", flush=True)
                ran = True
                try:
                    detail = SCENARIOS[name](probe)
                    ok = True
                except Exception as exc:  # reported in the table, the next scenario goes on
                    detail, ok = f"{type(exc).__name__}: {exc}", False
                    ran = isinstance(exc, AssertionError)  # a check failed: it ran
                seconds = time.monotonic() - began
                outcomes.append(Outcome(name, ok, seconds, detail, ran))
                print(f"    {'ok' if ok else 'FAILED'} in {seconds:.0f} s: {detail}", flush=True)
    finally:
        airflow.stop()
        drop()
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\n{'scenario':<18} {'result':<7} {'s':>5}  detail")
    for o in outcomes:
        print(f"{o.name:<18} {'ok' if o.ok else 'FAILED':<7} {o.seconds:>5.0f}  {o.detail}")
    print(
        f"\ntruth checks: {watcher.samples} samples, at most {watcher.most_ranks_alive} ranks "
        f"alive at once, {len(watcher.broken)} broken"
    )
    for problem in watcher.broken:
        print(f"  broken: {problem}")
    if args.smoke:
        ran = len(outcomes) == len(chosen) and all(o.ran for o in outcomes)
        print(
            f"\nsmoke run: {len(outcomes)} of {len(chosen)} ending(s) ran to their checks in "
            f"{time.monotonic() - started:.0f} s (Airflow's start included); no goal judged"
        )
        return 0 if ran else 1
    return 0 if all(o.ok for o in outcomes) and not watcher.broken else 1


if __name__ == "__main__":
    sys.exit(main())
