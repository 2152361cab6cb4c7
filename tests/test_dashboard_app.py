"""The dashboard app over HTTP (Flask's test client, no browser), SQLite and PostgreSQL.

Pages are opened through Dash's page router and callbacks are posted exactly as the
browser posts them (``dash_app.client``), so these tests cover layouts, callbacks and
JSON encoding; ``test_dashboard_browser.py`` checks the same app in Chromium.
"""

from __future__ import annotations

import csv
import html
import io
import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from dashboard_seed import (
    ALLREDUCE,
    BAD,
    BASELINE_NIGHT,
    KNOWN,
    LATEST_NIGHT,
    LIGHT,
    seeded_database,
)
from records_factory import PHASES, FakeRun, write_training_sweep

from cli import dashboard
from cli import main as cli
from dash_app.app import create_app
from dash_app.client import Client
from results_db.database import make_engine, upgrade
from results_db.ingest import ingest_location

PAGES = ["/", "/scaling", "/communication", "/cost", "/runs", "/run", "/compare", "/trend"]
HOSTILE = [
    "<script>alert(1)</script>",
    "' OR 1=1 --",
    "../../etc/passwd",
    "%00",
    "%0A",
    "a" * 3000,
    "☃☃☃",
    "-1",
    "1e309",
    "NaN",
    "[]",
    "{}",
    "$(reboot)",
    "javascript:alert(1)",
    "%",
    "%25%",
    "&&&",
    "===",
    "%E2%80%AE",
    "\\",
    "null",
    "undefined",
    "0x10",
    "99999999999999999999",
]


def text_of(component: Any) -> str:
    """Every string in a serialised component tree, joined (what a reader would see)."""
    if isinstance(component, str):
        return component
    if isinstance(component, dict):
        return " ".join(text_of(v) for k, v in component.items() if k not in ("type", "namespace"))
    if isinstance(component, list):
        return " ".join(text_of(v) for v in component)
    return ""


def prop_of(layout: Any, element_id: str, name: str) -> Any:
    """Property ``name`` of the component ``element_id`` in a serialised layout."""
    if isinstance(layout, dict):
        if layout.get("props", {}).get("id") == element_id:
            return layout["props"][name]
        layout = list(layout.values())
    if isinstance(layout, list):
        return next(
            (v for v in (prop_of(x, element_id, name) for x in layout) if v is not None), None
        )
    return None


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    admin = request.getfixturevalue("postgres_admin") if request.param == "postgresql" else None
    with seeded_database(request.param, tmp_path_factory.mktemp("dash-app"), admin) as url:
        app = create_app(url, stylesheets=[])
        yield Client(app)
        app.server.extensions["scalebench"].dispose()


@pytest.mark.parametrize("path", [*PAGES, "/no-such-page"])
def test_every_page_opens(client: Client, path: str) -> None:
    layout = client.open(path)
    shown = text_of(layout)
    assert "Traceback" not in shown
    expected = {"/": "Overview", "/no-such-page": "Page not found"}.get(path)
    assert (expected or path.strip("/").capitalize()[:5]) in shown or "Nightly trend" in shown


def test_the_cost_page_prices_the_device_the_runs_ran_on(client: Client) -> None:
    def gpu_chosen(search: str) -> str:
        return prop_of(client.open("/cost", search), "cost-gpu", "value")

    # the seeded sweeps ran on CPUs: no GPU price unless one is asked for
    assert gpu_chosen(f"?sweep={KNOWN}") == "none"
    assert gpu_chosen(f"?sweep={KNOWN}&gpu=nvidia-tesla-t4") == "nvidia-tesla-t4"


def test_overview_puts_the_flagged_regression_first(client: Client) -> None:
    out = client.call("overview-content.children", {})
    shown = text_of(out["overview-content"]["children"])
    assert shown.index("Regression flagged") < shown.index("Nightly") < shown.index("Latest sweep")
    assert f"{LATEST_NIGHT}" in shown and "+10.0 % worse" in shown
    assert KNOWN in shown and ALLREDUCE in shown
    assert out["overview-refresh"]["disabled"] is True  # nothing is running


