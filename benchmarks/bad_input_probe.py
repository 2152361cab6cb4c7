"""Bad input, given the way a user gives it, and what each one ends in.

Generates several hundred bad inputs and runs each as its own process, as a user would:
``python -m cli.main ...`` (every subcommand), ``python -m cli.main ingest`` of damaged sweep
directories, and ``python -m cli.embedded <dag_id> '<conf>'``; the cases are tables, family by
family, in ``bad_input_cases.py`` beside it. Every outcome is classified:

- **refused**: exit status not 0, one line that says what is wrong, no traceback;
- **traceback**: a Python traceback reached the user;
- **silent accept**: exit status 0 (or a value taken without a word) and something wrong was
  stored or written: impossible values in the database, a file outside the folder asked for,
  the default database or results folder used when another was named;
- **accepted correctly**: exit status 0 for input that is in fact usable (a bad record line
  quarantined and said, a large but possible value), nothing wrong stored;
- **other fault**: no answer within the time limit, a refusal without a message, or a good
  sweep beside the bad one left unstored.

Every ingest of a damaged sweep (and every ``prices``, ``regressions`` and ``db upgrade``
case) runs against a fresh SQLite file and a fresh PostgreSQL database (a copy of a migrated
template); their verdicts (exit status, rows stored, the message's first line with paths
and URLs normalised) must be the same.

Writes only under a temporary folder (the results folder, database and Airflow home of every
command point there). Nothing trains: the runs given settings are stopped by a results
database that is not one, after their request and settings are checked, and the embedded
runner's confs are all refused before Airflow starts.

Prints progress (cases done, faults so far, seconds left), a table of outcomes per family and
in total, and every case that is not clean with its command and its output's first lines.
Exit status 1 when any traceback, silent accept, other fault or database difference is found.

    .venv/bin/python benchmarks/bad_input_probe.py [--jobs 2] [--family 'rank files'] [--limit N]

``--smoke`` runs the first case of each family (``--limit 1``, about half a minute) and
prints the same table; it exits 1 only when the probe itself could not run a case.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from bad_input_cases import (
    BAD_RUN,
    FAMILIES,
    GOOD_RUNS,
    SAID_QUARANTINED,
    SAID_REFUSED,
    Case,
    prototypes,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

REPO = Path(__file__).resolve().parents[1]
POSTGRES_URL = os.environ.get(
    "SCALEBENCH_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)
TIMEOUT_S = 60.0  # a case without an answer by then is a fault (a read that never ends)
OUTCOMES = ("refused", "accepted correctly", "traceback", "silent accept", "other fault")
FAULTS = ("traceback", "silent accept", "other fault")
COULD_NOT_RUN = "the probe could not run it"  # the note of a case the probe itself failed on
MESSAGE = re.compile(
    r"^(scalebench|cli\.embedded|python -m cli\.embedded)[\w -]*: error: |^\s+refused: "
)


@dataclass
class Result:
    case: Case
    database: str  # "sqlite", "postgresql" or "" (no database of its own)
    outcome: str
    note: str
    command: str
    output: str
    verdict: tuple = ()


# -- databases --------------------------------------------------------------------------------


class Databases:
    """Fresh databases for the cases: copies of a migrated SQLite file, and PostgreSQL
    databases made from a migrated template (``CREATE DATABASE ... TEMPLATE``)."""

    def __init__(self, root: Path, admin_url: str, proto: Path) -> None:
        from sqlalchemy import create_engine, text
        from sqlalchemy.engine import make_url

        from results_db.database import make_engine, upgrade
        from results_db.ingest import ingest_location

        self.root, self.admin_url = root, admin_url
        self.sqlite = root / "template.db"
        upgrade(f"sqlite:///{self.sqlite}")
        self.seeded_sqlite = root / "template-seeded.db"
        shutil.copy(self.sqlite, self.seeded_sqlite)
        engine = make_engine(f"sqlite:///{self.seeded_sqlite}")
        good = root / "seed"
        shutil.copytree(proto / "good", good / "good")
        shutil.copytree(proto / "ar", good / "ar")
        ingest_location(engine, str(good))
        engine.dispose()
        self.admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self.lock = threading.Lock()
        tag = uuid.uuid4().hex[:8]
        self.template = f"scalebench_probe_{tag}"
        self.seeded_template = f"scalebench_probe_{tag}_seeded"
        self.created: list[str] = []
        with self.admin.connect() as conn:
            for name in (self.template, self.seeded_template):
                conn.execute(text(f'CREATE DATABASE "{name}"'))
                self.created.append(name)
        self._url = lambda name: (
            make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        )
        upgrade(self._url(self.template))
        upgrade(self._url(self.seeded_template))
        engine = make_engine(self._url(self.seeded_template))
        ingest_location(engine, str(good))
        engine.dispose()
        self.counter = 0

    def fresh(self, kind: str, seeded: bool, case_dir: Path) -> str:
        from sqlalchemy import text

        if kind == "sqlite":
            path = case_dir / "results.db"
            shutil.copy(self.seeded_sqlite if seeded else self.sqlite, path)
            return f"sqlite:///{path}"
        with self.lock:
            self.counter += 1
            name = f"{self.template}_{self.counter}"
            with self.admin.connect() as conn:
                source = self.seeded_template if seeded else self.template
                conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{source}"'))
            self.created.append(name)
        return self._url(name)

    def drop(self, url: str) -> None:
        from sqlalchemy import text
        from sqlalchemy.engine import make_url

        if not url.startswith("postgresql"):
            return
        name = make_url(url).database
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.created.remove(name)

    def close(self) -> None:
        from sqlalchemy import text

        with self.admin.connect() as conn:
            for name in list(self.created):
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.admin.dispose()


# Seconds no stored value may reach (nor be negative or not finite): a table's columns
SECONDS_COLUMNS = (
    (
        "StepTiming",
        (
            "t_s",
            "data_s",
            "forward_s",
            "loss_s",
            "backward_s",
            "gradient_packing_s",
            "communication_s",
            "optimizer_s",
        ),
    ),
    (
        "Run",
        (
            "compute_s",
            "communication_s",
            "step_s",
            "eval_s",
            "compile_s",
            "time_to_accuracy_s",
            "data_total_s",
            "forward_total_s",
            "backward_total_s",
            "optimizer_total_s",
            "samples_per_s",
        ),
    ),
    ("EpochEval", ("t_s", "eval_s", "train_s", "wall_s")),
    ("RunEvent", ("t_s",)),
    ("AllReduceSample", ("seconds",)),
)
# Counts no stored value may fall below: (what it is shown as, table, column, the least)
SMALLEST = (
    ("step_timing.samples", "StepTiming", "samples", 0),
    ("run.world_size", "Run", "world_size", 1),
    ("run.repeat", "Run", "repeat", 0),
    ("epoch_eval.epoch", "EpochEval", "epoch", 0),
    ("step_timing.step", "StepTiming", "step", 0),
)


def wrong_seconds(conn: Connection, models: ModuleType) -> list[str]:
    """A row's first column of seconds that cannot be true, in every row of every table."""
    from sqlalchemy import select

    wrong = []
    for table_name, columns in SECONDS_COLUMNS:
        table = getattr(models, table_name)
        for row in conn.execute(select(*(getattr(table, c) for c in columns))).all():
            for column, value in zip(columns, row, strict=True):
                if value is not None and not (0 <= float(value) < 1e7):
                    wrong.append(f"{table.__tablename__}.{column} = {value}")
                    break
    return wrong


