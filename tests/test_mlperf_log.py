"""Rank 0's MLPerf log, read by MLPerf's own compliance checker (the ``mlperf-logging`` package).

- A real light Task 1a run at one worker passes the whole checker, ruleset training 4.0.0
  (the last with ResNet), as an open-division ``resnet`` log.
- Every training task's log, from a real light run of one epoch at one worker, passes the
  ruleset's common rules: ``common.yaml`` and ``open_common.yaml``, chained into one file
  at test time (:func:`common_rules`). What cannot apply to a benchmark MLPerf does not
  have is left out: ``submission_benchmark``'s check that the name is one of MLPerf's
  benchmarks (Tasks 2a and 3a have no MLPerf counterpart; GNMT and Transformer left MLPerf
  after its 0.7 rules), and the two lines that then load more rules, the benchmark's own
  (``open_<benchmark>.yaml``, which this ruleset lacks for them) and the division's
  (``open_common.yaml``, chained here directly; it holds only that same name check).
  Every other common rule is kept as the package writes it.
- Tasks 4a and 4b log BLEU as a fraction, as the 0.7 rules (their last) want: a log at the
  target BLEU passes the whole 0.7.0 checker as open ``gnmt`` or ``transformer``. A light
  run never reaches MLPerf's full targets, so that log is written by the real
  :class:`~workers.tracker.Tracker` and :class:`~workers.tracker.MLPerfLog`, driven the way
  ``workers.run`` and the engine drive them, around the task's real adapter
  (:func:`driven_log`); it runs in the quick suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from conftest import MLPERF_ORG
from mlperf_logging import compliance_checker

from scalebench.config import BadSetting, mlperf_environment
from scalebench.sweep import validate_request
from scalebench.tasks import TASKS, TrainingSpec, get_task
from workers.adapter import TrainingOptions, adapter_for
from workers.distributed import environment
from workers.mlperf import benchmark_name, default_platform, submission
from workers.records import RecordWriter, read_rank_file
from workers.tracker import MLPerfLog, Tracker
from workers.training_setup import mlperf_hyperparameters

TASK1A = "task1a-resnet20-cifar10"
TASK4B = "task4b-transformer-wmt17"
TRAINING_TASKS = sorted(t for t, spec in TASKS.items() if isinstance(spec, TrainingSpec))
RULESET = "4.0.0"  # the last training ruleset with ResNet
TRANSLATION_RULESET = "0.7.0"  # the last with GNMT and Transformer
ORG = MLPERF_ORG


def training(task_id: str) -> TrainingSpec:
    spec = get_task(task_id)
    assert isinstance(spec, TrainingSpec)
    return spec


def mllog(path: Path) -> list[dict[str, Any]]:
    """The log's lines as the objects they hold."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line.removeprefix(":::MLLOG ")) for line in lines]


def values(path: Path) -> dict[str, Any]:
    """Each key's last value."""
    return {line["key"]: line["value"] for line in mllog(path)}


def common_rules(ruleset: str, out: Path) -> Path:
    """A checker config of the ruleset's ``common.yaml`` and ``open_common.yaml`` rules, less
    what only MLPerf's own benchmarks can meet (see the module docstring): any benchmark name
    passes, and no line loads another rule file."""
    folder = Path(compliance_checker.__file__).parent / f"training_{ruleset}"
    records: list[dict[str, Any]] = []
    for name in ("common.yaml", "open_common.yaml"):
        # BaseLoader, as the checker reads its files: every value stays a string
        records += yaml.load((folder / name).read_text(), Loader=yaml.BaseLoader)
    for record in records:
        rule = record.get("KEY", {})
        if rule.get("NAME") == "submission_benchmark":
            rule["CHECK"] = " v['value'] != '' "  # any name, not only MLPerf's
            rule.pop("POST", None)  # loads open_<benchmark>.yaml
        if rule.get("NAME") == "submission_division":  # keep its time limit, load nothing
            kept = [part for part in rule["POST"].split(";") if "enqueue_config" not in part]
            rule["POST"] = ";".join(kept)
    path = out / f"common_only_{ruleset}.yaml"
    path.write_text(yaml.safe_dump(records, sort_keys=False))
    return path


def check(log: Path, out: Path, config: Path | None = None, ruleset: str = RULESET) -> None:
    """Run the checker as a user would (``python -m mlperf_logging.compliance_checker``); on
    failure, show what it said."""
    argv = [
        sys.executable,
        "-m",
        "mlperf_logging.compliance_checker",
        "--usage",
        "training",
        "--ruleset",
        ruleset,
        "--log_output",
        str(out / "compliance_checker.log"),
    ]
    if config is not None:
        argv += ["--config", str(config)]
    done = subprocess.run(
        [*argv, str(log)], capture_output=True, text=True, timeout=300, check=False
    )
    said = f"{' '.join(argv)} {log}\n{done.stdout}{done.stderr}"
    assert done.returncode == 0, said
    assert "SUCCESS" in done.stderr, said


