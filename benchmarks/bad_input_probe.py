"""Bad input, given the way a user gives it, and what each one ends in.

Generates several hundred bad inputs and runs each as its own process, as a user would:
``python -m cli.main ...`` (every subcommand), ``python -m cli.main ingest`` of damaged sweep
directories, and ``python -m cli.embedded <dag_id> '<conf>'``. Every outcome is classified:

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
import contextlib
import functools
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
LIGHT_ID = "task1a-resnet20-cifar10-20261122T021829Z-37f8"
ALLREDUCE_ID = "task0-allreduce-20261122T021847Z-80d9"
POSTGRES_URL = os.environ.get(
    "SCALEBENCH_TEST_POSTGRES_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
)
ROOT = os.geteuid() == 0  # root reads and writes past file modes: a mode-000 file is usable
TIMEOUT_S = 60.0
SAID_REFUSED, SAID_QUARANTINED = (
    "  refused: ",
    "  unreadable: ",
)  # ingest's lines for each  # a case without an answer by then is a fault (a read that never ends)
OUTCOMES = ("refused", "accepted correctly", "traceback", "silent accept", "other fault")
FAULTS = ("traceback", "silent accept", "other fault")
COULD_NOT_RUN = "the probe could not run it"  # the note of a case the probe itself failed on
MESSAGE = re.compile(
    r"^(scalebench|cli\.embedded|python -m cli\.embedded)[\w -]*: error: |^\s+refused: "
)


@dataclass
class Case:
    """One bad input. ``argv`` follows ``python -m <module>``; ``{case}`` is the case's folder,
    ``{db}`` its database URL, ``{loc}`` its folder of sweeps."""

    family: str
    name: str
    argv: list[str]
    module: str = "cli.main"
    env: dict[str, str] = field(default_factory=dict)
    build: Callable[[Path], None] | None = None  # makes the case's files under its folder
    both: bool = False  # once with SQLite, once with PostgreSQL
    seeded: bool = False  # the database holds the good sweep before the command
    valid: bool = False  # usable input: exit 0 is right when nothing wrong is stored
    names: str = ""  # the refusal must name this, else the bad value was taken
    good_beside: bool = False  # a good sweep lies beside the damaged one and must be stored
    check: Callable[[Path, str | None], str | None] | None = None  # what is wrong, or None


@dataclass
class Result:
    case: Case
    database: str  # "sqlite", "postgresql" or "" (no database of its own)
    outcome: str
    note: str
    command: str
    output: str
    verdict: tuple = ()


# -- the sweeps the damage is done to ---------------------------------------------------------


def copy_renamed(source: Path, old: str, new: str, target: Path) -> None:
    """Copy a sweep directory, its sweep id ``old`` renamed ``new`` in names and contents."""
    for path in sorted(source.rglob("*")):
        dest = target / path.relative_to(source).as_posix().replace(old, new)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(path.read_bytes().replace(old.encode(), new.encode()))


def prototypes(root: Path) -> Path:
    """The good, bad-to-be and all-reduce sweeps every ingest case copies."""
    proto = root / "prototypes"
    copy_renamed(DATA / "sweep-light", LIGHT_ID, "bad", proto / "bad")
    copy_renamed(DATA / "sweep-light", LIGHT_ID, "good", proto / "good")
    copy_renamed(DATA / "sweep-allreduce", ALLREDUCE_ID, "ar", proto / "ar")
    return proto


PROTO: Path = Path()
BAD_RUN = "bad-w2-r0"
GOOD_RUNS = {"good-w1-r0", "good-w2-r0"}


def place(case_dir: Path, *sweeps: str) -> Path:
    loc = case_dir / "loc"
    for sweep in sweeps:
        shutil.copytree(PROTO / sweep, loc / sweep)
    return loc


def manifest_text(case_dir: Path, sweep: str = "bad") -> Path:
    return case_dir / "loc" / sweep / "sweep.json"


def rank_file(case_dir: Path, rank: int = 1, sweep: str = "bad", run: str = BAD_RUN) -> Path:
    return case_dir / "loc" / sweep / run / f"rank-{rank}.jsonl"


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_records(path: Path, lines: list[dict | str]) -> None:
    text = (line if isinstance(line, str) else json.dumps(line) for line in lines)
    path.write_text("".join(line + "\n" for line in text))


# -- the families -----------------------------------------------------------------------------

INGEST = ["ingest", "{loc}", "--database", "{db}"]


def ingest_case(family: str, name: str, damage: Callable[[Path], None], **kw) -> Case:
    """Ingest a folder holding the damaged sweep (``damage`` gets the case folder after
    ``bad`` and ``good`` are placed) and a good sweep beside it."""

    def build(case_dir: Path) -> None:
        place(case_dir, "bad", "good")
        damage(case_dir)

    kw.setdefault("good_beside", True)
    return Case(family, name, INGEST, build=build, both=True, **kw)


def edit_manifest(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(case_dir: Path) -> None:
        path = manifest_text(case_dir)
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return damage


def write_manifest(content: bytes | str) -> Callable[[Path], None]:
    def damage(case_dir: Path) -> None:
        path = manifest_text(case_dir)
        path.write_bytes(content.encode() if isinstance(content, str) else content)

    return damage


def manifest_cases() -> list[Case]:
    good = (PROTO / "bad" / "sweep.json").read_text()
    family = "sweep.json"
    cases = [ingest_case(family, "empty", write_manifest(""))]
    for cut in (1, 10, 50, 200, len(good) // 2, len(good) - 3):
        cases.append(ingest_case(family, f"cut after {cut} characters", write_manifest(good[:cut])))
    for label, text in {
        "a list": "[]",
        "a number": "7",
        "a string": '"sweep"',
        "null": "null",
        "true": "true",
        "whitespace": "   \n",
        "a BOM then JSON": "\ufeff" + good,
        "NaN as a value": good.replace('"repeats": 1', '"repeats": NaN'),
        "Infinity as a value": good.replace('"repeats": 1', '"repeats": Infinity'),
        "10,000 nested lists": "[" * 10_000 + "]" * 10_000,
        "100,000 nested objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
        "a huge integer": good.replace('"repeats": 1', '"repeats": ' + "9" * 5000),
        "two JSON objects": good + good,
        "a NUL byte": good.replace('"cli"', '"c\\u0000li"'),
    }.items():
        cases.append(ingest_case(family, label, write_manifest(text)))
    cases.append(ingest_case(family, "not UTF-8", write_manifest(b'{"sweep_id": "\xff\xfe"}')))
    cases.append(
        ingest_case(
            family,
            "Latin-1 text",
            write_manifest(good.replace("cli", "cl\u00e9").encode("latin-1")),
        )
    )

    def drop(*keys: str) -> Callable[[dict], object]:
        return lambda data: [data.pop(key, None) for key in keys]

    def setter(path: tuple, value: object) -> Callable[[dict], object]:
        def change(data: dict) -> None:
            target = data
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value

        return change

    for key in ("groups", "request", "sweep_id"):
        cases.append(ingest_case(family, f"without '{key}'", edit_manifest(drop(key))))
    # Sweeps written before the trigger and the planning time were recorded lack them, or
    # hold an empty time once rewritten: ingest reads them as a command-line sweep, planned
    # when its folder was made.
    cases.append(
        ingest_case(family, "without 'trigger'", edit_manifest(drop("trigger")), valid=True)
    )
    cases.append(ingest_case(family, "without 'task' in its request", edit_manifest(drop_task)))
    wrong_values: dict[str, tuple[tuple, object]] = {
        "groups an object": (("groups",), {"a": 1}),
        "groups a string": (("groups",), "w1"),
        "groups of numbers": (("groups",), [1, 2]),
        "groups empty": (("groups",), []),
        "request a list": (("request",), [1]),
        "request null": (("request",), None),
        "sweep_id a number": (("sweep_id",), 7),
        "sweep_id with ../": (("sweep_id",), "../escape"),
        "sweep_id with a slash": (("sweep_id",), "a/b"),
        "sweep_id 300 characters": (("sweep_id",), "s" * 300),
        "sweep_id empty": (("sweep_id",), ""),
        "sweep_id another sweep's": (("sweep_id",), "good"),
        "trigger a list": (("trigger",), [1]),
        "trigger 300 characters": (("trigger",), "t" * 300),
        "task unknown": (("request", "task"), "task9-nothing"),
        "task a number": (("request", "task"), 7),
        "task 500 characters": (("request", "task"), "x" * 500),
        "world_sizes of words": (("request", "world_sizes"), ["one"]),
        "world_sizes negative": (("request", "world_sizes"), [-1]),
        "repeats negative": (("request", "repeats"), -2),
        "backend unknown": (("request", "backend"), "carrier-pigeon"),
        "backend a number": (("request", "backend"), 3),
        "seed a string": (("request", "seed"), "zero"),
        "light a string": (("request", "light"), "yes"),
        "collective timeout negative": (("request", "collective_timeout_s"), -5),
        "collective timeout NaN": (("request", "collective_timeout_s"), float("nan")),
        "group timeout 1e308": (("request", "group_timeout_s"), 1e308),
        "variant unknown": (("request", "variant"), "chaotic"),
        "unknown request field": (("request", "bogus"), 1),
        "code_version a number": (("code_version",), 5),
        "config_hash a list": (("config_hash",), [1]),
        "finished_at nonsense": (("finished_at",), "when it was done"),
    }
    for stamp in ("", "yesterday", "2026-13-45T00:00:00", "2026-11-22 25:61", "0000-00-00"):
        wrong_values[f"created_at {stamp!r}"] = (("created_at",), stamp)
    wrong_values["created_at a number"] = (("created_at",), 1732233600)
    wrong_values["created_at null"] = (("created_at",), None)
    wrong_values["created_at in the year 99999"] = (("created_at",), "99999-01-01T00:00:00")
    older_forms = ("created_at ''", "created_at null")
    for name, (path, value) in wrong_values.items():
        valid = name in older_forms
        cases.append(ingest_case(family, name, edit_manifest(setter(path, value)), valid=valid))
    group_values: dict[str, tuple[str, object]] = {
        "world_size 0": ("world_size", 0),
        "world_size -2": ("world_size", -2),
        "world_size text": ("world_size", "2"),
        "world_size 2.5": ("world_size", 2.5),
        "world_size 10^12": ("world_size", 10**12),
        "world_size true": ("world_size", True),
        "repeat -1": ("repeat", -1),
        "repeat 10^12": ("repeat", 10**12),
        "status unknown": ("status", "great"),
        "status a number": ("status", 1),
        "seconds negative": ("seconds", -5),
        "seconds 1e308": ("seconds", 1e308),
        "seconds NaN": ("seconds", float("nan")),
        "seconds text": ("seconds", "ten"),
        "reason a list": ("reason", ["x"]),
        "run_id another sweep's": ("run_id", "good-w2-r0"),
        "run_id with ../": ("run_id", "../../escape"),
        "run_id a number": ("run_id", 7),
        "run_id 300 characters": ("run_id", "r" * 300),
        "network a number": ("network", 5),
        "attempts a string": ("attempts", "one"),
    }
    for name, (key, value) in group_values.items():
        cases.append(
            ingest_case(family, f"a group's {name}", edit_manifest(group_setter(key, value)))
        )
    cases.append(ingest_case(family, "a group that is a list", edit_manifest(group_replaced([1]))))
    cases.append(ingest_case(family, "a group listed twice", edit_manifest(group_twice)))
    for label, target in {
        "a link to a text file": "{case}/notes.txt",
        "a link to /dev/null": "/dev/null",
        "a link to /dev/zero": "/dev/zero",
        "a link to /dev/urandom": "/dev/urandom",
        "a link to nothing": "{case}/nowhere.json",
        "a link to itself": "{self}",
        "a link to a folder": "{case}",
    }.items():
        cases.append(ingest_case(family, f"sweep.json {label}", link_manifest(target)))
    cases.append(ingest_case(family, "sweep.json a folder", folder_manifest))
    cases.append(ingest_case(family, "sweep.json a FIFO", fifo_manifest))
    cases.append(
        ingest_case(family, "sweep.json unreadable (mode 000)", unreadable_manifest, valid=ROOT)
    )
    cases.append(  # without its manifest a folder is no sweep: nothing of it is stored
        ingest_case(family, "sweep.json missing", lambda d: manifest_text(d).unlink(), valid=True)
    )
    cases.append(
        ingest_case(
            family, "sweep.json 50 MB of spaces then {}", write_manifest(" " * 50_000_000 + "{}")
        )
    )
    # The damaged sweep given on its own, as the location.
    for label, damage in {
        "empty": write_manifest(""),
        "not an object": write_manifest("[1]"),
        "without groups": edit_manifest(drop("groups")),
    }.items():
        cases.append(
            Case(
                family,
                f"the damaged sweep as the location: {label}",
                ["ingest", "{loc}/bad", "--database", "{db}"],
                build=lambda d, damage=damage: (place(d, "bad"), damage(d)),
                both=True,
            )
        )
    return cases


def drop_task(data: dict) -> None:
    data["request"].pop("task", None)


def group_setter(key: str, value: object) -> Callable[[dict], object]:
    return lambda data: data["groups"][1].update({key: value})


def group_replaced(value: object) -> Callable[[dict], object]:
    return lambda data: data["groups"].__setitem__(1, value)


def group_twice(data: dict) -> None:
    data["groups"].append(dict(data["groups"][1]))


def link_manifest(target: str) -> Callable[[Path], None]:
    def damage(case_dir: Path) -> None:
        path = manifest_text(case_dir)
        (case_dir / "notes.txt").write_text("these are notes, not JSON\n")
        path.unlink()
        path.symlink_to(target.replace("{case}", str(case_dir)).replace("{self}", str(path)))

    return damage


def folder_manifest(case_dir: Path) -> None:
    path = manifest_text(case_dir)
    path.unlink()
    path.mkdir()


def fifo_manifest(case_dir: Path) -> None:
    path = manifest_text(case_dir)
    path.unlink()
    os.mkfifo(path)


def unreadable_manifest(case_dir: Path) -> None:
    manifest_text(case_dir).chmod(0)


def change_record(
    kind: str, change: Callable[[dict], object], nth: int = 0
) -> Callable[[Path], None]:
    """Change the ``nth`` record of ``kind`` in the bad run's rank 1."""

    def damage(case_dir: Path) -> None:
        path = rank_file(case_dir)
        lines = records(path)
        chosen = [r for r in lines if r["kind"] == kind][nth]
        change(chosen)
        write_records(path, lines)

    return damage


