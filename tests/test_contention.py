"""Contention: what other processes took of a group's cores is measured, stored, shown and
kept out of comparisons; comparisons also keep to one kind of hardware."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from records_factory import FakeRun, write_training_sweep
from sqlalchemy import Engine, select

from results_db import regressions
from results_db.analytics import RankCpuUse, contention_share, scaling_rows
from results_db.ingest import ingest_location
from results_db.models import Run
from results_db.report import training_table
from results_db.service import describe_finding
from scalebench import config
from scalebench.host import cpu_counters


def use(node: str, *, cores: int, threads: int, busy: float, own: float, window: float = 10.0):
    return RankCpuUse(node, cores, threads, window, busy, own)


def test_others_on_the_groups_cores_are_a_share_of_them() -> None:
    """One rank with both cores of a 2-core machine; a burner keeps one core busy."""
    assert contention_share([use("a", cores=2, threads=2, busy=29.0, own=19.0)]) == 0.5


def test_others_on_cores_the_group_was_not_given_do_not_count() -> None:
    """16 cores, the group has 2; others keep 4 busy: they fit beside it."""
    assert contention_share([use("a", cores=16, threads=2, busy=60.0, own=20.0)]) == 0.0
    # ... until they want more than the 14 the group left them: 15 cores is half of its 2
    assert contention_share([use("a", cores=16, threads=2, busy=170.0, own=20.0)]) == 0.5


def test_ranks_of_one_machine_add_their_own_seconds() -> None:
    """Two ranks share a 2-core machine: each reads the machine's counters (same values) and
    its own; only what neither of them spent is others'."""
    ranks = [
        use("a", cores=2, threads=1, busy=22.0, own=9.0),
        use("a", cores=2, threads=1, busy=22.0, own=9.0),
    ]
    assert contention_share(ranks) == pytest.approx(0.2)


def test_the_most_contended_machine_is_the_runs() -> None:
    ranks = [
        use("a", cores=2, threads=2, busy=20.0, own=20.0),
        use("b", cores=2, threads=2, busy=25.0, own=19.0),
    ]
    assert contention_share(ranks) == pytest.approx(0.3)
    assert contention_share([]) is None


def test_counters_read_the_machine_and_this_process() -> None:
    before = cpu_counters()
    assert before is not None
    deadline = before.own_s + 0.2
    while (now := cpu_counters()) is not None and now.own_s < deadline:
        pass  # burn 0.2 s of this process's CPU
    assert now is not None and now.own_s >= deadline
    assert now.host_busy_s - before.host_busy_s >= 0.15  # the machine saw it too
    assert cpu_counters(Path("/nonexistent/stat")) is None


@pytest.mark.parametrize("raw", ["lots", "1.5", "-0.1", "nan"])
def test_a_bad_threshold_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("SCALEBENCH_CONTENTION_THRESHOLD", raw)
    with pytest.raises(config.BadSetting, match="SCALEBENCH_CONTENTION_THRESHOLD"):
        config.contention_threshold()


