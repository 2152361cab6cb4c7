"""How sensitive the paired nightly is: slowdowns of our stack and of the platform, and A/A.

What it runs (real runs, on this machine), then how it judges them:

1. **A pool of real paired rounds per case.** Each round runs tonight's stack and the
   reference stack once each, at every worker count of ``--workers``, in an order drawn
   from the sweep's seed, exactly as a paired night does (``scalebench.sweep.start_sweep``
   of a request naming the stacks ``tonight`` and ``reference``, light task, at most
   ``--epochs`` epochs a run (8: light Task 2a's runs stop at their goal, as a night's do),
   one thread a rank; ``--pairing``, default ``auto``: where both arms fit on the cores at
   once, a round's arms run as a duet, each on its own cores, else one after the other).
   Both stacks are this interpreter; a slowed stack also
   has ``benchmarks/slowdown`` on its ``PYTHONPATH`` (a ``sitecustomize`` that spins, the
   product unmodified):

   - ``aa``: nothing changed;
   - ``stack-2``, ``stack-3``, ``stack-5``, ``stack-10``: tonight's compute phase slowed
     by 2, 3, 5 and 10 % (forward, loss, backward and optimizer);
   - ``platform-10``: both arms' compute slowed by 10 % (the machines got slower);
   - ``comm-10``: tonight's all-reduces slowed by 10 % (communication only).

   The cases run in turns (one sweep of ``--pairs-per-sweep`` rounds of every case, then
   again; the A/A case twice a turn, its pool holding ``--aa-rounds``, as the power rests on
   it) until each pool holds ``--pool-rounds`` rounds, so that the machine's drift over
   the hour falls on every case alike.
2. **What the pools measured**: each case's ratio tonight / reference of the steady step and
   of its phases, against the A/A pool's, with a 95 % interval: whether the runs of a case
   show the slowdown put in them, and how surely; and the A/A pool's noise, per worker count:
   the spread of a round's log-ratio, of a round's reference seconds, and from one sweep to
   the next beyond its rounds (the machines' drift over the hour, the stand-in for night to
   night).
3. **The power**, by the product's own judgement
   (:func:`results_db.regressions.paired_findings.paired_series`,
   :func:`~results_db.regressions.paired_findings.judge_series` and
   :func:`~results_db.regressions.paired_findings.changes`, with
   :data:`~results_db.regressions.shifts.PAIRED_RULE`) of nights made of real A/A rounds:
   each night as many rounds as the nightly's budget (``--budget-s``, 900 s) holds by the
   rounds' measured seconds, drawn from the A/A pool (with replacement), every run of the
   night scaled by one draw of the measured sweep-to-sweep drift, and on the case's nights
   the case's slowdown added to the arms it slows (:func:`slowed`: the slowed phase's
   seconds grow by the fraction, the step and the time to accuracy by what that adds). A
   trial is ``--history`` A/A nights, then up to 3 nights of the case, judged after each;
   ``--trials`` trials a case. The noise is measured, the size is the one put in: what the
   case pools measured (2.) says whether the runs agree with it.

It prints, per task and case: detected within 1, 2 and 3 nights (a change whose first
night is one of the case's nights), the attribution right (stack, or platform for
``platform-10``), the phase named first right (compute, or communication for ``comm-10``;
where it was not, the phases named instead),
and for ``aa`` the false alarms per series-night (a series flagged on either arm, on any of
the 3 nights after the history); then the goals, each met or not, with the measured
figures.

A pool smaller than a trial's nights is drawn again and again: its own sampling error then
weighs on every trial alike. The pools' sizes are printed; a verdict on a pool of a few
rounds says little.

``--collect aa`` runs the A/A pool only: every case is still judged (its slowdown added to
A/A rounds), without the row of what its own runs measured.

``--device cuda`` runs the ranks on the GPUs (each round's arms one after the other: two
arms would share a GPU); the judgement is the same.

``--data DIR`` keeps the pools (``results.db`` and ``pool.jsonl``) and adds to them;
``--judge-only`` runs nothing and judges the pools in ``DIR``. ``--smoke``: light Task 2a at
one worker, pools ``aa`` and ``stack-10`` of 1 round each of 1 epoch, 1 trial of 3 history
nights of 2 rounds, in a temporary folder; prints the same tables, no goal judged (about 30 s).

    .venv/bin/python benchmarks/regression_power.py [--tasks task2a-logreg-epsilon]
        [--workers 1,2] [--collect CASES] [--pool-rounds 16] [--aa-rounds 32] [--trials 10]
        [--outlier-sd 3] [--device cpu|cuda] [--data DIR] [--judge-only]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import math
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.group import LauncherFailed, record_verdict, run_together  # noqa: E402
from operators.launcher import launcher_for  # noqa: E402
from results_db import service  # noqa: E402
from results_db.database import make_engine  # noqa: E402
from results_db.queries.stacks import ArmRun, arm_runs  # noqa: E402
from results_db.regressions.paired_findings import (  # noqa: E402
    PLATFORM,
    STACK,
    changes,
    judge_series,
    paired_series,
)
from results_db.regressions.shifts import PAIRED_RULE, PairedRule  # noqa: E402
from scalebench import manifest  # noqa: E402
from scalebench.host import cpu_model  # noqa: E402
from scalebench.nightly import REFERENCE, TONIGHT  # noqa: E402
from scalebench.sweep import launches, start_sweep, validate_request  # noqa: E402

SLOWDOWN = ROOT / "benchmarks" / "slowdown"
POOL = "pool.jsonl"  # one JSON line per sweep run: task, case, sweep id, seconds


@dataclass(frozen=True)
class Case:
    """One kind of night: which arms are slowed, by how much, in which phase, and what a
    right finding says (its attribution and the phase it names first)."""

    name: str
    fraction: float
    phase: str  # "compute" or "communication"
    arms: tuple[str, ...]  # the arms slowed: (), (TONIGHT,), (TONIGHT, REFERENCE)
    attribution: str | None  # None: nothing should be found (A/A)
    named_phase: str | None


CASES = (
    Case("aa", 0.0, "compute", (), None, None),
    Case("stack-2", 0.02, "compute", (TONIGHT,), STACK, "compute"),
    Case("stack-3", 0.03, "compute", (TONIGHT,), STACK, "compute"),
    Case("stack-5", 0.05, "compute", (TONIGHT,), STACK, "compute"),
    Case("stack-10", 0.10, "compute", (TONIGHT,), STACK, "compute"),
    Case("platform-10", 0.10, "compute", (TONIGHT, REFERENCE), PLATFORM, "compute"),
    Case("comm-10", 0.10, "communication", (TONIGHT,), STACK, "communication"),
)
BY_NAME = {case.name: case for case in CASES}


def stack_of(case: Case, arm: str) -> dict[str, Any]:
    """One arm's stack in ``case``: this interpreter, slowed where the case says."""
    stack: dict[str, Any] = {"python": sys.executable}
    if arm in case.arms:
        stack["env"] = {
            "PYTHONPATH": str(SLOWDOWN),
            "SCALEBENCH_BENCH_SLOWDOWN": f"{case.fraction:g}",
            "SCALEBENCH_BENCH_PHASE": case.phase,
        }
    return stack


