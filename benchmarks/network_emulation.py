"""Emulated networks against their configured rate: all-reduce bus bandwidth on each profile.

What it measures: for each link profile (default ``100mbit``, ``1gbit``, ``10gbit``)
and group size (2 and 4 ranks), a gloo group of real processes on the local
launcher's emulated network (``operators/shaped_network.py``: a network
namespace per rank, veth pairs on a bridge, ``tbf`` on both ends) all-reduces
float32 messages of 1, 4, 16 and 64 MB the way Task 0 times them
(``workers.allreduce.time_allreduce``: warm-up, a barrier before each timed
repetition, the slowest rank's time). Bus bandwidth = bytes / seconds ×
2(n−1)/n (the nccl-tests convention), medians over repetitions.

The same sizes on ``host`` (no shaping, ranks on loopback) show what this
machine reaches at all, and on ``bridge`` (the emulated path: namespaces,
veth pairs and the bridge, with a token bucket too wide to limit anything)
what it reaches through the emulation's own plumbing, which costs more
processor time per byte than loopback. Printed per profile, size and group:
measured bus bandwidth in MB/s, measured / configured, and the verdict
against the goal (0.8–1.05) where the configured rate is below what both
``host`` and ``bridge`` reach at that size; elsewhere the machine, not the
emulation, is the limit, and it says which.

Needs root (network namespaces and ``tc``).

    .venv/bin/python benchmarks/network_emulation.py [--profiles 100mbit,1gbit,10gbit]
        [--ranks 2,4] [--sizes-mb 1,4,16,64] [--repetitions 3]

``--smoke`` measures ``100mbit`` (and ``host`` and ``bridge``) at 2 ranks, 1 MB, one
repetition: the same groups, namespaces and table in seconds, no goal judged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.shaped_network import ShapedNetwork  # noqa: E402
from scalebench.host import shaping_problems  # noqa: E402
from scalebench.network import NetworkProfile, parse_profile  # noqa: E402

SIZES_MB = (1, 4, 16, 64)  # message sizes, MB (10**6 bytes)
GOAL_LOW, GOAL_HIGH = 0.8, 1.05
MACHINE_LIMIT = 0.8  # a rate above this share of what host reaches is not the emulation's
# The emulated path without a limit: a token bucket of 100 Gbit/s never holds a packet back.
REFERENCES = {"host": NetworkProfile(), "bridge": NetworkProfile(rate_bit_per_s=100 * 10**9)}


def rank_main(repetitions: int, warmup: int, sizes_bytes: list[int]) -> None:
    """One rank: every size (bytes), Task 0's timing; rank 0 prints one JSON line per size."""
    import torch
    import torch.distributed as dist

    from workers.allreduce import time_allreduce

    dist.init_process_group("gloo")
    world_size = dist.get_world_size()
    for nbytes in sizes_bytes:
        tensor = torch.ones(nbytes // 4, dtype=torch.float32)
        seconds = torch.tensor(time_allreduce(tensor, repetitions, warmup, None))
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # a repetition takes its slowest rank
        median = statistics.median(seconds.tolist())
        if dist.get_rank() == 0:
            busbw = nbytes / median * 2 * (world_size - 1) / world_size
            print(json.dumps({"bytes": nbytes, "seconds": median, "busbw": busbw}), flush=True)
    dist.destroy_process_group()


def measure(
    profile: str, world_size: int, repetitions: int, warmup: int, sizes_bytes: list[int]
) -> dict[int, float]:
    """Bus bandwidth (bytes/s) per size (bytes) of a ``world_size`` group on ``profile``."""
    network = None
    master_addr, env = "127.0.0.1", dict(os.environ)
    link = REFERENCES.get(profile) or parse_profile(profile)
    if link.shaped:
        network = ShapedNetwork(world_size, link).create()  # a node per rank
        master_addr = network.master_addr
    sizes = ",".join(str(n) for n in sizes_bytes)
    argv = [sys.executable, __file__, "--rank", str(repetitions), str(warmup), sizes]
    env.update(
        MASTER_ADDR=master_addr,
        MASTER_PORT="29517",
        WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(ROOT),
    )
    procs = []
    try:
        for rank in range(world_size):
            command = argv if network is None else network.command(rank, argv)
            link_env = {} if network is None else network.environment(rank)
            procs.append(
                subprocess.Popen(
                    command,
                    env={**env, **link_env, "RANK": str(rank)},
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        out, _ = procs[0].communicate(timeout=1800)
        for proc in procs[1:]:
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        if network is not None:
            network.remove()
    if any(proc.returncode for proc in procs):
        raise SystemExit(f"{profile} at {world_size} ranks: a rank failed")
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {line["bytes"]: line["busbw"] for line in lines}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default="100mbit,1gbit,10gbit")
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument(
        "--sizes-mb", default=",".join(map(str, SIZES_MB)), help="message sizes, MB (10**6 B)"
    )
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="100mbit at 2 ranks, 1 MB, one repetition: seconds, no goal judged",
    )
    args = parser.parse_args()
    if args.smoke:
        args.profiles, args.ranks, args.sizes_mb, args.repetitions = "100mbit", "2", "1", 1
    sizes_bytes = [round(float(mb) * 1e6) for mb in args.sizes_mb.split(",")]
    profiles = [parse_profile(p) for p in args.profiles.split(",")]
    problems = shaping_problems(profiles)
    if problems:
        raise SystemExit("cannot emulate networks here: " + "; ".join(problems))
    sizes = [int(k) for k in args.ranks.split(",")]
    plan = [(p, k) for k in sizes for p in [*REFERENCES, *(p.name for p in profiles)]]
    rows = []
    reached: dict[tuple[str, int], dict[int, float]] = {}  # (reference, ranks) -> size -> busbw
    started = time.perf_counter()
    for done, (profile, world_size) in enumerate(plan):
        print(
            f"[{done + 1}/{len(plan)}] {profile} at {world_size} ranks "
            f"({time.perf_counter() - started:.0f} s so far) ...",
            flush=True,
        )
        measured = measure(profile, world_size, args.repetitions, args.warmup, sizes_bytes)
        if profile in REFERENCES:
            reached[profile, world_size] = measured
            continue
        rate = parse_profile(profile).rate_bytes_per_s or 0.0
        for nbytes, busbw in sorted(measured.items()):
            ratio = busbw / rate
            limit, ceiling = min(
                ((name, reached[name, world_size][nbytes]) for name in REFERENCES),
                key=lambda item: item[1],
            )
            if rate > MACHINE_LIMIT * ceiling:
                verdict = f"machine-bound ({limit} reaches {ceiling / 1e6:.0f} MB/s)"
            elif args.smoke:
                verdict = "not judged (smoke)"
            else:
                verdict = "PASS" if GOAL_LOW <= ratio <= GOAL_HIGH else "MISS"
            rows.append(
                [
                    profile,
                    world_size,
                    f"{nbytes / 1e6:g}",
                    f"{rate / 1e6:g}",
                    f"{busbw / 1e6:.1f}",
                    f"{ratio:.2f}",
                    verdict,
                ]
            )
    from tabulate import tabulate

    print()
    print(
        tabulate(
            rows,
            headers=[
                "profile",
                "ranks",
                "MB",
                "configured MB/s",
                "busbw MB/s",
                "measured / configured",
                "verdict",
            ],
        )
    )
    if args.smoke:
        print(
            f"\nsmoke run: {len(plan)} groups, no goal judged; "
            f"{time.perf_counter() - started:.0f} s"
        )
        return
    judged = [r for r in rows if r[-1] in ("PASS", "MISS")]
    passed = sum(r[-1] == "PASS" for r in judged)
    print(
        f"\n{passed} of {len(judged)} judged points within {GOAL_LOW}–{GOAL_HIGH} of the "
        f"configured rate; {len(rows) - len(judged)} where this machine is the limit; "
        f"{time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), int(sys.argv[3]), [int(n) for n in sys.argv[4].split(",")])
    else:
        main()