def wrong_counts(conn: Connection, models: ModuleType) -> list[str]:
    """Every count below the least it can be."""
    from sqlalchemy import func, select

    wrong = []
    for name, table_name, column, least in SMALLEST:
        value = conn.execute(
            select(func.min(getattr(getattr(models, table_name), column)))
        ).scalar()
        if value is not None and value < least:
            wrong.append(f"{name} = {value}")
    return wrong


def wrong_prices(prices: list) -> list[str]:
    """Every price that is negative or not finite, and every kind or name no price has."""
    import math

    wrong = []
    for kind, name, regular, preemptible in prices:
        values = [float(regular), float(preemptible)]
        if not all(math.isfinite(v) and v >= 0 for v in values):
            wrong.append(f"price {name!r}: {values}")
        if kind not in ("instance", "gpu") or not name.strip() or "\n" in name:
            wrong.append(f"price of kind {kind!r} named {name[:20]!r}")
    return wrong


def wrong_transports(transports: list) -> list[str]:
    """Every stored transport label longer than its column's 100 characters or holding a
    character that is not printable (a terminal's escape, a carriage return)."""
    wrong = []
    for run_id, *labels in transports:
        for label in labels:
            if label and (len(label) > 100 or not label.isprintable()):
                wrong.append(f"run {run_id}: a transport label {label[:40]!r}")
    return wrong