def test_scaling_shows_the_known_speedups(client: Client) -> None:
    out = client.call("scaling-tta.figure", {"scaling-sweep.value": KNOWN})
    assert out["scaling-url"]["search"] == f"?sweep={KNOWN}"
    table = text_of(out["scaling-summary"]["children"])
    assert "1.82×" in table and "3.23×" in table and "80.6 %" in table
    speedup = out["scaling-speedup"]["figure"]["data"]
    measured = next(t for t in speedup if t["name"].startswith("speedup"))
    assert measured["y"] == pytest.approx([1.0, 100 / 55, 100 / 31])
    light = client.call("scaling-tta.figure", {"scaling-sweep.value": LIGHT})
    assert "0.647×" in text_of(light["scaling-summary"]["children"])


def test_scaling_lists_failed_runs_with_their_reason(client: Client) -> None:
    out = client.call("scaling-tta.figure", {"scaling-sweep.value": BAD})
    shown = text_of(out["scaling-summary"]["children"])
    assert "peer went away" in shown and "diverged" in shown
    # every figure says why it is empty: one run failed, the other diverged
    why = "No time to accuracy in this sweep: of its 2 runs, 1 failed and 1 diverged."
    assert why in json.dumps(out["scaling-tta"]["figure"])
    speedup = "No speedup without the time to accuracy of 1 worker: its run at 1 worker failed."
    assert speedup in json.dumps(out["scaling-speedup"]["figure"])


def test_communication_figures(client: Client) -> None:
    values = {
        "comm-sweep.value": KNOWN,
        "comm-allreduce.value": ALLREDUCE,
        "comm-dtype.value": "float16",
    }
    out = client.call("comm-ratio.figure", values)
    assert out["comm-url"]["search"] == f"?sweep={KNOWN}&allreduce={ALLREDUCE}&dtype=float16"
    ratio = out["comm-ratio"]["figure"]["data"][0]
    assert ratio["y"] == pytest.approx([0.05 / 0.4] * 3)  # records_factory: 0.05 s of 0.4 s
    phases = out["comm-phases"]["figure"]["data"]
    assert [t["name"] for t in phases] == [
        "data",
        "forward",
        "loss",
        "backward",
        "gradient_packing",
        "communication",
        "optimizer",
    ]
    latency = out["comm-latency"]["figure"]
    assert [t["name"] for t in latency["data"]] == ["gloo float16 ×2"]
    assert latency["layout"]["xaxis"]["type"] == "log" == latency["layout"]["yaxis"]["type"]
    assert len(latency["data"][0]["x"]) == 13


def test_cost_page_uses_the_dated_prices(client: Client) -> None:
    values = {
        "cost-sweep.value": KNOWN,
        "cost-instance.value": "n1-standard-4",
        "cost-gpu.value": "none",
    }
    out = client.call("cost-bars.figure", values)
    assert out["cost-url"]["search"] == f"?sweep={KNOWN}&gpu=none"
    regular = out["cost-bars"]["figure"]["data"][0]
    assert regular["y"][0] == pytest.approx(0.2092 * 100 / 3600)  # CPU only
    prices = text_of(out["cost-prices"]["children"])
    assert "2020-12-07" in prices and "$0.35/h" in prices
    index = out["cost-index"]["figure"]
    assert any(s.get("y0") == 1.0 for s in index["layout"]["shapes"])  # the 1.0 line
    missing = client.call("cost-bars.figure", {**values, "cost-instance.value": "a100-box"})
    assert "no price for instance type 'a100-box'" in text_of(out | missing)


