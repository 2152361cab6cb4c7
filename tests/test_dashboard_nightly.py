"""The Nightly page: the paired nightly's series, findings and triage.

Its figures and tables on hand-made histories; the page over HTTP (Flask's test client, as
the browser posts) on paired nights made as workers write them and judged by the paired
nightly, in SQLite and PostgreSQL; on PostgreSQL, the dashboard's read-only login may
triage a finding and change nothing else. ``test_dashboard_browser.py`` clicks through it
in Chromium.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from dashboard_seed import (
    NEW_CPU,
    NEW_TORCH,
    OLD_CPU,
    OLD_TORCH,
    PAIRED_NIGHTS,
    PAIRED_TASK,
    PLATFORM_NIGHT,
    STACK_NIGHT,
    paired_database,
    paired_night_id,
    write_paired,
)
from sqlalchemy import text
from test_dashboard_app import prop_of, text_of

from dash_app.app import create_app
from dash_app.client import Client
from dash_app.nightly_data import TriageRefused, write_triage
from dash_app.pages import nightly
from dash_app.pages.nightly import figures
from results_db.database import upgrade
from results_db.queries.paired_nights import FindingRow
from results_db.regressions.paired_findings import SeriesKey
from results_db.service.nightly import NightPoint, SeriesHistory, findings

# -- figures and tables, on hand-made histories ------------------------------------------

NIGHT0 = datetime(2026, 11, 1, 2, tzinfo=UTC)


def history(
    world_size: int,
    metric: str,
    ratios: list[float],
    ratio_changes: list[int] = (),  # type: ignore[assignment]
    reference_changes: list[int] = (),  # type: ignore[assignment]
    flagged: bool = False,
    network: str = "host",
) -> SeriesHistory:
    """A series of one night per ratio (interval ±2 %, the first night one round: no
    interval), the reference arm 0.1 s, 0.12 s from any reference change."""
    reference = [0.1] * len(ratios)
    for start in reference_changes:
        reference[start:] = [0.12] * (len(ratios) - start)
    points = [
        NightPoint(
            f"n{i:02d}",
            NIGHT0 + timedelta(days=i),
            ratio,
            0.0 if i == 0 else ratio * 0.98,
            math.inf if i == 0 else ratio * 1.02,
            1 if i == 0 else 8,
            reference[i],
        )
        for i, ratio in enumerate(ratios)
    ]
    key = SeriesKey("task2a", network, world_size, metric)
    return SeriesHistory(key, points, list(ratio_changes), list(reference_changes), flagged)


def finding(
    finding_id: int, state: str, series: list[tuple[int, str, str]], night: int = 5
) -> FindingRow:
    return FindingRow(
        id=finding_id,
        first_night=NIGHT0 + timedelta(days=night),
        first_sweep_id=f"n{night:02d}",
        attribution="stack",
        size=1.06,
        low=1.04,
        high=1.08,
        p_value=1e-6,
        series=[
            {
                "task": "task2a",
                "network": "host",
                "world_size": size,
                "metric": metric,
                "arm": arm,
                "size": 1.06,
                "low": 1.04,
                "high": 1.08,
                "p_value": 1e-6,
                "nights": 2,
                "rounds": 16,
            }
            for size, metric, arm in series
        ],
        phases=["compute"],
        diff={
            "part": "stack",
            "before_sweep": "n04",
            "after_sweep": "n05",
            "changed": {"torch": ["2.13.0", "2.14.0"], "env": [{}, {"OMP_NUM_THREADS": "1"}]},
        },
        state=state,
        note="",
        created_at=NIGHT0,
        updated_at=NIGHT0,
    )


STEPPED = [1.0, 1.01, 0.99, 1.0, 1.0, 1.06, 1.07, 1.05]


def test_each_series_is_a_ratio_above_its_reference_arm_with_its_change_points() -> None:
    histories = [
        history(2, "steady_step_s", [1.0] * 8, reference_changes=[3]),
        history(1, "steady_step_s", STEPPED, ratio_changes=[5], flagged=True),
        history(1, "compute_s", STEPPED, ratio_changes=[5]),
    ]
    shown = finding(7, "open", [(1, "steady_step_s", "ratio")])
    figure = figures.nightly_figure(histories, "steady_step_s", finding=shown)
    layout = figure.layout
    # one worker first, then two: four rows, their nights' axis shared
    titles = [a.text for a in layout.annotations]
    assert titles[0].startswith("FLAGGED · 1 worker: steady step · moved in finding 7")
    assert titles[1] == "reference arm (s)" and titles[2].startswith("2 workers: steady step")
    assert layout.annotations[0].font.color == figures.FLAGGED_COLOUR
    assert {layout.xaxis.matches, layout.xaxis2.matches, layout.xaxis3.matches} == {"x4"}
    ratio = next(t for t in figure.data if t.name == "tonight / reference, 1 worker")
    assert list(ratio.y) == STEPPED and ratio.marker.color == figures.FLAGGED_COLOUR
    band = [t for t in figure.data if t.yaxis == "y" and t.hoverinfo == "skip"]
    assert band[0].y[0] is None and band[1].y[0] is None  # one round: no interval drawn
    assert band[0].y[1] == pytest.approx(1.01 * 1.02) and band[1].fill == "tonexty"
    changes = [t for t in figure.data if t.name and t.name.startswith("change point")]
    assert [(t.yaxis, list(t.y)) for t in changes if len(t.y)] == [
        ("y", [1.06]),
        ("y4", [0.12]),
    ]
    level = next(t for t in figure.data if t.yaxis == "y" and str(t.name).startswith("level"))
    before = math.exp(sum(map(math.log, STEPPED[:5])) / 5)
    after = (1.06 * 1.07 * 1.05) ** (1 / 3)
    assert list(level.y) == pytest.approx([before, before, None, after, after, None])
    shapes = [(s.xref, s.yref, s.x0, s.line.color) for s in layout.shapes]
    assert ("x domain", "y", 0, "#777") in shapes  # the line at 1
    fifth = NIGHT0 + timedelta(days=5)
    assert ("x", "y domain", fifth, figures.CHANGE_COLOUR) in shapes
    assert ("x", "y domain", fifth, figures.FINDING_COLOUR) in shapes  # the finding's night
    assert ("x2", "y2 domain", fifth, figures.FINDING_COLOUR) in shapes
    assert ("x4", "y4 domain", NIGHT0 + timedelta(days=3), figures.CHANGE_COLOUR) in shapes
    assert not any(s[1] == "y3 domain" and s[3] == figures.FINDING_COLOUR for s in shapes)
    assert layout.height == 2 * figures.PANEL_HEIGHT + 60


def test_a_measure_without_a_night_says_so() -> None:
    figure = figures.nightly_figure([history(1, "steady_step_s", [1.0])], "eval_s")
    assert "No paired night measured the evaluation yet" in figure.layout.annotations[0].text


def test_false_alarms_count_the_findings_marked_so_over_the_nights_judged() -> None:
    histories = [history(1, "steady_step_s", STEPPED), history(1, "compute_s", [1.0] * 3)]
    marked = [
        finding(
            1, "false-alarm", [(1, "steady_step_s", "ratio"), (1, "steady_step_s", "reference")]
        ),
        finding(2, "false-alarm", [(1, "steady_step_s", "ratio"), (2, "steady_step_s", "ratio")]),
        finding(3, "open", [(1, "steady_step_s", "ratio")]),
    ]
    alarms = figures.false_alarms(histories, marked)
    steady = alarms[("task2a", "host", 1, "steady_step_s")]
    assert (steady.count, steady.judged, steady.rate) == (2, 5, 0.4)  # 8 nights, 3 before
    assert steady.describe() == "2 of 5 judged nights (40.0 %)"
    compute = alarms[("task2a", "host", 1, "compute_s")]
    assert compute.rate is None and compute.describe() == "no night judged yet"
    rows = figures.series_rows([*histories, history(2, "data_s", [1.0] * 4, flagged=True)], alarms)
    assert [r["series"] for r in rows] == [
        "2 workers: data loading",  # flagged first
        "1 worker: steady step",
        "1 worker: compute",
    ]
    assert rows[1]["newest ratio (95 %)"] == "×1.050 [1.029, 1.071]"
    assert rows[1]["false alarms"] == "2 of 5 judged nights (40.0 %)"
    title = figures.panel_title(histories[0], steady, None)
    assert title == "1 worker: steady step · false alarms: 2 of 5 judged nights (40.0 %)"


def test_findings_as_rows_with_their_diff() -> None:
    shown = finding(4, "acknowledged", [(1, "steady_step_s", "ratio"), (1, "compute_s", "ratio")])
    (row,) = figures.finding_rows([shown])
    assert row == {
        "finding": "[4](/nightly?finding=4)",
        "first night": "2026-11-06",
        "state": "acknowledged",
        "attribution": "stack",
        "size (95 %)": "×1.060 [1.040, 1.080]",
        "phases": "compute",
        "moved": "1 worker steady step (ratio ×1.060), 1 worker compute (ratio ×1.060)",
        "changed": "torch, env",
    }
    assert figures.diff_rows(shown) == [
        {"key": "env", "before": "{}", "after": '{"OMP_NUM_THREADS": "1"}'},
        {"key": "torch", "before": "2.13.0", "after": "2.14.0"},
    ]
    assert figures.headline_metric(shown) == "steady_step_s"
    compute_only = finding(5, "open", [(2, "compute_s", "reference")])
    assert figures.headline_metric(compute_only) == "compute_s"
    assert [o["value"] for o in figures.finding_options([shown], compute_only)] == [5, 4]
    assert figures.ratio_text(1.2, 0.0, math.inf) == "×1.200 [—]"
    facts = dict(figures.finding_facts(shown))
    assert facts["size (95 %)"] == "×1.060 [1.040, 1.080]: 6.0 % slower, p = 1e-06"
    assert facts["what changed"] == "stack: sweep n04 → n05"


def test_the_address_is_read_and_checked() -> None:
    state, problems = nightly.parse_nightly({"finding": "12"})
    assert state == nightly.NightlyState(finding=12) and problems == []
    state, problems = nightly.parse_nightly(
        {"task": "<x>", "metric": "nope", "state": "gone", "finding": "-1"}
    )
    assert state == nightly.NightlyState()
    assert len(problems) == 4
    state, _ = nightly.parse_nightly({"metric": "compute_s", "state": "false-alarm"})
    assert state.metric == "compute_s" and state.state == "false-alarm"


# -- the page, on paired nights judged by the paired nightly -----------------------------


@pytest.fixture(scope="module")
def paired_records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_paired(tmp_path_factory.mktemp("paired-records"))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def paired(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    paired_records: Path,
) -> Iterator[str]:
    """The URL of a database of the paired nights, judged."""
    admin = request.getfixturevalue("postgres_admin") if request.param == "postgresql" else None
    directory = tmp_path_factory.mktemp("paired")
    with paired_database(request.param, directory, admin, paired_records) as url:
        yield url


@pytest.fixture(scope="module")
def client(paired: str) -> Iterator[Client]:
    app = create_app(paired, stylesheets=[])
    yield Client(app)
    app.server.extensions["scalebench"].dispose()


def found(url: str) -> dict[str, FindingRow]:
    """The seeded findings by attribution: one of the platform, one of the stack."""
    return {f.attribution: f for f in findings(url, None, None)}


def shown(client: Client, finding_id: int | None, **values: Any) -> dict[str, Any]:
    """The main callback's answer for the paired task."""
    asked = {
        "nightly-task.value": PAIRED_TASK,
        "nightly-metric.value": "steady_step_s",
        "nightly-state.value": "any",
        "nightly-finding.value": finding_id,
        "nightly-triaged.data": 0,
        **values,
    }
    return client.call("nightly-figure.figure", asked)