def snapshot(url: str) -> tuple[dict, list[str]]:
    """What ``url``'s database holds (the verdict's rows), and every stored value that cannot
    be true: negative or non-finite seconds, ids that climb out of a folder, bad prices."""
    from sqlalchemy import func, select

    import results_db.models as models
    from results_db.database import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            sweeps = sorted(conn.execute(select(models.Sweep.id)).scalars())
            runs = sorted(conn.execute(select(models.Run.id, models.Run.status)).all())
            steps = conn.execute(select(func.count()).select_from(models.StepTiming)).scalar_one()
            wrong = wrong_seconds(conn, models) + wrong_counts(conn, models)
            for ident in [*sweeps, *(r[0] for r in runs)]:
                if "/" in ident or ident in ("", ".", ".."):
                    wrong.append(f"an id that is no folder name: {ident!r}")
            transports = sorted(
                conn.execute(
                    select(
                        models.Run.id,
                        models.Run.transport_within_node,
                        models.Run.transport_between_nodes,
                    )
                ).all()
            )
            wrong += wrong_transports(transports)
            price = models.Price
            prices = conn.execute(
                select(price.kind, price.name, price.regular_per_hour, price.preemptible_per_hour)
            ).all()
            wrong = (wrong + wrong_prices(prices))[:5]
        rows = {
            "sweeps": sweeps,
            "transports": [tuple(t) for t in transports if t[1] or t[2]],
            "runs": [tuple(r) for r in runs],
            "steps": steps,
            "prices": sorted((k, n[:30], f"{float(r):.4f}") for k, n, r, _ in prices),
        }
        return rows, wrong
    except Exception as exc:  # a database the command left unreadable (or never made)
        return {"unreadable": type(exc).__name__}, []
    finally:
        engine.dispose()


# -- running and judging ----------------------------------------------------------------------


def normalise(line: str, case_dir: Path, url: str) -> str:
    line = line.replace(str(case_dir), "<case>")
    if url:
        line = line.replace(url, "<db>")
    line = re.sub(r"(sqlite|postgresql)\S*", "<db>", line)
    line = re.sub(r"scalebench_probe_\w+", "<name>", line)
    line = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00)?", "<time>", line)
    return line.strip()


def first_message(text: str) -> str:
    for line in text.splitlines():
        if MESSAGE.search(line):
            return line
    return ""


def run_case(case: Case, root: Path, index: int, databases: Databases | None) -> list[Result]:
    kinds = ["sqlite", "postgresql"] if case.both and databases else [""]
    results = []
    for kind in kinds:
        case_dir = root / "cases" / f"{index:04d}{kind[:1]}"
        (case_dir / "work").mkdir(parents=True)
        if case.build:
            case.build(case_dir)
        url = ""
        uses_db = any("{db}" in a for a in case.argv)
        if uses_db and databases:
            url = databases.fresh(kind or "sqlite", case.seeded, case_dir)
        pg_url = ""
        if any("{pg}" in a for a in case.argv) and databases:
            pg_url = databases.fresh("postgresql", False, case_dir)

        def fill(text: str, case_dir: Path = case_dir, url: str = url, pg_url: str = pg_url) -> str:
            return (
                text.replace("{case}", str(case_dir))
                .replace("{loc}", str(case_dir / "loc"))
                .replace("{db}", url)
                .replace("{pg}", pg_url)
            )

        argv = [fill(a) for a in case.argv]
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("SCALEBENCH_", "AIRFLOW"))},
            "PYTHONPATH": str(REPO),
            "SCALEBENCH_RESULTS_URI": str(case_dir / "default-results"),
            "SCALEBENCH_DATABASE_URL": f"sqlite:///{case_dir / 'default.db'}",
            "SCALEBENCH_DATA_DIR": str(case_dir / "default-data"),
            "AIRFLOW_HOME": str(case_dir / "airflow"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.update({k: fill(v) for k, v in case.env.items()})
        command = [sys.executable, "-m", case.module, *argv]
        shown = " ".join(shlex_quote(a) for a in [f"python -m {case.module}", *argv])[:400]
        try:
            done = subprocess.run(
                command, cwd=case_dir / "work", env=env, capture_output=True, timeout=TIMEOUT_S
            )
            out = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
            rc: int | None = done.returncode
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(
                errors="replace"
            )
            rc = None
        rows: dict = {}
        wrong: list[str] = []
        if url:
            rows, wrong = snapshot(url)
        outcome, note = judge(case, case_dir, rc, out, rows, wrong, url)
        message = normalise(first_message(out), case_dir, url)
        verdict = (rc, message, json.dumps(rows, sort_keys=True, default=str))
        results.append(Result(case, kind, outcome, note, shown, out, verdict))
        if url and databases:
            databases.drop(url)
        if pg_url and databases:
            databases.drop(pg_url)
        restore_modes(case_dir)
        shutil.rmtree(case_dir, ignore_errors=True)
    return results


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text if len(text) < 80 else text[:60] + f"...({len(text)} chars)")