def test_runs_table_searches_sorts_and_pages(client: Client) -> None:
    base = {
        "runs-q.value": "",
        "runs-status.value": "all",
        "runs-task.value": None,
        "runs-table.columnState": [],
        "runs-pages.active_page": 1,
    }
    out = client.call("runs-table.rowData", {**base, "runs-q.value": "peer"}, "runs-q.value")
    assert [r["status"] for r in out["runs-table"]["rowData"]] == ["failed"]
    assert out["runs-url"]["search"] == "?q=peer"
    sort = [{"colId": "run", "sort": None}, {"colId": "time_to_accuracy_s", "sort": "asc"}]
    paged = {**base, "runs-table.columnState": sort, "runs-pages.active_page": 2}
    out = client.call("runs-table.rowData", paged, "runs-table.columnState")
    assert out["runs-pages"]["max_value"] == 2 and out["runs-pages"]["active_page"] == 2
    assert out["runs-url"]["search"] == "?sort=time_to_accuracy_s&order=asc&page=1"
    # a filter changed (not the grid or the pager): back to the first page
    out = client.call("runs-table.rowData", paged, "runs-status.value")
    assert out["runs-pages"]["active_page"] == 1
    assert out["runs-url"]["search"] == "?sort=time_to_accuracy_s&order=asc"
    first = client.call("runs-table.rowData", {**base, "runs-table.columnState": sort})
    # the real 1-worker light run
    assert first["runs-table"]["rowData"][0]["time_to_accuracy_s"] == "1.83 s"
    assert "42 run(s)" in first["runs-count"]["children"]


def test_run_page(client: Client) -> None:
    out = client.call("run-loss.figure", {"run-id.value": f"{KNOWN}-w2-r2"})
    assert out["run-url"]["search"] == f"?id={KNOWN}-w2-r2"
    loss = out["run-loss"]["figure"]["data"]
    assert [t["name"] for t in loss] == ["1 worker", "2 workers (this run)", "4 workers"]
    metric = out["run-metric"]["figure"]
    assert any(s.get("y0") == 70.0 for s in metric["layout"]["shapes"])  # the target line
    assert [t["y"][-1] for t in metric["data"]] == [80.0, 80.0, 80.0]
    facts = text_of(out["run-facts"]["children"])
    assert "50 s" in facts and "top1 accuracy ≥ 70 — reached" in facts
    assert "goal reached" in text_of(out["run-events"]["children"])
    assert "node-1" in text_of(out["run-environment"]["children"])
    failed = client.call("run-loss.figure", {"run-id.value": f"{BAD}-w1-r1"})
    assert "peer went away" in text_of(failed["run-events"]["children"])


def test_the_run_page_of_an_allreduce_run_shows_its_curves(client: Client) -> None:
    """Task 0 trains nothing: its run page draws that run's latency and bus bandwidth against
    message size, not empty training charts."""
    run_id = f"{ALLREDUCE}-w2-r0"
    out = client.call("run-loss.figure", {"run-id.value": run_id})
    latency, busbw = out["run-loss"]["figure"], out["run-metric"]["figure"]
    assert latency["layout"]["title"]["text"].startswith("All-reduce latency")
    assert busbw["layout"]["title"]["text"] == "All-reduce bus bandwidth"
    assert latency["data"] and all(len(t["x"]) > 3 for t in latency["data"])
    shown = text_of(out)
    assert "Training loss" not in shown and "Validation" not in shown


def test_downloads(client: Client) -> None:
    run_id = f"{LIGHT}-w2-r0"
    steps = client.http.get(f"/download/run/{run_id}/steps.csv")
    assert steps.status_code == 200 and steps.mimetype == "text/csv"
    rows = list(csv.reader(io.StringIO(steps.get_data(as_text=True))))
    assert rows[0][:4] == ["rank", "epoch", "step", "t_s"] and len(rows) == 1 + 48
    evals = client.http.get(f"/download/run/{run_id}/evaluations.csv").get_data(as_text=True)
    assert evals.splitlines()[0].startswith("epoch,t_s,metric_value")
    official = client.http.get(f"/download/run/{KNOWN}-w1-r1/official.txt")
    assert official.get_data(as_text=True).startswith(
        "70% Top 1 Validation Accuracy reached in 100.0 s"
    )
    for bad in (
        "no-such-run/steps.csv",
        f"{run_id}/passwd",
        "%3Cscript%3E/official.txt",
        "a%20b/steps.csv",
    ):
        assert client.http.get(f"/download/run/{bad}").status_code == 404
    escape = client.http.get("/download/run/..%2F..%2Fetc/steps.csv")
    assert "Content-Disposition" not in escape.headers  # the path leaves the download route


