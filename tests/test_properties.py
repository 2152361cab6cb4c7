"""Property-based tests: for any input, a valid result or a clear refusal, never a crash.

- the sweep request and the trigger form's conf: any JSON value gives a request or an
  :class:`InvalidParameter` naming a field;
- the record decoder and ingest: any sequence of byte lines (valid records, cut short,
  binary, huge numbers, NaN and Infinity, wrong types, repeats) is read or quarantined
  line by line, and ingesting it again leaves the same rows;
- every declared quantity (scalebench.quantities): a value outside its range is
  quarantined with its line and never stored;
- the dashboard's URL state: any query string gives a page state and its messages.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from urllib.parse import parse_qsl

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from records_factory import FakeRun, write_training_sweep
from sqlalchemy import func, select

from results_db.database import make_engine, upgrade
from results_db.ingest import ingest_location
from results_db.models import EpochEval, Run, RunEnvironment, RunEvent, StepTiming, Sweep
from scalebench import quantities
from scalebench.request import FORM_FIELDS, SweepRequest
from scalebench.request_fields import InvalidParameter
from scalebench.sweep import request_from_form
from workers.records import parse_rank_lines


def examples(count: int) -> settings:
    """``count`` examples, the same ones on every run (CI must not turn flaky), no deadline
    (2 cores shared with other tests), nothing written into the checkout."""
    return settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


# Any JSON value (what a trigger's conf or the REST API can carry).
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
# Values near the ones a user would type, so that many examples pass validation.
PLAUSIBLE = {
    "workers": st.lists(st.sampled_from([0, 1, 2, 3, 4, 8, 64]), max_size=4)
    | st.sampled_from(["1,2", "2", "x"]),
    "light": st.booleans(),
    "repeats": st.integers(-2, 200),
    "seed": st.integers(-1, 2**64 + 1),
    "collective_timeout_s": st.floats(allow_nan=True) | st.sampled_from(["60", "1e15"]),
    "group_timeout_s": st.floats(allow_nan=True) | st.integers(0, 10**7),
    "backend": st.sampled_from(["gloo", "nccl", "mpi", "tcp"]),
    "launcher": st.sampled_from(["local", "kubernetes", "slurm"]),
    "device": st.sampled_from(["auto", "cpu", "cuda", "tpu"]),
}
FIELD_VALUES = st.one_of(
    st.fixed_dictionaries(
        {}, optional={name: strategy | JSON for name, strategy in PLAUSIBLE.items()}
    ),
    st.dictionaries(st.sampled_from(FORM_FIELDS) | st.text(max_size=10), JSON, max_size=6),
)


@examples(300)
@given(fields=FIELD_VALUES, task=st.sampled_from(["task1a-resnet20-cifar10", "task0-allreduce"]))
def test_any_request_is_valid_or_refused_naming_a_field(fields: dict, task: str) -> None:
    try:
        request = request_from_form(task, fields)
    except InvalidParameter as refused:
        assert refused.field in FORM_FIELDS or refused.field in fields
        assert str(refused).startswith(f"{refused.field}: ")
        event("refused")
    else:
        assert isinstance(request, SweepRequest)
        event("valid request")
        assert request.repeats >= 1 and request.world_sizes


@pytest.fixture(scope="module")
def trigger_form():
    from operators.benchmark_dag import params
    from scalebench.tasks import get_task

    return params(get_task("task2a-logreg-epsilon"))


@examples(200)
@given(conf=st.dictionaries(st.sampled_from(FORM_FIELDS) | st.text(max_size=10), JSON, max_size=5))
def test_any_trigger_conf_is_refused_by_the_form_or_the_request_naming_a_field(
    conf: dict, trigger_form
) -> None:
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    form = ParamsDict(dict(trigger_form))
    try:
        form.update(conf)
        form.validate()
    except ParamValidationError as refused:
        assert str(refused).startswith("Invalid input for param ")
        return
    try:
        request_from_form("task2a-logreg-epsilon", form.dump())
    except InvalidParameter as refused:
        assert refused.field in FORM_FIELDS or refused.field in conf


# -- the record decoder and ingest -----------------------------------------------------------


def _good_lines(tmp: Path) -> list[bytes]:
    sweep = write_training_sweep(tmp, "g", [FakeRun(1, epochs=2, steps_per_epoch=2)])
    return (sweep / "g-w1-r1" / "rank-0.jsonl").read_bytes().splitlines()


GOOD = _good_lines(Path(__import__("tempfile").mkdtemp(prefix="scalebench-good-")))
ODD_NUMBERS = st.sampled_from(
    [
        b"NaN",
        b"Infinity",
        b"-Infinity",
        b"1e999",
        b"-800",
        b"99999999999999999999999",
        b'"fast"',
        b"true",
        b"null",
        b"[]",
        b"{}",
    ]
)


@st.composite
def damaged_line(draw: st.DrawFn) -> bytes:
    line = draw(st.sampled_from(GOOD))
    how = draw(st.sampled_from(["number", "cut", "drop field", "binary", "bytes", "as is"]))
    if how == "cut":
        return line[: draw(st.integers(0, max(0, len(line) - 1)))]
    if how == "binary":
        return draw(st.binary(max_size=40))
    if how == "bytes":
        return draw(st.binary(max_size=8)) + line
    record = json.loads(line)
    keys = [k for k in record if k not in ("kind",)]
    key = draw(st.sampled_from(keys))
    if how == "drop field":
        record.pop(key)
        return json.dumps(record).encode()
    if how == "number":
        text = json.dumps({**record, key: "@@"}).encode()
        return text.replace(b'"@@"', draw(ODD_NUMBERS))
    return line


RANK_FILES = st.lists(damaged_line(), min_size=1, max_size=30)


@examples(400)
@given(lines=RANK_FILES)
def test_any_byte_lines_are_read_or_quarantined_line_by_line(lines: list[bytes]) -> None:
    rank = parse_rank_lines(Path("rank-0.jsonl"), (line + b"\n" for line in lines))
    non_empty = sum(1 for line in lines if line.strip())
    assert rank.bad_lines + len(rank.records) + rank.superseded == non_empty
    for problem in rank.problems:
        assert problem.startswith("rank-0.jsonl:")


TABLES = (Sweep, Run, EpochEval, StepTiming, RunEvent, RunEnvironment)


@pytest.fixture(scope="module")
def sqlite_engine(tmp_path_factory: pytest.TempPathFactory):
    url = f"sqlite:///{tmp_path_factory.mktemp('properties') / 'results.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


@examples(60)
@given(lines=RANK_FILES)
def test_ingest_of_any_rank_file_never_crashes_and_is_repeatable(
    lines: list[bytes], sqlite_engine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("sweeps")
    sweep_id = root.name.replace("_", "-")  # a new sweep (and run) in the shared database
    sweep = write_training_sweep(root, sweep_id, [FakeRun(1)])
    rank_file = sweep / f"{sweep_id}-w1-r1" / "rank-0.jsonl"
    rank_file.write_bytes(b"".join(line + b"\n" for line in lines))
    first = ingest_location(sqlite_engine, str(root))
    event("some lines quarantined" if first.quarantined_lines else "every line read")
    event("refused" if first.refused else "loaded")
    assert not [r for r in first.refused if "Error" in r], first.refused
    rows = _counts(sqlite_engine)
    again = ingest_location(sqlite_engine, str(root))
    assert _counts(sqlite_engine) == rows and not again.conflicts
    assert again.quarantined_lines == first.quarantined_lines


def _counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            m.__tablename__: conn.execute(select(func.count()).select_from(m)).scalar_one()
            for m in TABLES
        }


# -- the dashboard's URL state ---------------------------------------------------------------


@examples(300)
@given(
    query=st.text(max_size=80)
    | st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "sweep",
                    "run",
                    "task",
                    "metric",
                    "sort",
                    "page",
                    "workers",
                    "gpu",
                    "machine",
                    "q",
                    "tta",
                    "x",
                ]
            )
            | st.text(max_size=6),
            st.text(max_size=12),
        ),
        max_size=6,
    ).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs))
)
def test_any_query_string_gives_a_page_state(query: str) -> None:
    from dash_app import state
    from dash_app.pages import communication as communication_page
    from dash_app.pages import compare as compare_page
    from dash_app.pages import cost as cost_page
    from dash_app.pages import overview as overview_page
    from dash_app.pages import run as run_page
    from dash_app.pages import runs as runs_page
    from dash_app.pages import scaling as scaling_page
    from dash_app.pages import trend as trend_page

    params = dict(parse_qsl(query.lstrip("?"), keep_blank_values=True))
    assume(all(isinstance(v, str) for v in params.values()))
    for parse in (
        overview_page.parse_overview,
        scaling_page.parse_sweep,
        communication_page.parse_communication,
        cost_page.parse_cost,
        runs_page.parse_runs,
        run_page.parse_run,
        compare_page.parse_compare,
        trend_page.parse_trend,
    ):
        page, problems = parse(params)
        assert all(isinstance(p, str) for p in problems)
        again, _ = parse(dict(parse_qsl(state.to_search(page).lstrip("?"))))
        assert again == page  # the canonical address gives the same page


# Every declared quantity, with where it lives in a rank file: (kind, event or "", field);
# eval metrics live in an eval record's metrics.
DECLARED = (
    [("eval", "", f"metrics.{name}") for name in quantities.METRICS]
    + [
        (kind.split(":")[0], kind.split(":")[1] if ":" in kind else "", name)
        for kind, name in quantities.FIELDS
        if kind != "any"
    ]
    + [("step", "", "world_size")]
)  # a field of every record


@st.composite
def out_of_range(draw: st.DrawFn) -> tuple[tuple[str, str, str], float]:
    """A declared quantity and a value outside its range (below, or above where bounded)."""
    place = draw(st.sampled_from(DECLARED))
    kind, _, name = place
    declared = (
        quantities.METRICS[name.split(".", 1)[1]]
        if name.startswith("metrics.")
        else next(
            q
            for (k, n), q in quantities.FIELDS.items()
            if n == name and (k.startswith(kind) or k == "any")
        )
    )
    sides = []
    if declared.low is not None:
        sides.append(st.floats(max_value=declared.low, exclude_max=True, allow_nan=False))
    if declared.high is not None:
        sides.append(st.floats(min_value=declared.high, exclude_min=True, allow_nan=False))
    value = draw(st.one_of(sides).filter(math.isfinite))
    if isinstance(declared.low, int) and value.is_integer() and abs(value) < 2**62:
        value = int(value)  # counts are integers in the records
    return place, value


@examples(60)
@given(drawn=out_of_range())
def test_a_value_outside_its_quantitys_range_is_quarantined_never_stored(
    drawn: tuple[tuple[str, str, str], float],
    sqlite_engine,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    (kind, event_name, name), value = drawn
    root = tmp_path_factory.mktemp("ranges")
    sweep_id = root.name.replace("_", "-")
    sweep = write_training_sweep(root, sweep_id, [FakeRun(1)])
    rank_file = sweep / f"{sweep_id}-w1-r1" / "rank-0.jsonl"
    records = [json.loads(line) for line in rank_file.read_text().splitlines()]
    index = next(
        i
        for i, r in enumerate(records)
        if r["kind"] == kind and (not event_name or r.get("event") == event_name)
    )
    changed = records[index]
    if name.startswith("metrics."):
        changed["metrics"][name.split(".", 1)[1]] = value
    else:
        changed[name] = value
    rank_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = ingest_location(sqlite_engine, str(root))
    short = name.split(".")[-1]
    assert report.quarantined_lines >= 1, report
    assert any(f":{index + 1}: " in p and short in p for p in report.problems), report.problems
    with sqlite_engine.connect() as conn:
        run = conn.execute(select(Run).where(Run.sweep_id == sweep_id)).one()
        metrics = conn.execute(
            select(EpochEval.metrics).where(EpochEval.run_id == run.id)
        ).scalars()
        stored = [m.get(short) for m in metrics]
    assert value not in stored
    assert run.quarantined_lines >= 1
