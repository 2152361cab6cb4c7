"""Dashboard URL state: parsing is strict but friendly, and writing it back round-trips."""

from __future__ import annotations

import random
import string
from dataclasses import fields

import pytest

from dash_app import state
from dash_app.pages import communication as communication_page
from dash_app.pages import compare as compare_page
from dash_app.pages import cost as cost_page
from dash_app.pages import overview as overview_page
from dash_app.pages import run as run_page
from dash_app.pages import runs as runs_page
from dash_app.pages import scaling as scaling_page
from dash_app.pages import trend as trend_page
from dash_app.pages.communication import CommunicationState
from dash_app.pages.cost import CostState
from dash_app.pages.runs import RunsState
from dash_app.pages.scaling import SweepState
from dash_app.pages.trend import TrendState
from dash_app.state import to_search
from scalebench.statuses import RUN_STATUSES

PARSERS = [
    overview_page.parse_overview,
    scaling_page.parse_sweep,
    communication_page.parse_communication,
    cost_page.parse_cost,
    runs_page.parse_runs,
    run_page.parse_run,
    compare_page.parse_compare,
    trend_page.parse_trend,
]

HOSTILE = [
    "",
    " ",
    "<script>alert(1)</script>",
    "' OR 1=1 --",
    "../../etc/passwd",
    "%00",
    "\x00",
    "\n\r\t",
    "a" * 5000,
    "☃" * 50,
    "-1",
    "1e9",
    "NaN",
    "None",
    "[]",
    "{}",
    "$(reboot)",
    "javascript:alert(1)",
    "known-scaling\n",
    "..",
    "task1a;DROP TABLE run",
    "\u202eevil",
    "0x10",
    "99999999999999999999",
    "%",
    "%%",
    "?",
    "&",
    "=",
    "#",
]


def test_defaults_when_nothing_is_given() -> None:
    assert scaling_page.parse_sweep({}) == (SweepState(), [])
    assert runs_page.parse_runs({}) == (RunsState(), [])
    assert trend_page.parse_trend({}) == (TrendState(), [])
    assert cost_page.parse_cost({}) == (CostState(), [])


def test_good_values_are_kept() -> None:
    parsed, problems = runs_page.parse_runs(
        {
            "q": "w4",
            "status": "failed",
            "task": "task1a-resnet20-cifar10",
            "sort": "tta",
            "order": "asc",
            "page": "3",
        }
    )  # ("tta": the former name of time_to_accuracy_s, still understood)
    assert problems == []
    assert parsed == RunsState(
        "w4", "failed", "task1a-resnet20-cifar10", "time_to_accuracy_s", "asc", 3
    )
    parsed, problems = communication_page.parse_communication(
        {
            "sweep": "known-scaling",
            "allreduce": "task0-allreduce-20261122T021847Z-80d9",
            "dtype": "float16",
        }
    )
    assert problems == [] and parsed.dtype == "float16" and parsed.sweep == "known-scaling"


def test_several_allreduce_sweeps_are_read_in_order_without_repeats() -> None:
    parsed, problems = communication_page.parse_communication({"allreduce": "b-2, a-1,,b-2,c"})
    assert parsed.allreduce == ("b-2", "a-1", "c") and problems == []
    many = ",".join(f"s{i}" for i in range(state.MAX_OVERLAID + 2))
    parsed, problems = communication_page.parse_communication({"allreduce": f"{many},<x>"})
    assert parsed.allreduce == tuple(f"s{i}" for i in range(state.MAX_OVERLAID))
    assert problems == [
        f"allreduce: at most {state.MAX_OVERLAID} are shown; 's6' is not.",
        f"allreduce: at most {state.MAX_OVERLAID} are shown; 's7' is not.",
        "allreduce: '<x>' is not a valid sweep id.",
    ]
    assert to_search(parsed) == f"?allreduce={','.join(parsed.allreduce)}"


def test_bad_values_fall_back_to_defaults_with_a_message() -> None:
    parsed, problems = trend_page.parse_trend({"metric": "speed", "nights": "-4", "task": "a b"})
    assert parsed == TrendState()
    assert len(problems) == 3
    assert any("metric" in p and "time_to_accuracy_s, samples_per_s" in p for p in problems)
    assert any("nights" in p and "from 2 to 3650" in p for p in problems)
    assert any("task" in p and "not a valid task id" in p for p in problems)


def test_unknown_and_repeated_parameters_are_named() -> None:
    parsed, problems = scaling_page.parse_sweep({"sweep": ["a1", "b2"], "colour": "red"})
    assert parsed.sweep == "a1"
    assert problems == [
        "sweep: given 2 times; the first one is used.",
        "Ignored unknown parameter(s) 'colour'.",
    ]


def test_long_values_are_shortened_in_messages() -> None:
    _, problems = scaling_page.parse_sweep({"sweep": "<" * 1000})
    assert len(problems[0]) < 120 and "..." in problems[0]


@pytest.mark.parametrize(
    "value",
    [
        SweepState("known-scaling"),
        CommunicationState("a", ("b",), "float32"),
        CommunicationState(None, ("b", "c-2", "d"), "all"),
        CostState("s", "n1-highmem-8", "none"),
        RunsState("peer went", "failed", "t", "time_to_accuracy_s", "asc", 2),
        TrendState("task1a-resnet20-cifar10", "samples_per_s", 30),
        run_page.RunState("r-1"),
        compare_page.CompareState("nightly-08", "nightly-07"),
    ],
)
def test_search_round_trips(value: object) -> None:
    from urllib.parse import parse_qs

    search = to_search(value)
    params = {k: v[0] for k, v in parse_qs(search.removeprefix("?")).items()}
    parser = {
        SweepState: scaling_page.parse_sweep,
        CommunicationState: communication_page.parse_communication,
        CostState: cost_page.parse_cost,
        RunsState: runs_page.parse_runs,
        TrendState: trend_page.parse_trend,
        run_page.RunState: run_page.parse_run,
        compare_page.CompareState: compare_page.parse_compare,
    }[type(value)]
    assert parser(params) == (value, [])


def test_defaults_are_left_out_of_the_search() -> None:
    assert to_search(RunsState()) == ""
    assert to_search(RunsState(q="a b&c")) == "?q=a+b%26c"


@pytest.mark.parametrize("parse", PARSERS)
def test_hostile_values_never_raise(parse) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(7)
    alphabet = string.printable + "☃é\u202e\x00"
    values = HOSTILE + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(40)
    ]
    names = [
        "sweep",
        "allreduce",
        "dtype",
        "instance",
        "gpu",
        "q",
        "status",
        "task",
        "sort",
        "order",
        "page",
        "id",
        "a",
        "b",
        "metric",
        "nights",
        "__class__",
        "",
    ]
    for value in values:
        params = {rng.choice(names): value, rng.choice(names): [value, "x"]}
        parsed, problems = parse(params)
        assert all(isinstance(p, str) and p for p in problems)
        for item in fields(parsed):
            got = getattr(parsed, item.name)
            if isinstance(got, str) and item.name != "q":
                assert (
                    got == item.default
                    or state.IDENTIFIER.fullmatch(got)
                    or got
                    in (
                        "all",
                        "asc",
                        "desc",
                        *state.TREND_METRICS,
                        "none",
                        *state.SORTABLE_RUN_COLUMNS,
                        "float32",
                        "float16",
                        "bfloat16",
                        *RUN_STATUSES,
                    )
                )
        if hasattr(parsed, "q"):
            assert len(parsed.q) <= state.MAX_SEARCH and parsed.q.isprintable()