def test_compare_shows_the_regression_verdict(client: Client) -> None:
    layout = text_of(client.open("/compare"))
    assert LATEST_NIGHT in layout and BASELINE_NIGHT in layout  # the defaults
    out = client.call(
        "compare-table.children",
        {"compare-a.value": LATEST_NIGHT, "compare-b.value": BASELINE_NIGHT},
    )
    assert "REGRESSION flagged by the nightly detector" in text_of(out["compare-verdict"])
    table = out["compare-table"]["children"]["props"]["rowData"]
    assert table[0]["TTA change"] == "+10.6 %"
    assert table[0]["A against B alone"].startswith("slower, not significant")


def test_trend_marks_the_flagged_night(client: Client) -> None:
    values = {
        "trend-task.value": "task1a-resnet20-cifar10",
        "trend-metric.value": "time_to_accuracy_s",
        "trend-nights.value": 5,
    }
    out = client.call("trend-figure.figure", values)
    assert out["trend-url"]["search"] == "?task=task1a-resnet20-cifar10&nights=5"
    traces = out["trend-figure"]["figure"]["data"]
    assert len(traces[0]["x"]) == 5
    flagged = next(t for t in traces if t["name"] == "flagged regression")
    assert flagged["y"] == pytest.approx([110.5])
    assert LATEST_NIGHT in text_of(out["trend-flags"]["children"])


def test_fuzzed_urls_and_values_get_friendly_answers(client: Client) -> None:
    rng = random.Random(3)
    names = [
        "sweep",
        "allreduce",
        "dtype",
        "gpu",
        "instance",
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
        "x",
    ]
    for value in HOSTILE:
        path = rng.choice(PAGES)
        search = f"?{rng.choice(names)}={value}&{rng.choice(names)}={value}"
        shown = text_of(client.open(path, search))
        assert "Traceback" not in shown and "error" not in shown.lower().replace("errors", "")
    # the callbacks, fed what a tampered request could send
    for value in [*HOSTILE, None, 7, ["a"]]:
        for output, inputs in (
            ("scaling-tta.figure", {"scaling-sweep.value": value}),
            ("run-loss.figure", {"run-id.value": value}),
            ("compare-table.children", {"compare-a.value": value, "compare-b.value": KNOWN}),
            (
                "trend-figure.figure",
                {
                    "trend-task.value": value,
                    "trend-metric.value": value,
                    "trend-nights.value": value,
                },
            ),
            (
                "cost-bars.figure",
                {"cost-sweep.value": KNOWN, "cost-instance.value": value, "cost-gpu.value": value},
            ),
            (
                "runs-table.rowData",
                {
                    "runs-q.value": value,
                    "runs-status.value": value,
                    "runs-table.columnState": [{"colId": value, "sort": value}],
                    "runs-pages.active_page": value,
                },
            ),
        ):
            response = client.post(output, inputs)
            assert response.status_code in (200, 204), (output, value, response.data[:300])
            assert b"Traceback" not in response.data


def test_an_empty_database_says_what_to_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(url)
    client = Client(create_app(url, stylesheets=[]))
    advice = text_of(client.call("overview-content.children", {}))
    assert "./scripts/quickstart.sh" in advice
    assert "scalebench run task1a-resnet20-cifar10 --light --workers 1,2" in advice
    for path in PAGES[1:]:
        assert "quickstart.sh" in text_of(client.open(path))


def test_a_missing_database_file_is_explained(tmp_path: Path) -> None:
    client = Client(create_app(f"sqlite:///{tmp_path / 'none.db'}", stylesheets=[]))
    advice = text_of(client.call("overview-content.children", {}))
    assert "There is no results database at" in advice and "quickstart.sh" in advice
    for path in PAGES[1:]:
        assert "There is no results database" in text_of(client.open(path))
    assert not (tmp_path / "none.db").exists()