def phase(name: str, value: object) -> Callable[[dict], object]:
    return lambda record: record["phases"].update({name: value})


def raw_lines(*extra: str | bytes, at: int = 3) -> Callable[[Path], None]:
    """Insert ``extra`` lines (as bytes) after line ``at`` of the bad run's rank 1."""

    def damage(case_dir: Path) -> None:
        path = rank_file(case_dir)
        lines = path.read_bytes().splitlines(keepends=True)
        added = [(e.encode() if isinstance(e, str) else e) + b"\n" for e in extra]
        path.write_bytes(b"".join([*lines[:at], *added, *lines[at:]]))

    return damage


def rank_cases() -> list[Case]:
    family = "rank files"
    cases: list[Case] = []
    quarantined = {
        "a line that is not JSON": raw_lines("this is not json"),
        "a JSON list": raw_lines("[1, 2, 3]"),
        "a JSON number": raw_lines("42"),
        "an empty object": raw_lines("{}"),
        "a record without kind": raw_lines('{"v": 1, "t": 1.0}'),
        "a record of an unknown kind": raw_lines(
            json.dumps(
                {"v": 1, "run_id": BAD_RUN, "rank": 1, "world_size": 2, "kind": "gossip", "t": 1.0}
            )
        ),
        "a NUL byte line": raw_lines(b"\x00\x00\x00"),
        "a line of invalid UTF-8": raw_lines(b'{"v": 1, "kind": "step", "x": "\xff\xfe"}'),
        "a line over the length cap": raw_lines(b'{"pad": "' + b"x" * 2_000_000 + b'"}'),
        "a line of 10,000 nested lists": raw_lines("[" * 10_000 + "]" * 10_000),
        "a line of 100,000 nested objects": raw_lines('{"a":' * 100_000 + "1" + "}" * 100_000),
        "a huge integer in a line": raw_lines('{"v": ' + "9" * 5000 + "}"),
    }
    for name, damage in quarantined.items():
        cases.append(ingest_case(family, name, damage, check=quarantine_said))
    impossible = {
        "a phase time of 1e308": change_record("step", phase("forward", 1e308), 3),
        "a phase time of -1": change_record("step", phase("backward", -1.0), 3),
        "a phase time of -1e-9": change_record("step", phase("data", -1e-9), 3),
        "a phase time NaN": change_record("step", phase("forward", float("nan")), 3),
        "a phase time Infinity": change_record("step", phase("forward", float("inf")), 3),
        "a phase time -Infinity": change_record("step", phase("loss", float("-inf")), 3),
        "a phase time as text": change_record("step", phase("forward", "fast"), 3),
        "a phase time null": change_record("step", phase("forward", None), 3),
        "a phase time true": change_record("step", phase("forward", True), 3),
        "a phase time of a year": change_record("step", phase("forward", 3.2e7), 3),
        "an unknown phase": change_record("step", phase("teleport", 0.1), 3),
        "phases a list": change_record("step", lambda r: r.update(phases=[1, 2]), 3),
        "phases missing": change_record("step", lambda r: r.pop("phases"), 3),
        "a step time of -5": change_record("step", lambda r: r.update(t=-5.0), 0),
        "a step time of 1e308": change_record("step", lambda r: r.update(t=1e308), 3),
        "a step time NaN": change_record("step", lambda r: r.update(t=float("nan")), 3),
        "a step time as text": change_record("step", lambda r: r.update(t="soon"), 3),
        "samples negative": change_record("step", lambda r: r.update(samples=-128), 3),
        "samples 1e20": change_record("step", lambda r: r.update(samples=10**20), 3),
        "samples 2.5": change_record("step", lambda r: r.update(samples=2.5), 3),
        "epoch negative": change_record("step", lambda r: r.update(epoch=-1), 3),
        "epoch 10^12": change_record("step", lambda r: r.update(epoch=10**12), 3),
        "step negative": change_record("step", lambda r: r.update(step=-3), 3),
        "step 10^30": change_record("step", lambda r: r.update(step=10**30), 3),
        "loss as text": change_record("step", lambda r: r.update(loss="low"), 3),
        "lr negative infinity": change_record("step", lambda r: r.update(lr=float("-inf")), 3),
        "rank 7 in rank-1.jsonl": change_record("step", lambda r: r.update(rank=7), 3),
        "rank -1": change_record("step", lambda r: r.update(rank=-1), 3),
        "world_size 3 in a group of 2": change_record("step", lambda r: r.update(world_size=3), 3),
        "another run's id": change_record("step", lambda r: r.update(run_id="good-w2-r0"), 3),
        "a run id with ../": change_record("step", lambda r: r.update(run_id="../x"), 3),
        "schema version 99": change_record("step", lambda r: r.update(v=99), 3),
        "schema version as text": change_record("step", lambda r: r.update(v="1"), 3),
        "an eval's wall_seconds negative": change_record(
            "eval", lambda r: r.update(wall_seconds=-4.0)
        ),
        "an eval's eval_seconds 1e308": change_record(
            "eval", lambda r: r.update(eval_seconds=1e308)
        ),
        "an eval's epoch -1": change_record("eval", lambda r: r.update(epoch=-1)),
        "an eval's metrics a list": change_record("eval", lambda r: r.update(metrics=[1])),
        "an eval's accuracy NaN": change_record(
            "eval", lambda r: r["metrics"].update(top1_accuracy=float("nan"))
        ),
        "an event's t negative": change_record("event", lambda r: r.update(t=-100.0)),
        "a start's started_at nonsense": change_record(
            "event", lambda r: r.update(started_at="teatime")
        ),
        "an unknown event": change_record("event", lambda r: r.update(event="lunch")),
        "an event name of 300 characters": change_record(
            "event", lambda r: r.update(event="e" * 300)
        ),
        "an env host of 1,000 characters": change_record(
            "env", lambda r: r.update(host="h" * 1000)
        ),
        "an env gpus a string": change_record("env", lambda r: r.update(gpus="all of them")),
        "a goal's time_to_accuracy_s negative": change_record(
            "event", lambda r: r.update(time_to_accuracy_s=-1.0), 1
        ),
    }
    for name, damage in impossible.items():
        cases.append(ingest_case(family, name, damage))
    cases.append(ingest_case(family, "step times running backwards", steps_backwards))
    cases.append(ingest_case(family, "every step at the same time", same_time))
    for label, target in {
        "a link to /dev/zero": "/dev/zero",
        "a link to /dev/urandom": "/dev/urandom",
        "a link to a folder": "{case}",
        "a link to nothing": "{case}/nowhere",
        "a link to /etc/passwd": "/etc/passwd",
    }.items():
        cases.append(ingest_case(family, f"rank-1.jsonl {label}", link_rank(target)))
    cases.append(ingest_case(family, "rank-1.jsonl a FIFO", fifo_rank))
    cases.append(ingest_case(family, "rank-1.jsonl a folder", folder_rank))
    cases.append(
        ingest_case(family, "rank-1.jsonl unreadable (mode 000)", unreadable_rank, valid=ROOT)
    )
    # A rank that wrote nothing, in a group its launcher called a success: the run is stored
    # failed, naming the rank, as a group whose rank was killed early is.
    for label, damage in {
        "rank-1.jsonl empty": lambda d: rank_file(d).write_text(""),
        "rank-1.jsonl missing": lambda d: rank_file(d).unlink(),
    }.items():
        cases.append(ingest_case(family, label, damage, valid=True, check=stored_failed_by_rank_1))
    cases.append(
        ingest_case(family, "rank-1.jsonl Latin-1 throughout", latin1_rank, check=quarantine_said)
    )
    cases.append(ingest_case(family, "rank-1.jsonl with CRLF line ends", crlf_rank, valid=True))
    cases.append(ingest_case(family, "rank-1.jsonl with a BOM", bom_rank))
    cases.append(
        ingest_case(
            family, "rank-1.jsonl one line of 200 MB", huge_line_rank, check=quarantine_said
        )
    )
    cases.append(ingest_case(family, "rank-5.jsonl in a group of 2", extra_rank))
    cases.append(ingest_case(family, "rank-1.jsonl a copy of rank 0", copied_rank))
    cases.append(ingest_case(family, "rank-1.jsonl the last line cut", cut_last_line, valid=True))
    cases.append(ingest_case(family, "verdicts.jsonl of garbage", garbage_verdicts))
    # Nothing of scalebench reads the MLPerf log (MLPerf's own checker does): no damage to it
    # can be stored.
    cases.append(ingest_case(family, "mllog-rank-0.log of binary", binary_mllog, valid=True))
    for name, change in {
        "seconds negative": lambda r: r.update(seconds=[-1.0] * 10),
        "seconds NaN": lambda r: r.update(seconds=[float("nan")] * 10),
        "seconds 1e308": lambda r: r.update(seconds=[1e308] * 10),
        "seconds empty": lambda r: r.update(seconds=[]),
        "seconds a number": lambda r: r.update(seconds=0.1),
        "bytes negative": lambda r: r.update(bytes=-4),
        "bytes 10^30": lambda r: r.update(bytes=10**30),
        "elements 0": lambda r: r.update(elements=0),
        "dtype unknown": lambda r: r.update(dtype="float3"),
        "dtype of 100 characters": lambda r: r.update(dtype="f" * 100),
    }.items():
        cases.append(
            Case(
                family,
                f"an all-reduce record's {name}",
                ["ingest", "{loc}", "--database", "{db}"],
                build=allreduce_damage(change),
                both=True,
            )
        )
    return cases