@pytest.fixture
def light_run(one_epoch_run: Callable[[str], Path]) -> Callable[[str], Path]:
    """The MLPerf log of a real light run of one epoch of a task at one worker, with
    ``SCALEBENCH_MLPERF_ORG`` set: the session's shared run (conftest's ``one_epoch_run``)."""
    return lambda task_id: one_epoch_run(task_id) / "mllog-rank-0.log"


def driven_log(spec: TrainingSpec, run_dir: Path, metrics: dict[str, float]) -> Path:
    """A one-epoch log of ``spec`` without its training: the calls ``workers.run`` and
    :func:`workers.engine.train` make on rank 0's tracker, in their order, with the task's
    real adapter (light data) and an evaluation that scored ``metrics``. Needs a group."""
    device = torch.device("cpu")
    adapter = adapter_for(spec, TrainingOptions(light=True, data_dir=run_dir), device)
    tracker = Tracker(
        RecordWriter(run_dir, run_dir.name, 0, 1),
        device,
        goal=spec.goal,
        light=True,
        max_epochs=1,
        mlperf_log=MLPerfLog(run_dir / "mllog-rank-0.log"),
    )
    tracker.init_start()
    info = environment("gloo")
    tracker.environment(info)
    tracker.submission(submission(spec, info, device, 1))
    tracker.hyperparameters(mlperf_hyperparameters(adapter))
    tracker.start(task=spec.id, light=True, **adapter.start_details())
    tracker.begin_epoch(0)
    started = tracker.begin_evaluation(0)
    tracker.evaluation(0, metrics, started)
    tracker.finish("max_epochs", epochs=1)
    tracker.close()
    return run_dir / "mllog-rank-0.log"


# -- the checker ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_light_task1a_run_passes_the_checker_as_an_open_resnet_log(
    light_run: Callable[[str], Path], tmp_path: Path
) -> None:
    log = light_run(TASK1A)
    check(log, tmp_path)  # the ruleset's common.yaml, then open_common and open_resnet
    logged = values(log)
    assert logged["submission_benchmark"] == "resnet"
    assert logged["submission_division"] == "open" and logged["submission_org"] == ORG
    assert logged["submission_status"] == "research"
    assert logged["submission_platform"].startswith("1x")
    assert (logged["train_samples"], logged["eval_samples"]) == (5748, 360)  # the light set
    assert 0 < logged["eval_accuracy"] < 1
    rank = read_rank_file(log.parent / "rank-0.jsonl")
    (evaluation,) = rank.of_kind("eval")
    assert logged["eval_accuracy"] == pytest.approx(evaluation["metrics"]["top1_accuracy"] / 100)


@pytest.mark.slow
@pytest.mark.parametrize("task_id", TRAINING_TASKS)
def test_every_light_runs_log_passes_the_common_rules(
    task_id: str, light_run: Callable[[str], Path], tmp_path: Path
) -> None:
    log = light_run(task_id)
    check(log, tmp_path, common_rules(RULESET, tmp_path))
    assert values(log)["submission_benchmark"] == benchmark_name(training(task_id))


@pytest.mark.parametrize(
    ("task_id", "benchmark", "bleu"),
    [("task4a-gnmt-wmt16", "gnmt", 24.0), (TASK4B, "transformer", 25.0)],
)
def test_a_translation_log_at_mlperfs_target_passes_its_last_rules(
    task_id: str, benchmark: str, bleu: float, tmp_path: Path, one_rank: None
) -> None:
    """MLPerf's 0.7 rules want BLEU as a fraction, at least the target (0.24 for GNMT, 0.25
    for Transformer): the log of an evaluation that reached it passes their whole checker,
    and the common rules of 4.0.0."""
    log = driven_log(training(task_id), tmp_path, {"bleu": bleu, "loss": 3.0})
    check(log, tmp_path, ruleset=TRANSLATION_RULESET)
    check(log, tmp_path, common_rules(RULESET, tmp_path))
    logged = values(log)
    assert logged["submission_benchmark"] == benchmark
    assert logged["eval_accuracy"] == pytest.approx(bleu / 100)
    assert logged["train_samples"] == 12000 and logged["eval_samples"] == 400


def test_a_log_without_the_submission_lines_fails_the_common_rules(tmp_path: Path) -> None:
    """The rules are not vacuous: the lines the log had before it named its submission."""
    log = tmp_path / "mllog-rank-0.log"
    tracker = Tracker(
        RecordWriter(tmp_path, "run", 0, 1),
        torch.device("cpu"),
        goal=training(TASK1A).goal,
        max_epochs=1,
        mlperf_log=MLPerfLog(log),
    )
    tracker.init_start()
    tracker.start()
    tracker.begin_epoch(0)
    tracker.evaluation(0, {"top1_accuracy": 50.0, "loss": 1.0}, tracker.begin_evaluation(0))
    tracker.finish("max_epochs")
    tracker.close()
    with pytest.raises(AssertionError, match="submission_org"):
        check(log, tmp_path, common_rules(RULESET, tmp_path))


