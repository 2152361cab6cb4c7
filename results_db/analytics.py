"""The benchmark's definitions, as small pure functions on plain numbers.

- **time-to-accuracy (TTA)**: seconds from the group's common start to the
  end of the first evaluation that meets the goal; also reported without the
  time spent evaluating.
- **speedup(k)** = TTA(1) / TTA(k); **compute speedup** uses compute seconds
  (forward + loss + backward + optimizer) instead. **Scaling efficiency** =
  speedup(k) / k.
- **communication ratio** = communication seconds / total step seconds, per
  rank, averaged over ranks. Communication is the collectives alone (records
  version 3; before, it included packing and unpacking the gradients, which
  is now the ``gradient_packing`` phase): a 1-worker run's ratio is 0.
- **all-reduce**: per size, p50 / mean / p95 latency (seconds);
  algbw = bytes / seconds; busbw = algbw × 2(n−1)/n (the nccl-tests
  convention, so that busbw is comparable across world sizes).
- **repeats**: N runs of one configuration are combined by MLPerf's rule:
  drop the fastest and the slowest when N ≥ 3, then take the mean.
- **contention**: the share of the cores a group was given that other
  processes took while it ran (:func:`contention_share`). Above
  ``SCALEBENCH_CONTENTION_THRESHOLD`` (default 0.10) the run is
  ``contended``: its times say as much about the machine as about the code.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scalebench.statuses import NOT_STARTED

COMPUTE_PHASES = ("forward", "loss", "backward", "optimizer")


@dataclass(frozen=True)
class Combined:
    """Repeats of one configuration: the mean of the kept values and their spread."""

    mean: float
    minimum: float
    maximum: float
    stdev: float
    kept: int
    total: int


def converged_mean(values: Sequence[float | None]) -> Combined | None:
    """MLPerf's rule for repeats that may not all have reached the goal.

    ``None`` is a repeat that never reached it, counted as infinitely slow. With
    three or more repeats the fastest and slowest are dropped and the rest
    averaged, so one repeat that never converged is tolerated (it is the
    slowest); with fewer, every repeat must have converged. Returns ``None``
    when the kept repeats include one that never converged (or there are no
    repeats): the configuration then has no time to accuracy.
    """
    ordered = sorted(values, key=lambda v: math.inf if v is None else v)
    kept = ordered[1:-1] if len(ordered) >= 3 else ordered
    if not kept or any(v is None for v in kept):
        return None
    numbers = [float(v) for v in kept if v is not None]
    return Combined(
        mean=statistics.fmean(numbers),
        minimum=numbers[0],
        maximum=numbers[-1],
        stdev=statistics.stdev(numbers) if len(numbers) > 1 else 0.0,
        kept=len(numbers),
        total=len(values),
    )


def speedup(time_one_worker: float, time_k_workers: float) -> float:
    """TTA(1) / TTA(k): how many times faster k workers reach the goal."""
    if time_k_workers <= 0:
        raise ValueError("time must be positive")
    return time_one_worker / time_k_workers


def scaling_efficiency(speedup_k: float, world_size: int) -> float:
    """speedup(k) / k: 1.0 is perfect linear scaling."""
    return speedup_k / world_size


def communication_ratio(per_rank: Sequence[tuple[float, float]]) -> float:
    """Mean over ranks of communication seconds / total step seconds.

    ``per_rank`` holds (communication seconds, total step seconds) per rank.
    """
    ratios = [communication_s / step_s for communication_s, step_s in per_rank if step_s > 0]
    if not ratios:
        raise ValueError("no step time recorded")
    return statistics.fmean(ratios)


def communication_to_computation(
    communication_s: float, forward_s: float, loss_s: float, backward_s: float, optimizer_s: float
) -> float | None:
    """Communication seconds per second of computation (the ``COMPUTE_PHASES``: forward,
    loss, backward, optimizer), the second ratio the task texts quote; None without any
    computation."""
    compute_s = forward_s + loss_s + backward_s + optimizer_s
    return communication_s / compute_s if compute_s > 0 else None


def algbw(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in bytes per second."""
    return nbytes / seconds


