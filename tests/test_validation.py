"""Bad input is refused before anything starts, with a message naming the field."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli import main as cli
from scalebench.request import MAX_GROUP_TIMEOUT_S, MAX_GROUPS, MAX_REPEATS
from scalebench.sweep import InvalidParameter, plan_groups, request_from_form, validate_request
from workers.run import parse_args

LIGHT = {"task": "task1a-resnet20-cifar10", "workers": "1,2", "light": True}


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"task": "task9-imaginary"}, "task", "unknown task"),
        ({"workers": "0"}, "workers", "at least 1"),
        ({"workers": "1,-2"}, "workers", "at least 1"),
        ({"workers": "two"}, "workers", "whole number"),
        ({"workers": ""}, "workers", "at least one worker count"),
        ({"backend": "carrier-pigeon"}, "backend", "gloo, nccl, mpi"),
        ({"backend": "nccl"}, "backend", "nccl needs GPUs"),
        ({"repeats": "abc"}, "repeats", "whole number"),
        ({"repeats": 2.5}, "repeats", "whole number"),
        ({"repeats": 0}, "repeats", "at least 1"),
        ({"repeats": True}, "repeats", "whole number"),
        ({"light": "yes"}, "light", "true or false"),
        ({"variant": "async"}, "variant", "sync, ddp"),
        ({"collective_timeout_s": "-5"}, "collective_timeout_s", "positive"),
        ({"group_timeout_s": "soon"}, "group_timeout_s", "number of seconds"),
        ({"group_timeout_s": 10, "collective_timeout_s": 60}, "group_timeout_s", "shorter"),
        ({"seed": -1}, "seed", "at least 0"),
        ({"precision": "fp8"}, "precision", "fp32, bf16"),
        ({"compile": "yes"}, "compile", "off, on, auto"),
        ({"compile": True}, "compile", "off, on, auto"),
        ({"task": "task0-allreduce", "compile": "on"}, "compile", "no model to compile"),
        ({"launcher": "slurm"}, "launcher", "local, kubernetes"),
        ({"gpus_per_worker": 17}, "gpus_per_worker", "at most 16"),
        ({"gpus_per_worker": "many"}, "gpus_per_worker", "whole number"),
        ({"worker_image": "repo/worker:tag"}, "worker_image", "only the kubernetes launcher"),
        ({"launcher": "kubernetes", "worker_image": "Bad Image"}, "worker_image", "reference"),
        (
            {"launcher": "kubernetes", "backend": "nccl", "gpus_per_worker": 0},
            "gpus_per_worker",
            "at least one GPU",
        ),
        ({"launcher": "kubernetes", "backend": "mpi"}, "backend", "gloo or nccl"),
        ({"workers": "1,64"}, "workers", "not 64"),
        ({"device": "tpu"}, "device", "auto, cpu, cuda"),
        ({"device": "cuda"}, "device", "no GPU"),
        ({"device": "cpu", "backend": "nccl"}, "device", "GPU tensors only"),
        (
            {"device": "cuda", "launcher": "kubernetes", "gpus_per_worker": 0},
            "gpus_per_worker",
            "a GPU in every pod",
        ),
        ({"workers": "1,3"}, "workers", "runs at 1, 2, 4, 8, 16, 32 workers"),
        ({"task": "task2a-logreg-epsilon", "workers": "1,32"}, "workers", "not 32"),
    ],
)
def test_each_bad_field_is_named(changes: dict, field: str, message: str) -> None:
    with pytest.raises(InvalidParameter, match=message) as info:
        validate_request(**{**LIGHT, **changes}, gpus=0, max_workers=32)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_a_trigger_with_unknown_fields_is_refused_naming_them_and_the_known_ones() -> None:
    with pytest.raises(InvalidParameter) as refused:
        fields = {"workers": [1], "light": True, "bogus_key": 5, "another": 1}
        request_from_form("task2a-logreg-epsilon", fields)
    assert refused.value.field == "another"
    assert "unknown fields 'another', 'bogus_key'" in str(refused.value)
    assert "known fields: workers, light, backend" in str(refused.value)
    # every field of the Airflow form is known
    from operators.benchmark_dag import params
    from scalebench.tasks import TASKS

    for spec in TASKS.values():
        request = request_from_form(spec.id, {k: p.value for k, p in params(spec).items()})
        assert request.task == spec.id


def test_nccl_needs_one_gpu_per_worker() -> None:
    with pytest.raises(InvalidParameter, match="2 workers asked, 1 GPUs") as info:
        validate_request(**{**LIGHT, "backend": "nccl"}, gpus=1)
    assert info.value.field == "workers"
    assert validate_request(**{**LIGHT, "backend": "nccl"}, gpus=2).backend == "nccl"


def test_full_task_without_its_data_set_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameter, match=r"cifar-10-batches-py.*the download") as info:
        validate_request(
            task="task1a-resnet20-cifar10", workers="1", data_dir=tmp_path, download=False
        )
    assert info.value.field == "data_dir"


def test_a_missing_set_that_can_be_downloaded_is_left_to_the_data_step(tmp_path: Path) -> None:
    # CIFAR-10 has published checksums: downloaded unless the request says not to.
    request = validate_request(task="task1a-resnet20-cifar10", workers="1", data_dir=tmp_path)
    assert request.download is True
    # epsilon publishes none: fetched only when asked for.
    with pytest.raises(InvalidParameter, match="ask for the download") as info:
        validate_request(task="task2a-logreg-epsilon", workers="1", data_dir=tmp_path)
    assert info.value.field == "data_dir"
    assert validate_request(
        task="task2a-logreg-epsilon", workers="1", data_dir=tmp_path, download=True
    ).download
    # WikiText-2 and WMT have recorded checksums: downloaded unless the request says not to
    for task in ("task3a-awdlstm-wikitext2", "task4a-gnmt-wmt16", "task4b-transformer-wmt17"):
        assert validate_request(task=task, workers="1", data_dir=tmp_path).download is True
    # ...and a missing set that is not to be downloaded is refused, naming what to run
    with pytest.raises(InvalidParameter, match="scalebench data wikitext2") as info:
        validate_request(
            task="task3a-awdlstm-wikitext2", workers="1", data_dir=tmp_path, download=False
        )
    assert info.value.field == "data_dir"
    with pytest.raises(InvalidParameter, match="true or false") as info:
        validate_request(**LIGHT, download="yes")
    assert info.value.field == "download"


def test_all_reduce_needs_no_data_set(tmp_path: Path) -> None:
    request = validate_request(task="task0-allreduce", workers=[2, 1, 2], data_dir=tmp_path)
    assert request.world_sizes == (1, 2)


def test_a_valid_request_is_normalised_and_planned() -> None:
    request = validate_request(**{**LIGHT, "workers": "2, 1", "repeats": "2", "seed": "5"})
    assert request.world_sizes == (1, 2) and request.repeats == 2 and request.seed == 5
    groups = plan_groups(request, "sweep", Path("/r/sweep"))
    assert [(g.world_size, g.repeat) for g in groups] == [(1, 0), (2, 0), (1, 1), (2, 1)]
    assert len({g.run_id for g in groups}) == 4
    assert groups[3].run_dir == Path("/r/sweep") / groups[3].run_id
    assert groups[3].seed == 6  # each repeat its own seed


def test_a_worker_request_renders_the_command_line_the_worker_parses() -> None:
    request = validate_request(**{**LIGHT, "repeats": 2, "seed": 5, "compile": "off"})
    group = plan_groups(request, "sweep", Path("/r/sweep"))[-1]
    args = parse_args(group.worker_argv(results_dir="/pod/run", data_dir="/pod/data"))
    assert (args.task, args.results, args.run_id) == (LIGHT["task"], Path("/pod/run"), group.run_id)
    assert (args.light, args.seed, args.backend) == (True, 6, "gloo")
    assert args.collective_timeout_s == 60.0
    assert (args.variant, args.precision, args.compile) == ("sync", "fp32", "off")
    assert args.data_dir == Path("/pod/data")
    assert args.device == "auto"
    all_reduce = plan_groups(validate_request(task="task0-allreduce", workers=[2]), "s", Path("/r"))
    assert "--variant" not in all_reduce[0].worker_argv(results_dir="/r", data_dir="/d")
    on_cpu = validate_request(task="task0-allreduce", workers=[2], device="cpu")
    group = plan_groups(on_cpu, "s", Path("/r"))[0]
    assert parse_args(group.worker_argv(results_dir="/r", data_dir="/d")).device == "cpu"


def test_cpu_and_gpu_tensors_are_different_configurations() -> None:
    from scalebench.config_hash import configuration_hash

    def config(**changes: str) -> str:
        fields = validate_request(task="task0-allreduce", workers=[2], **changes).to_fields()
        return configuration_hash(fields)

    assert config() == config(device="auto") != config(device="cpu")
    # sweeps stored before the device could be chosen keep their configuration
    fields = validate_request(task="task0-allreduce", workers=[2]).to_fields()
    assert configuration_hash({k: v for k, v in fields.items() if k != "device"}) == config()


@pytest.mark.parametrize(
    ("changes", "field", "limit"),
    [
        ({"repeats": MAX_REPEATS + 1}, "repeats", f"at most {MAX_REPEATS}, got"),
        ({"repeats": 1_000_000}, "repeats", f"at most {MAX_REPEATS}, got"),
        (
            {"workers": [1, 2, 4, 8, 16, 32], "repeats": MAX_REPEATS},
            "repeats",
            f"a sweep plans at most {MAX_GROUPS}",
        ),
        ({"group_timeout_s": MAX_GROUP_TIMEOUT_S + 1}, "group_timeout_s", "at most 604800 s"),
        ({"seed": 2**63 - 1}, "seed", "at most 9223372036854775805"),  # 3 repeats: seed + 2
        ({"seed": 2**64 + 5, "repeats": 1}, "seed", "at most 9223372036854775807"),
        (
            {"collective_timeout_s": 1e15, "group_timeout_s": MAX_GROUP_TIMEOUT_S},
            "collective_timeout_s",
            "at most 604800 s",
        ),
        ({"collective_timeout_s": 0.000001}, "collective_timeout_s", "at least 1 s"),
        ({"collective_timeout_s": "nan"}, "collective_timeout_s", "positive and finite"),
        ({"group_timeout_s": "inf"}, "group_timeout_s", "positive and finite"),
    ],
)
def test_requests_no_one_can_have_meant_are_refused_naming_the_limit(
    changes: dict, field: str, limit: str
) -> None:
    with pytest.raises(InvalidParameter, match=re.escape(limit)) as refused:
        validate_request(**{**LIGHT, "max_workers": 64, **changes})
    assert refused.value.field == field


def test_cli_refuses_before_creating_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    status = cli.main(
        ["run", "task1a-resnet20-cifar10", "--light", "--repeats", "abc", "--results", str(results)]
    )
    assert status == 2
    assert (
        "scalebench: error: repeats: must be a whole number, got 'abc'" in capsys.readouterr().err
    )
    assert not results.exists()


def test_cli_refuses_an_unknown_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = cli.main(["run", "resnet", "--results", str(tmp_path / "r")])
    assert status == 2
    err = capsys.readouterr().err
    assert "task: unknown task 'resnet'" in err and "task1a-resnet20-cifar10" in err


def test_worker_refuses_bad_input_with_exit_status_2(tmp_path: Path) -> None:
    cases = [
        (["--task", "nope"], {}, "unknown task"),
        (["--task", "task0-allreduce"], {"WORLD_SIZE": "-1"}, "WORLD_SIZE must be at least 1"),
        (["--task", "task1a-resnet20-cifar10", "--data-dir", str(tmp_path)], {}, "CIFAR-10"),
        (["--task", "task0-allreduce", "--timeout", "0"], {}, "--timeout: must be positive"),
        (
            ["--task", "task0-allreduce", "--timeout", "1e15"],
            {},
            "--timeout: must be at most 604800",
        ),
        (["--task", "task0-allreduce", "--timeout", "0.000001"], {}, "--timeout: must be at least"),
        (["--task", "task0-allreduce", "--threads-per-worker", "-1"], {}, "must be at least 0"),
        (["--task", "task0-allreduce", "--timeout", "nan"], {}, "got 'nan'"),
        (["--task", "task0-allreduce", "--timeout", "inf"], {}, "got 'inf'"),
        (["--task", "task0-allreduce", "--seed", str(2**63)], {}, "--seed must be between"),
        (
            ["--task", "task0-allreduce"],
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "70000"},
            "MASTER_PORT must be a TCP port (1-65535), got 70000",
        ),
        (
            ["--task", "task0-allreduce"],
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"},
            "MASTER_PORT must be a TCP port",
        ),
    ]
    for args, env, message in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "workers.run", *args, "--results", str(tmp_path / "run")],
            env={"PATH": "/usr/bin:/bin", **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr
        assert not (tmp_path / "run").exists()  # nothing started, nothing written


def test_the_cluster_maximum_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCALEBENCH_MAX_WORKERS", "4")
    with pytest.raises(InvalidParameter, match=r"at most 4 \(SCALEBENCH_MAX_WORKERS\)") as info:
        validate_request(**{**LIGHT, "workers": [1, 8]})
    assert info.value.field == "workers"
    assert validate_request(**{**LIGHT, "workers": [1, 4]}).world_sizes == (1, 4)


def test_a_kubernetes_request_with_nccl_and_gpus_passes_without_local_gpus() -> None:
    image = "registry.example:5000/scalebench-worker:1.0"
    request = validate_request(
        **{**LIGHT, "workers": [8]},
        launcher="kubernetes",
        backend="nccl",
        gpus_per_worker=1,
        gpus=0,
        worker_image=image,
    )
    assert (request.launcher, request.backend, request.gpus_per_worker) == (
        "kubernetes",
        "nccl",
        1,
    )


@pytest.mark.parametrize(
    ("task", "changes", "field"),
    [
        ("task3a-awdlstm-wikitext2", {"variant": "ddp"}, "variant"),
        ("task4b-transformer-wmt17", {"variant": "ddp"}, "variant"),
        ("task3a-awdlstm-wikitext2", {"precision": "bf16"}, "precision"),
        ("task4b-transformer-wmt17", {"precision": "bf16"}, "precision"),
        ("task4a-gnmt-wmt16", {"variant": "ddp"}, "variant"),
        ("task4a-gnmt-wmt16", {"precision": "bf16"}, "precision"),
    ],
)
def test_a_task_refuses_what_it_does_not_implement(task: str, changes: dict, field: str) -> None:
    with pytest.raises(InvalidParameter, match="only") as info:
        validate_request(task=task, workers=[1], light=True, **changes)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("task", "corpus"),
    [("task4a-gnmt-wmt16", "wmt16-en-de"), ("task4b-transformer-wmt17", "wmt17-en-de")],
)
def test_full_translation_without_its_corpus_is_refused(
    task: str, corpus: str, tmp_path: Path
) -> None:
    with pytest.raises(InvalidParameter, match="newstest2014") as info:
        validate_request(task=task, workers=[1], data_dir=tmp_path, download=False)
    assert info.value.field == "data_dir" and corpus in str(info.value)


def test_the_compile_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCALEBENCH_COMPILE")
    assert validate_request(task="task1a-resnet20-cifar10", workers=[1], light=True).compile == (
        "auto"
    )
    monkeypatch.setenv("SCALEBENCH_COMPILE", "on")
    assert validate_request(task="task1a-resnet20-cifar10", workers=[1], light=True).compile == (
        "on"
    )
    monkeypatch.setenv("SCALEBENCH_COMPILE", "sometimes")
    with pytest.raises(InvalidParameter, match="SCALEBENCH_COMPILE must be one of") as info:
        validate_request(task="task1a-resnet20-cifar10", workers=[1], light=True)
    assert info.value.field == "compile"


def test_placement_is_spread_on_kubernetes_and_pack_locally_unless_asked() -> None:
    from scalebench.config_hash import configuration_hash

    kubernetes = {
        **LIGHT,
        "launcher": "kubernetes",
        "gpus": 0,
        "gpus_per_worker": 0,
        "max_workers": 64,
    }
    assert validate_request(**LIGHT).placement == "pack"
    assert validate_request(**kubernetes).placement == "spread"
    assert validate_request(**kubernetes, placement="pack").placement == "pack"
    with pytest.raises(InvalidParameter, match="spread needs the kubernetes launcher") as info:
        validate_request(**LIGHT, placement="spread")
    assert info.value.field == "placement"
    with pytest.raises(InvalidParameter, match="must be one of auto, spread, pack"):
        validate_request(**LIGHT, placement="everywhere")
    # One rank per node is another measurement than ranks sharing one: another configuration.
    hashes = {
        p: configuration_hash(validate_request(**kubernetes, placement=p).to_fields())
        for p in ("spread", "pack")
    }
    assert hashes["spread"] != hashes["pack"]
    assert hashes["pack"] == configuration_hash(validate_request(**LIGHT).to_fields())


def test_three_repeats_unless_asked_and_one_repeat_is_allowed() -> None:
    """MLPerf's mean needs three repeats: the request, the command line and the trigger form
    all default to three; a single repeat is allowed (and marked wherever it is shown)."""
    from operators.benchmark_dag import params
    from scalebench.tasks import TASKS

    assert validate_request(task="task2a-logreg-epsilon", workers=[1], light=True).repeats == 3
    args = cli.build_parser().parse_args(["run", "task2a-logreg-epsilon", "--workers", "1"])
    assert int(args.repeats) == 3
    assert params(TASKS["task2a-logreg-epsilon"])["repeats"].value == 3
    assert (
        validate_request(task="task2a-logreg-epsilon", workers=[1], light=True, repeats=1).repeats
        == 1
    )


def test_threads_per_worker_is_checked_planned_and_part_of_the_configuration() -> None:
    from scalebench.config_hash import configuration_hash

    for bad in (-1, 257, "many", 1.5):
        with pytest.raises(InvalidParameter) as refused:
            validate_request(**LIGHT, threads_per_worker=bad)
        assert refused.value.field == "threads_per_worker"
    default = validate_request(**LIGHT)
    one = validate_request(**LIGHT, threads_per_worker="1")
    assert (default.threads_per_worker, one.threads_per_worker) == (0, 1)
    # 0 (the launcher's share) keeps the identity configurations had before the field
    before = {k: v for k, v in default.to_fields().items() if k != "threads_per_worker"}
    assert configuration_hash(default.to_fields()) == configuration_hash(before)
    assert configuration_hash(one.to_fields()) != configuration_hash(default.to_fields())
    for request, threads in ((default, 0), (one, 1)):
        argv = plan_groups(request, "s", Path("/tmp"))[0].worker_argv("r", "d")
        assert parse_args(argv).threads_per_worker == threads


def test_an_epoch_limit_is_checked_reaches_every_rank_and_is_part_of_the_configuration() -> None:
    from scalebench.config_hash import configuration_hash

    for bad, message in ((0, "at least 1"), (10_001, "at most 10000"), ("few", "whole number")):
        with pytest.raises(InvalidParameter, match=message) as refused:
            validate_request(**LIGHT, max_epochs=bad)
        assert refused.value.field == "max_epochs"
    with pytest.raises(InvalidParameter, match="the all-reduce task has no epochs"):
        validate_request(**{**LIGHT, "task": "task0-allreduce"}, max_epochs=2)
    default, three = validate_request(**LIGHT), validate_request(**LIGHT, max_epochs="3")
    assert (default.max_epochs, three.max_epochs) == (None, 3)
    # not given: the identity configurations had before the field; given: another one
    before = {k: v for k, v in default.to_fields().items() if k != "max_epochs"}
    assert configuration_hash(default.to_fields()) == configuration_hash(before)
    assert configuration_hash(three.to_fields()) != configuration_hash(default.to_fields())
    for request, epochs in ((default, None), (three, 3)):
        for group in plan_groups(request, "s", Path("/tmp")):
            assert parse_args(group.worker_argv("r", "d")).max_epochs == epochs


def test_gpus_per_worker_unless_asked_a_gpu_per_pod_and_locally_only_where_used() -> None:
    local = validate_request(**LIGHT, gpus=0)
    assert local.gpus_per_worker == 0  # a CPU host: gloo on CPU tensors takes no GPU
    assert validate_request(**LIGHT, gpus=2, backend="nccl").gpus_per_worker == 1
    pods = validate_request(**LIGHT, launcher="kubernetes", worker_image="repo/worker:1")
    assert pods.gpus_per_worker == 1
    assert validate_request(**LIGHT, gpus=0, gpus_per_worker=1).gpus_per_worker == 1
    with pytest.raises(InvalidParameter, match="gpus_per_worker: the local launcher gives each"):
        validate_request(**LIGHT, gpus=0, gpus_per_worker=3)  # one GPU per local rank at most


def test_the_group_time_limit_unless_asked_fits_the_task() -> None:
    """Full Task 1a took 5,895 s at one worker on a CPU in the task's published results:
    its limit leaves room for that; a light run keeps an hour; an asked limit stands."""
    from scalebench.tasks import get_task

    full = validate_request(task="task1a-resnet20-cifar10", workers=[1], download=True)
    assert full.group_timeout_s == get_task("task1a-resnet20-cifar10").time_limit_s > 3 * 5895
    assert validate_request(**LIGHT).group_timeout_s == 3600.0
    assert validate_request(task="task0-allreduce", workers=[2]).group_timeout_s == 3600.0
    assert validate_request(**LIGHT, group_timeout_s=900).group_timeout_s == 900.0


def test_backends_this_host_cannot_run_are_refused_by_name_before_any_worker_starts(
    tmp_path: Path,
) -> None:
    """The form lists nccl and mpi with what they need; asked for where that is missing,
    each is refused in a sentence naming ``backend``, and no sweep folder is made."""
    from scalebench.host import mpi_available

    with pytest.raises(InvalidParameter, match="nccl needs GPUs and none is available") as info:
        validate_request(**LIGHT, backend="nccl", gpus=0)
    assert info.value.field == "backend"
    if mpi_available():  # this torch has MPI: mpi is taken, and its refusal cannot be shown
        validate_request(**LIGHT, backend="mpi")
        return
    status = cli.main(
        ["run", LIGHT["task"], "--light", "--backend", "mpi", "--results", str(tmp_path)]
    )
    assert status == 2 and list(tmp_path.iterdir()) == []
    with pytest.raises(InvalidParameter, match="mpi needs a torch build with MPI") as info:
        validate_request(**LIGHT, backend="mpi")
    assert info.value.field == "backend"