def press(client: Client, state: str, finding_id: int | None, note: str = "") -> dict[str, Any]:
    """A click on the triage button of ``state``."""
    values = {
        "nightly-finding.value": finding_id,
        "nightly-note.value": note,
        "nightly-triaged.data": 0,
    }
    return client.call(
        "nightly-triage-message.children", values, f"nightly-triage-{state}.n_clicks"
    )


def test_the_seeded_nights_are_two_findings_with_what_changed(paired: str) -> None:
    seeded = found(paired)
    assert set(seeded) == {"platform", "stack"}
    assert seeded["platform"].first_sweep_id == paired_night_id(PLATFORM_NIGHT)
    assert seeded["platform"].diff["changed"] == {"cpu": [OLD_CPU, NEW_CPU]}
    assert seeded["stack"].first_sweep_id == paired_night_id(STACK_NIGHT)
    assert seeded["stack"].diff["changed"] == {"torch": [OLD_TORCH, NEW_TORCH]}


def test_a_findings_link_opens_on_its_task_and_shows_its_change(
    client: Client, paired: str
) -> None:
    stack = found(paired)["stack"]
    layout = client.open("/nightly", f"?finding={stack.id}")
    assert prop_of(layout, "nightly-task", "value") == PAIRED_TASK
    assert prop_of(layout, "nightly-metric", "value") == "steady_step_s"
    assert prop_of(layout, "nightly-finding", "value") == stack.id
    assert "Some of this link's settings" not in text_of(layout)
    odd = text_of(client.open("/nightly", "?finding=99999&task=nope&metric=%3Cb%3E"))
    assert "there is no finding 99999" in odd and "no paired night of 'nope'" in odd
    assert "'<b>' is not one of steady_step_s" in odd and "Traceback" not in odd

    out = shown(client, stack.id)
    assert out["nightly-url"]["search"] == f"?task={PAIRED_TASK}&finding={stack.id}"
    traces = out["nightly-figure"]["figure"]["data"]
    ratio = next(t for t in traces if t.get("name") == "tonight / reference, 1 worker")
    assert len(ratio["y"]) == PAIRED_NIGHTS
    assert all(r == pytest.approx(1.0, abs=0.03) for r in ratio["y"][:STACK_NIGHT])
    assert all(r == pytest.approx(1.06, abs=0.03) for r in ratio["y"][STACK_NIGHT:])
    marks = [t for t in traces if str(t.get("name", "")).startswith("change point")]
    assert [(t["yaxis"], len(t["y"])) for t in marks] == [("y", 1), ("y2", 1)]
    detail = text_of(out["nightly-detail"]["children"])
    assert f"Finding {stack.id}" in detail and "paired-05 → paired-06" in detail
    diff = prop_of(out["nightly-detail"]["children"], "nightly-diff-table", "rowData")
    assert diff == [{"key": "torch", "before": OLD_TORCH, "after": NEW_TORCH}]
    rows = out["nightly-findings"]["children"]["props"]["rowData"]
    assert [r["attribution"] for r in rows] == ["stack", "platform"]  # the newest first
    assert rows[1]["changed"] == "cpu"
    assert out["nightly-triage-box"]["style"] is None
    assert out["nightly-refresh"]["disabled"] is True