def test_published_results_are_overlaid_on_full_sweeps_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'full.db'}"
    upgrade(url)
    runs = [FakeRun(size, time_to_accuracy_s=tta) for size, tta in ((1, 400.0), (2, 230.0))]
    write_training_sweep(tmp_path / "records", "full-1a", runs, light=False)
    write_training_sweep(tmp_path / "records", "light-1a", runs)
    engine = make_engine(url)
    ingest_location(engine, str(tmp_path / "records"))
    engine.dispose()
    client = Client(create_app(url, stylesheets=[]))

    def published(out: dict, graph: str) -> dict[str, list]:
        return {
            t["name"]: t["y"]
            for t in out[graph]["figure"]["data"]
            if t["name"].startswith("published")
        }

    scaling = {"scaling-sweep.value": "full-1a", "scaling-published.value": "on"}
    out = client.call("scaling-tta.figure", scaling)
    assert out["scaling-url"]["search"] == "?sweep=full-1a&published=on"
    assert published(out, "scaling-tta") == {
        "published: 1 T4 per n1-standard-4": [407.0],
        "published: 3 vCPUs of an n1-standard-4": [5895.0],
    }
    assert "MLBench published results" in text_of(out["scaling-published-note"]["children"])
    off = client.call("scaling-tta.figure", {**scaling, "scaling-published.value": "off"})
    assert published(off, "scaling-tta") == {} and off["scaling-published-note"]["children"] is None
    light = client.call("scaling-tta.figure", {**scaling, "scaling-sweep.value": "light-1a"})
    assert published(light, "scaling-tta") == {}
    assert "light variant" in text_of(light["scaling-published-note"]["children"])

    cost = {
        "cost-sweep.value": "full-1a",
        "cost-instance.value": "n1-standard-4",
        "cost-gpu.value": "nvidia-tesla-t4",
        "cost-published.value": "on",
    }
    out = client.call("cost-bars.figure", cost)
    bars = published(out, "cost-bars")
    assert bars["published: 1 T4 per n1-standard-4"] == pytest.approx([407 / 3600 * 0.154])
    pareto = published(out, "cost-pareto")
    assert pareto["published: 3 vCPUs of an n1-standard-4"] == pytest.approx([5895 / 3600 * 0.044])
    assert "published=on" in out["cost-url"]["search"]
    for path in ("/cost", "/scaling"):  # a link opens with the overlay on
        layout = client.open(path, "?sweep=full-1a&published=on")
        assert prop_of(layout, f"{path[1:]}-published", "value") == "on"


def copy_allreduce_sweep(target: Path, suffix: str, device: str) -> str:
    """The recorded all-reduce sweep again under another id, its tensors said to be on
    ``device``; returns the new sweep id."""
    sweep_id = ALLREDUCE[: -len(suffix)] + suffix
    source = Path(__file__).parent / "data" / "sweep-allreduce"
    for path in source.rglob("*"):
        if path.is_file():
            copy = target / sweep_id / str(path.relative_to(source)).replace(ALLREDUCE, sweep_id)
            copy.parent.mkdir(parents=True, exist_ok=True)
            text = path.read_text().replace(ALLREDUCE, sweep_id)
            copy.write_text(text.replace('"device":"cpu"', f'"device":"{device}"'))
    return sweep_id


