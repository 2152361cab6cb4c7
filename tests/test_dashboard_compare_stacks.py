"""The Compare page's stacks: a sweep's stacks side by side, each against its first.

The forest plot and the tables are pure functions, checked on hand-made reports (one-pair
intervals, a metric one comparison lacks); the page over HTTP (Flask's test client, as the
browser posts) on sweeps of three, one and no stacks written as workers write them and
ingested, in SQLite and PostgreSQL.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest
from records_factory import PHASES, FakeRun, write_training_sweep
from test_dashboard_app import prop_of, text_of

from dash_app.app import create_app
from dash_app.client import Client
from dash_app.pages.compare import figures
from results_db.regressions.paired import RatioInterval, StackComparison
from results_db.service import ingest
from results_db.service.stacks import StackReport

# -- the figure and tables, on hand-made reports ------------------------------------------

SLOWER = RatioInterval(1.2, 1.1, 1.3, 5)
FASTER = RatioInterval(0.8, 0.7, 0.9, 5)
SAME = RatioInterval(1.01, 0.95, 1.07, 5)
ONE = RatioInterval(1.5, 0.0, math.inf, 1)


def report() -> StackReport:
    """base, tonight and other: tonight at 1 and 2 workers (its time to accuracy not measured
    at 2), other at 1 worker on one pair only."""
    return StackReport(
        "s1",
        ["base", "tonight", "other"],
        {
            "base": {
                "executable": "/usr/bin/python3",
                "python": "3.11.9",
                "torch": "2.13.0",
                "cuda": None,
                "nccl": None,
                "numpy": "2.1.0",
                "env": {},
            },
            "tonight": {
                "executable": "/opt/py/bin/python",
                "python": "3.11.9",
                "torch": "2.14.0",
                "cuda": None,
                "nccl": None,
                "numpy": "2.1.0",
                "env": {"OMP_NUM_THREADS": "1"},
                "image_digest": "repo/worker@sha256:abc",
            },
        },
        [
            StackComparison(
                1,
                "host",
                "tonight",
                "base",
                {"steady_step_s": SLOWER, "compute_s": FASTER, "time_to_accuracy_s": SAME},
            ),
            StackComparison(1, "host", "other", "base", {"steady_step_s": ONE}),
            StackComparison(
                2, "1gbit-1ms", "tonight", "base", {"steady_step_s": SAME, "compute_s": SLOWER}
            ),
        ],
    )


def traces_by_name(figure: Any) -> dict[str, Any]:
    return {t.name: t for t in figure.data}


def test_the_forest_plot_marks_each_interval_by_what_it_says() -> None:
    figure = figures.stacks_figure(report())
    traces = traces_by_name(figure)
    slower = traces["slower: interval wholly above 1"]
    assert list(slower.x) == [1.2, 1.2]
    assert list(slower.y) == [
        "1 worker · tonight / base · steady step · 5 pairs",
        "2 workers on 1gbit-1ms · tonight / base · compute · 5 pairs",
    ]
    assert list(slower.error_x.array) == pytest.approx([0.1, 0.1])
    assert list(slower.error_x.arrayminus) == pytest.approx([0.1, 0.1])
    assert slower.marker.color == figures.INTERVAL_KINDS["slower"][0]
    faster = traces["faster: interval wholly below 1"]
    assert list(faster.y) == ["1 worker · tonight / base · compute · 5 pairs"]
    same = traces["no difference shown: interval holds 1"]
    assert len(same.x) == 2
    # one pair: an open marker that says so, no bar
    one = traces["one pair: no interval"]
    assert list(one.x) == [1.5] and list(one.text) == ["one pair: no interval"]
    assert one.error_x.array is None and one.marker.symbol == "circle-open"
    assert "1 pair" in one.y[0]
    # rows in order, first on top; the log axis holds 1 and every bound, not infinity
    layout = figure.layout
    assert layout.yaxis.categoryarray[0] == "1 worker · tonight / base · steady step · 5 pairs"
    assert layout.yaxis.autorange == "reversed" and len(layout.yaxis.categoryarray) == 6
    assert layout.xaxis.type == "log"
    low, high = layout.xaxis.range
    assert 10**low < 0.7 and 1.5 < 10**high < 10
    (line,) = layout.shapes
    assert (line.x0, line.x1, line.yref) == (1.0, 1.0, "paper")
    assert "as fast as base" in layout.annotations[0].text
    # what a comparison lacks is not drawn, and the subtitle says so
    title = layout.title.text.replace("</sup><br><sup>", " ")
    assert "3 not measured by both stacks" in title  # other's two, tonight's at 2 workers
    assert layout.height >= 150 + 6 * figures.ROW_HEIGHT
    hover = list(slower.customdata)
    assert hover[0] == (
        "tonight / base, 1 worker, steady step: ×1.200 [1.100, 1.300], 5 pairs: "
        "slower by 10.0–30.0 %"
    )


def test_the_ratios_table_has_every_number_and_says_what_is_missing() -> None:
    rows = figures.stack_ratio_rows(report())
    assert len(rows) == 9  # three comparisons × the three metrics some comparison has
    assert rows[0] == {
        "workers": 1,
        "link": "host",
        "stack": "tonight",
        "against": "base",
        "metric": "steady step",
        "ratio": 1.2,
        "low": 1.1,
        "high": 1.3,
        "pairs": 5,
        "verdict": "slower by 10.0–30.0 %",
    }
    assert rows[1]["verdict"] == "faster by 10.0–30.0 %"
    assert rows[2]["verdict"] == "no difference shown"
    one = rows[3]
    assert (one["stack"], one["ratio"], one["low"], one["high"], one["pairs"]) == (
        "other",
        1.5,
        None,
        None,
        1,
    )
    assert one["verdict"] == "one pair: no interval"
    assert rows[4]["verdict"] == rows[5]["verdict"] == "not measured by both stacks in any round"
    missing = rows[8]
    assert (missing["workers"], missing["metric"], missing["ratio"]) == (
        2,
        "time to accuracy",
        None,
    )
    assert missing["verdict"] == "not measured by both stacks in any round"


def test_the_identities_side_by_side() -> None:
    rows = {r[figures.WHAT_RAN]: r for r in figures.stack_identity_rows(report())}
    assert list(rows) == [
        "interpreter",
        "Python",
        "torch",
        "CUDA",
        "NCCL",
        "numpy",
        "image",
        "variable OMP_NUM_THREADS",
    ]
    assert rows["torch"] == {
        figures.WHAT_RAN: "torch",
        "base": "2.13.0",
        "tonight": "2.14.0",
        "other": "—",
        figures.SAME: "no",
    }
    assert rows["interpreter"]["other"] == "no run measured"
    assert rows["CUDA"][figures.SAME] == "yes"  # none recorded by any
    assert rows["image"]["base"] == "—" and rows["image"]["tonight"].startswith("repo/worker")
    assert rows["variable OMP_NUM_THREADS"]["base"] == "not set"
    assert rows["variable OMP_NUM_THREADS"]["tonight"] == "1"


def test_fewer_than_two_stacks_nothing_compared_or_one_pair_only() -> None:
    assert figures.stacks_section(StackReport("s0", [], {}, [])) is None
    note = figures.stacks_section(StackReport("s1", ["base"], {}, []))
    assert note is not None and "A ran one stack (base)" in str(note)
    nothing = StackReport("s2", ["base", "tonight"], {}, [])
    empty = figures.stacks_figure(nothing)
    assert "No round in which base and another stack both succeeded" in str(
        empty.layout.annotations[0].text
    )
    section = str(figures.stacks_section(nothing))
    assert "No ratio to show" in section and "compare-stacks-identities" in section
    only_one = StackReport(
        "s3",
        ["base", "tonight"],
        {},
        [StackComparison(1, "host", "tonight", "base", {"data_s": ONE})],
    )
    figure = figures.stacks_figure(only_one)
    assert [t.name for t in figure.data] == ["one pair: no interval"]
    low, high = figure.layout.xaxis.range
    assert 10**low < 1 < 1.5 < 10**high < 10
    assert figures.interval_words(RatioInterval(1.0, 1.0, 1.0, 3)) == "no difference shown"


# -- the page, on stored sweeps ---------------------------------------------------------

STACKS = "stacks-3"
ONE_STACK = "stacks-1"
NO_STACK = "stacks-0"
ROUNDS = 3


def slowed(factor: float) -> dict[str, float]:
    return {name: seconds * factor for name, seconds in PHASES.items()}


def seed(url: str, folder: Path) -> None:
    """Three sweeps: base, tonight (its steps 1.2× base's, a little more each round) and
    other (one round, at one worker) over three rounds at 1 and 2 workers, tonight not
    reaching its goal at 2 workers; one of a single stack; one of none."""
    python = {"python": sys.executable}
    runs = []
    for r in range(ROUNDS):
        for size in (1, 2):
            runs.append(FakeRun(size, repeat=r, stack="base"))
            runs.append(
                FakeRun(
                    size,
                    repeat=r,
                    stack="tonight",
                    phases={**slowed(1.2 + 0.01 * r), "data": PHASES["data"] * 0.5},
                    time_to_accuracy_s=None if size == 2 else 100.0,
                )
            )
    runs.append(FakeRun(1, repeat=0, stack="other", phases=slowed(1.5)))
    stacks = {"base": python, "tonight": python, "other": python}
    write_training_sweep(folder, STACKS, runs, task="task2a-logreg-epsilon", stacks=stacks)
    write_training_sweep(
        folder,
        ONE_STACK,
        [FakeRun(1, stack="base")],
        task="task2a-logreg-epsilon",
        stacks={"base": python},
    )
    write_training_sweep(folder, NO_STACK, [FakeRun(1)], task="task2a-logreg-epsilon")
    ingest(url, str(folder), say=None)


def compared(client: Client, a: str | None, b: str | None = NO_STACK) -> dict[str, Any]:
    """The Compare page's answer for sweeps ``a`` and ``b``."""
    return client.call("compare-stacks.children", {"compare-a.value": a, "compare-b.value": b})


def stacks_shown(client: Client, a: str | None) -> Any:
    return compared(client, a)["compare-stacks"]["children"]


def test_the_page_shows_a_stored_sweeps_stacks(
    engine: Any, database_url: str, tmp_path: Path
) -> None:
    seed(database_url, tmp_path / "records")
    app = create_app(database_url, stylesheets=[])
    try:
        client = Client(app)
        layout = client.open("/compare", f"?a={STACKS}&b={NO_STACK}")
        assert prop_of(layout, "compare-a", "value") == STACKS
        assert "compare-stacks" in str(layout)

        shown = stacks_shown(client, STACKS)
        words = text_of(shown)
        assert "A's stacks side by side: each against base" in words
        figure = prop_of(shown, "compare-stacks-figure", "figure")
        traces = {t["name"]: t for t in figure["data"]}
        slower = traces["slower: interval wholly above 1"]
        steady = slower["y"].index("1 worker · tonight / base · steady step · 3 pairs")
        total, data = sum(PHASES.values()), PHASES["data"]
        each = [((total - data) * (1.2 + 0.01 * r) + data * 0.5) / total for r in range(ROUNDS)]
        assert slower["x"][steady] == pytest.approx(math.prod(each) ** (1 / ROUNDS), rel=1e-3)
        assert slower["error_x"]["array"][steady] > 0
        assert "2 workers · tonight / base · compute · 3 pairs" in slower["y"]
        faster = traces["faster: interval wholly below 1"]
        assert "1 worker · tonight / base · data loading · 3 pairs" in faster["y"]
        one = traces["one pair: no interval"]
        assert "1 worker · other / base · steady step · 1 pair" in one["y"]
        assert "error_x" not in one
        title = figure["layout"]["title"]["text"].replace("</sup><br><sup>", " ")
        assert "1 not measured by both stacks" in title  # tonight's time at 2 workers

        rows = prop_of(shown, "compare-stacks-ratios", "rowData")
        by_key = {(r["workers"], r["stack"], r["metric"]): r for r in rows}
        step = by_key[(1, "tonight", "steady step")]
        assert step["pairs"] == ROUNDS and step["low"] > 1 and step["verdict"].startswith("slower")
        assert by_key[(1, "other", "steady step")]["verdict"] == "one pair: no interval"
        tta = by_key[(2, "tonight", "time to accuracy")]
        assert tta["ratio"] is None and tta["verdict"].startswith("not measured by both")
        assert by_key[(1, "tonight", "time to accuracy")]["pairs"] == ROUNDS

        identities = prop_of(shown, "compare-stacks-identities", "rowData")
        recorded = {r[figures.WHAT_RAN]: r for r in identities}
        assert recorded["Python"] == {
            figures.WHAT_RAN: "Python",
            "base": "3.11",
            "tonight": "3.11",
            "other": "3.11",
            figures.SAME: "yes",
        }
        assert recorded["torch"]["tonight"] == "2.13.0"

        # one stack: a note; none: nothing; a sweep not stored: said, not raised
        assert "A ran one stack (base)" in text_of(stacks_shown(client, ONE_STACK))
        assert stacks_shown(client, NO_STACK) is None
        assert stacks_shown(client, None) is None
        gone = compared(client, "no-such-sweep")
        assert gone["compare-stacks"]["children"] is None
        assert "There is no sweep 'no-such-sweep'" in text_of(gone["compare-verdict"]["children"])

        # the two-sweep comparison still answers beside the stacks
        out = compared(client, STACKS)
        assert out["compare-url"]["search"] == f"?a={STACKS}&b={NO_STACK}"
        assert "Traceback" not in text_of(out["compare-verdict"]["children"])
    finally:
        app.server.extensions["scalebench"].dispose()