# -- what the lines say -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task_id", "metric", "value", "logged"),
    [
        (TASK1A, "top1_accuracy", 89.17, 0.8917),
        ("task2a-logreg-epsilon", "accuracy", 90.5, 0.905),
        ("task4a-gnmt-wmt16", "bleu", 24.3, 0.243),
        ("task3a-awdlstm-wikitext2", "perplexity", 65.2, 65.2),
    ],
)
def test_eval_accuracy_is_a_fraction_where_the_metric_is_out_of_100(
    task_id: str, metric: str, value: float, logged: float, tmp_path: Path
) -> None:
    """The MLPerf log's accuracy is a fraction for percentages and BLEU; perplexity keeps its
    value (it has no upper bound to divide by). The records keep the task's own unit."""
    spec = training(task_id)
    tracker = Tracker(
        RecordWriter(tmp_path, "run", 0, 1),
        torch.device("cpu"),
        goal=spec.goal,
        max_epochs=1,
        mlperf_log=MLPerfLog(tmp_path / "mllog-rank-0.log"),
    )
    tracker.start()
    tracker.evaluation(0, {metric: value, "loss": 1.0}, tracker.now())
    tracker.close()
    assert values(tmp_path / "mllog-rank-0.log")["eval_accuracy"] == pytest.approx(logged)
    (evaluation,) = read_rank_file(tmp_path / "rank-0.jsonl").of_kind("eval")
    assert evaluation["metrics"][metric] == value


def test_cache_clear_comes_once_before_init_start(tmp_path: Path) -> None:
    log = tmp_path / "mllog-rank-0.log"
    tracker = Tracker(
        RecordWriter(tmp_path, "run", 0, 1), torch.device("cpu"), mlperf_log=MLPerfLog(log)
    )
    tracker.init_start()
    tracker.close()
    assert [(line["key"], line["value"]) for line in mllog(log)] == [
        ("cache_clear", False),  # scalebench drops no system cache
        ("init_start", None),
    ]


def test_benchmark_names_are_mlperfs_where_it_has_the_benchmark() -> None:
    names = {t: benchmark_name(training(t)) for t in TRAINING_TASKS}
    assert names == {
        TASK1A: "resnet",
        "task2a-logreg-epsilon": "task2a-logreg-epsilon",
        "task3a-awdlstm-wikitext2": "task3a-awdlstm-wikitext2",
        "task4a-gnmt-wmt16": "gnmt",
        TASK4B: "transformer",
    }


def test_the_platform_is_rank_0s_device_times_the_ranks() -> None:
    info = {"cpu": "AMD EPYC (family 25, model 17)", "torch_threads": 1, "gpus": []}
    cpu = default_platform(info, torch.device("cpu"), 2)
    assert cpu == "2xAMD EPYC (family 25, model 17), 1 thread each"
    gpus = {**info, "gpus": ["NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"]}
    assert default_platform(gpus, torch.device("cuda", 1), 8) == "8xNVIDIA H100 80GB HBM3"


def test_the_settings_and_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = training(TASK1A)
    info = {"cpu": "Some CPU", "torch_threads": 4, "gpus": []}
    for name in ("ORG", "PLATFORM", "DIVISION", "STATUS"):
        monkeypatch.setenv(f"SCALEBENCH_MLPERF_{name}", "")  # empty: the default
    assert submission(spec, info, torch.device("cpu"), 1) == {
        "submission_benchmark": "resnet",
        "submission_org": "scalebench",
        "submission_division": "open",
        "submission_status": "research",
        "submission_platform": "1xSome CPU, 4 threads each",
    }
    assert mlperf_environment() == {}
    given = {"ORG": "Lab", "PLATFORM": "rack 3", "DIVISION": "closed", "STATUS": "onprem"}
    for name, value in given.items():
        monkeypatch.setenv(f"SCALEBENCH_MLPERF_{name}", value)
    assert list(submission(spec, info, torch.device("cpu"), 1).values()) == [
        "resnet",
        "Lab",
        "closed",
        "onprem",
        "rack 3",
    ]
    assert mlperf_environment() == {f"SCALEBENCH_MLPERF_{k}": v for k, v in given.items()}


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SCALEBENCH_MLPERF_DIVISION", "Open"), ("SCALEBENCH_MLPERF_STATUS", "available")],
)
def test_a_bad_division_or_status_is_refused_naming_the_setting(
    variable: str,
    value: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from workers import run

    monkeypatch.setenv(variable, value)
    with pytest.raises(BadSetting, match=f"{variable} must be one of .*, got '{value}'"):
        validate_request(task=TASK1A, workers=[1], light=True)
    with pytest.raises(BadSetting, match=variable):  # no MLPerf log there, refused all the same
        validate_request(task="task0-allreduce", workers=[1], light=True)
    results = tmp_path / "run"
    assert run.main(["--task", TASK1A, "--light", "--results", str(results)]) == 2
    assert f"workers.run: refused: {variable} must be one of" in capsys.readouterr().err
    assert not results.exists()