class Progress:
    """The rounds of every pool to run, one line as each ends: how many are done, the seconds
    so far and about how many are left (the mean round so far, times the rounds to go)."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.done = 0
        self.started = time.monotonic()

    def round_ended(self, what: str) -> None:
        self.done += 1
        elapsed_s = time.monotonic() - self.started
        left_s = elapsed_s / self.done * max(self.rounds - self.done, 0)
        left = f"{left_s / 60:.0f} min" if left_s >= 120 else f"{left_s:.0f} s"
        print(
            f"    {what}: {self.done}/{self.rounds} rounds in all "
            f"({elapsed_s:.0f} s, about {left} to go)",
            flush=True,
        )


def run_case_sweep(
    task: str,
    case: Case,
    workers: str,
    pairs: int,
    epochs: int,
    data: Path,
    seed: int,
    way: str = "auto",
    progress: Progress | None = None,
    device: str = "cpu",
) -> tuple[str, Path, float, int]:
    """One sweep of ``pairs`` rounds of ``case``, in the plan's order, each round's arms as
    the request's ``pairing`` (``way``) runs them (a duet's at once: ``launches``); its id,
    folder, seconds and failed groups. ``progress`` hears of each round as it ends; the ranks
    run on ``device`` (``cuda``: one after the other, as ``pairing: auto`` runs GPU ranks)."""
    request = validate_request(
        task=task,
        light=True,
        workers=workers,
        stacks={TONIGHT: stack_of(case, TONIGHT), REFERENCE: stack_of(case, REFERENCE)},
        pairs=pairs,
        seed=seed,
        max_epochs=epochs,
        threads_per_worker=1,
        device=device,
        compile="off",
        pairing=way,
        data_dir=str(data / "data"),
    )
    plan = start_sweep(request, data / "results", trigger="cli")
    started = time.monotonic()
    failed = 0
    started_launches = launches(plan.groups)
    for index, launch in enumerate(started_launches):
        ended = run_together(launch, lambda group: launcher_for(group, sink=lambda line: None))
        for group, result in zip(launch, ended, strict=True):
            if isinstance(result, LauncherFailed):
                failed += 1
            else:
                failed += record_verdict(group, result)[0] != "succeeded"
        following = started_launches[index + 1 : index + 2]
        if progress is not None and (not following or following[0][0].repeat != launch[0].repeat):
            progress.round_ended(f"{task} {case.name} round {launch[0].repeat + 1}/{pairs}")
    manifest.finish(plan.sweep_dir)
    return plan.sweep_id, plan.sweep_dir, time.monotonic() - started, failed


def collect(args: argparse.Namespace, data: Path) -> None:
    """Run sweeps of every case in turns until each pool holds ``--pool-rounds`` rounds."""
    url = f"sqlite:///{data / 'results.db'}"
    service.upgrade(url)
    pool_file = data / POOL
    cases = [BY_NAME[name] for name in args.collect]
    target = {c.name: args.aa_rounds if c.name == "aa" else args.pool_rounds for c in cases}

    def to_run(task: str, case: Case) -> int:
        """The rounds ``case`` still needs, in whole sweeps of ``--pairs-per-sweep``."""
        missing = target[case.name] - _pooled_rounds(pool_file, task).get(case.name, 0)
        return math.ceil(max(missing, 0) / args.pairs_per_sweep) * args.pairs_per_sweep

    progress = Progress(sum(to_run(task, case) for task in args.tasks for case in cases))
    for task in args.tasks:
        turn = 0  # of this call (a pool added to goes on where it stood)
        while True:
            have = _pooled_rounds(pool_file, task)
            wanted = [c for c in cases if have.get(c.name, 0) < target[c.name]]
            if not wanted:
                break
            turn += 1
            order = list(wanted)
            if BY_NAME["aa"] in order and args.aa_rounds > args.pool_rounds:
                # the power rests on the A/A pool: it runs twice a turn, among the others
                order.insert(len(order) // 2 + 1, BY_NAME["aa"])
            for case in order:
                if have.get(case.name, 0) >= target[case.name]:
                    continue  # full already (the A/A pool's second sweep of a turn)
                seed = len(_lines(pool_file)) * 1000
                began = time.monotonic()
                sweep_id, folder, seconds, failed = run_case_sweep(
                    task,
                    case,
                    args.workers,
                    args.pairs_per_sweep,
                    args.epochs,
                    data,
                    seed,
                    args.pairing,
                    progress,
                    args.device,
                )
                with contextlib.redirect_stdout(io.StringIO()):
                    service.ingest(url, str(folder))
                line = {
                    "task": task,
                    "case": case.name,
                    "sweep_id": sweep_id,
                    "rounds": args.pairs_per_sweep,
                    "seconds": seconds,
                    "failed": failed,
                }
                with pool_file.open("a") as out:
                    out.write(json.dumps(line) + "\n")
                done = have.get(case.name, 0) + args.pairs_per_sweep
                have[case.name] = done
                failures = f", {failed} failed" if failed else ""
                print(
                    f"  {task} turn {turn}: {case.name} {done}/{target[case.name]} rounds "
                    f"({time.monotonic() - began:.0f} s{failures})",
                    flush=True,
                )


def _lines(pool_file: Path) -> list[dict[str, Any]]:
    if not pool_file.exists():
        return []
    return [json.loads(line) for line in pool_file.read_text().splitlines() if line.strip()]


def _pooled_rounds(pool_file: Path, task: str) -> dict[str, int]:
    have: dict[str, int] = {}
    for line in _lines(pool_file):
        if line["task"] == task:
            have[line["case"]] = have.get(line["case"], 0) + int(line["rounds"])
    return have


# -- judging composed nights ---------------------------------------------------------------

Round = list[ArmRun]  # one round's runs: both arms at every worker count


@dataclass(frozen=True)
class Night:
    """A composed night, as :func:`paired_series` reads one."""

    sweep_id: str
    reference: dict[str, Any]
    arms: list[ArmRun]


def pools(data: Path, task: str) -> tuple[dict[str, list[list[Round]]], float]:
    """Per case, its sweeps, each a list of rounds (a round: every arm run of one round),
    and the mean seconds of a round."""
    url = f"sqlite:///{data / 'results.db'}"
    engine = make_engine(url)
    found: dict[str, list[list[Round]]] = {}
    seconds = []
    with engine.connect() as conn:
        for line in _lines(data / POOL):
            if line["task"] != task:
                continue
            by_round: dict[int, Round] = {}
            for arm in arm_runs(conn, line["sweep_id"]):
                by_round.setdefault(arm.repeat, []).append(arm)
            whole = [r for r in by_round.values() if {a.stack for a in r} == {TONIGHT, REFERENCE}]
            found.setdefault(line["case"], []).append(whole)
            seconds.append(line["seconds"] / max(line["rounds"], 1))
    engine.dispose()
    return found, statistics.fmean(seconds) if seconds else math.nan


def rounds_of(sweeps: list[list[Round]]) -> list[Round]:
    return [r for sweep in sweeps for r in sweep]


# -- what the pools measured ---------------------------------------------------------------


def _log_ratios(rounds: list[Round], world_size: int, metric: str) -> list[float]:
    logs = []
    for measured in rounds:
        arms = {a.stack: a.seconds.get(metric) for a in measured if a.world_size == world_size}
        mine, theirs = arms.get(TONIGHT), arms.get(REFERENCE)
        if mine and theirs and mine > 0 and theirs > 0:
            logs.append(math.log(mine / theirs))
    return logs


def _reference_logs(rounds: list[Round], world_size: int) -> list[float]:
    return [
        math.log(a.seconds["steady_step_s"])
        for measured in rounds
        for a in measured
        if a.stack == REFERENCE and a.world_size == world_size and a.seconds.get("steady_step_s")
    ]


def measured_shift(
    case_rounds: list[Round], aa_rounds: list[Round], world_size: int, metric: str
) -> tuple[float, float, float, int] | None:
    """The case's ratio tonight / reference of ``metric`` against the A/A pool's (a ratio of
    ratios, 1.10 = 10 % slower than A/A), its 95 % Welch interval, and the case's rounds."""
    from scipy import stats

    mine, aa = (
        _log_ratios(case_rounds, world_size, metric),
        _log_ratios(aa_rounds, world_size, metric),
    )
    if len(mine) < 2 or len(aa) < 2:
        return None
    shift = statistics.fmean(mine) - statistics.fmean(aa)
    se2 = statistics.variance(mine) / len(mine) + statistics.variance(aa) / len(aa)
    freedom = (
        se2**2
        / (
            (statistics.variance(mine) / len(mine)) ** 2 / (len(mine) - 1)
            + (statistics.variance(aa) / len(aa)) ** 2 / (len(aa) - 1)
        )
        if se2 > 0
        else 1.0
    )
    half = float(stats.t.ppf(0.975, freedom)) * math.sqrt(se2)
    return math.exp(shift), math.exp(shift - half), math.exp(shift + half), len(mine)


