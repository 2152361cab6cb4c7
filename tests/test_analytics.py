"""The definitions, on numbers worked out by hand."""

from __future__ import annotations

import pytest

from results_db import analytics
from scalebench.config_hash import configuration_hash


def test_busbw_is_algbw_times_2_n_minus_1_over_n() -> None:
    # 100 MB in 0.1 s = 1 GB/s algbw; 4 ranks: × 2·3/4 = 1.5 GB/s
    assert analytics.algbw(100_000_000, 0.1) == pytest.approx(1e9)
    assert analytics.busbw(100_000_000, 0.1, 4) == pytest.approx(1.5e9)
    assert analytics.busbw(100_000_000, 0.1, 2) == pytest.approx(1e9)
    assert analytics.busbw(100_000_000, 0.1, 1) == 0.0


def test_mlperf_mean_drops_fastest_and_slowest_from_three_up() -> None:
    combined = analytics.converged_mean([10.0, 30.0, 12.0, 14.0, 100.0])
    assert combined is not None and combined.mean == pytest.approx(56 / 3)  # 12, 14, 30
    assert (combined.minimum, combined.maximum, combined.kept, combined.total) == (12, 30, 3, 5)
    two = analytics.converged_mean([10.0, 20.0])
    assert two is not None and two.mean == 15.0 and two.kept == 2
    one = analytics.converged_mean([7.0])
    assert one is not None and one.stdev == 0.0


def test_a_repeat_that_never_converged_counts_as_infinitely_slow() -> None:
    # three repeats, one never reached the goal: it is the slowest, dropped
    combined = analytics.converged_mean([100.0, None, 110.0])
    assert combined is not None and combined.mean == 110.0 and combined.kept == 1
    # two of three never reached it: one of them is kept, so there is no time
    assert analytics.converged_mean([100.0, None, None]) is None
    # with fewer than three repeats every one must have converged
    assert analytics.converged_mean([100.0, None]) is None
    assert analytics.converged_mean([]) is None
    assert analytics.converged_mean([100.0, 120.0]).mean == 110.0


class _Run:
    def __init__(self, size: int, tta: float | None) -> None:
        self.world_size = size
        self.goal_reached = tta is not None
        self.time_to_accuracy_s = tta
        self.time_to_accuracy_without_eval_s = None if tta is None else tta * 0.9
        self.compute_s = None if tta is None else tta * 0.5
        self.communication_ratio = 0.1


def test_a_configuration_without_enough_converged_repeats_has_no_time_and_says_so() -> None:
    rows = analytics.scaling_rows(
        [
            _Run(1, 100.0),
            _Run(1, 104.0),
            _Run(1, 96.0),
            _Run(2, 60.0),
            _Run(2, None),
            _Run(2, None),
            _Run(4, 30.0),
        ]
    )
    one, two, four = rows
    assert one.time_to_accuracy_s == 100.0 and one.kept == 1
    assert analytics.time_to_accuracy_text(one) == "100.00 (middle of 3)"
    # before: the mean of the one repeat that converged, 60 s, and a speedup of 1.67
    assert two.time_to_accuracy_s is None and two.speedup is None and two.kept == 0
    assert analytics.time_to_accuracy_text(two) == "1 of 3 reached the goal"
    assert four.kept == 1 and four.speedup == pytest.approx(100.0 / 30.0)
    assert analytics.time_to_accuracy_text(four) == "30.00 (1 repeat)"
    five = analytics.scaling_rows([_Run(1, 100.0), _Run(1, 110.0)])[0]
    assert analytics.time_to_accuracy_text(five) == "105.00 ±7.07 (2 repeats)"


def test_speedup_and_efficiency() -> None:
    assert analytics.speedup(407.0, 101.75) == pytest.approx(4.0)
    assert analytics.scaling_efficiency(4.0, 8) == 0.5


def test_communication_ratio_is_averaged_over_ranks() -> None:
    # rank 0: 1 s of 4 s; rank 1: 3 s of 4 s → (0.25 + 0.75) / 2
    assert analytics.communication_ratio([(1.0, 4.0), (3.0, 4.0)]) == pytest.approx(0.5)


