"""The bad inputs of ``bad_input_probe.py``, family by family: tables of what is given or
damaged, and for each family a short function that makes its tables' rows into cases.

A case's ``argv`` follows ``python -m <module>``: ``{case}`` is the case's folder, ``{db}`` a
fresh database's URL, ``{pg}`` a fresh PostgreSQL database's, ``{loc}`` the case's folder of
sweeps. A case's build makes its files under its folder, copying the sweeps ``prototypes``
made; its check says what is wrong with an accepted command, or None.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import socket
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
LIGHT_ID = "task1a-resnet20-cifar10-20261122T021829Z-37f8"
ALLREDUCE_ID = "task0-allreduce-20261122T021847Z-80d9"
ROOT = os.geteuid() == 0  # root reads and writes past file modes: a mode-000 file is usable
SAID_REFUSED, SAID_QUARANTINED = "  refused: ", "  unreadable: "  # ingest's lines for each

Build = Callable[[Path], object]  # makes a case's files under its folder
Check = Callable[[Path, str | None], str | None]  # what is wrong (given the output), or None
Change = Callable[[dict], object]  # changes a record or a sweep.json in place


@dataclass
class Case:
    """One bad input. ``argv`` follows ``python -m <module>``; ``{case}`` is the case's folder,
    ``{db}`` its database URL, ``{loc}`` its folder of sweeps."""

    family: str
    name: str
    argv: list[str]
    module: str = "cli.main"
    env: dict[str, str] = field(default_factory=dict)
    build: Build | None = None  # makes the case's files under its folder
    both: bool = False  # once with SQLite, once with PostgreSQL
    seeded: bool = False  # the database holds the good sweep before the command
    valid: bool = False  # usable input: exit 0 is right when nothing wrong is stored
    names: str = ""  # the refusal must name this, else the bad value was taken
    good_beside: bool = False  # a good sweep lies beside the damaged one and must be stored
    check: Check | None = None  # what is wrong, or None


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


PROTO: Path = Path()  # where the sweeps below were made: set by prototypes()
BAD_RUN = "bad-w2-r0"
GOOD_RUNS = {"good-w1-r0", "good-w2-r0"}


def prototypes(root: Path) -> Path:
    """Make the good, bad-to-be and all-reduce sweeps every ingest case copies, under
    ``root``: the cases' builds copy them from there."""
    global PROTO
    proto = root / "prototypes"
    copy_renamed(DATA / "sweep-light", LIGHT_ID, "bad", proto / "bad")
    copy_renamed(DATA / "sweep-light", LIGHT_ID, "good", proto / "good")
    copy_renamed(DATA / "sweep-allreduce", ALLREDUCE_ID, "ar", proto / "ar")
    PROTO = proto
    return proto


def place(case_dir: Path, *sweeps: str) -> Path:
    loc = case_dir / "loc"
    for sweep in sweeps:
        shutil.copytree(PROTO / sweep, loc / sweep)
    return loc


def good_placed(case_dir: Path) -> None:
    place(case_dir, "good")


def manifest_text(case_dir: Path, sweep: str = "bad") -> Path:
    return case_dir / "loc" / sweep / "sweep.json"


def rank_file(case_dir: Path, rank: int = 1, sweep: str = "bad", run: str = BAD_RUN) -> Path:
    return case_dir / "loc" / sweep / run / f"rank-{rank}.jsonl"


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_records(path: Path, lines: list[dict | str]) -> None:
    text = (line if isinstance(line, str) else json.dumps(line) for line in lines)
    path.write_text("".join(line + "\n" for line in text))


def a_file(case_dir: Path) -> None:
    (case_dir / "file").write_text("x")


INGEST = ["ingest", "{loc}", "--database", "{db}"]


def ingest_case(family: str, name: str, damage: Build, **kw) -> Case:
    """Ingest a folder holding the damaged sweep (``damage`` gets the case folder after
    ``bad`` and ``good`` are placed) and a good sweep beside it."""

    def build(case_dir: Path) -> None:
        place(case_dir, "bad", "good")
        damage(case_dir)

    kw.setdefault("good_beside", True)
    return Case(family, name, INGEST, build=build, both=True, **kw)


def said(text: str) -> Check:
    def check(case_dir: Path, output: str | None) -> str | None:
        if output is not None and text not in output:
            return f"not said: {text!r}"
        return None

    return check


# -- sweep.json -------------------------------------------------------------------------------


def edit_manifest(change: Change) -> Build:
    def damage(case_dir: Path) -> None:
        path = manifest_text(case_dir)
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return damage


def write_manifest(content: bytes | str) -> Build:
    def damage(case_dir: Path) -> None:
        path = manifest_text(case_dir)
        path.write_bytes(content.encode() if isinstance(content, str) else content)

    return damage


def drop(*keys: str) -> Change:
    return lambda data: [data.pop(key, None) for key in keys]


def setter(path: tuple, value: object) -> Change:
    def change(data: dict) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def drop_task(data: dict) -> None:
    data["request"].pop("task", None)


def group_setter(key: str, value: object) -> Change:
    return lambda data: data["groups"][1].update({key: value})


def group_replaced(value: object) -> Change:
    return lambda data: data["groups"].__setitem__(1, value)


def group_twice(data: dict) -> None:
    data["groups"].append(dict(data["groups"][1]))


def link_manifest(target: str) -> Build:
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


def missing_manifest(case_dir: Path) -> None:
    manifest_text(case_dir).unlink()


def spaces_manifest(case_dir: Path) -> None:
    write_manifest(" " * 50_000_000 + "{}")(case_dir)


def alone(damage: Build) -> Build:
    """Place only the bad sweep, then damage it."""

    def build(case_dir: Path) -> None:
        place(case_dir, "bad")
        damage(case_dir)

    return build


