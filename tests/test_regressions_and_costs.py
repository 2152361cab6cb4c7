"""Nightly regression detection, costs, prices and exports against a real database."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from records_factory import FakeRun, write_training_sweep
from sqlalchemy import Engine, select

from cli import main as cli
from dash_app.pages.trend.figures import trend_figure
from results_db import models, regressions, service
from results_db.ingest import ingest_location
from results_db.models import Regression
from results_db.queries.costs import costs, prices_in_force
from results_db.queries.nightly import nightly_trend
from results_db.queries.sweeps import scaling, sweep_networks


def nightly(root: Path, night: int, tta: list[float]) -> str:
    sweep_id = f"nightly-{night:02d}"
    runs = [FakeRun(2, repeat=i, time_to_accuracy_s=value) for i, value in enumerate(tta)]
    write_training_sweep(
        root, sweep_id, runs, trigger="scheduled", created_at=f"2026-11-{night:02d}T02:00:00+00:00"
    )
    return sweep_id


BASELINE = [
    [100.0, 101.5, 99.0],
    [98.5, 100.5, 102.0],
    [101.0, 99.5, 100.0],
    [100.2, 98.8, 101.2],
    [99.7, 100.9, 100.1],
    [101.8, 99.2, 100.4],
    [100.6, 99.9, 98.9],
]


def seed_baseline(root: Path) -> None:
    for night, values in enumerate(BASELINE, start=1):
        nightly(root, night, values)


def detect(engine: Engine, sweep_id: str) -> list[regressions.Finding]:
    with engine.begin() as conn:
        findings = regressions.detect(conn, sweep_id)
        regressions.record(conn, sweep_id, findings)
    return [f for f in findings if f.metric == "time_to_accuracy_s"]


def test_a_real_slowdown_is_flagged_and_stored(engine: Engine, tmp_path: Path) -> None:
    seed_baseline(tmp_path)
    latest = nightly(tmp_path, 8, [109.0, 111.0, 110.5])  # about 10 % slower, every repeat
    ingest_location(engine, str(tmp_path))
    (finding,) = detect(engine, latest)
    assert finding.flagged
    assert finding.change == pytest.approx(0.10, abs=0.01)
    assert finding.p_value < 0.01
    assert finding.baseline_runs == 21 and finding.latest_runs == 3
    with engine.connect() as conn:
        stored = conn.execute(select(Regression.world_size, Regression.metric)).all()
    assert ("2", "time_to_accuracy_s") in {(str(w), m) for w, m in stored}


def test_one_noisy_repeat_is_not_a_regression(engine: Engine, tmp_path: Path) -> None:
    seed_baseline(tmp_path)
    latest = nightly(tmp_path, 8, [100.3, 99.6, 135.0])  # mean +11.6 %, but one outlier
    ingest_location(engine, str(tmp_path))
    (finding,) = detect(engine, latest)
    assert finding.change > 0.05
    assert not finding.flagged
    with engine.connect() as conn:
        assert conn.execute(select(Regression.id)).all() == []


def test_a_single_slow_point_cannot_raise_an_alarm(engine: Engine, tmp_path: Path) -> None:
    seed_baseline(tmp_path)
    latest = nightly(tmp_path, 8, [160.0])
    ingest_location(engine, str(tmp_path))
    (finding,) = detect(engine, latest)
    assert finding.change > 0.5 and not finding.flagged


def test_a_small_but_significant_change_is_not_flagged(engine: Engine, tmp_path: Path) -> None:
    seed_baseline(tmp_path)
    latest = nightly(tmp_path, 8, [103.0, 103.2, 103.4])  # consistent, but only 3 %
    ingest_location(engine, str(tmp_path))
    (finding,) = detect(engine, latest)
    assert finding.p_value < 0.01 and not finding.flagged


def test_without_enough_history_nothing_is_compared(engine: Engine, tmp_path: Path) -> None:
    nightly(tmp_path, 1, [100.0, 100.0, 100.0])
    latest = nightly(tmp_path, 2, [150.0, 150.0, 150.0])
    ingest_location(engine, str(tmp_path))
    assert detect(engine, latest) == []


def test_each_network_profile_is_compared_with_its_own_baseline(
    engine: Engine, tmp_path: Path
) -> None:
    """A nightly on host and 100mbit: only the profile that got slower is flagged, and
    a sweep's tables and costs are per profile, never a mixture of both."""
    for night, values in enumerate(BASELINE, start=1):
        runs = [
            FakeRun(size, repeat=i, time_to_accuracy_s=v * factor, network=network)
            for i, v in enumerate(values)
            for network, factor in (("host", 1), ("100mbit", 3))
            for size in (1, 2)
        ]
        write_training_sweep(
            tmp_path,
            f"nightly-{night:02d}",
            runs,
            trigger="scheduled",
            created_at=f"2026-11-{night:02d}T02:00:00+00:00",
        )
    slower = {"100mbit": 1.1, "host": 1.0}  # only the slow link's runs take 10 % longer
    latest = [
        FakeRun(size, repeat=i, time_to_accuracy_s=v * factor * slower[network], network=network)
        for i, v in enumerate([100.0, 100.5, 99.5])
        for network, factor in (("host", 1), ("100mbit", 3))
        for size in (1, 2)
    ]
    write_training_sweep(
        tmp_path, "nightly-08", latest, trigger="scheduled", created_at="2026-11-08T02:00:00+00:00"
    )
    ingest_location(engine, str(tmp_path))
    flagged = {
        (f.network, f.world_size, f.metric) for f in detect(engine, "nightly-08") if f.flagged
    }
    assert flagged == {("100mbit", 1, "time_to_accuracy_s"), ("100mbit", 2, "time_to_accuracy_s")}
    with engine.connect() as conn:
        reasons = conn.execute(select(Regression.reason)).scalars().all()
        assert set(reasons) == {"on the 100mbit network"}
        assert sweep_networks(conn, "nightly-08") == ["host", "100mbit"]
        host = scaling(conn, "nightly-08")  # the first profile the sweep names
        shaped = scaling(conn, "nightly-08", "100mbit")
        assert [r.runs for r in host] == [3, 3] == [r.runs for r in shaped]
        assert shaped[0].time_to_accuracy_s == pytest.approx(3 * 1.1 * 100.0)
        assert host[0].time_to_accuracy_s == pytest.approx(100.0)
        assert costs(conn, "nightly-08", network="100mbit")[0].time_to_accuracy_s == (
            shaped[0].time_to_accuracy_s
        )
        trend = nightly_trend(conn, "task1a-resnet20-cifar10")
    night = {
        (p.network, p.world_size): p.time_to_accuracy_s for p in trend if p.sweep_id == "nightly-08"
    }
    assert night[("100mbit", 1)] == pytest.approx(3 * 1.1 * 100.0)
    assert night[("host", 1)] == pytest.approx(100.0)
    names = {t.name for t in trend_figure(trend, [], "time_to_accuracy_s").data}
    assert {n for n in names if "on 100mbit" in n} and {n for n in names if "on host" in n}
    report = cli_report(engine, "nightly-08")
    assert "network host:" in report and "network 100mbit:" in report


