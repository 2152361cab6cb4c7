"""The arms of a duet meet before their timed runs begin, so that their steps overlap.

The arms of a duet round (:mod:`scalebench.pairing`) start together, but an interpreter
with other packages, or a slower import, starts its training later: a light run's timed
steps take a second or two, and two arms a second apart would not share the machine's
moments at all. So each arm's rank 0, its model and data ready, says so in a file of its
own run folder (``SCALEBENCH_DUET_READY``) and waits until every arm's file exists
(``SCALEBENCH_DUET_ARMS``, separated by ``os.pathsep``), then the arm's ranks meet in a
barrier; the timed run opens after that. An arm whose partner never comes (it failed to
start) waits :data:`MEET_TIMEOUT_S` seconds at most, then runs alone and says so. The files
live in the run folders, which a group run again sets aside first, so an earlier attempt's
file is never mistaken for a partner's.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch.distributed as dist

READY_VARIABLE = "SCALEBENCH_DUET_READY"
ARMS_VARIABLE = "SCALEBENCH_DUET_ARMS"
MEET_TIMEOUT_S = 120.0
_POLL_S = 0.002


def meet_the_other_arms(timeout_s: float = MEET_TIMEOUT_S) -> float | None:
    """Wait for the duet's other arms (rank 0 by their files, the arm's other ranks in a
    barrier behind it); the seconds rank 0 waited, ``None`` outside a duet."""
    own = os.environ.get(READY_VARIABLE)
    arms = [Path(p) for p in os.environ.get(ARMS_VARIABLE, "").split(os.pathsep) if p]
    if not own or not arms:
        return None
    grouped = dist.is_available() and dist.is_initialized()
    waited_s = 0.0
    if not grouped or dist.get_rank() == 0:
        Path(own).touch()
        began = time.monotonic()
        while not all(arm.exists() for arm in arms):
            if time.monotonic() - began > timeout_s:
                print(
                    f"workers.run: the duet's other arms were not ready after {timeout_s:g} s; "
                    "this arm runs alone",
                    file=sys.stderr,
                    flush=True,
                )
                break
            time.sleep(_POLL_S)
        waited_s = time.monotonic() - began
    if grouped and dist.get_world_size() > 1:
        dist.barrier()
    return waited_s
