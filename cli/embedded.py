"""Run one benchmark DAG through Airflow on this machine, and show what happens.

    python -m cli.embedded task1a_resnet20_cifar10 '{"workers": [1, 2], "light": true}'

This is the embedded path of the README's quick start: a real Airflow DAG run
(``airflow dags test``: every task runs in one process, no scheduler needed)
against the Airflow home in ``$AIRFLOW_HOME`` (``./var/airflow`` by default),
which it migrates first. Airflow's own log goes to
``var/airflow/<dag>-<time>.log``; the terminal gets one line per task
started and finished (with seconds), the workers' progress lines (epochs,
with the time left), and, at the end, the sweep's table from the results
database. A conf the trigger form would refuse is refused before Airflow
starts, naming the field (exit status 2); a task that fails is named with its
error's message. The exit status is 0 when the DAG run succeeded, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from scalebench.rank import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_REFUSED

STARTED = re.compile(r"\[DAG TEST\] starting task_id=(\S+) map_index=(-?\d+)")
ENDED = re.compile(r"\[DAG TEST\] end task task_id=(\S+) map_index=(-?\d+)")
FAILED = re.compile(r"Task failed|Task instance in failure state|\[error\s*\] (.*)")
FINISHED = re.compile(r"DagRun Finished: .*?\bstate=(\w+)")
PLANNED = re.compile(r"sweep (\S+): \d+ group\(s\) planned")
# The message of a structured Airflow log line: "<time> [info     ] <message> [<logger>] loc=..."
MESSAGE = re.compile(r"^\S+ \[(?:info|warning|error)\s*\] (.*?)(?: \[[\w.]+\])?(?: \w+=\S+)*$")
TASK_FAILED = re.compile(r"\[error\s*\] Task failed with exception")
TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\S+ \[")
TRACEBACK_HEADERS = (
    "Traceback (most recent call last)",
    "During handling of the above",
    "The above exception was the direct cause",
)
WORKER_PROGRESS = re.compile(r"\[rank 0\] .*(epoch \d+/\d+|size|finished|refused)|ingested")


def airflow_environment() -> dict[str, str]:
    """The environment for the embedded Airflow: its home, our DAG folder, no examples."""
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env.setdefault("AIRFLOW_HOME", str(Path("var/airflow").resolve()))
    env.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(repo / "dags"))
    env.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    return env


def airflow(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = shutil.which("airflow") or str(Path(sys.executable).with_name("airflow"))
    return subprocess.run([command, *args], env=env, capture_output=True, text=True)


def prepare_airflow(env: dict[str, str]) -> None:
    """Migrate Airflow's metadata database and create the workers pool (idempotent)."""
    from scalebench import config

    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    for args in (
        ("db", "migrate"),
        # Deferred groups (Kubernetes, watched from the triggerer) keep their slots.
        (
            "pools",
            "set",
            "--include-deferred",
            config.pool(),
            str(config.max_workers()),
            "scalebench: one slot per worker (GPU)",
        ),
    ):
        done = airflow(*args, env=env)
        if done.returncode != 0:
            raise SystemExit(f"airflow {' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")


class TaskFailures:
    """The tasks that failed in a ``dags test`` log, each with its exception's last line
    (the message a user acts on; the traceback stays in Airflow's log file)."""

    def __init__(self) -> None:
        self.failures: list[tuple[str, str]] = []
        self.task = ""
        self._in_traceback = False
        self._last = ""

    def feed(self, line: str, task: str) -> None:
        text = line.rstrip()
        if TASK_FAILED.search(text):
            self.task, self._in_traceback, self._last = task, True, ""
            return
        if not self._in_traceback:
            return
        if TIMESTAMPED.match(text):  # the traceback is over: its last message stands
            self._in_traceback = False
            if self._last:
                self.failures.append((self.task, self._last))
        elif text and not text[0].isspace() and not text.startswith(TRACEBACK_HEADERS):
            self._last = text

    def close(self) -> None:
        if self._in_traceback and self._last:
            self.failures.append((self.task, self._last))
        self._in_traceback = False