def test_several_allreduce_sweeps_are_overlaid(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'allreduce.db'}"
    upgrade(url)
    records = tmp_path / "records"
    on_gpu = copy_allreduce_sweep(records, "aaaa", "cuda:0")
    again = copy_allreduce_sweep(records, "bbbb", "cpu")
    original = copy_allreduce_sweep(records, ALLREDUCE[-4:], "cpu")
    engine = make_engine(url)
    ingest_location(engine, str(records))
    engine.dispose()
    client = Client(create_app(url, stylesheets=[]))

    chosen = [original, on_gpu, again]
    out = client.call(
        "comm-latency.figure",
        {"comm-sweep.value": None, "comm-allreduce.value": chosen, "comm-dtype.value": "float32"},
    )
    assert out["comm-url"]["search"] == f"?allreduce={original},{on_gpu},{again}&dtype=float32"
    for graph in ("comm-latency", "comm-busbw"):
        names = [t["name"] for t in out[graph]["figure"]["data"]]
        # the device is named because it differs; the sweep where two curves would share a name
        assert names == [
            "gloo cpu float32 ×2 · 20261122T021847Z-80d9",
            "gloo cpu float32 ×2 · 20261122T021847Z-bbbb",
            "gloo cuda float32 ×2",
        ], graph
    busbw = {t["name"]: t for t in out["comm-busbw"]["figure"]["data"]}
    assert busbw["gloo cuda float32 ×2"]["y"] == busbw[names[0]]["y"]  # the same records
    assert f"sweep {on_gpu}" in busbw["gloo cuda float32 ×2"]["hovertemplate"]

    one = client.call(
        "comm-latency.figure",
        {"comm-sweep.value": None, "comm-allreduce.value": on_gpu, "comm-dtype.value": "float32"},
    )
    assert [t["name"] for t in one["comm-latency"]["figure"]["data"]] == ["gloo float32 ×2"]
    none = client.call(
        "comm-latency.figure",
        {"comm-sweep.value": None, "comm-allreduce.value": [], "comm-dtype.value": "float32"},
    )
    assert "No all-reduce sweep chosen" in json.dumps(none["comm-latency"]["figure"])
    # a shared link opens with the same sweeps picked; an unknown one is named and left out
    layout = client.open("/communication", f"?allreduce={on_gpu},{again},nosuch-sweep")
    assert prop_of(layout, "comm-allreduce", "value") == [on_gpu, again]
    assert "there is no sweep 'nosuch-sweep'" in text_of(layout)


def test_a_sweep_on_two_network_profiles_draws_a_curve_for_each(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'networks.db'}"
    upgrade(url)
    slow = dict(PHASES, communication=0.5)  # the slow link: ten times the communication
    runs = [
        FakeRun(size, time_to_accuracy_s=tta, network=network, phases=phases)
        for network, phases, ttas in (
            ("host", PHASES, (100.0, 55.0)),
            ("100mbit", slow, (100.0, 90.0)),
        )
        for size, tta in zip((1, 2), ttas, strict=True)
    ]
    write_training_sweep(tmp_path / "records", "two-links", runs)
    later = [
        replace(r, time_to_accuracy_s=120.0) if (r.network, r.world_size) == ("100mbit", 2) else r
        for r in runs
    ]
    write_training_sweep(tmp_path / "records", "two-links-later", later)
    engine = make_engine(url)
    ingest_location(engine, str(tmp_path / "records"))
    engine.dispose()
    client = Client(create_app(url, stylesheets=[]))

    out = client.call(
        "scaling-tta.figure", {"scaling-sweep.value": "two-links", "scaling-network.value": "all"}
    )
    speedups = {t["name"]: t["y"] for t in out["scaling-speedup"]["figure"]["data"]}
    assert speedups["speedup = TTA(1) / TTA(k) · host"] == pytest.approx([1.0, 100 / 55])
    assert speedups["speedup = TTA(1) / TTA(k) · 100mbit"] == pytest.approx([1.0, 100 / 90])
    assert list(speedups).count("ideal (linear)") == 1
    assert out["scaling-url"]["search"] == "?sweep=two-links"
    assert out["scaling-network-column"]["style"] is None  # shown: the sweep has two profiles
    assert [o["value"] for o in out["scaling-network"]["options"]] == ["all", "host", "100mbit"]
    table = text_of(out["scaling-summary"]["children"])
    assert "network host" in table and "network 100mbit" in table and "1.11×" in table

    one = client.call(
        "scaling-tta.figure",
        {"scaling-sweep.value": "two-links", "scaling-network.value": "100mbit"},
    )
    assert one["scaling-url"]["search"] == "?sweep=two-links&network=100mbit"
    names = [t["name"] for t in one["scaling-speedup"]["figure"]["data"]]
    assert "speedup = TTA(1) / TTA(k)" in names and not any("host" in n for n in names)

    comm = client.call(
        "comm-ratio.figure",
        {
            "comm-sweep.value": "two-links",
            "comm-allreduce.value": [],
            "comm-dtype.value": "all",
            "comm-network.value": "all",
        },
    )
    ratios = {t["name"]: t["y"] for t in comm["comm-ratio"]["figure"]["data"]}
    name = "communication / step time (mean over runs)"
    host = ratios[f"{name} · host"]
    assert ratios[f"{name} · 100mbit"][0] == pytest.approx(10 * host[0] * 0.4 / 0.85)
    assert comm["comm-phases"]["figure"]["layout"]["title"]["text"].endswith("· host")
    layout = client.open("/scaling", "?sweep=two-links&network=100mbit")
    assert prop_of(layout, "scaling-network", "value") == "100mbit"

    cost = client.call(
        "cost-bars.figure",
        {
            "cost-sweep.value": "two-links",
            "cost-gpu.value": "none",
            "cost-instance.value": "n1-standard-4",
            "cost-network.value": "all",
        },
    )
    bars = {t["name"]: t["y"] for t in cost["cost-bars"]["figure"]["data"]}
    regular = [name for name in bars if name.startswith("regular")]
    assert sorted(name.rsplit(" · ", 1)[1] for name in regular) == ["100mbit", "host"]

    compared = client.call(
        "compare-table.children",
        {"compare-a.value": "two-links-later", "compare-b.value": "two-links"},
    )
    rows = compared["compare-table"]["children"]["props"]["rowData"]
    changes = {(r["network"], r["workers"]): r["TTA change"] for r in rows}
    assert changes == {
        ("host", 1): "+0.0 %",
        ("host", 2): "+0.0 %",
        ("100mbit", 1): "+0.0 %",
        ("100mbit", 2): "+33.3 %",
    }