def stored_failed_by_rank_1(case_dir: Path, output: str | None) -> str | None:
    """The damaged run is right only as a failed run whose stored reason names rank 1."""
    if output is not None and f"{BAD_RUN}: failed" not in output:
        return "a run with a rank that wrote nothing was not said to have failed"
    return None


def quarantine_said(case_dir: Path, output: str | None) -> str | None:
    """A quarantined line is right only if the output says so."""
    if output is not None and SAID_QUARANTINED not in output:
        return "a bad line was dropped without a word"
    return None


def steps_backwards(case_dir: Path) -> None:
    path = rank_file(case_dir)
    lines = records(path)
    steps = [r for r in lines if r["kind"] == "step"]
    steps[6]["t"] = steps[2]["t"] - 0.5
    write_records(path, lines)


def same_time(case_dir: Path) -> None:
    path = rank_file(case_dir)
    lines = records(path)
    for record in lines:
        if record["kind"] == "step":
            record["t"] = 1.0
    write_records(path, lines)


def link_rank(target: str) -> Callable[[Path], None]:
    def damage(case_dir: Path) -> None:
        path = rank_file(case_dir)
        path.unlink()
        path.symlink_to(target.replace("{case}", str(case_dir)))

    return damage


def fifo_rank(case_dir: Path) -> None:
    rank_file(case_dir).unlink()
    os.mkfifo(rank_file(case_dir))