def cli_report(engine: Engine, sweep_id: str) -> str:
    from results_db.report import sweep_report

    with engine.connect() as conn:
        return sweep_report(conn, sweep_id)


def test_regressions_command_exits_1_when_flagged(
    engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_baseline(tmp_path)
    latest = nightly(tmp_path, 8, [109.0, 111.0, 110.5])
    ingest_location(engine, str(tmp_path))
    url = engine.url.render_as_string(hide_password=False)
    assert cli.main(["regressions", latest, "--database", url]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    assert cli.main(["regressions", "nightly-07", "--database", url]) == 0
    # the rule's options reach the detector: 10 % slower is within a 20 % tolerance
    assert cli.main(["regressions", latest, "--database", url, "--min-change", "0.2"]) == 0
    assert "REGRESSION" not in capsys.readouterr().out


def test_costs_and_price_index_use_the_prices_in_force(engine: Engine, tmp_path: Path) -> None:
    runs = [FakeRun(1, time_to_accuracy_s=3600.0), FakeRun(4, time_to_accuracy_s=1406.25)]
    write_training_sweep(tmp_path, "c", runs)
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        rows = {r.world_size: r for r in costs(conn, "c")}
    hourly_regular = 0.2092 + 0.35
    assert rows[1].cost_regular == pytest.approx(hourly_regular)
    assert rows[4].cost_regular == pytest.approx(4 * hourly_regular * 1406.25 / 3600)
    assert rows[4].speedup == pytest.approx(2.56)
    assert rows[4].price_index_regular == pytest.approx(1.5625 / 2.56)
    assert rows[4].cost_preemptible == pytest.approx(4 * 0.154 * 1406.25 / 3600)


def test_prices_can_be_set_and_loaded_with_dates(
    engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = engine.url.render_as_string(hide_password=False)
    assert (
        cli.main(
            [
                "prices",
                "set",
                "gpu",
                "nvidia-tesla-t4",
                "--regular",
                "0.40",
                "--preemptible",
                "0.12",
                "--valid-from",
                "2026-06-01",
                "--database",
                url,
            ]
        )
        == 0
    )
    price_file = tmp_path / "prices.csv"
    price_file.write_text(
        "kind,name,regular_per_hour,preemptible_per_hour,source,valid_from\n"
        "instance,a2-highgpu-1g,3.67,1.10,provider list,2026-09-01\n"
    )
    assert cli.main(["prices", "load", str(price_file), "--database", url]) == 0
    with engine.connect() as conn:
        now = {(p.kind, p.name): p for p in prices_in_force(conn)}
        earlier = {
            (p.kind, p.name): p
            for p in prices_in_force(conn, at=pd.Timestamp("2026-01-01", tz="UTC").to_pydatetime())
        }
    assert now[("gpu", "nvidia-tesla-t4")].regular_per_hour == 0.40
    assert earlier[("gpu", "nvidia-tesla-t4")].regular_per_hour == 0.35
    assert ("instance", "a2-highgpu-1g") in now and ("instance", "a2-highgpu-1g") not in earlier
    assert cli.main(["prices", "list", "--database", url]) == 0
    assert "a2-highgpu-1g" in capsys.readouterr().out


def test_bad_price_input_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    assert (
        cli.main(
            [
                "prices",
                "set",
                "tpu",
                "v5",
                "--regular",
                "1",
                "--preemptible",
                "1",
                "--valid-from",
                "2026-01-01",
                "--database",
                url,
            ]
        )
        == 2
    )
    assert "kind: must be instance or gpu" in capsys.readouterr().err
    assert (
        cli.main(
            [
                "prices",
                "set",
                "gpu",
                "x",
                "--regular",
                "cheap",
                "--preemptible",
                "1",
                "--valid-from",
                "2026-01-01",
                "--database",
                url,
            ]
        )
        == 2
    )
    assert "regular_per_hour: must be dollars per hour" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_writes_tables_and_official_results(
    engine: Engine, tmp_path: Path, fmt: str
) -> None:
    runs = [FakeRun(1, time_to_accuracy_s=407.0), FakeRun(2, time_to_accuracy_s=None)]
    write_training_sweep(tmp_path / "r", "e", runs)
    ingest_location(engine, str(tmp_path / "r"))
    url = engine.url.render_as_string(hide_password=False)
    written = service.export(url, "e", fmt, tmp_path / "out")
    names = sorted(p.name for p in written)
    assert names == sorted(
        [
            f"e-runs.{fmt}",
            f"e-evaluations.{fmt}",
            f"e-steps.{fmt}",
            f"e-scaling.{fmt}",
            "e-official.txt",
        ]
    )
    reader = pd.read_csv if fmt == "csv" else pd.read_parquet
    # Per configuration, by MLPerf's rule: a worker count whose repeats did not reach the
    # goal has no time, and says how many did.
    scaling = reader(tmp_path / "out" / f"e-scaling.{fmt}").set_index("world_size")
    assert scaling.loc[1, "time_to_accuracy_s"] == 407.0 and scaling.loc[1, "kept"] == 1
    assert scaling.loc[1, "time_to_accuracy"] == "407.00 (1 repeat)"
    assert pd.isna(scaling.loc[2, "time_to_accuracy_s"]) and pd.isna(scaling.loc[2, "speedup"])
    assert scaling.loc[2, "time_to_accuracy"] == "0 of 1 reached the goal"
    assert set(scaling["network"]) == {"host"}
    runs = reader(tmp_path / "out" / f"e-runs.{fmt}")
    assert set(runs["world_size"]) == {1, 2}
    assert runs.loc[runs.world_size == 1, "time_to_accuracy_s"].item() == 407.0
    assert len(reader(tmp_path / "out" / f"e-steps.{fmt}")) == 12 + 24
    official = (tmp_path / "out" / "e-official.txt").read_text().splitlines()
    assert official[0].startswith("70% Top 1 Validation Accuracy reached in 407.0 s, compute ")
    assert "communication" in official[0]
    assert "not reached" in official[1]


def test_a_nightly_whose_runs_all_fail_is_flagged(engine: Engine, tmp_path: Path) -> None:
    seed_baseline(tmp_path)
    runs = [
        FakeRun(2, repeat=i, time_to_accuracy_s=None, end="failed", launcher_status="failed")
        for i in range(3)
    ]
    write_training_sweep(
        tmp_path, "nightly-08", runs, trigger="scheduled", created_at="2026-11-08T02:00:00+00:00"
    )
    ingest_location(engine, str(tmp_path))
    (finding,) = detect(engine, "nightly-08")
    assert finding.flagged and finding.latest_mean is None
    assert "no successful run" in finding.reason
    with engine.connect() as conn:
        reasons = conn.execute(select(Regression.metric, Regression.reason)).all()
    assert ("time_to_accuracy_s", finding.reason) in reasons


FIXTURE_ALLREDUCE = Path(__file__).parent / "data" / "sweep-allreduce"


def allreduce_night(root: Path, night: int, repeats: int, slower: float) -> str:
    """The recorded all-reduce sweep as a scheduled night of ``repeats`` runs, its
    all-reduce times multiplied by ``slower`` (and varied a little per repeat)."""
    import json

    manifest = json.loads((FIXTURE_ALLREDUCE / "sweep.json").read_text())
    old_sweep = manifest["sweep_id"]
    [group] = manifest["groups"]
    sweep_id = f"allreduce-night-{night:02d}"
    manifest.update(
        sweep_id=sweep_id, trigger="scheduled", created_at=f"2026-11-{night:02d}T02:00:00+00:00"
    )
    manifest["request"]["repeats"] = repeats
    manifest["groups"] = []
    for repeat in range(repeats):
        run_id = f"{sweep_id}-w2-r{repeat + 1}"
        manifest["groups"].append({**group, "run_id": run_id, "repeat": repeat})
        factor = slower * (1 + 0.01 * repeat + 0.002 * night)
        for source in (FIXTURE_ALLREDUCE / group["run_id"]).glob("rank-*.jsonl"):
            lines = []
            for line in source.read_text().splitlines():
                record = json.loads(line.replace(group["run_id"], run_id))
                if record["kind"] == "allreduce":
                    record["seconds"] = [s * factor for s in record["seconds"]]
                lines.append(json.dumps(record))
            target = root / sweep_id / run_id / source.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("\n".join(lines) + "\n")
    assert old_sweep not in json.dumps(manifest)
    (root / sweep_id).mkdir(parents=True, exist_ok=True)
    (root / sweep_id / "sweep.json").write_text(json.dumps(manifest))
    return sweep_id


def test_a_slower_all_reduce_is_flagged(engine: Engine, tmp_path: Path) -> None:
    for night in (10, 11, 12):
        allreduce_night(tmp_path, night, repeats=3, slower=1.0)
    latest = allreduce_night(tmp_path, 13, repeats=3, slower=1.4)
    ingest_location(engine, str(tmp_path))
    with engine.begin() as conn:
        findings = regressions.detect(conn, latest)
    [finding] = [f for f in findings if f.metric == "allreduce_largest_s"]
    assert finding.flagged and finding.world_size == 2
    assert finding.change == pytest.approx(0.4, abs=0.05)
    assert finding.latest_runs == 3 and finding.baseline_runs == 9


def test_the_dags_summary_gives_every_network_profile(
    engine: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [
        FakeRun(size, time_to_accuracy_s=100.0 / size * factor, network=network)
        for size in (1, 2)
        for network, factor in (("host", 1), ("100mbit", 1.5))
    ]
    write_training_sweep(tmp_path, "two-links", runs)
    ingest_location(engine, str(tmp_path))
    url = engine.url.render_as_string(hide_password=False)
    rows = service.summarize_sweep("two-links", url)
    assert [(r["network"], r["world_size"]) for r in rows] == [
        ("host", 1),
        ("host", 2),
        ("100mbit", 1),
        ("100mbit", 2),
    ]
    slow = {r["world_size"]: r["time_to_accuracy_s"] for r in rows if r["network"] == "100mbit"}
    assert slow == {1: pytest.approx(150.0), 2: pytest.approx(75.0)}
    assert "network 100mbit" in capsys.readouterr().out


def test_regressions_of_an_unknown_sweep_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert cli.main(["db", "upgrade", "--database", url]) == 0
    assert cli.main(["regressions", "no-such-sweep", "--database", url]) == 2
    err = capsys.readouterr().err
    assert err == "scalebench: error: sweep: no sweep 'no-such-sweep' in the results database\n"


def test_export_to_a_path_that_is_a_file_is_refused_before_anything_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "exports"
    taken.write_text("not a folder")
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert cli.main(["export", "s", "--out", str(taken), "--database", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scalebench: error: out: ") and "is a file" in err
    assert taken.read_text() == "not a folder"


@pytest.mark.parametrize(
    ("regular", "name", "says"),
    [
        ("nan", "n1", "regular_per_hour: must be between 0 and"),
        ("inf", "n1", "regular_per_hour: must be between 0 and"),
        ("-1", "n1", "regular_per_hour: must be between 0 and"),
        ("1e12", "n1", "regular_per_hour: must be between 0 and"),
        ("0.5", "x" * 1000, "name: at most 100 characters, got 1000"),
    ],
)
def test_prices_no_column_can_hold_are_refused_alike_on_both_databases(
    database_url: str, regular: str, name: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["db", "upgrade", "--database", database_url]) == 0
    argv = ["prices", "set", "instance", name, "--regular", regular, "--preemptible", "0.1"]
    assert cli.main([*argv, "--valid-from", "2026-01-01", "--database", database_url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scalebench: error: ") and says in err and err.count("\n") == 1


def test_a_price_file_that_is_not_utf8_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_bytes(b"kind,name,regular_per_hour,preemptible_per_hour,valid_from\n\xff\xfe,x\n")
    url = f"sqlite:///{tmp_path / 'r.db'}"
    assert cli.main(["prices", "load", str(prices), "--database", url]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err


def test_backfilled_nights_are_taken_in_the_order_of_their_nights(
    engine: Engine, tmp_path: Path
) -> None:
    """Three past nights backfilled this morning, after tonight's sweep ran: they are the
    nights before tonight, so tonight is compared with them (in the order it was created,
    it would have no earlier night at all)."""
    tonight = "tonight"
    runs = [FakeRun(2, repeat=i, time_to_accuracy_s=v) for i, v in enumerate([110.0, 111.0, 109.5])]
    write_training_sweep(
        tmp_path,
        tonight,
        runs,
        trigger="scheduled",
        created_at="2026-11-20T02:00:00+00:00",
        night="2026-11-20T02:00:00+00:00",
    )
    for day, values in zip((17, 18, 19), BASELINE, strict=False):
        runs = [FakeRun(2, repeat=i, time_to_accuracy_s=v) for i, v in enumerate(values)]
        write_training_sweep(
            tmp_path,
            f"backfilled-{day}",
            runs,
            trigger="scheduled",
            created_at=f"2026-11-20T{day - 10:02d}:00:00+00:00",  # this morning, after tonight
            night=f"2026-11-{day}T02:00:00+00:00",
        )
    ingest_location(engine, str(tmp_path))
    (finding,) = detect(engine, tonight)
    assert finding.baseline_runs == 9 and finding.flagged
    with engine.connect() as conn:
        nights = dict(conn.execute(select(models.Sweep.id, models.Sweep.night)).all())
    assert nights[tonight].day == 20 and nights["backfilled-17"].day == 17