def test_pages_refresh_only_while_a_sweep_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'running.db'}"
    upgrade(url)
    runs = [
        FakeRun(1, time_to_accuracy_s=50.0),
        FakeRun(2, time_to_accuracy_s=None, end="killed", launcher_status="planned"),
    ]
    write_training_sweep(tmp_path / "records", "in-progress", runs)
    engine = make_engine(url)
    ingest_location(engine, str(tmp_path / "records"))
    engine.dispose()
    client = Client(create_app(url, stylesheets=[]))
    out = client.call("scaling-tta.figure", {"scaling-sweep.value": "in-progress"})
    assert out["scaling-refresh"]["disabled"] is False
    assert client.call("overview-content.children", {})["overview-refresh"]["disabled"] is False
    layout = json.dumps(client.open("/scaling"))
    assert '"interval": 10000' in layout
    # The running group's progress, as its last load found it.
    overview = text_of(client.call("overview-content.children", {}))
    assert "Running now" in overview and "in-progress-w2-r1" in overview
    # Its ranks wrote 3 epochs of 4 steps; rank 0's third evaluation was not written yet.
    assert "2 epoch(s), 12 steps" in overview
    assert "top1 accuracy 51" in overview  # the newest evaluation, the second
    facts = text_of(client.call("run-facts.children", {"run-id.value": "in-progress-w2-r1"}))
    assert "running: 2 epoch(s), 12 steps done, newest top1 accuracy 51" in facts