def test_percentiles_interpolate() -> None:
    values = [float(v) for v in range(1, 101)]
    assert analytics.percentile(values, 50) == pytest.approx(50.5)
    assert analytics.percentile(values, 95) == pytest.approx(95.05)
    assert analytics.percentile([3.0], 95) == 3.0


def test_allreduce_summary_takes_the_slowest_rank_per_repetition() -> None:
    rank0 = [0.001, 0.004, 0.002]
    rank1 = [0.003, 0.001, 0.002]
    summary = analytics.summarise_allreduce([rank0, rank1], nbytes=4_000, world_size=2)
    # per repetition: 0.003, 0.004, 0.002
    assert summary.p50 == pytest.approx(0.003)
    assert summary.mean == pytest.approx(0.003)
    assert summary.algbw == pytest.approx(4_000 / 0.003)
    assert summary.busbw == pytest.approx(4_000 / 0.003)
    assert summary.samples == 3
    with pytest.raises(ValueError, match="different numbers"):
        analytics.summarise_allreduce([[0.1], [0.1, 0.2]], 4, 2)


def test_cost_is_workers_times_hourly_prices_times_hours() -> None:
    # 4 workers × ($0.2092 + $0.35)/h × 30 min
    assert analytics.cost(4, 0.2092, 0.35, 1800.0) == pytest.approx(4 * 0.5592 * 0.5)


def test_price_index_of_the_published_example() -> None:
    # 1 worker costs $10; 4 workers cost $18 and are 2.56× faster → 0.70
    assert analytics.price_index(18.0, 10.0, 2.56) == pytest.approx(0.703, abs=1e-3)


def test_configuration_hash_ignores_what_does_not_change_the_measurement() -> None:
    base = {"task": "t", "light": True, "backend": "gloo", "variant": "sync"}
    same = configuration_hash({**base, "world_sizes": [1, 2], "seed": 9})
    assert configuration_hash(base) == same
    assert configuration_hash({**base, "backend": "nccl"}) != same
    assert configuration_hash({**base, "precision": "fp32"}) == same
    # Compiled runs measure something else; eager ones keep the identity they had before.
    assert configuration_hash({**base, "compile": "off"}) == same
    assert configuration_hash({**base, "compile": "auto"}) != same
    assert configuration_hash({**base, "compile": "on"}) != configuration_hash(
        {**base, "compile": "auto"}
    )


def test_communication_to_computation_divides_by_the_compute_phases_only() -> None:
    # 1 s communicating against 2 s of forward, loss, backward and optimizer; data time ignored
    assert analytics.communication_to_computation(1.0, 0.5, 0.25, 1.0, 0.25) == pytest.approx(0.5)
    assert analytics.communication_to_computation(1.0, 0.0, 0.0, 0.0, 0.0) is None


def test_a_speedup_above_the_worker_count_is_flagged_where_it_is_shown() -> None:
    """The loaded-machine case: 1 worker at 437 s, 2 at 82 s is a speedup of 5.3 on 2
    workers. The table, the Scaling page's table and its speedup figure all flag it."""
    from dash_app.pages.scaling import figures
    from results_db.report import training_table

    rows = analytics.scaling_rows([_Run(1, 437.0), _Run(2, 82.0), _Run(4, 120.0)])
    one, two, four = rows
    assert two.superlinear and not one.superlinear and not four.superlinear
    linear = analytics.scaling_rows([_Run(1, 100.0), _Run(2, 50.0)])[1]
    assert linear.speedup == 2.0 and not linear.superlinear
    assert analytics.scaling_rows([_Run(1, 100.0), _Run(2, 49.0)])[1].superlinear
    table = training_table(rows, [], {}, "top1_accuracy")
    assert f"! {analytics.SUPERLINEAR_NOTE} (at 2 worker(s))" in table
    assert "5.33 !" in table and "3.64 !" not in table
    shown = figures.scaling_rows_table(rows)
    assert analytics.SUPERLINEAR_NOTE in shown[1]["speedup"]
    assert analytics.SUPERLINEAR_NOTE not in shown[2]["speedup"]
    flagged = [t for t in figures.speedup_figure(rows).data if t.name == analytics.SUPERLINEAR_NOTE]
    assert len(flagged) == 1 and list(flagged[0].x) == [2]