def spreads(aa: list[list[Round]], world_size: int) -> tuple[float, float, float]:
    """The A/A pool's noise at ``world_size``, each a standard deviation of natural logs: a
    round's steady-step log-ratio, a round's reference log-seconds, and the sweeps' mean
    reference log-seconds beyond what their rounds explain (the machines' drift from one
    sweep to the next, the stand-in for night to night)."""
    ratios = _log_ratios(rounds_of(aa), world_size, "steady_step_s")
    within = [_reference_logs(sweep, world_size) for sweep in aa]
    within = [w for w in within if len(w) > 1]
    sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else math.nan  # noqa: E731
    if len(within) < 2:
        return sd(ratios), sd(_reference_logs(rounds_of(aa), world_size)), 0.0
    pooled = statistics.fmean(statistics.variance(w) for w in within)
    means = [statistics.fmean(w) for w in within]
    expected = statistics.fmean(pooled / len(w) for w in within)
    between = max(statistics.variance(means) - expected, 0.0)
    return sd(ratios), math.sqrt(pooled), math.sqrt(between)


# -- nights for the power: A/A rounds, the case's slowdown added --------------------------


def slowed(measured: Round, case: Case) -> Round:
    """An A/A round with ``case``'s slowdown added to the arms it slows: the slowed phase's
    seconds grow by the case's fraction, and so do the step and the time to accuracy by what
    that adds to the step."""
    phase = "compute_s" if case.phase == "compute" else "communication_s"
    rebuilt = []
    for arm in measured:
        seconds = dict(arm.seconds)
        if arm.stack in case.arms and case.fraction and seconds.get("steady_step_s"):
            extra = seconds.get(phase, 0.0) * case.fraction
            grown = (seconds["steady_step_s"] + extra) / seconds["steady_step_s"]
            seconds[phase] = seconds.get(phase, 0.0) + extra
            seconds["steady_step_s"] += extra
            if "time_to_accuracy_s" in seconds:
                seconds["time_to_accuracy_s"] *= grown
        rebuilt.append(replace(arm, seconds=seconds))
    return rebuilt