def test_the_findings_filter_by_state_and_another_measure_is_drawn(client: Client) -> None:
    out = shown(client, None, **{"nightly-state.value": "fixed", "nightly-metric.value": "data_s"})
    assert out["nightly-url"]["search"] == f"?task={PAIRED_TASK}&metric=data_s&state=fixed"
    assert text_of(out["nightly-findings"]["children"]) == "No finding in this state."
    assert out["nightly-triage-box"]["style"] == {"display": "none"}
    title = out["nightly-figure"]["figure"]["layout"]["title"]["text"]
    assert title == "Tonight / reference per night: data loading"


def test_a_click_triages_the_finding_and_the_view_shows_it(client: Client, paired: str) -> None:
    platform = found(paired)["platform"]
    try:
        said = press(client, "false-alarm", platform.id, "a new CPU, not our code")
        words = text_of(said["nightly-triage-message"]["children"])
        assert f"Finding {platform.id} is now false-alarm." in words
        assert said["nightly-triaged"]["data"] == 1
        stored = found(paired)["platform"]
        assert (stored.state, stored.note) == ("false-alarm", "a new CPU, not our code")
        out = shown(client, platform.id, **{"nightly-triaged.data": 1})
        assert "false-alarm" in text_of(out["nightly-detail"]["children"])
        series = {r["series"]: r for r in out["nightly-series"]["children"]["props"]["rowData"]}
        judged = PAIRED_NIGHTS - 3
        assert series["1 worker: steady step"]["false alarms"] == (
            f"1 of {judged} judged nights ({100 / judged:.1f} %)"
        )
        assert press(client, "open", platform.id)  # an empty note keeps the note
        assert found(paired)["platform"].note == "a new CPU, not our code"
    finally:
        write_triage(paired, platform.id, "open", "")