def folder_rank(case_dir: Path) -> None:
    rank_file(case_dir).unlink()
    rank_file(case_dir).mkdir()


def unreadable_rank(case_dir: Path) -> None:
    rank_file(case_dir).chmod(0)


def latin1_rank(case_dir: Path) -> None:
    path = rank_file(case_dir)
    path.write_bytes(path.read_bytes().replace(b'"gloo"', b'"gl\xf6\xf6"'))


def crlf_rank(case_dir: Path) -> None:
    path = rank_file(case_dir)
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))


def bom_rank(case_dir: Path) -> None:
    path = rank_file(case_dir)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())


def huge_line_rank(case_dir: Path) -> None:
    with rank_file(case_dir).open("ab") as handle:
        for _ in range(200):
            handle.write(b"x" * 1_000_000)


def extra_rank(case_dir: Path) -> None:
    shutil.copy(rank_file(case_dir), rank_file(case_dir, 5))


def copied_rank(case_dir: Path) -> None:
    shutil.copy(rank_file(case_dir, 0), rank_file(case_dir, 1))


def cut_last_line(case_dir: Path) -> None:
    path = rank_file(case_dir)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])


def garbage_verdicts(case_dir: Path) -> None:
    (case_dir / "loc" / "bad" / "verdicts.jsonl").write_bytes(b"\xff\xfe garbage\n[1]\n")


def binary_mllog(case_dir: Path) -> None:
    (case_dir / "loc" / "bad" / BAD_RUN / "mllog-rank-0.log").write_bytes(bytes(range(256)) * 10)


