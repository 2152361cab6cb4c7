"""The nightly regression DAG: settings, schedule, notifier, and a real night that regressed."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from records_factory import FakeRun, write_training_sweep
from sqlalchemy import select

from operators.notify import RegressionFlagged, failure_message, notify_failure
from scalebench.host import cpu_model
from scalebench.nightly import NightlySettings


def test_the_defaults_run_the_light_suite_at_two_in_the_morning() -> None:
    settings = NightlySettings.from_env({})
    assert settings.schedule == "0 2 * * *"
    assert settings.tasks == ("task1a-resnet20-cifar10", "task0-allreduce")
    assert (settings.value("workers"), settings.value("repeats")) == ((1, 2), 3)
    assert settings.request() == {"light": True}  # the rest: the request's defaults


def test_settings_come_from_the_environment() -> None:
    settings = NightlySettings.from_env(
        {
            "SCALEBENCH_NIGHTLY_SCHEDULE": "30 3 * * 1-5",
            "SCALEBENCH_NIGHTLY_TASKS": "task0-allreduce",
            "SCALEBENCH_NIGHTLY_WORKERS": "4,1,2",
            "SCALEBENCH_NIGHTLY_REPEATS": "5",
            "SCALEBENCH_NIGHTLY_FULL": "1",
            "SCALEBENCH_NIGHTLY_LAUNCHER": "kubernetes",
            "SCALEBENCH_NIGHTLY_BACKEND": "nccl",
            "SCALEBENCH_NIGHTLY_PLACEMENT": "pack",
            "SCALEBENCH_NIGHTLY_NETWORK": "host, 1000mbit",
        }
    )
    assert (settings.schedule, settings.tasks) == ("30 3 * * 1-5", ("task0-allreduce",))
    assert settings.request() == {
        "workers": [1, 2, 4],
        "repeats": 5,
        "light": False,
        "launcher": "kubernetes",
        "backend": "nccl",
        "placement": "pack",
        "network": ["host", "1gbit"],
    }


def test_every_request_field_is_a_nightly_setting() -> None:
    """Settings are derived from the fields' declarations: a new field needs no code here."""
    settings = NightlySettings.from_env(
        {
            "SCALEBENCH_NIGHTLY_THREADS_PER_WORKER": "1",
            "SCALEBENCH_NIGHTLY_LIGHT": "no",
            "SCALEBENCH_NIGHTLY_GROUP_TIMEOUT_S": "900",
            "SCALEBENCH_NIGHTLY_DATA_DIR": "/srv/data",
        }
    )
    assert settings.request() == {
        "threads_per_worker": 1,
        "light": False,
        "group_timeout_s": 900.0,
        "data_dir": "/srv/data",
    }
    with pytest.raises(ValueError, match="SCALEBENCH_NIGHTLY_THREADS_PER_WORKER: must be at most"):
        NightlySettings.from_env({"SCALEBENCH_NIGHTLY_THREADS_PER_WORKER": "100000"})


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SCHEDULE", "every night"),
        ("TASKS", "task9-imaginary"),
        ("WORKERS", "0"),
        ("REPEATS", "three"),
        ("FULL", "maybe"),
        ("LIGHT", "maybe"),
        ("LAUNCHER", "slurm"),
        ("BACKEND", "carrier-pigeon"),
        ("PLACEMENT", "everywhere"),
        ("NETWORK", "10mbps"),
    ],
)
def test_a_bad_setting_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"SCALEBENCH_NIGHTLY_{variable}"):
        NightlySettings.from_env({f"SCALEBENCH_NIGHTLY_{variable}": value})


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("STACKS", '{"a": {"python": "/usr/bin/python3"}}', "set SCALEBENCH_NIGHTLY_REFERENCE"),
        ("PAIRS", "5", "as many rounds as SCALEBENCH_NIGHTLY_BUDGET_S allows"),
    ],
)
def test_the_nightly_takes_its_stacks_and_rounds_from_its_own_settings(
    variable: str, value: str, words: str
) -> None:
    with pytest.raises(ValueError, match=f"SCALEBENCH_NIGHTLY_{variable}: .*{words}"):
        NightlySettings.from_env({f"SCALEBENCH_NIGHTLY_{variable}": value})


def test_the_dag_runs_the_suite_one_sweep_after_the_other_every_night() -> None:
    from operators.nightly_dag import build_nightly_dag

    dag = build_nightly_dag(NightlySettings.from_env({}))
    assert dag.timetable.expression == "0 2 * * *" and str(dag.timetable.timezone) == "UTC"
    assert dag.catchup is False and dag.max_active_runs == 1
    ingest = dag.get_task("task1a_resnet20_cifar10.ingest")
    assert "task0_allreduce.validate" in ingest.downstream_task_ids
    for task in dag.tasks:
        assert task.on_failure_callback == [notify_failure] or task.on_failure_callback == (
            notify_failure
        )
    check = dag.get_task("task1a_resnet20_cifar10.check_regressions")
    assert check.upstream_task_ids == {"task1a_resnet20_cifar10.ingest"}
    # no other night has the machines first (a backfill runs nights at once otherwise)
    wait = dag.get_task("earlier_night_done")
    assert "task1a_resnet20_cifar10.validate" in wait.downstream_task_ids
    assert wait.mode == "reschedule" and not wait.upstream_task_ids
    # a wait that failed fails the night; a later sweep of the night follows the one before
    # it whatever that one did
    assert dag.get_task("task1a_resnet20_cifar10.validate").trigger_rule == "all_success"
    assert dag.get_task("task0_allreduce.validate").trigger_rule == "all_done"