def busbw(nbytes: int, seconds: float, world_size: int) -> float:
    """Bus bandwidth of an all-reduce in bytes per second: algbw × 2(n−1)/n."""
    return algbw(nbytes, seconds) * 2 * (world_size - 1) / world_size


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class LatencySummary:
    """Latency of one all-reduce configuration, seconds, and bandwidths, bytes/s."""

    p50: float
    mean: float
    p95: float
    algbw: float
    busbw: float
    samples: int


def summarise_allreduce(
    per_rank_seconds: Sequence[Sequence[float]], nbytes: int, world_size: int
) -> LatencySummary:
    """Summarise the timed repetitions of one size.

    A collective has finished when its slowest rank has, so each repetition's
    time is the maximum over ranks. Bandwidths use the median time.
    """
    counts = {len(s) for s in per_rank_seconds}
    if len(counts) != 1:
        raise ValueError(f"ranks recorded different numbers of repetitions: {sorted(counts)}")
    repetitions = [max(times) for times in zip(*per_rank_seconds, strict=True)]
    p50 = percentile(repetitions, 50)
    return LatencySummary(
        p50=p50,
        mean=statistics.fmean(repetitions),
        p95=percentile(repetitions, 95),
        algbw=algbw(nbytes, p50),
        busbw=busbw(nbytes, p50, world_size),
        samples=len(repetitions),
    )


def cost(world_size: int, node_per_hour: float, gpu_per_hour: float, seconds: float) -> float:
    """Dollars for k workers, each a node with one GPU, running ``seconds``.

    cost(k) = k × (node $/h + GPU $/h) × time in hours.
    """
    return world_size * (node_per_hour + gpu_per_hour) * seconds / 3600.0


def price_index(cost_k: float, cost_one: float, speedup_k: float) -> float:
    """(cost(k) / cost(1)) / speedup(k): below 1.0 the extra workers pay for themselves."""
    return (cost_k / cost_one) / speedup_k


@dataclass(frozen=True)
class RankCpuUse:
    """What one rank measured of its machine between the common start and its end.

    ``host_busy_cpu_s``: CPU seconds the whole machine spent (every core, every process);
    ``own_cpu_s``: the rank's own; ``window_s``: the wall seconds between the two readings;
    ``cpu_count``: the machine's cores; ``threads``: the compute threads the rank was
    given (torch's intra-op threads).
    """

    node: str
    cpu_count: int
    threads: int
    window_s: float
    host_busy_cpu_s: float
    own_cpu_s: float


def contention_share(ranks: Sequence[RankCpuUse]) -> float | None:
    """The share of the cores the group was given that other processes took, on its most
    contended machine (0.25: a quarter of them); None when no rank measured it.

    Per machine: the group was given ``cores = min(cores of the machine, its ranks'
    threads)``. Others kept ``others = (machine's busy CPU seconds − the ranks' own) /
    wall seconds`` cores busy on average. What they took from the group is what did not
    fit on the machine's remaining cores: ``max(0, others − (cpu_count − cores)) / cores``.
    The ranks of one machine read the same counters over nearly the same window, so their
    readings of the machine are averaged and their own seconds added.
    """
    by_node: dict[str, list[RankCpuUse]] = defaultdict(list)
    for rank in ranks:
        if rank.window_s > 0 and rank.cpu_count > 0:
            by_node[rank.node].append(rank)
    shares = []
    for on_node in by_node.values():
        cpu_count = on_node[0].cpu_count
        cores = max(1, min(cpu_count, sum(max(1, r.threads) for r in on_node)))
        window_s = statistics.fmean(r.window_s for r in on_node)
        busy_s = statistics.fmean(r.host_busy_cpu_s for r in on_node)
        own_s = math.fsum(r.own_cpu_s for r in on_node)
        others = max(0.0, busy_s - own_s) / window_s
        shares.append(max(0.0, others - (cpu_count - cores)) / cores)
    return max(shares) if shares else None


CONTENDED_NOTE = "contended: other processes took a share of its cores while it ran"

# A speedup above the worker count (an efficiency above 1) is more likely a measurement
# problem than a real gain: a busy machine slowed the 1-worker runs, or the ranks together
# were given more threads than the 1-worker run had.
SUPERLINEAR_NOTE = "superlinear: check contention and threads"