def allreduce_damage(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def build(case_dir: Path) -> None:
        place(case_dir, "ar")
        path = case_dir / "loc" / "ar" / "ar-w2-r0" / "rank-1.jsonl"
        lines = records(path)
        change([r for r in lines if r["kind"] == "allreduce"][2])
        write_records(path, lines)

    return build


# -- settings, databases, paths, locations, prices, sweeps, arguments --------------------------

GUARD = "sqlite:///{case}/guard.db"  # a file that is no database: stops `run` before training
RUN = ["run", "task0-allreduce", "--light", "--workers", "2", "--database", GUARD]


def guard(case_dir: Path) -> None:
    (case_dir / "guard.db").write_text("this file is not a database\n")


def guard_refused(case_dir: Path, output: str | None) -> str | None:
    return None


def settings_cases() -> list[Case]:
    family = "settings"
    cases = []
    bad = {
        "SCALEBENCH_MAX_WORKERS": ["abc", "0", "-1", "1.5", "", " ", "1e9", "nan", "0x10", "²"],
        "SCALEBENCH_COMPILE": ["sometimes", "", "ON", "auto;rm"],
        "SCALEBENCH_MLPERF_DIVISION": ["openish", "CLOSED", "x" * 300],
        "SCALEBENCH_MLPERF_STATUS": ["maybe", "Research", "0"],
        "SCALEBENCH_RESULTS_URI": [
            "",
            " ",
            "file://",
            "s3://bucket/results",
            "http://x/r",
            "zip://a",
        ],
    }
    for variable, values in bad.items():
        for value in values:
            cases.append(
                Case(
                    family,
                    f"run with {variable}={value[:20]!r}",
                    RUN,
                    env={variable: value},
                    build=guard,
                    names=variable,
                )
            )
    # Possible values: the run goes on to the guard database, which refuses it.
    for variable, value in (
        ("SCALEBENCH_MAX_WORKERS", "99999999999999999999"),
        ("SCALEBENCH_MAX_WORKERS", " 4 "),
        ("SCALEBENCH_MLPERF_ORG", "o" * 2000),
        ("SCALEBENCH_MLPERF_PLATFORM", "\u2603 snowman"),
    ):
        cases.append(
            Case(
                family,
                f"run with {variable}={value[:20]!r} (possible)",
                RUN,
                env={variable: value},
                build=guard,
                names="database: cannot read the results database",
                valid=True,
            )
        )
    ingest_settings = {
        "SCALEBENCH_STATEMENT_TIMEOUT_S": ["abc", "0", "-1", "nan", "inf", "", "1e400", "86401"],
        "SCALEBENCH_CONTENTION_THRESHOLD": ["abc", "2", "-0.1", "nan", "inf", "", "1e400"],
    }
    for variable, values in ingest_settings.items():
        for value in values:
            cases.append(
                Case(
                    family,
                    f"ingest with {variable}={value!r}",
                    INGEST,
                    env={variable: value},
                    build=lambda d: place(d, "good"),
                    names=variable,
                    both=True,
                )
            )
    for value in [
        "",
        " ",
        "bogus",
        "sqlite://",
        "sqlite:////nonexistent/dir/x.db",
        "mysql://u@h/d",
        "postgresql://[::1",
        "postgresql://u@[::1]:99999/d",
        "postgresql://u@host:port/d",
        "oracle+cx_oracle://u@h/d",
        "sqlite:///{case}",
    ]:
        for command in (
            ["report", "x"],
            ["ingest", "{loc}"],
            ["db", "upgrade"],
            ["prices", "list"],
        ):
            cases.append(
                Case(
                    family,
                    f"{command[0]} with SCALEBENCH_DATABASE_URL={value[:30]!r}",
                    command,
                    env={"SCALEBENCH_DATABASE_URL": value},
                    build=lambda d: place(d, "good"),
                    names="database" if value.strip() else "SCALEBENCH_DATABASE_URL",
                )
            )
    for value in ["", " ", "{case}/missing"]:
        cases.append(
            Case(
                family,
                f"data digits with SCALEBENCH_DATA_DIR={value!r}",
                ["data", "digits"],
                env={"SCALEBENCH_DATA_DIR": value},
                valid=value.startswith("{case}"),  # digits ships with scikit-learn
            )
        )
    return cases


def not_a_database(case_dir: Path) -> None:
    (case_dir / "text.db").write_text("SQLite format 3? no.\n" * 100)
    (case_dir / "zeros.db").write_bytes(b"\x00" * 4096)
    (case_dir / "header.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 4080)
    (case_dir / "folder.db").mkdir()
    (case_dir / "empty.db").write_text("")


def _pg_message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _hold(conn: socket.socket, logs_in: bool) -> None:
    """One connection to a PostgreSQL that never answers: with ``logs_in``, the startup is
    answered the way a real server answers it (no password asked), then nothing more."""
    with contextlib.suppress(OSError):
        while logs_in:  # SSL and GSS encryption requests are declined, then the startup
            (length, code) = struct.unpack("!ii", conn.recv(8, socket.MSG_WAITALL))
            if code in (80877103, 80877104):
                conn.sendall(b"N")
                continue
            conn.recv(length - 8, socket.MSG_WAITALL)
            status = [
                (b"server_version", b"15.0"),
                (b"client_encoding", b"UTF8"),
                (b"DateStyle", b"ISO, MDY"),
                (b"standard_conforming_strings", b"on"),
                (b"integer_datetimes", b"on"),
            ]
            conn.sendall(
                _pg_message(b"R", struct.pack("!i", 0))
                + b"".join(_pg_message(b"S", k + b"\0" + v + b"\0") for k, v in status)
                + _pg_message(b"K", struct.pack("!ii", 4242, 1))
                + _pg_message(b"Z", b"I")
            )
            break
        while conn.recv(1 << 16):  # read, never answered
            pass


@functools.cache
def silent_postgres(logs_in: bool) -> str:
    """The URL of a PostgreSQL on 127.0.0.1 that never answers (``logs_in``: only after the
    login), served by this process's threads until it ends."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def serve() -> None:
        while True:
            conn = server.accept()[0]
            threading.Thread(target=_hold, args=(conn, logs_in), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return f"postgresql+psycopg2://nobody@127.0.0.1:{server.getsockname()[1]}/results"


def silent_server_cases(family: str) -> list[Case]:
    """A PostgreSQL that never completes the login (the connect timeout ends it, 10 s), and
    one that logs in and never answers a statement (the statement timeout, set to 2 s, and
    its 5 s of grace): each refused naming the limit."""
    cases = []
    for logs_in, how, names, env in (
        (False, "never logs in", "connect timeout", {}),
        (
            True,
            "logs in, never answers",
            "SCALEBENCH_STATEMENT_TIMEOUT_S",
            {"SCALEBENCH_STATEMENT_TIMEOUT_S": "2"},
        ),
    ):
        for command in (["ingest", "{loc}"], ["report", "x"], ["prices", "list"]):
            cases.append(
                Case(
                    family,
                    f"{command[0]} --database a PostgreSQL that {how}",
                    [*command, "--database", silent_postgres(logs_in)],
                    env=env,
                    build=lambda d: place(d, "good"),
                    names=names,
                )
            )
    return cases


def database_cases() -> list[Case]:
    family = "databases"
    cases = []
    files = ["text.db", "zeros.db", "header.db", "folder.db", "empty.db"]
    commands = [
        ["report", "x"],
        ["ingest", "{loc}"],
        ["db", "upgrade"],
        ["prices", "list"],
        ["export", "x", "--out", "{case}/out"],
        ["regressions", "x"],
        ["db", "refit"],
        ["project", "x", "--allreduce", "y"],
    ]
    for name in files:
        for command in commands:
            cases.append(
                Case(
                    family,
                    f"{command[0]} {command[1]} on {name}",
                    [*command, "--database", f"sqlite:///{{case}}/{name}"],
                    build=lambda d: (not_a_database(d), place(d, "good")),
                    # an empty file is a database SQLite can start: ingest and upgrade fill it
                    valid=name == "empty.db" and command[0] in ("ingest", "db"),
                )
            )
    urls = [
        "",
        "nonsense",
        "sqlite:/relative",
        "http://example.org/db",
        "postgresql://",
        "postgresql://[::1",
        "postgresql://[::1]:5432",
        "postgresql://[fe80::1%eth0]/x",
        "postgresql://u:p@[::1]:notaport/d",
        "postgresql://u@127.0.0.1:1/d",
        "postgresql://u@:5432/d",
        "postgresql+nodriver://u@h/d",
        "sqlite:///" + "a/" * 3000 + "x.db",
        "sqlite:///{case}/no/such/folder/x.db",
        "sqlite:///:memory:",
        "postgresql://u@256.256.256.256/d",
        "postgresql://%zz@h/d",
    ]
    for url in urls:
        for command in (["report", "x"], ["ingest", "{loc}"], ["prices", "list"]):
            cases.append(
                Case(
                    family,
                    f"{command[0]} --database {url[:40]!r}",
                    [*command, "--database", url],
                    build=lambda d: place(d, "good"),
                    valid=url == "sqlite:///:memory:" and command[0] == "ingest",
                )
            )
    for revision in [
        "nope",
        "0009@-20",
        "0009@+3",
        "head+5",
        "base",
        "-1",
        "",
        "0001:0003",
        "heads",
        "x" * 300,
    ]:
        cases.append(
            Case(
                family,
                f"db upgrade --revision {revision[:20]!r}",
                ["db", "upgrade", "--revision", revision, "--database", "{db}"],
                both=True,
                valid=revision in ("base", "heads"),
            )
        )
    cases.extend(silent_server_cases(family))
    return cases


def path_cases() -> list[Case]:
    family = "paths"
    long_name = "n" * 300
    long_path = "/".join(["d" * 200] * 30)
    seeded = {"both": False, "seeded": True}
    cases = [
        Case(
            family,
            "export --out an existing file",
            ["export", "good", "--out", "{case}/file", "--database", "{db}"],
            build=lambda d: (d / "file").write_text("x"),
            **seeded,
        ),
        Case(
            family,
            "export --out in a missing folder (made)",
            ["export", "good", "--out", "{case}/a/b/c", "--database", "{db}"],
            valid=True,
            **seeded,
            check=lambda d, o: None if (d / "a/b/c").is_dir() else "no export folder",
        ),
        Case(
            family,
            "export --out a file name too long",
            ["export", "good", "--out", f"{{case}}/{long_name}", "--database", "{db}"],
            **seeded,
        ),
        Case(
            family,
            "export --out a path too long",
            ["export", "good", "--out", f"{{case}}/{long_path}", "--database", "{db}"],
            **seeded,
        ),
        Case(
            family,
            "export --out ''",
            ["export", "good", "--out", "", "--database", "{db}"],
            **seeded,
        ),
        Case(
            family,
            "export --out /proc",
            ["export", "good", "--out", "/proc", "--database", "{db}"],
            **seeded,
        ),
        Case(
            family,
            "export --out a read-only folder",
            ["export", "good", "--out", "{case}/ro", "--database", "{db}"],
            build=read_only_folder,
            valid=ROOT,
            **seeded,
        ),
        Case(
            family,
            "export --format xml",
            ["export", "good", "--format", "xml", "--out", "{case}/o", "--database", "{db}"],
            **seeded,
        ),
        Case(
            family,
            "export --format ''",
            ["export", "good", "--format", "", "--out", "{case}/o", "--database", "{db}"],
            **seeded,
        ),
        Case(
            family,
            "run --results ''",
            [
                "run",
                "task0-allreduce",
                "--light",
                "--workers",
                "2",
                "--results",
                "",
                "--database",
                GUARD,
            ],
            build=guard,
        ),
        Case(
            family,
            "run --results ' '",
            [
                "run",
                "task0-allreduce",
                "--light",
                "--workers",
                "2",
                "--results",
                " ",
                "--database",
                GUARD,
            ],
            build=guard,
        ),
        Case(
            family,
            "run --database ''",
            ["run", "task0-allreduce", "--light", "--workers", "2", "--database", ""],
        ),
        Case(
            family,
            "run --results a path too long",
            [
                "run",
                "task0-allreduce",
                "--light",
                "--workers",
                "2",
                "--results",
                f"{{case}}/{long_path}",
                "--no-ingest",
            ],
        ),
        Case(
            family,
            "run --results an existing file",
            [
                "run",
                "task0-allreduce",
                "--light",
                "--workers",
                "2",
                "--results",
                "{case}/file",
                "--no-ingest",
            ],
            build=lambda d: (d / "file").write_text("x"),
        ),
        Case(
            family,
            "run --data-dir ''",
            [
                "run",
                "task0-allreduce",
                "--light",
                "--workers",
                "2",
                "--data-dir",
                "",
                "--database",
                GUARD,
            ],
            build=guard,
        ),
        Case(family, "data digits --data-dir ''", ["data", "digits", "--data-dir", ""]),
        Case(
            family,
            "data digits --data-dir a file",
            ["data", "digits", "--data-dir", "{case}/file"],
            build=lambda d: (d / "file").write_text("x"),
            valid=True,  # digits ships with scikit-learn: no data folder is read
        ),
        Case(
            family,
            "data cifar10 --data-dir a path too long",
            ["data", "cifar10", "--data-dir", f"{{case}}/{long_path}"],
        ),
        Case(family, "report --database ''", ["report", "good", "--database", ""]),
        Case(
            family,
            "ingest --database ''",
            ["ingest", "{loc}", "--database", ""],
            build=lambda d: place(d, "good"),
        ),
        Case(family, "prices list --database ''", ["prices", "list", "--database", ""]),
        Case(family, "db upgrade --database ''", ["db", "upgrade", "--database", ""]),
        Case(family, "regressions --database ''", ["regressions", "x", "--database", ""]),
        Case(family, "dashboard --database ''", ["dashboard", "--database", ""]),
        Case(family, "report ''", ["report", "", "--database", "{db}"], **seeded),
        Case(family, "report a file name too long", ["report", f"{{case}}/{long_name}"]),
        Case(family, "report a path too long", ["report", f"{{case}}/{long_path}"]),
        Case(family, "report a folder without sweep.json", ["report", "{case}"]),
        Case(family, "report /dev/zero", ["report", "/dev/zero"]),
        Case(
            family,
            "ingest a path too long",
            ["ingest", f"{{case}}/{long_path}", "--database", "{db}"],
            both=True,
        ),
        Case(
            family,
            "ingest a missing folder",
            ["ingest", "{case}/missing", "--database", "{db}"],
            both=True,
        ),
        Case(
            family,
            "ingest a file",
            ["ingest", "{case}/file", "--database", "{db}"],
            both=True,
            build=lambda d: (d / "file").write_text("x"),
        ),
        Case(family, "ingest /dev/zero", ["ingest", "/dev/zero", "--database", "{db}"], both=True),
        Case(
            family,
            "ingest an empty folder",
            ["ingest", "{case}/empty", "--database", "{db}"],
            both=True,
            build=lambda d: (d / "empty").mkdir(),
            valid=True,
        ),
        Case(
            family,
            "prices load a folder",
            ["prices", "load", "{case}", "--database", "{db}"],
            both=True,
        ),
        Case(
            family,
            "prices load a missing file",
            ["prices", "load", "{case}/none.csv", "--database", "{db}"],
            both=True,
        ),
        Case(
            family,
            "prices load a path too long",
            ["prices", "load", f"{{case}}/{long_path}", "--database", "{db}"],
            both=True,
        ),
        Case(
            family,
            "prices load /dev/zero",
            ["prices", "load", "/dev/zero", "--database", "{db}"],
            both=True,
        ),
    ]
    return cases


def read_only_folder(case_dir: Path) -> None:
    (case_dir / "ro").mkdir()
    (case_dir / "ro").chmod(0o500)


def location_cases() -> list[Case]:
    family = "remote locations"
    locations = [
        "http://127.0.0.1:1/sweeps",
        "https://127.0.0.1:1/sweeps",
        "s3://no-bucket/sweeps",
        "gs://no-bucket/x",
        "ftp://127.0.0.1:1/x",
        "zip://x.zip",
        "zip://{case}/a.zip",
        "tar://x",
        "memory://nothing",
        "bogus://x",
        "://x",
        "file://",
        "file://{case}/none",
        "sftp://127.0.0.1:1/x",
        "hdfs://x/y",
        "github://org:repo@sha/x",
        "abfs://c/x",
        "http://[::1/x",
        "s3://",
        "data:text/plain,hello",
        "local://{case}/none",
    ]
    return [
        Case(
            family,
            f"ingest {loc}",
            ["ingest", loc, "--database", "{db}"],
            both=True,
            build=lambda d: (d / "a.zip").write_bytes(b"PK not really"),
        )
        for loc in locations
    ]


def prices_file(content: bytes | str) -> Callable[[Path], None]:
    def build(case_dir: Path) -> None:
        path = case_dir / "prices.csv"
        path.write_bytes(content.encode() if isinstance(content, str) else content)

    return build


def prices_cases() -> list[Case]:
    family = "prices"
    cases = []
    base = {
        "kind": "instance",
        "name": "n1-standard-4",
        "regular": "0.19",
        "preemptible": "0.04",
        "valid_from": "2026-01-01",
    }
    variants: dict[str, dict[str, str]] = {}
    for value in [
        "nan",
        "NaN",
        "inf",
        "-inf",
        "-1",
        "1e9",
        "abc",
        "",
        "1,5",
        "0x10",
        "1e-400",
        "1e400",
        "0.00015",  # finer than the table keeps: each database would round it its own way
    ]:
        variants[f"--regular {value!r}"] = {"regular": value}
    for value in ["nan", "-0.5", "infinity"]:
        variants[f"--preemptible {value!r}"] = {"preemptible": value}
    for value in ["", "n" * 101, "n" * 5000, "bad\nname", "\u0000x"]:
        variants[f"name {value[:12]!r} ({len(value)} characters)"] = {"name": value}
    for value in ["server", "", "GPU", "k" * 30]:
        variants[f"kind {value[:12]!r}"] = {"kind": value}
    for value in [
        "yesterday",
        "2026-02-30",
        "0000-01-01",
        "99999-01-01",
        "",
        "2026-01-01T25:00",
        "0001-01-01T00:00:00+05:00",  # before year 1 in UTC
        "9999-12-31T23:00:00-05:00",  # after year 9999 in UTC
    ]:
        variants[f"--valid-from {value!r}"] = {"valid_from": value}
    for name, change in variants.items():
        values = {**base, **change}
        if "\x00" in values["name"]:
            continue  # an argument cannot hold NUL
        cases.append(
            Case(
                family,
                f"set {name}",
                [
                    "prices",
                    "set",
                    values["kind"],
                    values["name"],
                    f"--regular={values['regular']}",
                    f"--preemptible={values['preemptible']}",
                    f"--valid-from={values['valid_from']}",
                    "--database",
                    "{db}",
                ],
                both=True,
                check=prices_stored_wrong,
            )
        )
    cases.append(
        Case(
            family,
            "set a possible price",
            [
                "prices",
                "set",
                "gpu",
                "nvidia-tesla-t4",
                "--regular",
                "0.35",
                "--preemptible",
                "0.11",
                "--valid-from",
                "2026-01-01",
                "--database",
                "{db}",
            ],
            both=True,
            valid=True,
            check=prices_stored_wrong,
        )
    )
    header = "kind,name,regular_per_hour,preemptible_per_hour,valid_from,source\n"
    files: dict[str, bytes | str] = {
        "empty": "",
        "only a header": header,
        "no header": "instance,n1,0.1,0.05,2026-01-01,x\n",
        "NaN price": header + "instance,n1,nan,0.05,2026-01-01,x\n",
        "inf price": header + "instance,n1,inf,0.05,2026-01-01,x\n",
        "negative price": header + "instance,n1,-3,0.05,2026-01-01,x\n",
        "price 1e9": header + "instance,n1,1e9,0.05,2026-01-01,x\n",
        "a name of 5,000 characters": header + f"instance,{'n' * 5000},0.1,0.05,2026-01-01,x\n",
        "an unknown kind": header + "spaceship,n1,0.1,0.05,2026-01-01,x\n",
        "a bad date": header + "instance,n1,0.1,0.05,someday,x\n",
        "missing columns": header + "instance,n1\n",
        "extra columns": header + "instance,n1,0.1,0.05,2026-01-01,x,y,z\n",
        "Latin-1": (header + "instance,n\u00e9,0.1,0.05,2026-01-01,x\n").encode("latin-1"),
        "binary": bytes(range(256)) * 20,
        "a NUL byte": header + "instance,n\x001,0.1,0.05,2026-01-01,x\n",
        "an unclosed quote": header + 'instance,"n1,0.1,0.05,2026-01-01,x\n',
        "the same row twice": header + "instance,n1,0.1,0.05,2026-01-01,x\n" * 2,
        "a row of 10 MB": header + "instance,n1,0.1,0.05,2026-01-01," + "x" * 10_000_000 + "\n",
        "UTF-16": (header + "instance,n1,0.1,0.05,2026-01-01,x\n").encode("utf-16"),
        "a BOM": "\ufeff" + header + "instance,n1,0.1,0.05,2026-01-01,x\n",
    }
    for name, content in files.items():
        cases.append(
            Case(
                family,
                f"load {name}",
                ["prices", "load", "{case}/prices.csv", "--database", "{db}"],
                build=prices_file(content),
                both=True,
                check=prices_stored_wrong,
            )
        )
    return cases


def prices_stored_wrong(case_dir: Path, output: str | None) -> str | None:
    return None  # the price rows are checked with every database snapshot


def sweep_id_cases() -> list[Case]:
    family = "sweep ids"
    ids = [
        "../good",
        "../../etc/passwd",
        "good/../good",
        "/etc",
        "..",
        ".",
        "a" * 300,
        "good\n",
        "good;drop table sweep",
        "%",
        "_",
        "g%",
        "\u2603",
        "good ",
        " good",
    ]
    cases = []
    for sweep in ids:
        for command in (["report"], ["regressions"], ["export"], ["project"]):
            argv = [*command, sweep, "--database", "{db}"]
            if command[0] == "export":
                argv += ["--out", "{case}/out"]
            if command[0] == "project":
                argv += ["--allreduce", "ar"]
            cases.append(
                Case(
                    family,
                    f"{command[0]} {sweep[:20]!r}",
                    argv,
                    both=command[0] == "regressions",
                    seeded=True,
                )
            )
    cases.append(
        Case(
            family,
            "db refit --sweep '../good'",
            ["db", "refit", "--sweep", "../good", "--database", "{db}"],
            seeded=True,
            both=True,
        )
    )
    return cases


def argument_cases() -> list[Case]:
    family = "arguments"
    bad = [
        [],
        ["nosuchcommand"],
        ["--debugx"],
        ["tasks", "extra"],
        ["run"],
        ["run", "task9-nothing"],
        ["run", "task0-allreduce", "--workers", "0"],
        ["run", "task0-allreduce", "--workers", "-2"],
        ["run", "task0-allreduce", "--workers", "a,b"],
        ["run", "task0-allreduce", "--workers", ""],
        ["run", "task0-allreduce", "--workers", "1,,2"],
        ["run", "task0-allreduce", "--workers", "99999999999999999999"],
        ["run", "task0-allreduce", "--workers", "2.5"],
        ["run", "task0-allreduce", "--repeats", "-1"],
        ["run", "task0-allreduce", "--repeats", "x"],
        ["run", "task0-allreduce", "--backend", "mpi"],
        ["run", "task0-allreduce", "--backend", ""],
        ["run", "task0-allreduce", "--seed", "x"],
        ["run", "task0-allreduce", "--seed", "-1"],
        ["run", "task0-allreduce", "--collective-timeout-s", "nan"],
        ["run", "task0-allreduce", "--collective-timeout-s", "-1"],
        ["run", "task0-allreduce", "--group-timeout-s", "inf"],
        ["run", "task0-allreduce", "--group-timeout-s", "0"],
        ["run", "task0-allreduce", "--workers", "2,6", "--ranks-per-node", "4"],
        ["run", "task0-allreduce", "--ranks-per-node", "0"],
        ["run", "task0-allreduce", "--ranks-per-node", "1e3"],
        [
            "run",
            "task0-allreduce",
            "--workers",
            "8,12",
            "--ranks-per-node",
            "8",
            "--launcher",
            "kubernetes",
        ],
        ["run", "task1a-resnet20-cifar10", "--variant", "chaotic"],
        ["run", "task0-allreduce", "--launcher", "carrier"],
        ["run", "task0-allreduce", "--bogus"],
        ["run", "task0-allreduce", "--workers", "2", "--workers", "x"],
        ["report"],
        ["report", "a", "b"],
        ["report", "--database"],
        ["data"],
        ["data", "mnist9"],
        ["data", "digits", "--download", "x"],
        ["db"],
        ["db", "downgrade"],
        ["db", "upgrade", "x"],
        ["db", "grant-readonly"],
        ["db", "grant-readonly", "r", "--database", "sqlite:///{case}/r.db"],
        ["db", "grant-readonly", "", "--database", "{pg}"],
        ["db", "grant-readonly", "bad;role", "--database", "{pg}"],
        ["db", "grant-readonly", "r" * 100, "--database", "{pg}"],
        ["db", "refit", "--sweep"],
        ["project"],
        ["project", "x"],
        ["project", "x", "--allreduce"],
        ["project", "x", "--allreduce", "y", "--workers", "abc", "--database", "{db}"],
        ["project", "x", "--allreduce", "y", "--instance", "", "--database", "{db}"],
        ["ingest"],
        ["ingest", "a", "b"],
        ["ingest", "--replace"],
        ["export"],
        ["export", "x", "--out"],
        ["prices"],
        ["prices", "get"],
        ["prices", "set"],
        ["prices", "set", "instance", "n1"],
        ["prices", "load"],
        ["regressions"],
        ["regressions", "x", "--window", "x"],
        ["regressions", "x", "--window", "0", "--database", "{db}"],
        ["regressions", "x", "--window", "99999999999", "--database", "{db}"],
        ["regressions", "x", "--alpha", "nan", "--database", "{db}"],
        ["regressions", "x", "--alpha=-1", "--database", "{db}"],
        ["regressions", "x", "--min-change", "inf", "--database", "{db}"],
        ["network"],
        ["network", "bogus"],
        ["dashboard", "--port", "abc"],
        ["dashboard", "--port", "-1"],
        ["dashboard", "--port", "99999"],
        ["dashboard", "--host", "999.1.1.1", "--port", "1"],
        ["dashboard", "--port", ""],
        ["tasks", "--bogus"],
    ]
    cases = []
    for argv in bad:
        guarded = argv[:1] == ["run"] and len(argv) > 2  # a usable request stops at the guard
        cases.append(
            Case(
                family,
                " ".join(argv)[:60] or "(no arguments)",
                [*argv, "--database", GUARD] if guarded else argv,
                seeded="{db}" in argv,
                build=guard if guarded else None,
            )
        )
    return cases


def embedded_cases() -> list[Case]:
    family = "embedded confs"
    confs = {
        "task0_allreduce": [
            '{"workers": "x"}',
            '{"workers": []}',
            '{"workers": [0]}',
            '{"workers": [-1]}',
            '{"workers": [1.5]}',
            '{"workers": [99999999999]}',
            '{"workers": [true]}',
            '{"workers": null}',
            '{"bogus": 1}',
            '{"light": "yes"}',
            '{"repeats": -1}',
            '{"repeats": 1e9}',
            '{"backend": "mpi"}',
            '{"backend": 7}',
            '{"seed": "x"}',
            '{"collective_timeout_s": -1}',
            '{"collective_timeout_s": NaN}',
            '{"group_timeout_s": Infinity}',
            '{"data_dir": ""}',
            '{"data_dir": 7}',
            "[1, 2]",
            '"light"',
            "7",
            "null",
            "{",
            "",
            "{'light': true}",
            '{"workers": [1,]}',
            '{"workers": [2], "workers": "x"}',
            '{"launcher": "carrier"}',
            '{"compile": "maybe"}',
            '{"workers": [' + ",".join(["1"] * 10000) + "]}",
            '{"x": ' + "[" * 5000 + "]" * 5000 + "}",
        ],
        "task1a_resnet20_cifar10": [
            '{"variant": "chaotic"}',
            '{"precision": "fp3"}',
            '{"workers": [2], "light": 1}',
            '{"max_epochs": -1}',
            '{"placement": "scatter"}',
            '{"workers": [1, 2, 6], "ranks_per_node": 4}',
            '{"ranks_per_node": 0}',
            '{"ranks_per_node": "eight"}',
            '{"workers": [4, 6], "ranks_per_node": 4, "launcher": "kubernetes"}',
        ],
        "scalebench_nightly": ['{"workers": [1]}', '{"bogus": 1}'],
        "no_such_dag": ["{}"],
        "": ["{}"],
    }
    cases = []
    for dag, items in confs.items():
        for conf in items:
            cases.append(
                Case(
                    family,
                    f"{dag or '(empty dag)'} {conf[:40]}",
                    [dag, conf],
                    module="cli.embedded",
                )
            )
    return cases


def vanished_runner(case_dir: Path) -> None:
    """Make the bad sweep one left unfinished by a command line that has since ended."""
    path = manifest_text(case_dir)
    data = json.loads(path.read_text())
    data["finished_at"] = None
    data["runner"] = {"host": os.uname().nodename, "pid": 2**22 + 7, "started": 1}
    for group in data["groups"]:
        group["status"] = "planned"
    path.write_text(json.dumps(data))


OUTSIDE_TEXT = "a file outside every sweep\n"


def linked_verdicts(case_dir: Path) -> None:
    vanished_runner(case_dir)
    (case_dir / "outside.txt").write_text(OUTSIDE_TEXT)
    (manifest_text(case_dir).parent / "verdicts.jsonl").symlink_to(case_dir / "outside.txt")


def placed_with_linked_verdicts(case_dir: Path) -> None:
    place(case_dir, "bad")
    linked_verdicts(case_dir)


def folder_a_pattern_would_match(case_dir: Path) -> None:
    """A folder of sweeps, ``exp1``, that the location ``exp[1]`` names as a pattern."""
    shutil.copytree(PROTO / "good", case_dir / "exp1" / "good")


def outside_untouched(case_dir: Path, output: str | None) -> str | None:
    """Right only if the file the link points at is as it was."""
    if (case_dir / "outside.txt").read_text() != OUTSIDE_TEXT:
        return "wrote through a link to a file outside the sweep"
    return None


def linked_out(what: str) -> Callable[[Path], None]:
    """Put the bad sweep's ``what`` (sweep.json, a run folder, a rank file) outside the
    sweep's folder, with a link to it in its place."""

    def damage(case_dir: Path) -> None:
        place = {
            "sweep.json": manifest_text(case_dir),
            "a run folder": rank_file(case_dir).parent,
            "a rank file": rank_file(case_dir),
        }[what]
        away = case_dir / "elsewhere" / place.name
        away.parent.mkdir()
        place.rename(away)
        place.symlink_to(away)

    return damage


def squatter(case_dir: Path) -> None:
    """A sweep named after the good sweep's first group, listing that group's run as its own."""
    loc = case_dir / "loc"
    shutil.copytree(loc / "good", loc / "good-w1")
    path = manifest_text(case_dir, "good-w1")
    data = json.loads(path.read_text())
    data["sweep_id"] = "good-w1"
    data["groups"] = [g for g in data["groups"] if g["run_id"] == "good-w1-r0"]
    path.write_text(json.dumps(data))
    shutil.rmtree(loc / "good-w1" / "good-w2-r0")


def changed_after_storing(change: Callable[[dict], object]) -> Callable[[Path], None]:
    """The good sweep (stored in the seeded database) with its sweep.json changed."""

    def build(case_dir: Path) -> None:
        place(case_dir, "good")
        path = manifest_text(case_dir, "good")
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return build


def said(text: str) -> Callable[[Path, str | None], str | None]:
    def check(case_dir: Path, output: str | None) -> str | None:
        if output is not None and text not in output:
            return f"not said: {text!r}"
        return None

    return check


def store_cases() -> list[Case]:
    """What a results store must never do: read or write through a link that leaves a sweep,
    take a location for a pattern, let one sweep take another's run or rewrite its own
    stored identity, store an impossible value."""
    family = "store boundaries"
    cases = [
        ingest_case(
            family, "verdicts.jsonl linked outside", linked_verdicts, check=outside_untouched
        ),
        Case(
            family,
            "report of a sweep whose verdicts.jsonl is linked outside",
            ["report", "{loc}/bad"],
            build=placed_with_linked_verdicts,
            check=outside_untouched,
        ),
    ]
    for what in ("sweep.json", "a run folder", "a rank file"):
        cases.append(ingest_case(family, f"{what} linked outside the sweep", linked_out(what)))
    cases.append(
        Case(
            family,
            "a location holding a pattern ([1]) beside the folder it would match",
            ["ingest", "{case}/exp[1]", "--database", "{db}"],
            build=folder_a_pattern_would_match,
            both=True,
        )
    )
    cases.append(
        ingest_case(
            family,
            "a sweep listing another sweep's run as its own",
            squatter,
            check=said("stored as a run of sweep good"),
        )
    )
    for name, change in {
        "created_at": lambda d: d.update(created_at="2020-01-01T00:00:00+00:00"),
        "the task": lambda d: d["request"].update(task="task2a-logreg-epsilon"),
        "the seed": lambda d: d["request"].update(seed=12345),
        "the configuration hash": lambda d: d.update(config_hash="0" * 16),
    }.items():
        cases.append(
            Case(
                family,
                f"sweep.json's {name} changed after it was stored",
                INGEST,
                build=changed_after_storing(change),
                both=True,
                seeded=True,
                check=said("differs from what is stored"),
            )
        )
    impossible = {
        "an accuracy of 150 %": ("eval", lambda r: r["metrics"].update(top1_accuracy=150.0)),
        "an accuracy of -5 %": ("eval", lambda r: r["metrics"].update(top1_accuracy=-5.0)),
        "an accuracy of 1e308 %": ("eval", lambda r: r["metrics"].update(top1_accuracy=1e308)),
        "a negative evaluation loss": ("eval", lambda r: r["metrics"].update(loss=-1.0)),
        "a negative training loss": ("step", lambda r: r.update(loss=-0.5)),
        "a negative learning rate": ("step", lambda r: r.update(lr=-0.1)),
        "a CPU count of 0": ("env", lambda r: r.update(cpu_count=0)),
        "a CPU count of -2": ("env", lambda r: r.update(cpu_count=-2)),
        "a world size of 2**21": ("step", lambda r: r.update(world_size=2**21)),
        "a NUL character in a host name": ("env", lambda r: r.update(host="node\x00-1")),
    }
    for name, (kind, change) in impossible.items():
        cases.append(ingest_case(family, name, change_record(kind, change, 0)))
    return cases


FAMILIES: dict[str, Callable[[], list[Case]]] = {
    "sweep.json": manifest_cases,
    "rank files": rank_cases,
    "settings": settings_cases,
    "databases": database_cases,
    "paths": path_cases,
    "remote locations": location_cases,
    "prices": prices_cases,
    "sweep ids": sweep_id_cases,
    "arguments": argument_cases,
    "embedded confs": embedded_cases,
    "store boundaries": store_cases,
}


# -- databases --------------------------------------------------------------------------------


class Databases:
    """Fresh databases for the cases: copies of a migrated SQLite file, and PostgreSQL
    databases made from a migrated template (``CREATE DATABASE ... TEMPLATE``)."""

    def __init__(self, root: Path, admin_url: str) -> None:
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
        shutil.copytree(PROTO / "good", good / "good")
        shutil.copytree(PROTO / "ar", good / "ar")
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


def snapshot(url: str) -> tuple[dict, list[str]]:
    """What ``url``'s database holds (the verdict's rows), and every stored value that cannot
    be true: negative or non-finite seconds, ids that climb out of a folder, bad prices."""
    import math

    from sqlalchemy import func, select

    from results_db.database import make_engine
    from results_db.models import (
        AllReduceSample,
        EpochEval,
        Price,
        Run,
        RunEvent,
        StepTiming,
        Sweep,
    )

    engine = make_engine(url)
    wrong: list[str] = []
    try:
        with engine.connect() as conn:
            sweeps = sorted(conn.execute(select(Sweep.id)).scalars())
            runs = sorted(conn.execute(select(Run.id, Run.status)).all())
            steps = conn.execute(select(func.count()).select_from(StepTiming)).scalar_one()
            for table, columns in (
                (
                    StepTiming,
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
                    Run,
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
                (EpochEval, ("t_s", "eval_s", "train_s", "wall_s")),
                (RunEvent, ("t_s",)),
                (AllReduceSample, ("seconds",)),
            ):
                for row in conn.execute(select(*(getattr(table, c) for c in columns))).all():
                    for column, value in zip(columns, row, strict=True):
                        if value is not None and not (0 <= float(value) < 1e7):
                            wrong.append(f"{table.__tablename__}.{column} = {value}")
                            break
            for name, value in (
                (
                    "step_timing.samples",
                    conn.execute(select(func.min(StepTiming.samples))).scalar(),
                ),
                ("run.world_size", conn.execute(select(func.min(Run.world_size))).scalar()),
                ("run.repeat", conn.execute(select(func.min(Run.repeat))).scalar()),
                ("epoch_eval.epoch", conn.execute(select(func.min(EpochEval.epoch))).scalar()),
                ("step_timing.step", conn.execute(select(func.min(StepTiming.step))).scalar()),
            ):
                if value is not None and value < (1 if name == "run.world_size" else 0):
                    wrong.append(f"{name} = {value}")
            for ident in [*sweeps, *(r[0] for r in runs)]:
                if "/" in ident or ident in ("", ".", ".."):
                    wrong.append(f"an id that is no folder name: {ident!r}")
            prices = conn.execute(
                select(Price.kind, Price.name, Price.regular_per_hour, Price.preemptible_per_hour)
            ).all()
            for kind, name, regular, preemptible in prices:
                values = [float(regular), float(preemptible)]
                if not all(math.isfinite(v) and v >= 0 for v in values):
                    wrong.append(f"price {name!r}: {values}")
                if kind not in ("instance", "gpu") or not name.strip() or "\n" in name:
                    wrong.append(f"price of kind {kind!r} named {name[:20]!r}")
            wrong = wrong[:5]
        rows = {
            "sweeps": sweeps,
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


def main() -> int:
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

    global PROTO
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="scalebench-probe-"))
    try:
        PROTO = prototypes(root)
        cases = []
        for name, make in FAMILIES.items():
            if args.family and name not in args.family:
                continue
            made = [c for c in make() if not args.only or any(o in c.name for o in args.only)]
            cases.extend(made[: args.limit] if args.limit else made)
        runs = sum(2 if c.both else 1 for c in cases)
        print(f"{len(cases)} bad inputs, {runs} commands; working under {root}", flush=True)
        databases = Databases(root, args.postgres)
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