def compose(
    name: str, rounds: list[Round], count: int, draw: random.Random, case: Case, drift_sd: float
) -> Night:
    """A night of ``count`` A/A rounds drawn from ``rounds`` (with replacement), renumbered,
    each with ``case``'s slowdown added (:func:`slowed`), and the night's drift of the
    machines, one draw of ``drift_sd`` (log scale) on every run of both arms."""
    drift = math.exp(draw.gauss(0.0, drift_sd)) if drift_sd > 0 else 1.0
    arms = []
    for number in range(count):
        for arm in slowed(draw.choice(rounds), case):
            seconds = {metric: value * drift for metric, value in arm.seconds.items()}
            arms.append(
                replace(arm, repeat=number, run_id=f"{name}-{number}-{arm.run_id}", seconds=seconds)
            )
    return Night(name, {"python": "reference"}, arms)


@dataclass
class Tally:
    """One case's outcome over its trials."""

    trials: int = 0
    within: tuple[int, int, int] = (0, 0, 0)  # detected within 1, 2, 3 nights
    attribution_right: int = 0
    phase_right: int = 0
    detections: int = 0
    false_series_nights: int = 0  # A/A: series flagged on a night after the history
    series_nights: int = 0
    # the phase named first where it was not the case's ("none": a finding naming no phase)
    named_instead: collections.Counter[str] = field(default_factory=collections.Counter)


