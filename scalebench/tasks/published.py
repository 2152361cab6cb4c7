"""Results the benchmark text publishes, as points a figure can draw beside a sweep's.

Only figures the text states in words are here (its plots are pictures), each
with the hardware it was measured on. Costs the text does not state are
derived from a stated time and the stated prices, and say so. Every published
run used the full task, so these compare with full sweeps only.

Source: the MLBench benchmark-task results (PyTorch 1.5, Google Kubernetes
Engine, one n1-standard-4 machine per worker with 3 vCPUs for the pod, an
NVIDIA T4 per machine on GPU runs; prices per hour: n1-standard-4 $0.2092
regular / $0.0440 preemptible, T4 $0.35 / $0.11).
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "MLBench published results, PyTorch 1.5 on GKE"
N1_STANDARD_4_PREEMPTIBLE_PER_H = 0.0440  # US$ per hour
T4_PREEMPTIBLE_PER_H = 0.11  # US$ per hour


@dataclass(frozen=True)
class PublishedPoint:
    """One published result at ``world_size`` workers on ``hardware``.

    ``time_to_accuracy_s`` in seconds, ``speedup`` against one worker of the
    same hardware, ``cost_usd`` in US dollars for the whole run; ``None``
    where the text gives nothing. ``note`` says how a number was obtained
    when the text does not state it as is (approximate, derived).
    """

    task: str
    world_size: int
    hardware: str
    time_to_accuracy_s: float | None = None
    speedup: float | None = None
    cost_usd: float | None = None
    note: str = ""

    @property
    def label(self) -> str:
        """The legend entry: whose result, on what."""
        return f"published: {self.hardware}"


def _preemptible_cost(seconds: float, gpu: bool) -> float:
    per_hour = N1_STANDARD_4_PREEMPTIBLE_PER_H + (T4_PREEMPTIBLE_PER_H if gpu else 0.0)
    return seconds / 3600.0 * per_hour


T4 = "1 T4 per n1-standard-4"
CPU = "3 vCPUs of an n1-standard-4"
PUBLISHED: tuple[PublishedPoint, ...] = (
    # Task 1a: "the baseline time for 1 worker ... PyTorch CPU 5895 s, PyTorch GPU 407 s"
    # to 80 % validation accuracy; "all costs shown are for preemptible instances".
    PublishedPoint(
        "task1a-resnet20-cifar10",
        1,
        T4,
        time_to_accuracy_s=407.0,
        cost_usd=_preemptible_cost(407.0, gpu=True),
        note="cost: 407 s at the published preemptible prices",
    ),
    PublishedPoint(
        "task1a-resnet20-cifar10",
        1,
        CPU,
        time_to_accuracy_s=5895.0,
        cost_usd=_preemptible_cost(5895.0, gpu=False),
        note="cost: 5895 s at the published preemptible price",
    ),
    # Task 4a: "training on 1 node ~10$"; "training on 4 workers costs ~18$, but is
    # 2.56 times faster" (NCCL).
    PublishedPoint(
        "task4a-gnmt-wmt16",
        1,
        T4,
        speedup=1.0,
        cost_usd=10.0,
        note="cost approximate (~$10); price kind not stated",
    ),
    PublishedPoint(
        "task4a-gnmt-wmt16",
        4,
        T4,
        speedup=2.56,
        cost_usd=18.0,
        note="cost approximate (~$18); price kind not stated",
    ),
    # Task 4b: "training on 1 node ~5.5$".
    PublishedPoint(
        "task4b-transformer-wmt17",
        1,
        T4,
        cost_usd=5.5,
        note="cost approximate (~$5.5); price kind not stated",
    ),
)


def published_points(task: str) -> tuple[PublishedPoint, ...]:
    """The published results of ``task`` (empty for a task the text gives no figure for)."""
    return tuple(point for point in PUBLISHED if point.task == task)