def stored(engine: Engine) -> dict[str, tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(select(Run.id, Run.contention_share, Run.contended, Run.hardware))
        return {row.id: tuple(row[1:]) for row in rows}


def test_ingest_stores_the_share_the_flag_and_the_hardware(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = [
        FakeRun(1, repeat=0, others_cores=1.5),  # half of its one core taken
        FakeRun(1, repeat=1, others_cores=1.05),  # 5 %: under the default threshold
        FakeRun(1, repeat=2),  # records from before the CPU seconds were written
    ]
    write_training_sweep(tmp_path, "s", runs)
    ingest_location(engine, str(tmp_path))
    rows = stored(engine)
    hardware = "AMD EPYC (family 25, model 1), 2 cores"
    assert rows["s-w1-r1"] == (pytest.approx(0.5), True, hardware)
    assert rows["s-w1-r2"] == (pytest.approx(0.05), False, hardware)
    assert rows["s-w1-r3"] == (None, False, hardware)
    monkeypatch.setenv("SCALEBENCH_CONTENTION_THRESHOLD", "0.01")
    ingest_location(engine, str(tmp_path), replace=True)
    assert stored(engine)["s-w1-r2"][1] is True


def test_the_cli_table_marks_contended_worker_counts() -> None:
    class Row:
        def __init__(self, world_size: int, tta: float, contended: bool) -> None:
            self.world_size, self.goal_reached, self.contended = world_size, True, contended
            self.time_to_accuracy_s = self.time_to_accuracy_without_eval_s = tta
            self.compute_s, self.communication_ratio = tta, 0.1

    rows = scaling_rows([Row(1, 10.0, False), Row(2, 6.0, True), Row(2, 6.2, False)])
    assert [r.contended for r in rows] == [0, 1]
    table = training_table(rows, [], {}, "top1_accuracy")
    assert "6.10 ±0.14 (2 repeats) ~" in table
    assert "~ contended: other processes took a share of its cores while it ran" in table
    assert "(1 of 2 at 2 worker(s))" in table


def nightly(root: Path, night: int, tta: list[float], **run: Any) -> str:
    sweep_id = f"nightly-{night:02d}"
    runs = [FakeRun(2, repeat=i, time_to_accuracy_s=v, **run) for i, v in enumerate(tta)]
    created = f"2026-11-{night:02d}T02:00:00+00:00"
    write_training_sweep(root, sweep_id, runs, trigger="scheduled", created_at=created)
    return sweep_id


BASELINE = [[100.0, 101.5, 99.0], [98.5, 100.5, 102.0], [101.0, 99.5, 100.0]]


def tta_finding(engine: Engine, sweep_id: str) -> regressions.Finding:
    with engine.begin() as conn:
        findings = regressions.detect(conn, sweep_id)
    return next(f for f in findings if f.metric == "time_to_accuracy_s")


def test_the_nightly_leaves_contended_runs_out_and_says_so(engine: Engine, tmp_path: Path) -> None:
    for night, values in enumerate(BASELINE, start=1):
        nightly(tmp_path, night, values, others_cores=0.5)
    # slow because something else ran: every run of the night contended
    latest = nightly(tmp_path, 4, [130.0, 128.0, 131.0], others_cores=1.6)
    ingest_location(engine, str(tmp_path))
    finding = tta_finding(engine, latest)
    assert not finding.flagged and finding.latest_mean is None
    assert finding.reason == "no comparable run: the successful ones were contended"
    assert finding.left_out == "left out: 3 contended latest run(s)"
    assert "left out: 3 contended latest run(s)" in describe_finding(finding)


def test_the_nightly_compares_with_the_same_hardware_only(engine: Engine, tmp_path: Path) -> None:
    for night, values in enumerate(BASELINE, start=1):
        nightly(tmp_path, night, values)
    faster = "AMD EPYC (family 25, model 17)"
    nightly(tmp_path, 4, [80.0, 81.0, 79.0], cpu=faster)  # a faster machine's night
    latest = nightly(tmp_path, 5, [100.0, 100.5, 99.5])
    ingest_location(engine, str(tmp_path))
    finding = tta_finding(engine, latest)
    assert finding.baseline_runs == 9 and not finding.flagged
    assert finding.left_out == "left out: 3 baseline run(s) on other hardware"
    # against the faster machine's night alone, with the usual baseline, it would have been
    # 25 % slower: the other hardware's runs really were left out
    assert finding.baseline_mean == pytest.approx(100.222, abs=1e-3)


# -- a real group beside a real burner, seen in the dashboard -----------------------------


# Keeps one core busy until the run in the folder it is given has evaluated BURNED_EPOCHS
# epochs: contended for the first of the run's epochs (most of its time), the rest runs at
# the machine's pace (a contended epoch takes the time of 20 quiet ones: the run's two
# threads wait on each other while one of them waits for a core).
BURNED_EPOCHS = 1
EPOCHS = 3  # the run's length: its goal is not reached, a contended run is stored all the same
BURNER = f"""
import pathlib, sys, time
results, end = pathlib.Path(sys.argv[1]), time.monotonic() + 600
look = 0.0
while time.monotonic() < end:
    if time.monotonic() > look:
        look = time.monotonic() + 0.5
        evals = [f.read_text().count('"kind":"eval"') for f in results.glob("*/*/rank-0.jsonl")]
        if evals and max(evals) >= {BURNED_EPOCHS}:
            break
"""


def contended_sweep(root: Path) -> tuple[str, str]:
    """A light Task 2a group at 1 worker (2 threads) of :data:`EPOCHS` epochs, run and
    ingested while a process burns a core for its first :data:`BURNED_EPOCHS`: (database
    URL, sweep id)."""
    from cli import main as cli

    url = f"sqlite:///{root / 'results.db'}"
    burner = subprocess.Popen([sys.executable, "-c", BURNER, str(root / "results")])
    try:
        status = cli.main(
            [
                "run",
                "task2a-logreg-epsilon",
                "--light",
                "--workers",
                "1",
                "--repeats",
                "1",
                "--max-epochs",
                str(EPOCHS),
                "--results",
                str(root / "results"),
                "--data-dir",
                str(root / "data"),
                "--database",
                url,
            ]
        )
    finally:
        burner.kill()
        burner.wait()
    assert status == 0
    (sweep_dir,) = (root / "results").iterdir()
    return url, sweep_dir.name


# One real group beside a real burner, trained once and checked from the store to the page.
# It runs alone, with the timing tests: beside other tests its burner slows them too (three
# busy processes on two cores), and what they take of its cores would be counted.
@pytest.mark.slow
@pytest.mark.timing
def test_a_run_beside_a_core_burner_is_stored_contended_and_marked_in_chromium(
    tmp_path: Path,
) -> None:
    from browser import Page, chromium
    from werkzeug.serving import make_server

    from dash_app.app import create_app
    from results_db.database import make_engine

    url, sweep_id = contended_sweep(tmp_path)
    engine = make_engine(url)
    try:
        ((share, contended, hardware),) = stored(engine).values()
    finally:
        engine.dispose()
    # the burner kept one of the machine's cores busy, half the group's on a 2-core machine,
    # for the first of the run's three epochs, the larger part of its time: 0.44-0.46 of its
    # cores on a 2-core AMD EPYC, in 11-13 s (a run to its goal, 31 epochs, gave 0.22-0.24
    # in 16-18 s), well above the 0.10 that marks a run contended
    assert contended and share > 0.3, share
    assert hardware

    app = create_app(url, stylesheets=[])
    httpd = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with chromium() as driver:
            page = Page(driver, f"http://127.0.0.1:{httpd.server_port}")
            page.open(f"/scaling?sweep={sweep_id}")
            text = page.shows("scaling-summary", "1 contended", f"{sweep_id}-w1-r1: contended")
            assert "other processes took" in text and "of its cores while it ran" in text
            assert page.severe_logs() == []
    finally:
        httpd.shutdown()
        thread.join(timeout=10)
        app.server.extensions["scalebench"].dispose()


def test_a_night_whose_baseline_was_all_contended_says_so_not_too_few_nights(
    engine: Engine, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sixth night with five finished earlier nights whose 15 runs were all contended: the
    message says how many baseline runs were usable and why the others were left out, not
    that earlier nights are missing."""
    from results_db.service import check_regressions

    for night in range(1, 6):
        nightly(tmp_path, night, [100.0, 101.0, 99.0], others_cores=1.6)
    latest = nightly(tmp_path, 6, [100.0, 100.5, 99.5], others_cores=0.05)
    ingest_location(engine, str(tmp_path))
    assert check_regressions(database_url, latest) == []
    out = capsys.readouterr().out
    assert "earlier scheduled" not in out and "not enough" not in out, out
    assert (
        "not judged   2 worker(s): 0 of 15 successful baseline run(s) of 5 earlier night(s) "
        "usable (15 contended left out), the comparison needs 3; this night: 3 usable run(s)"
    ) in out, out


def test_a_night_without_enough_earlier_nights_says_how_many_it_needs(
    engine: Engine, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from results_db.service import check_regressions

    nightly(tmp_path, 1, [100.0, 101.0, 99.0])
    latest = nightly(tmp_path, 2, [100.0, 100.5, 99.5])
    ingest_location(engine, str(tmp_path))
    assert check_regressions(database_url, latest) == []
    out = capsys.readouterr().out
    assert (
        "not judged every size: 1 earlier scheduled night(s) of this configuration; the "
        "comparison needs 2"
    ) in out, out