def judge_case(
    task: str,
    case: Case,
    aa: list[Round],
    history: int,
    night_rounds: int,
    trials: int,
    seed: int,
    drift_sd: float = 0.0,
    rule: PairedRule = PAIRED_RULE,
) -> Tally:
    """``trials`` trials of ``case``: ``history`` A/A nights, then up to 3 of the case,
    judged by ``rule``."""
    tally = Tally()
    draw = random.Random(f"{seed}-{task}-{case.name}")
    unchanged = BY_NAME["aa"]
    for trial in range(trials):
        tally.trials += 1
        nights = [
            compose(f"t{trial}-h{n}", aa, night_rounds, draw, unchanged, drift_sd)
            for n in range(history)
        ]
        first_found: int | None = None
        found_change = None
        for n in range(3):
            nights.append(compose(f"t{trial}-c{n}", aa, night_rounds, draw, case, drift_sd))
            judged = judge_series(paired_series(task, nights, TONIGHT, REFERENCE), rule)
            if case.attribution is None:
                tally.series_nights += len(judged)
                tally.false_series_nights += sum(1 for j in judged if j.flagged)
                continue
            case_nights = {night.sweep_id for night in nights[history:]}
            hits = [c for c in changes(judged) if c.first_sweep_id in case_nights]
            if hits and first_found is None:
                first_found, found_change = n, hits[0]
        if first_found is not None and found_change is not None:
            tally.within = tuple(  # type: ignore[assignment]
                count + (first_found <= k) for k, count in enumerate(tally.within)
            )
            tally.detections += 1
            tally.attribution_right += found_change.attribution == case.attribution
            named = found_change.phases[0] if found_change.phases else None
            tally.phase_right += named == case.named_phase
            if named != case.named_phase:
                tally.named_instead[named or "none"] += 1
    return tally


