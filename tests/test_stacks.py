"""Stacks, a dimension of a request: how they are asked, checked, planned in paired rounds,
started, recorded, and compared (``scalebench compare``)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine

from cli import main as cli
from cli.run import add_commands
from results_db.regressions.paired import compare_stacks
from scalebench.request_fields import InvalidParameter
from scalebench.stacks import (
    STACK_VARIABLE,
    BadStack,
    Stack,
    parse_stacks,
    rank_environment,
    round_order,
    stacks_from_options,
)
from scalebench.sweep import GroupPlan, plan_groups, start_sweep, validate_request

TASK = "task2a-logreg-epsilon"
HERE = sys.executable
SLOWDOWN = Path(__file__).resolve().parents[1] / "benchmarks" / "slowdown"


def two_stacks(**slow_env: str) -> dict:
    return {"base": {"python": HERE}, "slow": {"python": HERE, "env": slow_env}}


# -- reading ---------------------------------------------------------------------------------


def test_stacks_are_read_from_a_mapping_json_text_or_their_stored_list_in_order() -> None:
    mapping = {"tonight": {"python": HERE, "env": {"A": "1"}}, "ref": {"image": "repo/w:1"}}
    stacks = parse_stacks(mapping)
    assert [s.name for s in stacks] == ["tonight", "ref"]
    assert stacks[0].env == (("A", "1"),) and stacks[1].image == "repo/w:1"
    assert parse_stacks(json.dumps(mapping)) == stacks
    stored = [s.stored() for s in stacks]
    assert stored[0] == {"name": "tonight", "python": HERE, "env": {"A": "1"}}
    assert parse_stacks(list(reversed(stored))) == tuple(reversed(stacks))
    assert parse_stacks(None) == parse_stacks({}) == parse_stacks("") == ()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"Tonight": {"python": HERE}}, "stack name 'Tonight'"),
        ({"a": {"python": HERE, "image": "x"}}, "got both"),
        ({"a": {"env": {}}}, "got neither"),
        ({"a": {"python": HERE, "env": {"RANK": "3"}}}, "set by the launcher"),
        ({"a": {"python": HERE, "env": {"A": 3}}}, "env A must be text"),
        ({"a": {"python": HERE, "env": {"1A": "x"}}}, "not a variable's name"),
        ({"a": {"image": "Bad Image"}}, "image must be a container image reference"),
        ({"a": {"python": HERE, "shell": "x"}}, "unknown key 'shell'"),
        ({f"s{i}": {"python": HERE} for i in range(5)}, "at most 4 stacks"),
        ("{not json", "must be JSON"),
        (["a", "b"], "must map each stack's name"),
    ],
)
def test_a_bad_stack_is_refused_in_one_line_naming_it(value: object, words: str) -> None:
    with pytest.raises(BadStack, match=words.replace("(", r"\(")):
        parse_stacks(value)


def test_the_command_lines_options_make_the_same_mapping() -> None:
    mapping = stacks_from_options(
        ["base=/usr/bin/python3", "slow=/opt/bin/python"],
        ["slow:PYTHONPATH=/opt/src", "slow:X=a=b"],
        image=False,
    )
    assert mapping == {
        "base": {"python": "/usr/bin/python3"},
        "slow": {"python": "/opt/bin/python", "env": {"PYTHONPATH": "/opt/src", "X": "a=b"}},
    }
    assert stacks_from_options(["ref=repo/w:1"], [], image=True) == {"ref": {"image": "repo/w:1"}}
    with pytest.raises(BadStack, match="write NAME=PYTHON"):
        stacks_from_options(["base"], [], image=False)
    with pytest.raises(BadStack, match="no stack 'other'"):
        stacks_from_options(["base=x"], ["other:A=1"], image=False)
    with pytest.raises(BadStack, match="given twice"):
        stacks_from_options(["a=x", "a=y"], [], image=False)


# -- checked before anything starts ----------------------------------------------------------


def test_pairs_need_two_stacks_and_stand_for_the_repeats() -> None:
    request = validate_request(task=TASK, light=True, stacks=two_stacks(), pairs=4)
    assert request.repeats == 4 and request.pairs == 4
    with pytest.raises(InvalidParameter, match="pairs compare two or more stacks") as refused:
        validate_request(task=TASK, light=True, pairs=3)
    assert refused.value.field == "pairs"
    # the trigger form always gives repeats, at its default: pairs win over that
    form = validate_request(task=TASK, light=True, stacks=two_stacks(), pairs=4, repeats=3)
    assert form.repeats == 4
    with pytest.raises(InvalidParameter, match="give pairs or repeats, not both"):
        validate_request(task=TASK, light=True, stacks=two_stacks(), pairs=3, repeats=5)
    with pytest.raises(InvalidParameter, match=r"× 2 stacks = 600 groups") as refused:
        validate_request(task=TASK, light=True, workers="1,2,4", stacks=two_stacks(), pairs=100)
    assert refused.value.field == "pairs"


def test_an_interpreter_that_is_missing_or_has_no_torch_is_refused_naming_the_stack(
    tmp_path: Path,
) -> None:
    with pytest.raises(InvalidParameter, match="slow: no interpreter") as refused:
        validate_request(task=TASK, light=True, stacks={"slow": {"python": str(tmp_path / "py")}})
    assert refused.value.field == "stacks"
    (tmp_path / "torch.py").write_text("raise ImportError('a broken build')\n")
    broken = {"slow": {"python": HERE, "env": {"PYTHONPATH": str(tmp_path)}}}
    with pytest.raises(InvalidParameter, match=r"slow: .* cannot import torch .*a broken build"):
        validate_request(task=TASK, light=True, stacks=broken)
    with pytest.raises(InvalidParameter, match="is not a Python interpreter"):
        validate_request(task=TASK, light=True, stacks={"sh": {"python": "/bin/true"}})


def test_an_image_needs_a_launcher_that_runs_images_and_an_interpreter_one_that_runs_here() -> None:
    with pytest.raises(InvalidParameter, match="only the kubernetes launcher runs images"):
        validate_request(task=TASK, light=True, stacks={"ref": {"image": "repo/w:1"}})
    with pytest.raises(InvalidParameter, match="the kubernetes launcher runs container images"):
        validate_request(
            task=TASK, light=True, launcher="kubernetes", stacks={"ref": {"python": HERE}}
        )


# -- planned in rounds ------------------------------------------------------------------------


def test_each_round_runs_every_stack_once_at_its_seed_in_an_order_drawn_from_the_seed(
    tmp_path: Path,
) -> None:
    request = validate_request(
        task=TASK, light=True, workers="1,2", stacks=two_stacks(), pairs=6, seed=7
    )
    groups = plan_groups(request, "sw", tmp_path)
    assert len(groups) == 6 * 2 * 2
    for repeat in range(6):
        for k in (1, 2):
            pair = [g for g in groups if g.repeat == repeat and g.world_size == k]
            assert sorted(g.stack_name for g in pair) == ["base", "slow"]
            assert {g.seed for g in pair} == {7 + repeat}
            assert pair[0].run_id == f"sw-w{k}-s{pair[0].stack_name}-r{repeat + 1}"
            first, second = groups.index(pair[0]), groups.index(pair[1])
            assert second == first + 1  # the two arms of a pair one right after the other
    firsts = [g.stack_name for g in groups if g.world_size == 1][::2]
    assert set(firsts) == {"base", "slow"}  # neither always first
    assert plan_groups(request, "sw", tmp_path) == groups  # the same request draws the same
    stacks = request.stacks
    assert round_order(stacks, 7, 6) != round_order(stacks, 8, 6)


def test_a_planned_stack_crosses_xcom_and_the_manifest_by_name(tmp_path: Path) -> None:
    request = validate_request(task=TASK, light=True, workers="1", stacks=two_stacks(A="1"))
    plan = start_sweep(request, tmp_path, trigger="cli")
    group = plan.groups[0]
    assert GroupPlan.from_xcom(json.loads(json.dumps(group.to_xcom()))) == group
    stored = json.loads((plan.sweep_dir / "sweep.json").read_text())
    assert [s["name"] for s in stored["request"]["stacks"]] == ["base", "slow"]
    assert {g["stack"] for g in stored["groups"]} == {"base", "slow"}


def test_a_ranks_environment_puts_the_stacks_variables_and_path_first() -> None:
    stack = Stack("slow", python=HERE, env=(("PYTHONPATH", "/opt/slow"), ("X", "1")))
    env = rank_environment(stack, {"PYTHONPATH": "/base", "X": "0", "HOME": "/h"})
    paths = env["PYTHONPATH"].split(":")
    assert paths[0] == "/opt/slow" and paths[-1] == "/base"
    assert (Path(paths[1]) / "workers" / "run.py").is_file()  # this checkout's workers
    assert env["X"] == "1" and env["HOME"] == "/h"
    assert json.loads(env[STACK_VARIABLE]) == {"name": "slow", "env": dict(stack.env)}
    assert rank_environment(None, {"X": "0"}) == {"X": "0"}


# -- compared ---------------------------------------------------------------------------------


class Arm:
    def __init__(self, stack: str, repeat: int, seconds: dict[str, float], k: int = 1) -> None:
        self.stack, self.repeat, self.seconds = stack, repeat, seconds
        self.world_size, self.network = k, "host"


def test_each_stack_is_compared_with_the_first_round_by_round() -> None:
    drift = [1.0, 1.3, 0.8, 1.1, 0.9]  # the machine's speed each round, both arms alike
    arms = [Arm("base", r, {"steady_step_s": 0.01 * d}) for r, d in enumerate(drift)]
    arms += [Arm("slow", r, {"steady_step_s": 0.0103 * d}) for r, d in enumerate(drift)]
    arms += [
        Arm("same", r, {"steady_step_s": 0.01 * d * (1.001 if r % 2 else 0.999)})
        for r, d in enumerate(drift)
    ]
    arms.append(Arm("slow", 5, {"steady_step_s": 0.5}))  # no base in round 5: not a pair
    found = {c.stack: c for c in compare_stacks(arms, ["base", "slow", "same"], ["steady_step_s"])}
    slow = found["slow"].metrics["steady_step_s"]
    assert slow.pairs == 5 and math.isclose(slow.ratio, 1.03) and slow.low > 1
    same = found["same"].metrics["steady_step_s"]
    assert same.low < 1 < same.high
    assert found["slow"].against == "base"
    assert compare_stacks(arms, ["gone", "slow"], ["steady_step_s"]) == []


@pytest.mark.slow
# it asserts that a duet's arms trained at the same time: beside other tests on two cores, the
# scheduler can hold one arm back longer than the other arm's whole timed run (a third of a
# second), so it runs alone
@pytest.mark.timing
def test_a_stack_slowed_by_its_sitecustomize_is_slower_and_compare_says_so_on_both_databases(
    tmp_path: Path, postgres_admin: object
) -> None:
    """The user's calls: two stacks of this interpreter, one with a ``sitecustomize`` on its
    ``PYTHONPATH`` that doubles every step; two pairs of one epoch at one thread a rank into
    SQLite, so that on two cores or more each round runs as a duet (both arms at once, each
    rank on a core of its own, their timed runs begun together); ``compare --json``; then the
    same sweep loaded into PostgreSQL, whose JSONB keeps no key order (the stacks are stored
    as a list)."""
    from conftest import POSTGRES_URL
    from sqlalchemy import select

    from results_db import service
    from results_db.database import make_engine
    from results_db.models import Run
    from results_db.scratch import scratch_database
    from scalebench.pairing import host_cores

    duet = len(host_cores()) >= 2

    database = f"sqlite:///{tmp_path / 'results.db'}"
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()) as out:
        patch.setenv("OMP_NUM_THREADS", "1")
        status = cli.main(
            [
                *("run", TASK, "--light", "--workers", "1", "--max-epochs", "1"),
                *("--stack", f"base={HERE}", "--stack", f"slow={HERE}"),
                *("--stack-env", f"slow:PYTHONPATH={SLOWDOWN}"),
                *("--stack-env", "slow:SCALEBENCH_BENCH_SLOWDOWN=1.0"),
                *("--pairs", "2", "--results", str(tmp_path / "results")),
                *("--database", database, "--threads-per-worker", "1", "--device", "cpu"),
            ]
        )
    printed = out.getvalue()
    assert status == 0, printed[-2000:]
    if duet:
        assert printed.count("a duet of stacks") == 2, printed[-2000:]
    else:
        assert "repeat 1/2, stack base" in printed
    engine = make_engine(database)
    with engine.connect() as conn:
        runs = conn.execute(select(Run.repeat, Run.pairing, Run.started_at, Run.ended_at)).all()
    engine.dispose()
    assert {run.pairing for run in runs} == {"duet" if duet else "interleaved"}
    for repeat in (0, 1) if duet else ():  # a duet's arms trained at the same time
        one, other = (run for run in runs if run.repeat == repeat)
        assert one.started_at < other.ended_at and other.started_at < one.ended_at
    # the report: a table per stack (a speedup is within one stack), then where to compare
    assert "stack base:" in printed and "stack slow:" in printed
    assert "scalebench compare" in printed
    sweep_dir = next((tmp_path / "results").iterdir())
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        assert cli.main(["compare", sweep_dir.name, "--database", database, "--json"]) == 0
    report = json.loads(shown.getvalue())
    assert report["stacks"] == ["base", "slow"] and report["against"] == "base"
    assert report["identities"]["slow"]["env"]["SCALEBENCH_BENCH_SLOWDOWN"] == "1.0"
    assert report["identities"]["base"]["executable"] and report["identities"]["base"]["torch"]
    (only,) = report["comparisons"]
    assert (only["workers"], only["stack"], only["against"]) == (1, "slow", "base")
    assert only["pairing"] == ("duet" if duet else "interleaved")
    step = only["metrics"]["steady_step_s"]
    assert set(step) == {"ratio", "low", "high", "pairs"} and step["pairs"] == 2
    assert step["ratio"] > 1.3  # each step spins as long again as the step before
    with contextlib.redirect_stdout(io.StringIO()) as table:
        assert cli.main(["compare", sweep_dir.name, "--database", database]) == 0
    assert "each stack against base" in table.getvalue()
    with (
        scratch_database(POSTGRES_URL, "scalebench_test", False, None) as url,
        contextlib.redirect_stdout(io.StringIO()),
    ):
        service.ingest(url, str(sweep_dir))
        stored = service.compare_sweep(url, sweep_dir.name)
    assert stored.stacks == ["base", "slow"]
    (again,) = stored.comparisons
    assert again.metrics["steady_step_s"].pairs == 2 and again.stack == "slow"
    assert set(again.metrics) >= {"steady_step_s", "compute_s", "data_s", "eval_s"}


def test_an_arms_evaluation_is_its_runs_lower_median_evaluation_after_the_first(
    engine: Engine, tmp_path: Path
) -> None:
    """The first evaluation warms up (on an H200, 50 to 74 ms against 5 to 8 ms for the
    next ones) and is left out where there are others; then one slow evaluation (a busy
    moment of the machine) does not move it, nor does how many evaluations a run made
    before its goal (time to accuracy counts those). A run of one evaluation keeps it."""
    from records_factory import FakeRun, write_training_sweep

    from results_db.ingest import ingest_location
    from results_db.queries.stacks import arm_runs

    runs = [
        FakeRun(1, stack="base", epochs=3, eval_seconds=(9.0, 1.0, 5.0)),
        FakeRun(1, stack="tonight", epochs=2, eval_seconds=(8.0, 1.1)),
        FakeRun(1, stack="once", epochs=1, eval_seconds=(2.0,)),
    ]
    stacks = {name: {"python": sys.executable} for name in ("base", "tonight", "once")}
    write_training_sweep(tmp_path, "evaluations", runs, stacks=stacks)
    ingest_location(engine, str(tmp_path))
    with engine.connect() as conn:
        arms = {arm.stack: arm.seconds["eval_s"] for arm in arm_runs(conn, "evaluations")}
    assert arms == pytest.approx({"base": 1.0, "tonight": 1.1, "once": 2.0})


def test_compare_refuses_a_sweep_it_cannot_compare_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = f"sqlite:///{tmp_path / 'results.db'}"
    from results_db import service

    service.upgrade(database)
    status = cli.main(["compare", "no-such-sweep", "--database", database])
    err = capsys.readouterr().err
    assert status != 0 and "no sweep 'no-such-sweep'" in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_the_run_command_offers_stack_and_stack_env() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["run", TASK, "--stack", "a=x", "--stack", "b=y", "--stack-env", "b:K=V"]
    )
    assert args.stacks == ["a=x", "b=y"] and args.stack_env == ["b:K=V"]


def test_an_interpreter_given_relative_to_here_is_stored_absolute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The DAG's tasks need not share the working folder of the one that validated."""
    here = Path(HERE)
    monkeypatch.chdir(here.parent)
    request = validate_request(task=TASK, light=True, stacks={"a": {"python": f"./{here.name}"}})
    assert request.stacks[0].python == str(here.parent / here.name)