# sweep.json cut after these many characters, then after half the good text and all but 3
CUT_AT = (1, 10, 50, 200)
# sweep.json's whole text, or how it is made from the good sweep's
MANIFEST_TEXTS: dict[str, str | bytes | Callable[[str], str | bytes]] = {
    "a list": "[]",
    "a number": "7",
    "a string": '"sweep"',
    "null": "null",
    "true": "true",
    "whitespace": "   \n",
    "a BOM then JSON": lambda good: "\ufeff" + good,
    "NaN as a value": lambda good: good.replace('"repeats": 1', '"repeats": NaN'),
    "Infinity as a value": lambda good: good.replace('"repeats": 1', '"repeats": Infinity'),
    "10,000 nested lists": "[" * 10_000 + "]" * 10_000,
    "100,000 nested objects": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "a huge integer": lambda good: good.replace('"repeats": 1', '"repeats": ' + "9" * 5000),
    "two JSON objects": lambda good: good + good,
    "a NUL byte": lambda good: good.replace('"cli"', '"c\\u0000li"'),
    "not UTF-8": b'{"sweep_id": "\xff\xfe"}',
    "Latin-1 text": lambda good: good.replace("cli", "cl\u00e9").encode("latin-1"),
}
# What sweep.json lacks: the change, and whether the sweep is usable without it. Sweeps
# written before the trigger and the planning time were recorded lack them, or hold an empty
# time once rewritten: ingest reads them as a command-line sweep, planned when its folder was
# made.
MANIFEST_WITHOUT: dict[str, tuple[Change, bool]] = {
    "without 'groups'": (drop("groups"), False),
    "without 'request'": (drop("request"), False),
    "without 'sweep_id'": (drop("sweep_id"), False),
    "without 'trigger'": (drop("trigger"), True),
    "without 'task' in its request": (drop_task, False),
}
# A field of sweep.json (its path of keys) given a wrong value
MANIFEST_VALUES: dict[str, tuple[tuple[str, ...], object]] = {
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
    **{
        f"created_at {stamp!r}": (("created_at",), stamp)
        for stamp in ("", "yesterday", "2026-13-45T00:00:00", "2026-11-22 25:61", "0000-00-00")
    },
    "created_at a number": (("created_at",), 1732233600),
    "created_at null": (("created_at",), None),
    "created_at in the year 99999": (("created_at",), "99999-01-01T00:00:00"),
}
OLDER_FORMS = ("created_at ''", "created_at null")  # usable: see MANIFEST_WITHOUT
# A field of the second group given a wrong value
GROUP_VALUES: dict[str, tuple[str, object]] = {
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
GROUP_SHAPES: dict[str, Change] = {
    "a group that is a list": group_replaced([1]),
    "a group listed twice": group_twice,
}
# sweep.json a link to these ({self}: itself)
MANIFEST_LINKS = {
    "a link to a text file": "{case}/notes.txt",
    "a link to /dev/null": "/dev/null",
    "a link to /dev/zero": "/dev/zero",
    "a link to /dev/urandom": "/dev/urandom",
    "a link to nothing": "{case}/nowhere.json",
    "a link to itself": "{self}",
    "a link to a folder": "{case}",
}
# sweep.json no file of text, or none: the damage, and whether the input is usable. Without its
# manifest a folder is no sweep: nothing of it is stored.
MANIFEST_FILES: dict[str, tuple[Build, bool]] = {
    "sweep.json a folder": (folder_manifest, False),
    "sweep.json a FIFO": (fifo_manifest, False),
    "sweep.json unreadable (mode 000)": (unreadable_manifest, ROOT),
    "sweep.json missing": (missing_manifest, True),
    "sweep.json 50 MB of spaces then {}": (spaces_manifest, False),
}
# The damaged sweep given on its own, as the location
MANIFEST_ALONE: dict[str, Build] = {
    "empty": write_manifest(""),
    "not an object": write_manifest("[1]"),
    "without groups": edit_manifest(drop("groups")),
}


def manifest_cases() -> list[Case]:
    family = "sweep.json"
    good = (PROTO / "bad" / "sweep.json").read_text()
    cuts = [(f"cut after {n} characters", good[:n]) for n in (*CUT_AT, len(good) // 2)]
    cuts.append((f"cut after {len(good) - 3} characters", good[: len(good) - 3]))
    texts = [("empty", ""), *cuts, *MANIFEST_TEXTS.items()]
    cases = [
        ingest_case(family, name, write_manifest(text(good) if callable(text) else text))
        for name, text in texts
    ]
    cases += [
        ingest_case(family, name, edit_manifest(change), valid=valid)
        for name, (change, valid) in MANIFEST_WITHOUT.items()
    ]
    cases += [
        ingest_case(family, name, edit_manifest(setter(path, value)), valid=name in OLDER_FORMS)
        for name, (path, value) in MANIFEST_VALUES.items()
    ]
    cases += [
        ingest_case(family, f"a group's {name}", edit_manifest(group_setter(key, value)))
        for name, (key, value) in GROUP_VALUES.items()
    ]
    cases += [ingest_case(family, name, edit_manifest(c)) for name, c in GROUP_SHAPES.items()]
    cases += [
        ingest_case(family, f"sweep.json {label}", link_manifest(target))
        for label, target in MANIFEST_LINKS.items()
    ]
    cases += [
        ingest_case(family, name, damage, valid=valid)
        for name, (damage, valid) in MANIFEST_FILES.items()
    ]
    alone_argv = ["ingest", "{loc}/bad", "--database", "{db}"]
    cases += [
        Case(
            family,
            f"the damaged sweep as the location: {label}",
            alone_argv,
            both=True,
            build=alone(damage),
        )
        for label, damage in MANIFEST_ALONE.items()
    ]
    return cases


# -- rank files -------------------------------------------------------------------------------


def change_record(kind: str, change: Change, nth: int = 0) -> Build:
    """Change the ``nth`` record of ``kind`` in the bad run's rank 1."""

    def damage(case_dir: Path) -> None:
        path = rank_file(case_dir)
        lines = records(path)
        chosen = [r for r in lines if r["kind"] == kind][nth]
        change(chosen)
        write_records(path, lines)

    return damage


def phase(name: str, value: object) -> Change:
    return lambda record: record["phases"].update({name: value})


def raw_lines(*extra: str | bytes, at: int = 3) -> Build:
    """Insert ``extra`` lines (as bytes) after line ``at`` of the bad run's rank 1."""

    def damage(case_dir: Path) -> None:
        path = rank_file(case_dir)
        lines = path.read_bytes().splitlines(keepends=True)
        added = [(e.encode() if isinstance(e, str) else e) + b"\n" for e in extra]
        path.write_bytes(b"".join([*lines[:at], *added, *lines[at:]]))

    return damage


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


def link_rank(target: str) -> Build:
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


def empty_rank(case_dir: Path) -> None:
    rank_file(case_dir).write_text("")


def missing_rank(case_dir: Path) -> None:
    rank_file(case_dir).unlink()


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


def allreduce_damage(change: Change) -> Build:
    def build(case_dir: Path) -> None:
        place(case_dir, "ar")
        path = case_dir / "loc" / "ar" / "ar-w2-r0" / "rank-1.jsonl"
        lines = records(path)
        change([r for r in lines if r["kind"] == "allreduce"][2])
        write_records(path, lines)

    return build


# Lines added to a rank file: quarantined, and said to be
RANK_LINES: dict[str, Build] = {
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
# Records of a rank file holding what cannot be
RANK_RECORDS: dict[str, Build] = {
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
    "an eval's wall_seconds negative": change_record("eval", lambda r: r.update(wall_seconds=-4.0)),
    "an eval's eval_seconds 1e308": change_record("eval", lambda r: r.update(eval_seconds=1e308)),
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
    "an event name of 300 characters": change_record("event", lambda r: r.update(event="e" * 300)),
    "an env host of 1,000 characters": change_record("env", lambda r: r.update(host="h" * 1000)),
    "an env gpus a string": change_record("env", lambda r: r.update(gpus="all of them")),
    "a goal's time_to_accuracy_s negative": change_record(
        "event", lambda r: r.update(time_to_accuracy_s=-1.0), 1
    ),
    "step times running backwards": steps_backwards,
    "every step at the same time": same_time,
}
# rank-1.jsonl a link to these
RANK_LINKS = {
    "a link to /dev/zero": "/dev/zero",
    "a link to /dev/urandom": "/dev/urandom",
    "a link to a folder": "{case}",
    "a link to nothing": "{case}/nowhere",
    "a link to /etc/passwd": "/etc/passwd",
}
# A rank file (or a file beside it) no file of records, or a wrong one: the damage, and what
# the case is given besides. A rank that wrote nothing, in a group its launcher called a
# success: the run is stored failed, naming the rank, as a group whose rank was killed early
# is. Nothing of scalebench reads the MLPerf log (MLPerf's own checker does): no damage to it
# can be stored.
RANK_FILES: tuple[tuple[str, Build, dict], ...] = (
    ("rank-1.jsonl a FIFO", fifo_rank, {}),
    ("rank-1.jsonl a folder", folder_rank, {}),
    ("rank-1.jsonl unreadable (mode 000)", unreadable_rank, {"valid": ROOT}),
    ("rank-1.jsonl empty", empty_rank, {"valid": True, "check": stored_failed_by_rank_1}),
    ("rank-1.jsonl missing", missing_rank, {"valid": True, "check": stored_failed_by_rank_1}),
    ("rank-1.jsonl Latin-1 throughout", latin1_rank, {"check": quarantine_said}),
    ("rank-1.jsonl with CRLF line ends", crlf_rank, {"valid": True}),
    ("rank-1.jsonl with a BOM", bom_rank, {}),
    ("rank-1.jsonl one line of 200 MB", huge_line_rank, {"check": quarantine_said}),
    ("rank-5.jsonl in a group of 2", extra_rank, {}),
    ("rank-1.jsonl a copy of rank 0", copied_rank, {}),
    ("rank-1.jsonl the last line cut", cut_last_line, {"valid": True}),
    ("verdicts.jsonl of garbage", garbage_verdicts, {}),
    ("mllog-rank-0.log of binary", binary_mllog, {"valid": True}),
)
# The third all-reduce record of the all-reduce sweep's rank 1, changed so
ALLREDUCE_CHANGES: dict[str, Change] = {
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
}


def rank_cases() -> list[Case]:
    family = "rank files"
    cases = [
        ingest_case(family, name, damage, check=quarantine_said)
        for name, damage in RANK_LINES.items()
    ]
    cases += [ingest_case(family, name, damage) for name, damage in RANK_RECORDS.items()]
    cases += [
        ingest_case(family, f"rank-1.jsonl {label}", link_rank(target))
        for label, target in RANK_LINKS.items()
    ]
    cases += [ingest_case(family, name, damage, **kw) for name, damage, kw in RANK_FILES]
    cases += [
        Case(
            family,
            f"an all-reduce record's {name}",
            INGEST,
            both=True,
            build=allreduce_damage(change),
        )
        for name, change in ALLREDUCE_CHANGES.items()
    ]
    return cases


# -- settings ---------------------------------------------------------------------------------

GUARD = "sqlite:///{case}/guard.db"  # a file that is no database: stops `run` before training
RUN_LIGHT = ["run", "task0-allreduce", "--light", "--workers", "2"]
RUN = [*RUN_LIGHT, "--database", GUARD]


def guard(case_dir: Path) -> None:
    (case_dir / "guard.db").write_text("this file is not a database\n")


# Settings `run` must refuse, naming them
RUN_SETTINGS = {
    "SCALEBENCH_MAX_WORKERS": ["abc", "0", "-1", "1.5", "", " ", "1e9", "nan", "0x10", "²"],
    "SCALEBENCH_COMPILE": ["sometimes", "", "ON", "auto;rm"],
    "SCALEBENCH_MLPERF_DIVISION": ["openish", "CLOSED", "x" * 300],
    "SCALEBENCH_MLPERF_STATUS": ["maybe", "Research", "0"],
    "SCALEBENCH_RESULTS_URI": ["", " ", "file://", "s3://bucket/results", "http://x/r", "zip://a"],
}
# Possible values: the run goes on to the guard database, which refuses it.
POSSIBLE_RUN_SETTINGS = (
    ("SCALEBENCH_MAX_WORKERS", "99999999999999999999"),
    ("SCALEBENCH_MAX_WORKERS", " 4 "),
    ("SCALEBENCH_MLPERF_ORG", "o" * 2000),
    ("SCALEBENCH_MLPERF_PLATFORM", "\u2603 snowman"),
)
# Settings `ingest` must refuse, naming them
INGEST_SETTINGS = {
    "SCALEBENCH_STATEMENT_TIMEOUT_S": ["abc", "0", "-1", "nan", "inf", "", "1e400", "86401"],
    "SCALEBENCH_CONTENTION_THRESHOLD": ["abc", "2", "-0.1", "nan", "inf", "", "1e400"],
}
# SCALEBENCH_DATABASE_URL values, each given to these commands
DATABASE_URL_VALUES = [
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
]
DATABASE_URL_COMMANDS = (
    ["report", "x"],
    ["ingest", "{loc}"],
    ["db", "upgrade"],
    ["prices", "list"],
)
DATA_DIR_VALUES = [
    "",
    " ",
    "{case}/missing",
]  # digits ships with scikit-learn: a missing one is fine


def settings_cases() -> list[Case]:
    family, possible = "settings", "database: cannot read the results database"
    cases = [
        Case(
            family,
            f"run with {variable}={value[:20]!r}",
            RUN,
            env={variable: value},
            build=guard,
            names=variable,
        )
        for variable, values in RUN_SETTINGS.items()
        for value in values
    ]
    cases += [
        Case(
            family,
            f"run with {variable}={value[:20]!r} (possible)",
            RUN,
            env={variable: value},
            build=guard,
            names=possible,
            valid=True,
        )
        for variable, value in POSSIBLE_RUN_SETTINGS
    ]
    cases += [
        Case(
            family,
            f"ingest with {variable}={value!r}",
            INGEST,
            env={variable: value},
            build=good_placed,
            names=variable,
            both=True,
        )
        for variable, values in INGEST_SETTINGS.items()
        for value in values
    ]
    cases += [
        Case(
            family,
            f"{command[0]} with SCALEBENCH_DATABASE_URL={value[:30]!r}",
            command,
            env={"SCALEBENCH_DATABASE_URL": value},
            build=good_placed,
            names="database" if value.strip() else "SCALEBENCH_DATABASE_URL",
        )
        for value in DATABASE_URL_VALUES
        for command in DATABASE_URL_COMMANDS
    ]
    cases += [
        Case(
            family,
            f"data digits with SCALEBENCH_DATA_DIR={value!r}",
            ["data", "digits"],
            env={"SCALEBENCH_DATA_DIR": value},
            valid=value.startswith("{case}"),
        )
        for value in DATA_DIR_VALUES
    ]
    return cases


# -- databases --------------------------------------------------------------------------------


def not_a_database(case_dir: Path) -> None:
    """Files that are no database (DATABASE_FILES), and the good sweep to ingest."""
    (case_dir / "text.db").write_text("SQLite format 3? no.\n" * 100)
    (case_dir / "zeros.db").write_bytes(b"\x00" * 4096)
    (case_dir / "header.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 4080)
    (case_dir / "folder.db").mkdir()
    (case_dir / "empty.db").write_text("")
    place(case_dir, "good")


def _pg_message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


PG_STATUS = [  # what a PostgreSQL 15 says of itself after the login
    (b"server_version", b"15.0"),
    (b"client_encoding", b"UTF8"),
    (b"DateStyle", b"ISO, MDY"),
    (b"standard_conforming_strings", b"on"),
    (b"integer_datetimes", b"on"),
]


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
            conn.sendall(
                _pg_message(b"R", struct.pack("!i", 0))
                + b"".join(_pg_message(b"S", k + b"\0" + v + b"\0") for k, v in PG_STATUS)
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


# Files that are no database (not_a_database makes them), each given to these commands
DATABASE_FILES = ["text.db", "zeros.db", "header.db", "folder.db", "empty.db"]
DATABASE_COMMANDS = [
    ["report", "x"],
    ["ingest", "{loc}"],
    ["db", "upgrade"],
    ["prices", "list"],
    ["export", "x", "--out", "{case}/out"],
    ["regressions", "x"],
    ["db", "refit"],
    ["project", "x", "--allreduce", "y"],
]
# --database URLs that name no usable database, each given to these commands
DATABASE_URLS = [
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
URL_COMMANDS = (["report", "x"], ["ingest", "{loc}"], ["prices", "list"])
# db upgrade --revision values; base and heads are possible
REVISIONS = [
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
]
# A PostgreSQL that never completes the login (the connect timeout ends it, 10 s), and one that
# logs in and never answers a statement (the statement timeout, set to 2 s, and its 5 s of
# grace): (whether it logs in, how it is named, what the refusal must name, the settings)
SILENT_SERVERS = (
    (False, "never logs in", "connect timeout", {}),
    (
        True,
        "logs in, never answers",
        "SCALEBENCH_STATEMENT_TIMEOUT_S",
        {"SCALEBENCH_STATEMENT_TIMEOUT_S": "2"},
    ),
)
SILENT_COMMANDS = (["ingest", "{loc}"], ["report", "x"], ["prices", "list"])  # each server, each


def database_cases() -> list[Case]:
    family = "databases"
    # an empty file is a database SQLite can start: ingest and upgrade fill it
    cases = [
        Case(
            family,
            f"{command[0]} {command[1]} on {name}",
            [*command, "--database", f"sqlite:///{{case}}/{name}"],
            build=not_a_database,
            valid=name == "empty.db" and command[0] in ("ingest", "db"),
        )
        for name in DATABASE_FILES
        for command in DATABASE_COMMANDS
    ]
    cases += [
        Case(
            family,
            f"{command[0]} --database {url[:40]!r}",
            [*command, "--database", url],
            build=good_placed,
            valid=url == "sqlite:///:memory:" and command[0] == "ingest",
        )
        for url in DATABASE_URLS
        for command in URL_COMMANDS
    ]
    cases += [
        Case(
            family,
            f"db upgrade --revision {revision[:20]!r}",
            ["db", "upgrade", "--revision", revision, "--database", "{db}"],
            both=True,
            valid=revision in ("base", "heads"),
        )
        for revision in REVISIONS
    ]
    cases += [
        Case(
            family,
            f"{command[0]} --database a PostgreSQL that {how}",
            [*command, "--database", silent_postgres(logs_in)],
            env=dict(env),
            build=good_placed,
            names=names,
        )
        for logs_in, how, names, env in SILENT_SERVERS
        for command in SILENT_COMMANDS
    ]
    return cases


# -- paths ------------------------------------------------------------------------------------


def export_folder_made(case_dir: Path, output: str | None) -> str | None:
    return None if (case_dir / "a/b/c").is_dir() else "no export folder"


def read_only_folder(case_dir: Path) -> None:
    (case_dir / "ro").mkdir()
    (case_dir / "ro").chmod(0o500)


def empty_folder(case_dir: Path) -> None:
    (case_dir / "empty").mkdir()


LONG_NAME = "n" * 300
LONG_PATH = "/".join(["d" * 200] * 30)
DB = ["--database", "{db}"]
EXPORT = ["export", "good", "--out"]
SEEDED = {"seeded": True}
# (name, argv, what the case is given besides)
PATH_ROWS: tuple[tuple[str, list[str], dict], ...] = (
    ("export --out an existing file", [*EXPORT, "{case}/file", *DB], {**SEEDED, "build": a_file}),
    (
        "export --out in a missing folder (made)",
        [*EXPORT, "{case}/a/b/c", *DB],
        {**SEEDED, "valid": True, "check": export_folder_made},
    ),
    ("export --out a file name too long", [*EXPORT, f"{{case}}/{LONG_NAME}", *DB], SEEDED),
    ("export --out a path too long", [*EXPORT, f"{{case}}/{LONG_PATH}", *DB], SEEDED),
    ("export --out ''", [*EXPORT, "", *DB], SEEDED),
    ("export --out /proc", [*EXPORT, "/proc", *DB], SEEDED),
    (
        "export --out a read-only folder",
        [*EXPORT, "{case}/ro", *DB],
        {**SEEDED, "build": read_only_folder, "valid": ROOT},
    ),
    (
        "export --format xml",
        ["export", "good", "--format", "xml", "--out", "{case}/o", *DB],
        SEEDED,
    ),
    ("export --format ''", ["export", "good", "--format", "", "--out", "{case}/o", *DB], SEEDED),
    ("run --results ''", [*RUN_LIGHT, "--results", "", "--database", GUARD], {"build": guard}),
    ("run --results ' '", [*RUN_LIGHT, "--results", " ", "--database", GUARD], {"build": guard}),
    ("run --database ''", [*RUN_LIGHT, "--database", ""], {}),
    (
        "run --results a path too long",
        [*RUN_LIGHT, "--results", f"{{case}}/{LONG_PATH}", "--no-ingest"],
        {},
    ),
    (
        "run --results an existing file",
        [*RUN_LIGHT, "--results", "{case}/file", "--no-ingest"],
        {"build": a_file},
    ),
    ("run --data-dir ''", [*RUN_LIGHT, "--data-dir", "", "--database", GUARD], {"build": guard}),
    ("data digits --data-dir ''", ["data", "digits", "--data-dir", ""], {}),
    (  # digits ships with scikit-learn: no data folder is read
        "data digits --data-dir a file",
        ["data", "digits", "--data-dir", "{case}/file"],
        {"build": a_file, "valid": True},
    ),
    (
        "data cifar10 --data-dir a path too long",
        ["data", "cifar10", "--data-dir", f"{{case}}/{LONG_PATH}"],
        {},
    ),
    ("report --database ''", ["report", "good", "--database", ""], {}),
    ("ingest --database ''", ["ingest", "{loc}", "--database", ""], {"build": good_placed}),
    ("prices list --database ''", ["prices", "list", "--database", ""], {}),
    ("db upgrade --database ''", ["db", "upgrade", "--database", ""], {}),
    ("regressions --database ''", ["regressions", "x", "--database", ""], {}),
    ("dashboard --database ''", ["dashboard", "--database", ""], {}),
    ("report ''", ["report", "", *DB], SEEDED),
    ("report a file name too long", ["report", f"{{case}}/{LONG_NAME}"], {}),
    ("report a path too long", ["report", f"{{case}}/{LONG_PATH}"], {}),
    ("report a folder without sweep.json", ["report", "{case}"], {}),
    ("report /dev/zero", ["report", "/dev/zero"], {}),
    ("ingest a path too long", ["ingest", f"{{case}}/{LONG_PATH}", *DB], {"both": True}),
    ("ingest a missing folder", ["ingest", "{case}/missing", *DB], {"both": True}),
    ("ingest a file", ["ingest", "{case}/file", *DB], {"both": True, "build": a_file}),
    ("ingest /dev/zero", ["ingest", "/dev/zero", *DB], {"both": True}),
    (
        "ingest an empty folder",
        ["ingest", "{case}/empty", *DB],
        {"both": True, "build": empty_folder, "valid": True},
    ),
    ("prices load a folder", ["prices", "load", "{case}", *DB], {"both": True}),
    ("prices load a missing file", ["prices", "load", "{case}/none.csv", *DB], {"both": True}),
    (
        "prices load a path too long",
        ["prices", "load", f"{{case}}/{LONG_PATH}", *DB],
        {"both": True},
    ),
    ("prices load /dev/zero", ["prices", "load", "/dev/zero", *DB], {"both": True}),
)


def path_cases() -> list[Case]:
    return [Case("paths", name, argv, **given) for name, argv, given in PATH_ROWS]


# -- remote locations -------------------------------------------------------------------------


def fake_zip(case_dir: Path) -> None:
    (case_dir / "a.zip").write_bytes(b"PK not really")


LOCATIONS = [
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


def location_cases() -> list[Case]:
    return [
        Case("remote locations", f"ingest {loc}", ["ingest", loc, *DB], both=True, build=fake_zip)
        for loc in LOCATIONS
    ]


# -- prices -----------------------------------------------------------------------------------


def prices_file(content: bytes | str) -> Build:
    def build(case_dir: Path) -> None:
        path = case_dir / "prices.csv"
        path.write_bytes(content.encode() if isinstance(content, str) else content)

    return build


def prices_stored_wrong(case_dir: Path, output: str | None) -> str | None:
    return None  # the price rows are checked with every database snapshot


PRICE = {  # a possible `prices set`, each bad value below given in place of one of its fields
    "kind": "instance",
    "name": "n1-standard-4",
    "regular": "0.19",
    "preemptible": "0.04",
    "valid_from": "2026-01-01",
}
REGULAR_PRICES = [
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
]
PREEMPTIBLE_PRICES = ["nan", "-0.5", "infinity"]
PRICE_NAMES = ["", "n" * 101, "n" * 5000, "bad\nname", "\u0000x"]  # NUL: no argument holds it
PRICE_KINDS = ["server", "", "GPU", "k" * 30]
VALID_FROM = [
    "yesterday",
    "2026-02-30",
    "0000-01-01",
    "99999-01-01",
    "",
    "2026-01-01T25:00",
    "0001-01-01T00:00:00+05:00",  # before year 1 in UTC
    "9999-12-31T23:00:00-05:00",  # after year 9999 in UTC
]
POSSIBLE_PRICE = [
    "gpu",
    "nvidia-tesla-t4",
    "--regular",
    "0.35",
    "--preemptible",
    "0.11",
    "--valid-from",
    "2026-01-01",
]
PRICE_HEADER = "kind,name,regular_per_hour,preemptible_per_hour,valid_from,source\n"
PRICE_ROW = "instance,n1,0.1,0.05,2026-01-01,x\n"
# `prices load` of these files
PRICE_FILES: dict[str, bytes | str] = {
    "empty": "",
    "only a header": PRICE_HEADER,
    "no header": PRICE_ROW,
    "NaN price": PRICE_HEADER + "instance,n1,nan,0.05,2026-01-01,x\n",
    "inf price": PRICE_HEADER + "instance,n1,inf,0.05,2026-01-01,x\n",
    "negative price": PRICE_HEADER + "instance,n1,-3,0.05,2026-01-01,x\n",
    "price 1e9": PRICE_HEADER + "instance,n1,1e9,0.05,2026-01-01,x\n",
    "a name of 5,000 characters": PRICE_HEADER + f"instance,{'n' * 5000},0.1,0.05,2026-01-01,x\n",
    "an unknown kind": PRICE_HEADER + "spaceship,n1,0.1,0.05,2026-01-01,x\n",
    "a bad date": PRICE_HEADER + "instance,n1,0.1,0.05,someday,x\n",
    "missing columns": PRICE_HEADER + "instance,n1\n",
    "extra columns": PRICE_HEADER + "instance,n1,0.1,0.05,2026-01-01,x,y,z\n",
    "Latin-1": (PRICE_HEADER + "instance,n\u00e9,0.1,0.05,2026-01-01,x\n").encode("latin-1"),
    "binary": bytes(range(256)) * 20,
    "a NUL byte": PRICE_HEADER + "instance,n\x001,0.1,0.05,2026-01-01,x\n",
    "an unclosed quote": PRICE_HEADER + 'instance,"n1,0.1,0.05,2026-01-01,x\n',
    "the same row twice": PRICE_HEADER + PRICE_ROW * 2,
    "a row of 10 MB": PRICE_HEADER + "instance,n1,0.1,0.05,2026-01-01," + "x" * 10_000_000 + "\n",
    "UTF-16": (PRICE_HEADER + PRICE_ROW).encode("utf-16"),
    "a BOM": "\ufeff" + PRICE_HEADER + PRICE_ROW,
}


def price_set_argv(change: dict[str, str]) -> list[str]:
    """`prices set` of the possible price with ``change`` made to its fields."""
    values = {**PRICE, **change}
    return [
        "prices",
        "set",
        values["kind"],
        values["name"],
        f"--regular={values['regular']}",
        f"--preemptible={values['preemptible']}",
        f"--valid-from={values['valid_from']}",
        *DB,
    ]


def prices_cases() -> list[Case]:
    family = "prices"
    variants: dict[str, dict[str, str]] = {
        **{f"--regular {value!r}": {"regular": value} for value in REGULAR_PRICES},
        **{f"--preemptible {value!r}": {"preemptible": value} for value in PREEMPTIBLE_PRICES},
        **{f"name {v[:12]!r} ({len(v)} characters)": {"name": v} for v in PRICE_NAMES},
        **{f"kind {value[:12]!r}": {"kind": value} for value in PRICE_KINDS},
        **{f"--valid-from {value!r}": {"valid_from": value} for value in VALID_FROM},
    }
    cases = [
        Case(family, f"set {name}", price_set_argv(change), both=True, check=prices_stored_wrong)
        for name, change in variants.items()
        if "\x00" not in change.get("name", "")
    ]
    cases.append(
        Case(
            family,
            "set a possible price",
            ["prices", "set", *POSSIBLE_PRICE, *DB],
            both=True,
            valid=True,
            check=prices_stored_wrong,
        )
    )
    cases += [
        Case(
            family,
            f"load {name}",
            ["prices", "load", "{case}/prices.csv", *DB],
            build=prices_file(content),
            both=True,
            check=prices_stored_wrong,
        )
        for name, content in PRICE_FILES.items()
    ]
    return cases


# -- sweep ids --------------------------------------------------------------------------------

SWEEP_IDS = [
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
# each command given each id, with what else it needs
SWEEP_ID_COMMANDS = {
    "report": [],
    "regressions": [],
    "export": ["--out", "{case}/out"],
    "project": ["--allreduce", "ar"],
}


def sweep_id_cases() -> list[Case]:
    family = "sweep ids"
    cases = [
        Case(
            family,
            f"{command} {sweep[:20]!r}",
            [command, sweep, *DB, *extra],
            both=command == "regressions",
            seeded=True,
        )
        for sweep in SWEEP_IDS
        for command, extra in SWEEP_ID_COMMANDS.items()
    ]
    refit = ["db", "refit", "--sweep", "../good", *DB]
    cases.append(Case(family, "db refit --sweep '../good'", refit, seeded=True, both=True))
    return cases


# -- arguments --------------------------------------------------------------------------------

# Command lines of cli.main; a `run` of a usable request is stopped by the guard database
BAD_ARGUMENTS = [
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
    ["project", "x", "--allreduce", "y", "--workers", "abc", *DB],
    ["project", "x", "--allreduce", "y", "--instance", "", *DB],
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
    ["regressions", "x", "--window", "0", *DB],
    ["regressions", "x", "--window", "99999999999", *DB],
    ["regressions", "x", "--alpha", "nan", *DB],
    ["regressions", "x", "--alpha=-1", *DB],
    ["regressions", "x", "--min-change", "inf", *DB],
    ["network"],
    ["network", "bogus"],
    ["dashboard", "--port", "abc"],
    ["dashboard", "--port", "-1"],
    ["dashboard", "--port", "99999"],
    ["dashboard", "--host", "999.1.1.1", "--port", "1"],
    ["dashboard", "--port", ""],
    ["tasks", "--bogus"],
    # stacks and their paired rounds: each refused before any rank starts
    ["run", "task2a-logreg-epsilon", "--light", "--stack", "a=/no/such/python", "--pairs", "2"],
    ["run", "task2a-logreg-epsilon", "--light", "--stack", "a=/no/python", "--stack", "b=/x"],
    ["run", "task2a-logreg-epsilon", "--light", "--stack", "a=/bin/true", "--stack", "b=/bin/true"],
    ["run", "task2a-logreg-epsilon", "--light", "--pairs", "3"],
    ["run", "task2a-logreg-epsilon", "--light", "--stack", "Bad Name=/x", "--stack", "b=/x"],
    ["run", "task2a-logreg-epsilon", "--light", "--stack", "a"],
    ["run", "task2a-logreg-epsilon", "--light", "--stack", "a=/x", "--stack-env", "b:K=V"],
    ["run", "task2a-logreg-epsilon", "--light", "--stack", "a=/x", "--stack-env", "a:RANK=1"],
    ["run", "task2a-logreg-epsilon", "--light", "--launcher", "kubernetes", "--stack", "a=BAD IMG"],
    # duets: refused naming pairing where nothing can run as one
    ["run", "task2a-logreg-epsilon", "--light", "--pairing", "duet"],
    ["run", "task2a-logreg-epsilon", "--light", "--pairing", "together"],
    [
        *("run", "task2a-logreg-epsilon", "--light", "--workers", "2,4", "--pairing", "duet"),
        *("--threads-per-worker", "64", "--stack", f"a={sys.executable}"),
        *("--stack", f"b={sys.executable}"),
    ],
    [
        *("run", "task2a-logreg-epsilon", "--light", "--pairing", "duet", "--network", "1gbit"),
        *("--threads-per-worker", "1", "--stack", f"a={sys.executable}"),
        *("--stack", f"b={sys.executable}"),
    ],
    ["nightly"],
    ["nightly", "pin"],
    ["nightly", "pin", "/no/such/python", *DB],
    ["nightly", "pin", "/bin/true", *DB],
    ["nightly", "pin", '{"python": "/x", "image": "y"}', *DB],
    ["nightly", "pin", '{"python": "/x"', *DB],
    ["nightly", "pin", "NOT AN IMAGE", "--image", *DB],
    ["nightly", "pin", "/x", "--env", "NOEQUALS", *DB],
    ["regressions", "--finding", "1", *DB],
    ["regressions", "--state", "fixed", *DB],
    ["regressions", "--finding", "999", "--state", "fixed", *DB],
    ["regressions", "--finding", "1", "--state", "bogus", *DB],
    ["regressions", "--finding", "x", "--state", "fixed", *DB],
    ["regressions", "--states", "bogus", *DB],
]


def argument_case(argv: list[str]) -> Case:
    guarded = argv[:1] == ["run"] and len(argv) > 2  # a usable request stops at the guard
    return Case(
        "arguments",
        " ".join(argv)[:60] or "(no arguments)",
        [*argv, "--database", GUARD] if guarded else argv,
        seeded="{db}" in argv,
        build=guard if guarded else None,
    )


def argument_cases() -> list[Case]:
    return [argument_case(argv) for argv in BAD_ARGUMENTS]


# -- embedded confs ---------------------------------------------------------------------------

# `python -m cli.embedded <dag> <conf>`: each DAG given each of its confs
EMBEDDED_CONFS = {
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
    "task2a_logreg_epsilon": [
        '{"stacks": {"a": {"python": "/x", "image": "y"}}, "pairs": 2}',
        '{"stacks": {"a": {}}, "pairs": 2}',
        '{"pairs": 2}',
        '{"stacks": "nope"}',
        '{"stacks": {"a": {"python": "/no/such/python"}, "b": {"python": "/x"}}, "pairs": 2}',
        '{"pairing": "duet"}',
        '{"pairing": ["duet"]}',
    ],
    "scalebench_nightly": ['{"workers": [1]}', '{"bogus": 1}', '{"stacks": {}}'],
    "no_such_dag": ["{}"],
    "": ["{}"],
}


def embedded_cases() -> list[Case]:
    return [
        Case(
            "embedded confs",
            f"{dag or '(empty dag)'} {conf[:40]}",
            [dag, conf],
            module="cli.embedded",
        )
        for dag, confs in EMBEDDED_CONFS.items()
        for conf in confs
    ]


# -- store boundaries -------------------------------------------------------------------------


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


def linked_out(what: str) -> Build:
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


def changed_after_storing(change: Change) -> Build:
    """The good sweep (stored in the seeded database) with its sweep.json changed."""

    def build(case_dir: Path) -> None:
        place(case_dir, "good")
        path = manifest_text(case_dir, "good")
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return build


LINKED_OUT = ("sweep.json", "a run folder", "a rank file")
# The stored good sweep's sweep.json, changed so
STORED_CHANGES: dict[str, Change] = {
    "created_at": lambda d: d.update(created_at="2020-01-01T00:00:00+00:00"),
    "the task": lambda d: d["request"].update(task="task2a-logreg-epsilon"),
    "the seed": lambda d: d["request"].update(seed=12345),
    "the configuration hash": lambda d: d.update(config_hash="0" * 16),
}
# Values no store may hold: (the kind of record, its change) in the bad run's rank 1
IMPOSSIBLE_VALUES: dict[str, tuple[str, Change]] = {
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
        *(ingest_case(family, f"{w} linked outside the sweep", linked_out(w)) for w in LINKED_OUT),
        Case(
            family,
            "a location holding a pattern ([1]) beside the folder it would match",
            ["ingest", "{case}/exp[1]", *DB],
            build=folder_a_pattern_would_match,
            both=True,
        ),
        ingest_case(
            family,
            "a sweep listing another sweep's run as its own",
            squatter,
            check=said("stored as a run of sweep good"),
        ),
    ]
    cases += [
        Case(
            family,
            f"sweep.json's {name} changed after it was stored",
            INGEST,
            build=changed_after_storing(change),
            both=True,
            seeded=True,
            check=said("differs from what is stored"),
        )
        for name, change in STORED_CHANGES.items()
    ]
    cases += [
        ingest_case(family, name, change_record(kind, change, 0))
        for name, (kind, change) in IMPOSSIBLE_VALUES.items()
    ]
    return cases


# -- data sets: mirrors, archives given by hand, and damaged downloads ---------------------


def archives_folder(*files: tuple[str, bytes]) -> Build:
    """A folder ``{case}/mine`` holding ``files`` (name, bytes), for ``data import``."""

    def build(case_dir: Path) -> None:
        folder = case_dir / "mine"
        folder.mkdir()
        for name, body in files:
            (folder / name).write_bytes(body)

    return build


def fifo_in_folder(case_dir: Path) -> None:
    (case_dir / "mine").mkdir()
    os.mkfifo(case_dir / "mine" / "epsilon_normalized.bz2")


def link_in_folder(case_dir: Path) -> None:
    (case_dir / "mine").mkdir()
    (case_dir / "mine" / "epsilon_normalized.bz2").symlink_to("/etc/passwd")


def damaged_download(name: str, body: bytes) -> Build:
    """``{case}/data/downloads/<name>``: a file left there, as a cut or a hand would."""

    def build(case_dir: Path) -> None:
        folder = case_dir / "data" / "downloads"
        folder.mkdir(parents=True)
        (folder / name).write_bytes(body)

    return build


def epsilon_text_given(body: bytes) -> Build:
    def build(case_dir: Path) -> None:
        folder = case_dir / "data" / "epsilon"
        folder.mkdir(parents=True)
        (folder / "epsilon_normalized.bz2").write_bytes(body)

    return build


DATA_DIR = ["--data-dir", "{case}/data"]
MIRRORS = "SCALEBENCH_DATA_MIRRORS"
DATA_ROWS: tuple[tuple[str, list[str], dict], ...] = (
    *(
        (
            f"data wmt16-en-de --download with {MIRRORS}={value!r}",
            ["data", "wmt16-en-de", "--download", *DATA_DIR],
            {"env": {MIRRORS: value}, "names": MIRRORS if "=" not in value.strip() else ""},
        )
        for value in ("statmt", "=http://127.0.0.1:1", "statmt=", " , ,statmt", "statmt=\x01")
    ),
    (  # a mirror that does not answer: one line naming the address
        "data wikitext2 --download from a mirror that does not answer",
        ["data", "wikitext2", "--download", *DATA_DIR],
        {"env": {MIRRORS: "wikitext=http://127.0.0.1:1/x"}, "names": "127.0.0.1:1"},
    ),
    (
        "data wikitext2 from a zip that is not one, left in downloads",
        ["data", "wikitext2", *DATA_DIR],
        {"build": damaged_download("wikitext-2-v1.zip", b"PK\x03\x04 cut"), "names": "SHA-256"},
    ),
    (
        "data wmt16-en-de with a damaged archive left in downloads",
        ["data", "wmt16-en-de", *DATA_DIR],
        {
            "build": damaged_download("wmt16-test.tgz", b"\x1f\x8b cut short"),
            "names": "wmt16-test.tgz",
        },
    ),
    (
        "data epsilon from a .bz2 that is not one",
        ["data", "epsilon", *DATA_DIR],
        {"build": epsilon_text_given(b"BZh9 not really"), "names": "epsilon_normalized.bz2"},
    ),
    ("data import without a folder", ["data", "import", *DATA_DIR], {}),
    ("data import a missing folder", ["data", "import", "{case}/none", *DATA_DIR], {}),
    ("data import a file", ["data", "import", "{case}/file", *DATA_DIR], {"build": a_file}),
    (
        "data import a folder of no archive",
        ["data", "import", "{case}/mine", *DATA_DIR],
        {"build": archives_folder(("holiday.jpg", b"\xff\xd8"))},
    ),
    (
        "data import a folder whose archive is a FIFO",
        ["data", "import", "{case}/mine", *DATA_DIR],
        {"build": fifo_in_folder},
    ),
    (
        "data import a folder whose archive is a link",
        ["data", "import", "{case}/mine", *DATA_DIR],
        {"build": link_in_folder},
    ),
    (
        "data digits with a folder",
        ["data", "digits", "{case}/mine", *DATA_DIR],
        {"names": "takes no folder"},
    ),
)


def data_cases() -> list[Case]:
    return [Case("data sets", name, argv, **given) for name, argv, given in DATA_ROWS]


# -- the cluster --------------------------------------------------------------------------------


def _silent_http(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while conn.recv(1 << 16):  # read, never answered
            pass


def _garbage_http(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.recv(1 << 16)
        body = b"<html><body>\x1b[31mlogin first</body></html>"
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )


@functools.cache
def fake_api_server(kind: str) -> str:
    """The address of a server on 127.0.0.1 that is no Kubernetes API: ``silent`` reads and
    never answers, ``garbage`` answers every request with an HTML page (served by this
    process's threads until it ends)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    handle = _silent_http if kind == "silent" else _garbage_http

    def serve() -> None:
        while True:
            conn = server.accept()[0]
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}"


def kube_config(
    server: str = "http://127.0.0.1:9", user: str = "{token: abc}", **extra: str
) -> str:
    """A kube config of one cluster at ``server``, one user, one context (JSON-style YAML)."""
    current = extra.get("current", "here")
    cluster = extra.get("cluster", "")
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'{cluster}}}}}]\n"
        f"users: [{{name: u, user: {user}}}]\n"
        "contexts: [{name: here, context: {cluster: c, user: u, namespace: scalebench}}]\n"
        f"current-context: {current}\n"
    )


# What the file given as the kube config holds (None: there is no such file), each refused
# in one line by `cluster check` and by a Kubernetes run's validation
KUBE_CONFIGS: dict[str, Callable[[], bytes | str | None]] = {
    "missing": lambda: None,
    "empty": lambda: "",
    "binary": lambda: b"\x00\xff\xfe{{" * 100,
    "not YAML": lambda: "clusters: [unclosed\n  - {\n",
    "a YAML list": lambda: "- clusters\n- users\n",
    "a bare word": lambda: "kubeconfig\n",
    "24 MB of YAML": lambda: "a: b\n" * (18 << 18),
    "a context that is not listed": lambda: kube_config(current="gone"),
    "a server that is not a URL": lambda: kube_config(server="not a url"),
    "a server on a closed port": lambda: kube_config(server="https://127.0.0.1:9"),
    "a server that never answers": lambda: kube_config(server=fake_api_server("silent")),
    "a server that answers HTML": lambda: kube_config(server=fake_api_server("garbage")),
    "a certificate authority that is not there": lambda: kube_config(
        server="https://127.0.0.1:9", cluster=", certificate-authority: /no/such/ca.crt"
    ),
    "a token file that is not there": lambda: kube_config(user="{tokenFile: /no/such/token}"),
    "an exec plugin not installed": lambda: kube_config(
        server="https://127.0.0.1:9",
        user="{exec: {apiVersion: client.authentication.k8s.io/v1, command: /no/such/plugin}}",
    ),
}
# Each command with its settings: HOME is the case's folder, so no ~/.kube/config is read
NO_HOME = {"HOME": "{case}"}
GIVEN_KUBECONFIG = {**NO_HOME, "KUBECONFIG": "{case}/kc"}
CLUSTER_COMMANDS: dict[str, tuple[list[str], dict[str, str]]] = {
    "cluster check --kubeconfig": (
        ["cluster", "check", "--no-pull-check", "--kubeconfig", "{case}/kc"],
        NO_HOME,
    ),
    "cluster check, KUBECONFIG": (["cluster", "check", "--no-pull-check"], GIVEN_KUBECONFIG),
    "run --launcher kubernetes, KUBECONFIG": (
        [
            *("run", "task2a-logreg-epsilon", "--light", "--workers", "1"),
            *("--launcher", "kubernetes", "--database", GUARD),
        ],
        GIVEN_KUBECONFIG,
    ),
}


def write_kube_config(content: Callable[[], bytes | str | None]) -> Build:
    def build(case_dir: Path) -> None:
        guard(case_dir)
        text = content()
        if isinstance(text, bytes):
            (case_dir / "kc").write_bytes(text)
        elif text is not None:
            (case_dir / "kc").write_text(text)

    return build


def cluster_cases() -> list[Case]:
    return [
        Case("cluster", f"{command}: {name}", argv, env=env, build=write_kube_config(content))
        for command, (argv, env) in CLUSTER_COMMANDS.items()
        for name, content in KUBE_CONFIGS.items()
    ]


# -- NCCL logs ----------------------------------------------------------------------------------

NCCL_LINE = "gpu-a:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via {via}\n"
# What the damaged run's rank 0 left as its NCCL log, in a sweep that ran nccl: each ingested,
# the run stored, its transports cut to what their columns hold and free of control characters
NCCL_LOGS: dict[str, Callable[[Path], object]] = {
    "binary": lambda path: path.write_bytes(os.urandom(1 << 20)),
    "one line of 10 MB": lambda path: path.write_text("NCCL INFO " + "x" * (10 << 20)),
    "a thousand made-up transports": lambda path: path.write_text(
        "".join(NCCL_LINE.format(via=f"T{i}{'z' * 60}/x") for i in range(1000))
    ),
    "terminal escapes in a transport": lambda path: path.write_text(
        NCCL_LINE.format(via="NET/\x1b[31mIB\x1b[0m\r\x07/0")
        + NCCL_LINE.format(via="\x1b]0;owned\x07/x")
    ),
    "ranks out of any range": lambda path: path.write_text(
        "NCCL INFO Channel 00/0 : 99999999999999999999[0] -> 1[1] via NET/IB/0\n"
    ),
    "Latin-1 text": lambda path: path.write_bytes(
        NCCL_LINE.format(via="NET/Sock\xe9t/0").encode("latin-1")
    ),
    "a link to /etc/passwd": lambda path: path.symlink_to("/etc/passwd"),
    "a FIFO": lambda path: os.mkfifo(path),
    "a folder": lambda path: path.mkdir(),
}


def nccl_log_damage(write: Callable[[Path], object]) -> Build:
    def damage(case_dir: Path) -> None:
        edit_manifest(setter(("request", "backend"), "nccl"))(case_dir)
        write(case_dir / "loc" / "bad" / BAD_RUN / "nccl-rank-0.log")

    return damage


def nccl_log_cases() -> list[Case]:
    return [
        ingest_case("nccl logs", f"nccl-rank-0.log {name}", nccl_log_damage(write), valid=True)
        for name, write in NCCL_LOGS.items()
    ]


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
    "data sets": data_cases,
    "cluster": cluster_cases,
    "nccl logs": nccl_log_cases,
}