def report(args: argparse.Namespace, data: Path) -> bool:
    """Print, per task, what the pools measured and the power; whether every goal was met."""
    met = True
    for task in args.tasks:
        pool, round_s = pools(data, task)
        if not pool.get("aa"):
            print(f"{task}: no A/A rounds in {data}: every trial's nights are drawn from them")
            met = False
            continue
        unpooled = [c for c in args.cases if not pool.get(c)]
        aa = rounds_of(pool["aa"])
        sizes = sorted({a.world_size for r in aa for a in r})
        night_rounds = args.night_rounds or max(2, int(args.budget_s // round_s))
        print(
            f"\n{task}: a round takes {round_s:.0f} s, so a night of {args.budget_s:.0f} s "
            f"holds {night_rounds} rounds; pools (rounds): "
            + ", ".join(f"{c} {len(rounds_of(pool.get(c, [])))}" for c in args.cases)
        )
        rule = replace(PAIRED_RULE, outlier_sd=args.outlier_sd)
        drift = 0.0
        for size in sizes:
            ratio_sd, reference_sd, between = spreads(pool["aa"], size)
            drift = max(drift, between)
            print(
                f"  A/A at {size} worker(s), sd of natural logs: a round's steady-step ratio "
                f"{ratio_sd:.3f}, a round's reference seconds {reference_sd:.3f}, sweep to "
                f"sweep {between:.3f}"
            )
        print("  what each case's runs measured, against the A/A pool (95 % interval, rounds):")
        for name in args.cases:
            case = BY_NAME[name]
            if case.attribution is None:
                continue
            if name in unpooled:
                print(f"    {name:12s} not run here (its power below adds its slowdown to A/A)")
                continue
            for size in sizes:
                cells = []
                for metric in ("steady_step_s", "compute_s", "communication_s"):
                    shift = measured_shift(rounds_of(pool[name]), aa, size, metric)
                    if shift is not None:
                        ratio, low, high, _rounds = shift
                        cells.append(f"{metric} x{ratio:.3f} [{low:.3f}, {high:.3f}]")
                print(f"    {name:12s} {size} worker(s): " + "; ".join(cells))
        print(
            f"  power: the product's judgement on nights of {night_rounds} A/A rounds drawn "
            f"from the pool, the case's slowdown added, {args.history} A/A nights of history, "
            f"a night's drift of sd {drift:.3f}, {args.trials} trials, rounds further than "
            f"{rule.outlier_sd:g} robust sds from their night's median pulled in"
        )
        print(
            f"  {'case':12s} {'1 night':>8s} {'2 nights':>9s} {'3 nights':>9s} "
            f"{'attributed':>11s} {'phase':>8s} {'false alarms':>14s}"
        )
        tallies = {}
        for name in args.cases:
            case = BY_NAME[name]
            tally = judge_case(
                task, case, aa, args.history, night_rounds, args.trials, args.seed, drift, rule
            )
            tallies[name] = tally
            if case.attribution is None:
                rate = tally.false_series_nights / max(tally.series_nights, 1)
                print(
                    f"  {name:12s} {'':>8s} {'':>9s} {'':>9s} {'':>11s} {'':>8s} "
                    f"{tally.false_series_nights:>4d}/{tally.series_nights:<4d} ({rate:.3f})"
                )
                continue
            within = " ".join(f"{w:>3d}/{tally.trials:<4d}" for w in tally.within)
            instead = ", ".join(f"{n} {c}" for n, c in tally.named_instead.most_common())
            print(
                f"  {name:12s} {within} "
                f"{tally.attribution_right:>5d}/{tally.detections:<5d} "
                f"{tally.phase_right:>3d}/{tally.detections:<4d}"
                + (f"   named instead: {instead}" if instead else "")
            )
        if not args.smoke:
            met &= goals(tallies)
    return met


def goals(tallies: dict[str, Tally]) -> bool:
    """The goals, each said with its figures; whether all were met."""
    checks = []

    def share(count: int, total: int) -> float:
        return count / total if total else 0.0

    if "stack-3" in tallies:
        t = tallies["stack-3"]
        checks.append(("3 % within 3 nights in 9 of 10", share(t.within[2], t.trials) >= 0.9))
    if "stack-5" in tallies:
        t = tallies["stack-5"]
        checks.append(("5 % within 1 night in 9 of 10", share(t.within[0], t.trials) >= 0.9))
    if "aa" in tallies:
        t = tallies["aa"]
        checks.append(
            (
                "A/A at most 1 in 20 series-nights",
                share(t.false_series_nights, t.series_nights) <= 0.05,
            )
        )
    if "platform-10" in tallies:
        t = tallies["platform-10"]
        checks.append(
            ("platform 10 % within 3 nights in 8 of 10", share(t.within[2], t.trials) >= 0.8)
        )
        checks.append(
            ("platform attributed in 9 of 10", share(t.attribution_right, t.detections) >= 0.9)
        )
    named = [t for n, t in tallies.items() if BY_NAME[n].named_phase and t.detections]
    if named:
        right = sum(t.phase_right for t in named)
        total = sum(t.detections for t in named)
        checks.append(("phase named right in 9 of 10", share(right, total) >= 0.9))
    for what, ok in checks:
        print(f"  goal {what}: {'met' if ok else 'NOT met'}")
    return all(ok for _, ok in checks)


def gpu_name() -> str | None:
    """The first CUDA device's name, as torch gives it (None where torch sees none)."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="task2a-logreg-epsilon")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--cases", default=",".join(c.name for c in CASES))
    parser.add_argument(
        "--collect",
        default=None,
        help="the cases whose pools are run (default: every case of --cases; the A/A pool "
        "always): a case judged but not pooled gets its power, with no measured row",
    )
    parser.add_argument("--pool-rounds", type=int, default=16, help="rounds of each case")
    parser.add_argument("--aa-rounds", type=int, default=32, help="rounds of the A/A pool")
    parser.add_argument("--pairs-per-sweep", type=int, default=4)
    parser.add_argument(
        "--pairing",
        default="auto",
        choices=("auto", "interleaved", "duet"),
        help="how a round's arms run (auto: a duet where they fit, as a night runs them)",
    )
    # up to 8 epochs: light Task 2a's runs stop at their goal after 6 to 8, as a night's do
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--history", type=int, default=7)
    parser.add_argument("--budget-s", type=float, default=900.0)
    parser.add_argument("--night-rounds", type=int, default=0, help="0: as the budget holds")
    parser.add_argument(
        "--outlier-sd",
        type=float,
        default=PAIRED_RULE.outlier_sd,
        help="judge with rounds this far from their night's median pulled in (0: none)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="where the ranks run (cuda: a round's arms one after the other on the GPUs)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--judge-only", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if args.smoke:
        args.workers, args.cases = "1", ["aa", "stack-10"]
        args.pool_rounds = args.aa_rounds = args.pairs_per_sweep = 1
        args.epochs, args.trials, args.history, args.night_rounds = 1, 1, 3, 2
    args.collect = (
        list(args.cases)
        if args.collect is None
        else [c.strip() for c in args.collect.split(",") if c.strip()]
    )
    for option, names in (("--cases", args.cases), ("--collect", args.collect)):
        unknown = [c for c in names if c not in BY_NAME]
        if unknown:
            parser.error(f"{option}: unknown {unknown}; known: {', '.join(BY_NAME)}")
        if "aa" not in names:
            names.insert(0, "aa")  # every trial's history
    if args.judge_only:  # pools measured elsewhere, perhaps: this machine is not named
        where = f"the pools in {args.data}"
    elif args.device == "cpu":
        where = cpu_model()
    else:
        gpu = gpu_name()
        if gpu is None:
            parser.error("--device cuda: torch sees no CUDA GPU on this machine; use --device cpu")
        where = f"{gpu} (host: {cpu_model()})"
    print(
        f"paired nightly power on {where}: {', '.join(args.tasks)} at {args.workers} "
        f"worker(s), light, {args.epochs} epoch(s) a run, ranks on {args.device}, "
        f"pairing {args.pairing}",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        data = args.data or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        data.mkdir(parents=True, exist_ok=True)
        if not args.judge_only:
            collect(args, data)
        met = report(args, data)
    if args.smoke:
        print("smoke size: pools of one round, no goal judged")
    return 0 if met or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
