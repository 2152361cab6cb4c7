"""Every task's light variant reproduces its recorded fixed-seed loss curve exactly.

The curves were recorded from the trainers before they became adapters of one
training engine (``tests/loss_curves.py``), and the engine reproduced them
exactly. Task 1a's were recorded again when its light variant moved to the
digits at 32×32 and the model to channels-last layout. Any change of the
training math shows up here as a different loss or learning rate at some step.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from loss_curves import CASES, expected_curve, record_curve


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_light_run_repeats_its_recorded_loss_curve(case: str, tmp_path: Path) -> None:
    task_id, extra_args = CASES[case]
    curve = record_curve(task_id, tmp_path / "run", extra_args)
    expected = expected_curve(case)
    assert len(curve["steps"]) == len(expected["steps"])
    for got, want in zip(curve["steps"], expected["steps"], strict=True):
        assert got == want, f"step {want[:2]}: loss/lr {got[2:]} != recorded {want[2:]}"
    assert curve["evals"] == expected["evals"]