def test_a_triage_that_cannot_be_stored_is_said_not_raised(client: Client, paired: str) -> None:
    gone = press(client, "fixed", 999)
    assert "There is no finding 999" in text_of(gone["nightly-triage-message"]["children"])
    assert "nightly-triaged" not in gone  # the view is not read again
    unchosen = press(client, "fixed", None)
    assert "Choose a finding first." in text_of(unchosen["nightly-triage-message"]["children"])
    with pytest.raises(TriageRefused, match="state: must be one of open, acknowledged"):
        write_triage(paired, found(paired)["stack"].id, "gone", None)
    out = shown(client, 999)
    assert "There is no finding 999" in text_of(out["nightly-detail"]["children"])
    assert {f.state for f in findings(paired, None, None)} == {"open"}


@pytest.mark.parametrize("paired", ["postgresql"], indirect=True)
def test_the_dashboards_login_may_triage_and_change_nothing_else(
    paired: str, postgres_admin: Any
) -> None:
    """As deployed: the dashboard connects as the login ``grant-readonly`` made, whose
    sessions are read-only by default (init.sql): it may set a finding's state and note and
    may change nothing else; a login without that grant is told how to get it."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ProgrammingError

    from results_db.service import grant_readonly

    role = f"dashboard_{uuid.uuid4().hex[:8]}"
    login = make_url(paired).set(username=role).render_as_string(hide_password=False)
    stack = found(paired)["stack"]
    try:
        grant_readonly(paired, role, None)
        with postgres_admin.connect() as conn:
            conn.execute(text(f'ALTER ROLE "{role}" SET default_transaction_read_only = on'))
        app = create_app(login, stylesheets=[])
        try:
            said = press(Client(app), "acknowledged", stack.id, "bisecting torch")
            assert "is now acknowledged" in text_of(said["nightly-triage-message"]["children"])
            assert found(paired)["stack"].state == "acknowledged"
            writer = create_engine(login)
            with writer.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("SET default_transaction_read_only = off"))
                conn.execute(
                    text("UPDATE nightly_finding SET note = 'mine' WHERE id = :i"), {"i": stack.id}
                )
                for statement in (
                    "UPDATE nightly_finding SET size = 2",
                    "DELETE FROM nightly_finding",
                    "UPDATE sweep SET task = 'x'",
                    "INSERT INTO reference_pin (stack, note, pinned_at) VALUES ('{}', '', now())",
                ):
                    with pytest.raises(ProgrammingError, match="permission denied"):
                        conn.execute(text(statement))
            writer.dispose()
            owner = create_engine(paired)
            with owner.begin() as conn:
                conn.execute(text(f'REVOKE UPDATE ON nightly_finding FROM "{role}"'))
            owner.dispose()
            refused = press(Client(app), "fixed", stack.id)
            words = text_of(refused["nightly-triage-message"]["children"])
            assert "may not change a finding's state" in words and "grant-readonly" in words
        finally:
            app.server.extensions["scalebench"].dispose()
    finally:
        write_triage(paired, stack.id, "open", "")
        owner = create_engine(paired)
        with owner.begin() as conn:  # the role owns privileges in this database: drop them
            conn.execute(text(f'DROP OWNED BY "{role}"'))
        owner.dispose()
        with postgres_admin.connect() as conn:
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))


def test_without_a_paired_night_the_page_says_how_to_start_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(url)
    app = create_app(url, stylesheets=[])
    try:
        page = text_of(Client(app).open("/nightly", "?finding=3"))
    finally:
        app.server.extensions["scalebench"].dispose()
    assert "No paired night yet" in page
    assert "scalebench nightly pin PYTHON_OR_IMAGE" in page
    assert "there is no finding 3" in page
    assert "SCALEBENCH_NIGHTLY_REFERENCE_STACK" in page