def restore_modes(case_dir: Path) -> None:
    for path in case_dir.rglob("*"):
        try:
            if not path.is_symlink():
                path.chmod(0o700)
        except OSError:
            pass


def judge(
    case: Case, case_dir: Path, rc: int | None, out: str, rows: dict, wrong: list[str], url: str
) -> tuple[str, str]:
    if "Traceback (most recent call last)" in out:
        return "traceback", ""
    if rc is None:
        return "other fault", f"no answer in {TIMEOUT_S:.0f} s"
    if wrong:
        return "silent accept", "stored: " + "; ".join(wrong)
    written = written_wrongly(case, case_dir)
    if written:
        return "silent accept", written
    if case.good_beside and "unreadable" not in rows and not case.valid:
        missing = GOOD_RUNS - {r[0] for r in rows.get("runs", [])}
        if missing:
            return "other fault", f"the good sweep beside it was not stored ({sorted(missing)})"
    if rc == 0:
        problem = case.check(case_dir, out) if case.check else None
        if problem:
            return "silent accept", problem
        if case.valid or case.check:
            return "accepted correctly", ""
        left_out = BAD_RUN not in {r[0] for r in rows.get("runs", [])}
        if case.good_beside and left_out and (SAID_REFUSED in out or SAID_QUARANTINED in out):
            return "accepted correctly", "the damaged run left out, and said"
        if SAID_QUARANTINED in out:
            return "accepted correctly", "the bad line quarantined, and said"
        return "silent accept", "exit status 0 for input that is not usable"
    message = first_message(out)
    if not message:
        return "other fault", f"exit status {rc} without a message"
    if case.names and case.names not in message:
        if case.valid:
            return "refused", "a possible value, stopped by the guard database"
        return "silent accept", f"the bad value was taken; refused for another reason: {message}"
    if case.valid and case.names:
        return "accepted correctly", "a possible value, stopped by the guard database"
    return "refused", ""


def written_wrongly(case: Case, case_dir: Path) -> str:
    """Files a command wrote where it was not asked to: the default places (the case named
    others), the folder it ran in."""
    named = " ".join(case.argv) + " " + " ".join(case.env)
    for default, option in (("default.db", "--database"), ("default-results", "--results")):
        if (case_dir / default).exists() and option in named:
            return f"wrote {default} though {option} was given"
    work = list((case_dir / "work").iterdir())
    if work:
        return f"wrote into the folder it ran in: {[p.name for p in work][:3]}"
    return ""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="cases at once (default 2)")
    parser.add_argument("--family", action="append", choices=list(FAMILIES), help="only these")
    parser.add_argument("--postgres", default=POSTGRES_URL, help="administrator URL of a server")
    parser.add_argument(
        "--limit", type=int, default=0, help="first N cases of each family (0: all)"
    )
    parser.add_argument("--only", action="append", help="cases whose name holds this text")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the first case of each family: seconds; exit 1 only when a case could not run",
    )
    args = parser.parse_args()
    if args.smoke:
        args.limit = 1
    return args


