"""A rank records how it ended even when a SIGTERM comes while it does so.

A rank whose launcher is killed gets SIGTERM from its own watchdog. When the rank is
blocked in a collective, Python handles that signal only once the collective returns,
and the collective returns with an error because the peer left first. So the signal is
handled while the rank is already recording that error: it must not cut the record short.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from scalebench.rank import EXIT_FAILED
from workers.records import read_rank_file


def test_a_sigterm_while_the_end_is_recorded_leaves_the_record_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers import adapter, engine, run
    from workers.tracker import Tracker

    def peer_left(task: Any, tracker: Tracker) -> str:
        raise RuntimeError("Connection closed by peer")

    record_failure = Tracker.fail

    def fail_under_sigterm(tracker: Tracker, event: str, reason: str) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # handled here, at once, by the rank's handler
        record_failure(tracker, event, reason)

    monkeypatch.setattr(run, "_configure_logging", lambda rank: None)  # pytest's logging stays
    monkeypatch.setattr(adapter, "adapter_for", lambda spec, options, device: None)
    monkeypatch.setattr(engine, "train", peer_left)
    monkeypatch.setattr(Tracker, "fail", fail_under_sigterm)
    monkeypatch.setattr(run, "_recording_end", False)
    handler = signal.getsignal(signal.SIGTERM)
    results = tmp_path / "run"
    try:
        status = run.main(["--task", "task2a-logreg-epsilon", "--light", "--results", str(results)])
    finally:
        signal.signal(signal.SIGTERM, handler)
        if dist.is_initialized():
            dist.destroy_process_group()
    assert status == EXIT_FAILED
    ending = read_rank_file(results / "rank-0.jsonl").of_kind("event")[-1]
    assert ending["event"] == "failed"
    assert ending["reason"] == "RuntimeError: Connection closed by peer"
