"""benchmarks/light_targets.py plans its grid (task × workers × seed) as a sweep plans its
repeats: each seed reaches the ranks as the same ``--seed`` a sweep's repeat gives them. The
groups themselves are trained on demand (its smoke runs in tests/test_benchmark_smokes.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType

import pytest

from scalebench.sweep import plan_groups, validate_request

ROOT = Path(__file__).resolve().parents[1]
TASK = "task2a-logreg-epsilon"


@pytest.fixture
def light_targets(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import light_targets

    return light_targets


def test_counts_are_read_as_lists_ranges_or_both(light_targets: ModuleType) -> None:
    parse = light_targets.parse_counts
    assert parse("1,2,4", "--workers", 1) == [1, 2, 4]
    assert parse("0-4", "--seeds", 0) == [0, 1, 2, 3, 4]
    assert parse("0-2,7,1", "--seeds", 0) == [0, 1, 2, 7]  # each once, in the order given
    assert parse("2", "--workers", 1) == [2]
    for bad, least in (("4-2", 0), ("a", 0), ("0", 1), ("", 0), ("1,,2", 0)):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad, "--seeds", least)


def test_each_seed_reaches_the_ranks_as_a_sweeps_repeat_gives_it(
    light_targets: ModuleType, tmp_path: Path
) -> None:
    groups = light_targets.plan(TASK, [1, 2, 4], [1, 3], None, tmp_path)
    # every worker count of one seed, then the next seed's, as a sweep interleaves them
    planned = [(g.world_size, g.seed) for g in groups]
    assert planned == [(1, 1), (2, 1), (4, 1), (1, 3), (2, 3), (4, 3)]
    # the arguments of the sweep's own repeat with that seed: seed 0 + repeat r
    sweep = validate_request(
        task=TASK, light=True, workers="1,2,4", seed=0, repeats=4, device="cpu", compile="off"
    )
    sweeps = {(g.world_size, g.seed): g for g in plan_groups(sweep, "s", tmp_path)}
    for group in groups:
        argv = group.worker_argv("RUN", "DATA")
        assert argv[argv.index("--seed") + 1] == str(group.seed)
        theirs = sweeps[group.world_size, group.seed].worker_argv("RUN", "DATA")
        drop = {"--run-id", "--data-dir"}  # its own name and folders

        def kept(args: list[str], drop: set[str] = drop) -> list[str]:
            return [a for i, a in enumerate(args) if a not in drop and args[i - 1] not in drop]

        assert kept(argv) == kept(theirs)
    assert all(g.timeout_s == g.request.spec.group_time_limit_s(True) for g in groups)


def test_an_epoch_limit_is_given_to_every_rank(light_targets: ModuleType, tmp_path: Path) -> None:
    (group,) = light_targets.plan(TASK, [2], [0], 80, tmp_path)
    argv = group.worker_argv("RUN", "DATA")
    assert argv[argv.index("--max-epochs") + 1] == "80" and "--light" in argv