def follow(
    dag_id: str, conf: dict, env: dict[str, str], log_path: Path
) -> tuple[str, str | None, list[tuple[str, str]]]:
    """Run ``airflow dags test``; print progress; return (DAG run state, sweep id, the
    failed tasks with their messages)."""
    command = shutil.which("airflow") or str(Path(sys.executable).with_name("airflow"))
    proc = subprocess.Popen(
        [command, "dags", "test", dag_id, "-c", json.dumps(conf)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    state, sweep_id, began, started_at = "unknown", None, time.monotonic(), {}
    failures, current = TaskFailures(), ""
    assert proc.stdout is not None
    with log_path.open("w", encoding="utf-8") as log:
        for line in proc.stdout:
            log.write(line)
            elapsed = f"{time.monotonic() - began:6.1f}s"
            failures.feed(line, current)
            if match := STARTED.search(line):
                key = match.groups()
                current = _task_name(*key)
                started_at[key] = time.monotonic()
                print(f"{elapsed}  ▶ {_task_name(*key)}", flush=True)
            elif match := ENDED.search(line):
                key = match.groups()
                took = time.monotonic() - started_at.get(key, time.monotonic())
                print(f"{elapsed}  ■ {_task_name(*key)} ({took:.1f} s)", flush=True)
            elif match := FINISHED.search(line):
                state = match.group(1)
            elif (match := MESSAGE.match(line.rstrip())) and WORKER_PROGRESS.search(line):
                print(f"{elapsed}      {match.group(1)}", flush=True)
            if match := PLANNED.search(line):
                sweep_id = match.group(1)
    proc.wait()
    failures.close()
    return state, sweep_id, failures.failures


def _task_name(task_id: str, map_index: str) -> str:
    return task_id if map_index == "-1" else f"{task_id}[{map_index}]"


def known_dag_ids() -> list[str]:
    """One DAG per registered task (``-`` becomes ``_``), plus the nightly one."""
    from scalebench.tasks import task_ids

    return [task_id.replace("-", "_") for task_id in task_ids()] + ["scalebench_nightly"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m cli.embedded",
        description="Run one benchmark DAG through Airflow on this machine (airflow dags test).",
    )
    parser.add_argument(
        "dag_id",
        choices=known_dag_ids(),
        metavar="DAG_ID",
        help="one of: " + ", ".join(known_dag_ids()),
    )
    parser.add_argument(
        "conf",
        nargs="?",
        default="{}",
        help="the trigger form's parameters as JSON, e.g. '{\"light\": true}'",
    )
    args = parser.parse_args(argv)
    try:
        args.conf = json.loads(args.conf)
    except json.JSONDecodeError as exc:
        parser.error(f"conf is not JSON: {exc}")
    except RecursionError:  # the json module's parser recurses once per nested list or object
        parser.error("conf is not JSON: nested deeper than it can be read")
    if not isinstance(args.conf, dict):
        parser.error("conf must be a JSON object, e.g. '{\"workers\": [1, 2]}'")
    refusal = conf_refusal(args.dag_id, args.conf)
    if refusal:
        parser.error(f"conf refused: {refusal}")
    return args


def conf_refusal(dag_id: str, conf: dict) -> str | None:
    """Why the DAG's trigger form would refuse ``conf``, naming the field (``None``: it
    would not): the form's JSON schema first, then the request's own validation, as the
    DAG's ``validate`` task does. The nightly DAG takes no conf fields: any is refused."""
    from operators.nightly_dag import NIGHTLY_DAG_ID
    from scalebench.nightly import conf_refusal as nightly_refusal
    from scalebench.tasks import get_task, task_ids

    if dag_id == NIGHTLY_DAG_ID:
        return nightly_refusal(conf)
    task = next((t for t in task_ids() if t.replace("-", "_") == dag_id), None)
    if task is None:
        return None
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    from operators.benchmark_dag import params
    from scalebench.sweep import InvalidParameter, request_from_form

    form = ParamsDict(params(get_task(task)))
    try:
        form.update(conf)
        form.validate()
    except ParamValidationError as exc:
        first = str(exc).splitlines()[0]
        return re.sub(r"^Invalid input for param (\w+): ", r"\1: ", first)
    try:
        request_from_form(task, form.dump())
    except InvalidParameter as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    dag_id, conf = args.dag_id, args.conf
    env = airflow_environment()
    print(f"Airflow home {env['AIRFLOW_HOME']}: migrating the metadata database ...", flush=True)
    prepare_airflow(env)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = Path(env["AIRFLOW_HOME"]) / f"{dag_id}-{stamp}.log"
    print(f"running DAG {dag_id} with {json.dumps(conf)} (Airflow's log: {log_path})", flush=True)
    state, sweep_id, failures = follow(dag_id, conf, env, log_path)
    print(f"DAG run {state}")
    for task, message in failures:
        print(f"  {task} failed: {message}")
    if sweep_id:
        from results_db.service import NoResult, summarize_sweep

        print(f"\nsweep {sweep_id} in the results database:")
        try:
            summarize_sweep(sweep_id)
        except NoResult as exc:
            print(exc)
    return EXIT_OK if state == "success" else EXIT_FAILED


def run_with_boundary(argv: list[str] | None = None) -> int:
    """:func:`main`, with an expected failure (the results database, a folder) as one
    line and exit status 2; ``SCALEBENCH_DEBUG=1`` shows the traceback."""
    from cli.errors import debugging, path_problem
    from results_db.service import database_problem

    try:
        return main(argv)
    except KeyboardInterrupt:
        print("cli.embedded: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        problem = database_problem(exc) or path_problem(exc)
        if problem is None or debugging():
            raise
        print(
            f"cli.embedded: error: {problem} (SCALEBENCH_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(run_with_boundary())