class Webhook:
    """A local HTTP endpoint that keeps what is POSTed to it."""

    def __init__(self) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.close()


def fake_context(error: BaseException) -> dict:
    ti = SimpleNamespace(
        dag_id="scalebench_nightly",
        task_id="t.check_regressions",
        run_id="scheduled__2026-11-22T02:00:00+00:00",
        log_url="http://airflow.example/log",
    )
    return {"ti": ti, "exception": error}


def test_a_failure_is_posted_to_the_webhook_and_given_to_the_callback(
    webhook: Webhook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = tmp_path / "probe.txt"
    monkeypatch.setenv("SCALEBENCH_NOTIFY_WEBHOOK", webhook.url)
    monkeypatch.setenv("SCALEBENCH_NOTIFY_CALLBACK", "notify_probe:record")
    monkeypatch.setenv("NOTIFY_PROBE_FILE", str(probe))
    notify_failure(fake_context(RegressionFlagged("sweep s: 1 regression(s) ...")))
    [message] = webhook.received
    assert message["text"].startswith(
        "scalebench: scalebench_nightly flagged a regression in task t.check_regressions"
    )
    assert "http://airflow.example/log" in message["text"]
    assert probe.read_text() == "t.check_regressions\n"


def test_a_broken_notifier_does_not_hide_the_failure(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SCALEBENCH_NOTIFY_WEBHOOK", "http://127.0.0.1:9/nothing-listens")
    monkeypatch.setenv("SCALEBENCH_NOTIFY_CALLBACK", "no_such_module:hook")
    notify_failure(fake_context(RuntimeError("boom")))  # returns; it logs instead
    assert "posting failed" in caplog.text and "no_such_module:hook" in caplog.text
    assert "failed in task t.check_regressions" in failure_message(
        fake_context(RuntimeError("boom"))
    )


@pytest.mark.slow
def test_a_night_that_got_slower_fails_is_stored_and_notifies(
    airflow_db, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, webhook: Webhook
) -> None:
    from operators.nightly_dag import build_nightly_dag
    from results_db.models import Regression, Sweep
    from results_db.service import ingest, upgrade

    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setenv("SCALEBENCH_DATABASE_URL", url)
    monkeypatch.setenv("SCALEBENCH_RESULTS_URI", str(tmp_path / "results"))
    monkeypatch.setenv("SCALEBENCH_NOTIFY_WEBHOOK", webhook.url)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # what is tested is the detector on a slower night, not whether this machine was busy
    monkeypatch.setenv("SCALEBENCH_CONTENTION_THRESHOLD", "1")
    upgrade(url)
    # the earlier nights ran on this machine: the detector compares like with like
    cores = os.cpu_count() or 1
    # Three earlier nights in which one worker reached Task 2a's light target in 1 ms
    # (faster than its epochs and evaluations can be: tonight is slower).
    # (Task 2a: its light run is among the shortest, about 10 s; what is tested is the
    # nightly pipeline, the same for every task.)
    for night in (19, 20, 21):
        runs = [
            FakeRun(1, repeat=r, time_to_accuracy_s=0.001, cpu=cpu_model(), cpu_count=cores)
            for r in range(3)
        ]
        write_training_sweep(
            tmp_path / "baseline",
            f"nightly-{night}",
            runs,
            trigger="scheduled",
            created_at=f"2026-11-{night}T02:00:00+00:00",
            task="task2a-logreg-epsilon",
        )
    ingest(url, str(tmp_path / "baseline"))

    # One repeat tonight is enough to be flagged: against nine baseline runs that all took
    # 1 ms, the Mann-Whitney test's p is 0.004 for a single slower run (below alpha = 0.01).
    settings = NightlySettings(
        tasks=("task2a-logreg-epsilon",), fields={"light": True, "workers": (1,), "repeats": 1}
    )
    run = build_nightly_dag(settings).test()

    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["task2a_logreg_epsilon.summarize"] == "success"
    assert states["task2a_logreg_epsilon.check_regressions"] == "failed"
    from results_db.database import make_engine

    engine = make_engine(url)
    with engine.connect() as conn:
        latest = conn.execute(select(Sweep.id).where(Sweep.id.not_like("nightly-%"))).scalar_one()
        flagged = conn.execute(
            select(Regression.metric, Regression.world_size).where(Regression.sweep_id == latest)
        ).all()
        trigger = conn.execute(select(Sweep.trigger).where(Sweep.id == latest)).scalar_one()
    engine.dispose()
    assert ("time_to_accuracy_s", 1) in flagged
    assert trigger == "scheduled"  # tonight is part of the baseline of the nights to come
    texts = [m["text"] for m in webhook.received]
    assert any("flagged a regression" in t and "time_to_accuracy_s" in t for t in texts), texts