@dataclass(frozen=True)
class ScalingRow:
    """Per worker count: time-to-accuracy (repeats by MLPerf's rule) and speedups."""

    world_size: int
    runs: int
    reached: int
    time_to_accuracy_s: float | None
    # how many repeats the time to accuracy and its spread rest on (0: it has none)
    kept: int
    time_to_accuracy_min_s: float | None
    time_to_accuracy_max_s: float | None
    time_to_accuracy_stdev_s: float | None
    time_to_accuracy_without_eval_s: float | None
    compute_s: float | None
    speedup: float | None
    compute_speedup: float | None
    efficiency: float | None
    communication_ratio: float | None
    contended: int = 0  # runs measured while other processes took their cores

    @property
    def superlinear(self) -> bool:
        """A speedup or compute speedup above the worker count (an efficiency above 1): to
        be checked before it is believed (:data:`SUPERLINEAR_NOTE`)."""
        k = self.world_size
        return any(s is not None and s > k for s in (self.speedup, self.compute_speedup))


def time_to_accuracy_text(row: ScalingRow, seconds: Any = lambda s: f"{s:.2f}") -> str:
    """A configuration's time to accuracy for a table: the mean with its spread and the
    number of repeats it rests on (``seconds`` formats a duration), or, when it has none,
    how many repeats reached the goal."""
    if row.time_to_accuracy_s is None:
        return f"{row.reached} of {row.runs} reached the goal" if row.runs else "—"
    value = seconds(row.time_to_accuracy_s)
    if row.kept == 1:
        return f"{value} (1 repeat)" if row.runs == 1 else f"{value} (middle of {row.runs})"
    spread = seconds(row.time_to_accuracy_stdev_s or 0.0)
    kept = f"{row.kept} of {row.runs}" if row.kept < row.runs else str(row.kept)
    return f"{value} ±{spread} ({kept} repeats)"


def scaling_rows(runs: Sequence[Any]) -> list[ScalingRow]:
    """Per worker count: TTA by MLPerf's rule (:func:`converged_mean`: a repeat that did not
    reach the goal counts as infinitely slow), speedups.

    ``runs`` are any objects with ``world_size``, ``goal_reached``,
    ``time_to_accuracy_s``, ``time_to_accuracy_without_eval_s``, ``compute_s``
    and ``communication_ratio`` (database rows or run summaries), and may have
    ``contended``. Speedups are against the 1-worker runs; None where there is
    nothing to compare.
    """
    by_size: dict[int, list] = defaultdict(list)
    for run in runs:
        by_size[run.world_size].append(run)

    def combined(group: list[Any], measure: str) -> Combined | None:
        return converged_mean(
            [
                getattr(r, measure) if r.goal_reached and r.time_to_accuracy_s is not None else None
                for r in group
                if getattr(r, "status", None) not in NOT_STARTED  # a run never made is no repeat
            ]
        )

    stats = {}
    for size, group in by_size.items():
        stats[size] = (
            combined(group, "time_to_accuracy_s"),
            combined(group, "time_to_accuracy_without_eval_s"),
            combined(group, "compute_s"),
        )
    base_tta, _, base_compute = stats.get(1, (None, None, None))
    rows = []
    for size in sorted(by_size):
        group = by_size[size]
        tta, without_eval, compute = stats[size]
        speed = speedup(base_tta.mean, tta.mean) if base_tta and tta else None
        compute_speed = (
            speedup(base_compute.mean, compute.mean)
            if base_compute and compute and compute.mean > 0
            else None
        )
        ratios = [r.communication_ratio for r in group if r.communication_ratio is not None]
        rows.append(
            ScalingRow(
                world_size=size,
                runs=len(group),
                reached=sum(bool(r.goal_reached) for r in group),
                time_to_accuracy_s=tta.mean if tta else None,
                kept=tta.kept if tta else 0,
                time_to_accuracy_min_s=tta.minimum if tta else None,
                time_to_accuracy_max_s=tta.maximum if tta else None,
                time_to_accuracy_stdev_s=tta.stdev if tta else None,
                time_to_accuracy_without_eval_s=without_eval.mean if without_eval else None,
                compute_s=compute.mean if compute else None,
                speedup=speed,
                compute_speedup=compute_speed,
                efficiency=scaling_efficiency(speed, size) if speed else None,
                communication_ratio=sum(ratios) / len(ratios) if ratios else None,
                contended=sum(bool(getattr(r, "contended", False)) for r in group),
            )
        )
    return rows
