"""Every benchmark runs at its smoke size (``--smoke``): the same code path as a measurement at
the smallest size that exercises it, judging no goal. A change that breaks a benchmark fails
here, not the next time someone measures with it. The measurements themselves are run on
demand (docs/benchmarks.md)."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import POSTGRES_URL

from scalebench.host import shaping_problems
from scalebench.network import parse_profile

ROOT = Path(__file__).resolve().parents[1]
# engine_overhead.py's tasks, in its order (1a, 2a, 3a, 4a, 4b)
ENGINE_TASKS = (
    "task1a-resnet20-cifar10",
    "task2a-logreg-epsilon",
    "task3a-awdlstm-wikitext2",
    "task4a-gnmt-wmt16",
    "task4b-transformer-wmt17",
)
CANNOT_SHAPE = shaping_problems([parse_profile("100mbit")])
NEEDS_SHAPING = pytest.mark.skipif(
    bool(CANNOT_SHAPE), reason=f"cannot emulate networks here: {'; '.join(CANNOT_SHAPE)}"
)

# benchmark → (its smoke's extra arguments, seconds it may take, marks). Those of more than
# about ten seconds are slow: they run with the slow tests.
SMOKES: dict[str, tuple[tuple[str, ...], int, tuple[pytest.MarkDecorator, ...]]] = {
    "dashboard_latency.py": (("--postgres", POSTGRES_URL), 120, ()),
    "ingest_postgres.py": (("--postgres", POSTGRES_URL), 120, ()),
    "allreduce_harness.py": ((), 120, ()),
    "projection_accuracy.py": ((), 120, ()),
    "dag_serialization.py": ((), 120, ()),
    # every task but 2a: Task 2a's smoke runs in tests/test_engine_overhead.py, its JSON checked
    "engine_overhead.py": (
        ("--task", ",".join(ENGINE_TASKS[:1] + ENGINE_TASKS[2:]), "--device", "cpu"),
        240,
        (pytest.mark.slow,),
    ),
    "resnet20_throughput.py": ((), 240, (pytest.mark.slow,)),
    "tracker_overhead.py": ((), 240, (pytest.mark.slow,)),
    "kubernetes_api_calls.py": ((), 240, (pytest.mark.slow,)),
    "bad_input_probe.py": ((), 300, (pytest.mark.slow,)),
    "regression_power.py": ((), 300, (pytest.mark.slow,)),
    # starts an Airflow of its own (api-server, scheduler, dag-processor, triggerer)
    "airflow_endings.py": ((), 400, (pytest.mark.slow,)),
    # one epoch of light Task 2a on one rank
    "light_targets.py": ((), 120, (pytest.mark.slow,)),
    # two stacks of this interpreter (A/A), 1 pair of one epoch of light Task 2a at 1 worker
    "stack_pairs.py": ((), 240, (pytest.mark.slow,)),
    # two light Task 2a trainings of one epoch (eager: the smoke compares off with auto)
    "light_tta_compile.py": ((), 240, (pytest.mark.slow,)),
    # network namespaces and tc on the host: alone, like the other emulated-link checks (a
    # group that builds its network removes what dead launchers left, which
    # tests/test_network.py leaves on purpose and checks)
    "network_emulation.py": ((), 240, (pytest.mark.slow, pytest.mark.timing, NEEDS_SHAPING)),
    "node_boundary.py": ((), 180, (pytest.mark.slow, pytest.mark.timing, NEEDS_SHAPING)),
}


# modules beside the benchmarks that are no benchmark of their own
HELPERS = {"machine_load.py", "bad_input_cases.py"}


def test_every_benchmark_has_a_smoke_here() -> None:
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")} - HELPERS
    assert scripts == set(SMOKES), "a benchmark without its smoke in this table"


@pytest.mark.parametrize("script", ["bad_input_probe.py", "bad_input_cases.py"])
def test_the_bad_input_probe_keeps_its_functions_short(script: str) -> None:
    """Its cases are tables the probe reads: no function of it grows past 80 lines."""
    tree = ast.parse((ROOT / "benchmarks" / script).read_text(encoding="utf-8"))
    long = {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > 80
    }
    assert not long, f"functions over 80 lines: {long}"


@pytest.mark.parametrize(
    "script",
    [pytest.param(name, marks=marks) for name, (_, _, marks) in sorted(SMOKES.items())],
)
def test_a_benchmark_runs_at_its_smoke_size(script: str, tmp_path: Path) -> None:
    args, timeout_s, _ = SMOKES[script]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--smoke", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "smoke" in output.lower(), output[-3000:]
    assert "Traceback" not in output, output[-3000:]


def test_the_engine_smokes_name_every_task_of_the_benchmark() -> None:
    source = (ROOT / "benchmarks" / "engine_overhead.py").read_text(encoding="utf-8")
    (assigned,) = (
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "TASKS"
    )
    assert ast.literal_eval(assigned.value) == ENGINE_TASKS


def test_the_power_benchmark_says_after_each_round_how_long_is_left(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pool's rounds take minutes each: after every round a line says how many of all the
    rounds are done and, from the mean round so far, how long the rest should take."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import regression_power as power

    clock = iter([100.0, 190.0, 280.0, 370.0])
    monkeypatch.setattr(power.time, "monotonic", lambda: next(clock))
    progress = power.Progress(4)
    for round_number in (1, 2, 3):
        progress.round_ended(f"task aa round {round_number}/4")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].strip() == "task aa round 1/4: 1/4 rounds in all (90 s, about 4 min to go)"
    assert lines[1].strip() == "task aa round 2/4: 2/4 rounds in all (180 s, about 3 min to go)"
    assert lines[2].strip() == "task aa round 3/4: 3/4 rounds in all (270 s, about 90 s to go)"


def test_the_power_benchmark_finds_a_slowdown_put_in_and_blames_the_stack_or_the_platform(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A/A rounds of a known spread, a slowdown added to the arms a case slows: the nights are
    judged by the product's own functions; a 10 % slower compute phase of tonight's arm is
    found on its first night and blamed on the stack and the compute phase, the same on both
    arms on the platform, and A/A nights raise few alarms."""
    import math
    import random

    from results_db.queries.stacks import ArmRun

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import regression_power as power

    draw = random.Random(5)

    def aa_round() -> list[ArmRun]:
        arms = []
        for stack in ("tonight", "reference"):
            compute = 0.010 * math.exp(draw.gauss(0, 0.01))
            data = 0.001 * math.exp(draw.gauss(0, 0.01))
            seconds = {"compute_s": compute, "data_s": data, "steady_step_s": compute + data}
            arms.append(ArmRun(f"r-{stack}", stack, 1, "host", 0, seconds))
        return arms

    aa = [aa_round() for _ in range(30)]
    case = power.BY_NAME["stack-10"]
    (tonight, reference) = power.slowed(aa[0], case)
    assert tonight.seconds["compute_s"] == pytest.approx(aa[0][0].seconds["compute_s"] * 1.1)
    assert reference.seconds == aa[0][1].seconds
    night = power.compose("n", aa, 6, draw, case, 0.0)
    assert sorted({a.repeat for a in night.arms}) == list(range(6))
    slowed = power.judge_case("t", case, aa, 5, 6, 3, 0)
    assert slowed.within == (3, 3, 3) and slowed.attribution_right == 3 and slowed.phase_right == 3
    assert not slowed.named_instead
    platform = power.judge_case("t", power.BY_NAME["platform-10"], aa, 5, 6, 3, 0)
    assert platform.within[2] == 3 and platform.attribution_right == 3
    # a detection that names another phase first says which: here compute, for a case that
    # expects communication
    expecting = dataclasses.replace(case, named_phase="communication")
    misnamed = power.judge_case("t", expecting, aa, 5, 6, 3, 0)
    assert misnamed.phase_right == 0 and misnamed.named_instead == {"compute": 3}
    quiet = power.judge_case("t", power.BY_NAME["aa"], aa, 5, 6, 3, 0)
    assert quiet.series_nights == 3 * 3 * 3  # 3 trials, 3 nights, 3 series
    assert quiet.false_series_nights <= 1