def test_the_dashboard_command_checks_its_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["dashboard", "--port", "http"]) == 2
    assert "port: must be a whole number" in capsys.readouterr().err
    args = cli.build_parser().parse_args(["dashboard", "--database", "sqlite://"])
    assert (args.host, args.port, args.func) == ("127.0.0.1", "8050", dashboard.cmd_dashboard)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("garbage", "not a results database URL this dashboard can open"),
        ("mysql://x", "No module named"),
        ("postgresql+psycopg2://postgres@127.0.0.1:9/x", "Connection refused"),
        ("sqlite:///{tmp}/none.db", "There is no results database at"),
        ("sqlite:///{tmp}/empty.db", "has no scalebench tables yet"),
    ],
)
def test_a_database_that_cannot_be_read_gets_a_503_page_not_a_stack(
    url: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dash_app import data

    monkeypatch.setattr(data, "HEALTH_TTL_S", 0.0)
    (tmp_path / "empty.db").touch()
    url = url.format(tmp=tmp_path)
    server = create_app(url, stylesheets=[]).server.test_client()
    for path in ("/", "/runs", "/scaling?sweep=x"):
        answer = server.get(path)
        text = answer.get_data(as_text=True)
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "30"
        assert says in html.unescape(text) and "Traceback" not in text
    assert server.get("/_dash-layout").status_code == 200  # the app itself still answers
    if url.endswith("empty.db"):  # once migrated, the same app serves its pages
        upgrade(url)
        assert server.get("/").status_code == 200


def test_pages_open_on_the_newest_sweep_with_results_and_say_so(tmp_path: Path) -> None:
    """A newer sweep whose every run failed has nothing to draw: the pages open on the newest
    sweep that has results and name the one passed over; asked for by link, it is shown."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    upgrade(url)
    records = tmp_path / "records"
    done = [FakeRun(1, time_to_accuracy_s=60.0), FakeRun(2, time_to_accuracy_s=40.0)]
    write_training_sweep(records, "with-results", done, created_at="2026-11-01T02:00:00+00:00")
    failed = [FakeRun(1, end="failed", launcher_status="failed", time_to_accuracy_s=None)]
    write_training_sweep(records, "all-failed", failed, created_at="2026-11-02T02:00:00+00:00")
    engine = make_engine(url)
    ingest_location(engine, str(records))
    engine.dispose()
    client = Client(create_app(url, stylesheets=[]))

    for page, prefix in (("scaling", "scaling"), ("cost", "cost"), ("communication", "comm")):
        layout = client.open(f"/{page}")
        assert prop_of(layout, f"{prefix}-sweep", "value") == "with-results", page
        assert "Showing with-results, the newest sweep with results: the newest, all-failed " in (
            text_of(layout)
        ), page
    linked = client.open("/scaling", "?sweep=all-failed")
    assert prop_of(linked, "scaling-sweep", "value") == "all-failed"
    assert "the newest sweep with results" not in text_of(linked)


def test_malformed_requests_get_a_4xx_and_one_log_line_never_a_traceback(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    server = client.app.server.test_client()
    caplog.clear()
    for path in (
        "/_dash-component-suites/dash/nonexistent.js",
        "/_dash-component-suites/no-such-library/x.js",
        "/_dash-component-suites/dash/../../etc/passwd",
    ):
        assert server.get(path).status_code == 404, path
    for body in (b"{}", b'{"output": 5}', b"[]", b'{"output": "x.children", "inputs": 3}'):
        answer = server.post("/_dash-update-component", data=body, content_type="application/json")
        assert answer.status_code == 400, body
    # Every page's callbacks, given inputs of kinds no page sends: answered, one line each.
    for output, callback in list(client.app.callback_map.items()):
        if not output.startswith(".."):
            continue
        outputs = [
            {"id": part.split(".")[0], "property": part.split(".")[1]}
            for part in output.strip(".").split("...")
        ]
        for value in ({"a": 1}, [[1]], ["a", "b"], 7, True):
            body = {
                "output": output,
                "outputs": outputs,
                "inputs": [{**i, "value": value} for i in callback["inputs"]],
                "state": [{**s, "value": value} for s in callback.get("state", [])],
                "changedPropIds": [f"{callback['inputs'][0]['id']}.value"],
            }
            answer = server.post("/_dash-update-component", json=body)
            assert answer.status_code in (200, 204, 400), (output, value, answer.status_code)
    assert not [r for r in caplog.records if r.exc_info], [
        r.getMessage() for r in caplog.records if r.exc_info
    ][:3]
    assert any("refused" in r.getMessage() for r in caplog.records)


def test_numpy_is_whole_before_the_first_request(tmp_path: Path) -> None:
    """Plotly imports numpy on the first figure; two callbacks doing that at once in the
    threaded server once gave one of them numpy half-imported (a page's unexpected error in
    the compose stack). The app imports it before it serves."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dash_app.app import create_app\n"
        "assert 'numpy' not in sys.modules\n"
        f"create_app('sqlite:///{tmp_path / 'r.db'}', stylesheets=[])\n"
        "print('numpy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