def chosen(args: argparse.Namespace) -> list[Case]:
    """The cases the arguments choose, family by family (the prototypes made first)."""
    cases = []
    for name, make in FAMILIES.items():
        if args.family and name not in args.family:
            continue
        made = [c for c in make() if not args.only or any(o in c.name for o in args.only)]
        cases.extend(made[: args.limit] if args.limit else made)
    return cases


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="scalebench-probe-"))
    try:
        proto = prototypes(root)
        cases = chosen(args)
        runs = sum(2 if c.both else 1 for c in cases)
        print(f"{len(cases)} bad inputs, {runs} commands; working under {root}", flush=True)
        databases = Databases(root, args.postgres, proto)
        results: list[Result] = []
        began = time.monotonic()
        last = [began]
        lock = threading.Lock()

        def one(item: tuple[int, Case]) -> None:
            try:
                found = run_case(item[1], root, item[0], databases)
            except Exception as exc:  # the probe's own failure: said, and the run goes on
                note = f"{COULD_NOT_RUN}: {type(exc).__name__}: {exc}"
                found = [Result(item[1], "", "other fault", note, item[1].name, "")]
            with lock:
                results.extend(found)
                now = time.monotonic()
                if now - last[0] > 15 or len(results) == runs:
                    last[0] = now
                    done = len(results)
                    faults = sum(r.outcome in FAULTS for r in results)
                    left = (now - began) / done * (runs - done)
                    print(
                        f"{done}/{runs} commands, {faults} faults so far, {now - began:.0f} s "
                        f"gone, about {left:.0f} s left",
                        flush=True,
                    )

        try:
            with ThreadPoolExecutor(args.jobs) as pool:
                list(pool.map(one, enumerate(cases)))
        finally:
            databases.close()
        status = report(cases, results)
        if not args.smoke:
            return status
        broken = [r for r in results if r.note.startswith(COULD_NOT_RUN)]
        print(
            f"\nsmoke run: {len(cases)} cases, {len(results)} commands in "
            f"{time.monotonic() - started:.0f} s; no goal judged, "
            f"{len(broken)} case(s) the probe could not run"
        )
        return 1 if broken else 0
    finally:
        restore_modes(root)
        shutil.rmtree(root, ignore_errors=True)


def report(cases: list[Case], results: list[Result]) -> int:
    """Print the counts and every case that is not clean; the exit status."""
    per_family: dict[str, Counter] = {}
    differences: list[tuple[Result, Result]] = []
    by_case: dict[int, list[Result]] = {}
    for result in results:
        by_case.setdefault(id(result.case), []).append(result)
    for case in cases:
        counter = per_family.setdefault(case.family, Counter())
        counter["inputs"] += 1
        found = by_case[id(case)]
        for result in found:
            counter[result.outcome] += 1
        if len(found) == 2 and found[0].verdict != found[1].verdict:
            differences.append((found[0], found[1]))
            counter["db differences"] += 1
    columns = ["inputs", *OUTCOMES, "db differences"]
    total = Counter()
    print()
    print("| family | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for family, counter in per_family.items():
        total.update(counter)
        print(f"| {family} | " + " | ".join(str(counter[c]) for c in columns) + " |")
    print("| **total** | " + " | ".join(f"**{total[c]}**" for c in columns) + " |")
    print("\n(outcomes count commands: a case run on both databases counts twice)")
    bad = [r for r in results if r.outcome in FAULTS]
    for result in bad:
        print(
            f"\n[{result.outcome}] {result.case.family}: {result.case.name}"
            f"{' (' + result.database + ')' if result.database else ''}"
        )
        if result.note:
            print(f"  {result.note}")
        print(f"  $ {result.command}")
        for line in [x for x in result.output.splitlines() if x.strip()][-8:]:
            print(f"    {line[:300]}")
    for sqlite, postgres in differences:
        print(f"\n[database difference] {sqlite.case.family}: {sqlite.case.name}")
        print(f"  $ {sqlite.command}")
        for label, result in (("SQLite", sqlite), ("PostgreSQL", postgres)):
            rc, message, rows = result.verdict
            print(f"  {label}: exit {rc}, {message[:200]!r}, {rows[:300]}")
    return 1 if bad or differences else 0


if __name__ == "__main__":
    sys.exit(main())
