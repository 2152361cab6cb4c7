"""The shape every page shares (``dash_app.wiring``): named outputs, what they become on
failure, the guard between Dash and a page's update, and each page's registration."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from dash import Dash, Input, no_update

from dash_app import wiring
from dash_app.data import DataUnavailable
from dash_app.pages import PAGES
from dash_app.wiring import Outputs

CALLBACK_PAGES = [page for page in PAGES if not page.__name__.endswith("not_found_404")]


def shown_text(value: Any) -> str:
    """The strings a component or figure would show, joined."""
    if isinstance(value, str):
        return value
    if hasattr(value, "to_plotly_json"):
        value = value.to_plotly_json()
    if isinstance(value, dict):
        return " ".join(shown_text(v) for v in value.values())
    if isinstance(value, list | tuple):
        return " ".join(shown_text(v) for v in value)
    return ""


def outputs_of(page: Any) -> list[Outputs]:
    return [value for value in vars(page).values() if isinstance(value, Outputs)]


@pytest.mark.parametrize("page", CALLBACK_PAGES, ids=lambda p: p.__name__.rsplit(".", 1)[-1])
def test_every_page_declares_its_own_parts_only(page: Any) -> None:
    assert isinstance(page.PAGE, wiring.Page) and page.PAGE.module == page.__name__
    assert callable(page.update) and callable(page.build) and callable(page.register)
    assert outputs_of(page)
    assert not hasattr(page, "failure")  # the failure answer is the outputs' own
    for outputs in outputs_of(page):
        answer = outputs.failure("the database went away")
        assert list(answer) == list(outputs.outputs)
        shown = [name for name, value in answer.items() if "went away" in shown_text(value)]
        assert shown, f"{page.__name__}: no output shows the failure"
        if "refresh_off" in answer:
            assert answer["refresh_off"] is True
        if "search" in answer:
            assert answer["search"] is no_update  # the address keeps what was asked
        with pytest.raises(KeyError, match="not outputs of this callback: nope"):
            outputs.answer(nope=1)


def test_a_failed_answer_does_not_share_its_values_between_calls() -> None:
    outputs = Outputs(rows=wiring.cleared("grid", "rowData", []))
    first = outputs.failure("x")
    first["rows"].append({"a": 1})
    assert outputs.failure("y")["rows"] == []


def test_the_wired_update_is_guarded(caplog: pytest.LogCaptureFixture) -> None:
    outputs = Outputs(
        search=wiring.address("t"),
        note=wiring.message("t-note"),
        figure=wiring.blank_figure("t-figure", "A title"),
        refresh_off=wiring.refresh("t"),
    )
    calls: list[Any] = []

    def update(sweep: str | None, _tick: int | None = None) -> dict[str, Any]:
        calls.append(sweep)
        if sweep == "gone":
            raise DataUnavailable("the results database cannot be read")
        if sweep == "bug":
            raise ZeroDivisionError
        return outputs.answer(note=sweep)

    app = Dash(__name__)
    outputs.wire(app, update, Input("t-sweep", "value"), Input("t-refresh", "n_intervals"))
    (callback,) = app.callback_map.values()
    assert [o.component_id for o in outputs.outputs.values()] == [
        "t-url",
        "t-note",
        "t-figure",
        "t-refresh",
    ]
    assert len(callback["output"]) == 4 and len(callback["inputs"]) == 2

    safe = wiring.guarded(outputs.failure)(update)
    assert safe("a") == {**outputs.answer(), "note": "a"}
    with caplog.at_level(logging.WARNING):
        refused = safe({"id": 1})
    assert calls == ["a"]  # refused before it ran
    assert wiring.WRONG_KINDS in shown_text(refused["note"])
    assert "sweep=dict" in caplog.text
    down = safe("gone")
    assert "cannot be read" in shown_text(down["note"]) and down["refresh_off"] is True
    assert "A title" in shown_text(down["figure"]) and down["search"] is no_update
    with caplog.at_level(logging.ERROR):
        assert wiring.UNEXPECTED in shown_text(safe("bug")["note"])
    assert "ZeroDivisionError" in caplog.text


def test_a_page_layout_is_parsed_then_built_and_a_failure_is_a_page() -> None:
    page = wiring.Page(__name__, "/t", "Title", "What it shows.")

    def parse(params: Any) -> tuple[str, list[str]]:
        return params.get("x", ""), ["x: not used"] if "y" in params else []

    def build(state: str, problems: list[str]) -> Any:
        if state == "gone":
            raise DataUnavailable("no database")
        return page(state, problems=problems)

    layout = page.layout(parse, build)
    shown = shown_text(layout(x="hello", y="1"))
    assert "Title" in shown and "What it shows." in shown
    assert "hello" in shown and "x: not used" in shown
    failed = shown_text(layout(x="gone"))
    assert "Title" in failed and "no database" in failed


def test_what_an_update_shows_is_chosen_or_said_why_not(caplog: pytest.LogCaptureFixture) -> None:
    runs = {"r1": "the run"}
    assert wiring.chosen("r1", runs.get, "run") == "the run"
    with pytest.raises(wiring.NotShown, match=r"^Choose a run\.$"):
        wiring.chosen(None, runs.get, "run")
    with pytest.raises(wiring.NotShown, match=r"^Choose a sweep and a price\.$"):
        wiring.chosen("", runs.get, "sweep", "Choose a sweep and a price.")
    with pytest.raises(wiring.NotShown, match=r"^There is no run 'gone' in the database\.$"):
        wiring.chosen("gone", runs.get, "run")

    outputs = Outputs(note=wiring.message("t-note"), refresh_off=wiring.refresh("t"))

    def update(run_id: str | None) -> dict[str, Any]:
        return outputs.answer(note=wiring.chosen(run_id, runs.get, "run"))

    safe = wiring.guarded(outputs.failure)(update)
    with caplog.at_level(logging.DEBUG):
        assert safe("r1") == {"note": "the run", "refresh_off": no_update}
        missing = safe("gone")
    assert "There is no run 'gone'" in shown_text(missing["note"])
    assert missing["refresh_off"] is True and not caplog.records
