"""API calls a Kubernetes group costs: per group, and per minute while it runs, in each mode.

What it measures: one 4-rank group through the launcher against the API server
emulator of the tests (``tests/kube_emulator.py``, real HTTP on 127.0.0.1), with
the blocking wait (``KubernetesGroup.wait`` through the provider's
KubernetesHook) and deferred (``GroupTrigger`` through AsyncKubernetesHook, then
what the resumed task does with its events: every ``--live-s`` seconds while the
group runs rank 0's new lines (and the live results, which cost no API call), at
the end the last lines, the log tail and the clean-up), in three cluster modes:

- ``plain``: no queue; the pods run ``--run-s`` seconds, then rank 1 fails, so
  the count includes the failed rank's log tail;
- ``kueue``: the Job is created suspended in a queue that admits it after
  ``--admit-s`` seconds; then as ``plain``;
- ``preempted``: rank 1's pod is evicted after ``--run-s`` seconds and the group
  is run again (one retry, the default), which then succeeds after ``--run-s``.

Every request the server received is counted by kind (the calls that start and
end each attempt, the looks while it runs).

    .venv/bin/python benchmarks/kubernetes_api_calls.py [--poll-s 1] [--run-s 12] [--admit-s 5]
        [--live-s 60]

With ``--poll-s`` below the default ``SCALEBENCH_K8S_POLL_S`` (5 s) it finishes
sooner; the per-minute figure at the default is the per-look count × 12.

``--smoke`` runs one group per mode (waits alternating, so both are used) with pods that run
1 s, a look every 0.2 s, Kueue admitting after 0.5 s and a deferred wait's ``running``
event every 0.4 s: the same counts in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from kube_emulator import EmulatedCluster, Stage, exited, running  # noqa: E402

from operators.kubernetes import KubernetesGroup, KubernetesSettings, group_names  # noqa: E402
from scalebench.network import HOST_PROFILE  # noqa: E402
from scalebench.request import SweepRequest  # noqa: E402
from scalebench.sweep import GroupPlan  # noqa: E402

CONN_ID = "emulated_k8s"
MODES = ("plain", "kueue", "preempted")
WAITS = ("blocking", "deferred")
# --smoke: one group per mode; the preempted one deferred, through this file's retry loop
SMOKE_GROUPS = (("plain", "blocking"), ("kueue", "deferred"), ("preempted", "deferred"))


def plan(results: Path) -> GroupPlan:
    request = SweepRequest(
        task="task1a-resnet20-cifar10",
        light=True,
        backend="nccl",
        compile="off",
        launcher="kubernetes",
        placement="pack",
        gpus_per_worker=1,  # what validate_request decides for a pod when not asked
        group_timeout_s=3600.0,
        data_dir=results,
    )
    (results / "s").mkdir(parents=True, exist_ok=True)
    (results / "s" / "verdicts.jsonl").touch()
    return GroupPlan(
        request=request,
        run_id="bench-w4-r1",
        world_size=4,
        repeat=0,
        network=HOST_PROFILE,
        sweep_dir=str(results / "s"),
    )


def kind(method: str, path: str) -> str:
    """A request as RBAC would name it: verb and resource."""
    parts = path.strip("/").split("/")
    resources = ("jobs", "pods", "services", "networkpolicies")
    resource = (
        "pods/log" if parts[-1] == "log" else next(p for p in reversed(parts) if p in resources)
    )
    return f"{method} {resource}"


def stages(mode: str, run_s: float) -> list[Stage]:
    if mode == "preempted":  # the eviction comes from outside; the retry succeeds
        return [Stage(0, running(), logs={0: "step\n" * 10}), Stage(run_s, exited(0))]
    return [
        Stage(0, running(), logs={0: "step\n" * 10}),
        Stage(run_s, exited(143), ranks={1: exited(1)}, logs={0: "step\n" * 10, 1: "boom\n" * 60}),
    ]


def follow_deferred(group: KubernetesGroup, live_s: float) -> str:
    """What the deferring task and the triggerer do, attempt after attempt, resuming on a
    ``running`` event every ``live_s`` seconds."""

    async def first_event(trigger: Any) -> dict:
        async for fired in trigger.run():
            return fired.payload
        raise RuntimeError("the trigger ended without an event")

    while True:
        event = asyncio.run(first_event(group.trigger(3600, live_ingest_s=live_s)))
        while event["status"] == "running":
            group.resumed(event["started_s"], event["attempt"])
            event = asyncio.run(first_event(group.carry_on(event, 3600, live_ingest_s=live_s)))
        result = group.resumed(event["started_s"], event["attempt"]).conclude(event)
        if not group.may_retry(result.status):
            return result.status
        group.next_attempt(result)


def one_group(
    mode: str, wait: str, poll_s: float, run_s: float, admit_s: float, live_s: float, work: Path
):
    """Run one group; the requests sent and the verdict (times in seconds)."""
    work = work / f"{mode}-{wait}"
    work.mkdir()
    with EmulatedCluster(stages(mode, run_s), admit_after_s=admit_s) as cluster:
        config = cluster.kube_config(work / "kube")
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = cluster.connection_uri(config)
        settings = KubernetesSettings(
            conn_id=CONN_ID,
            poll_interval_s=poll_s,
            queue_name="scalebench" if mode == "kueue" else "",
        )
        names = group_names("bench", f"run-{mode}-{wait}", 0, 1, 4)
        group = KubernetesGroup(
            plan(work),
            names=names,
            settings=settings,
            results_root=work,
            data_root=work,
            sink=lambda line: None,
        )
        group.start()
        if mode == "preempted":
            threading.Timer(run_s, cluster.evict, [f"{names.job}-1-x7k2p"]).start()
        status = group.wait(3600).status if wait == "blocking" else follow_deferred(group, live_s)
        return [(m, p) for m, p, _, _ in cluster.requests()], status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--poll-s", type=float, default=1.0, help="seconds between looks")
    parser.add_argument("--run-s", type=float, default=12.0, help="seconds the pods run")
    parser.add_argument("--admit-s", type=float, default=5.0, help="seconds Kueue waits")
    parser.add_argument(
        "--live-s",
        type=float,
        default=60.0,
        help="seconds between a deferred wait's running events (SCALEBENCH_LIVE_INGEST_S)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="one group per mode, pods running 1 s, a look every 0.2 s: seconds",
    )
    args = parser.parse_args()
    groups = [(mode, wait) for mode in MODES for wait in WAITS]
    if args.smoke:
        args.poll_s, args.run_s, args.admit_s, args.live_s = 0.2, 1.0, 0.5, 0.4
        groups = list(SMOKE_GROUPS)
    began = time.perf_counter()
    logging.disable(logging.INFO)  # the emulator's access log and the trigger's copy of rank 0
    print(
        f"one 4-rank group, a look every {args.poll_s:g} s, pods running {args.run_s:g} s, "
        f"deferred resuming every {args.live_s:g} s\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for mode, wait in groups:
            sent, status = one_group(
                mode, wait, args.poll_s, args.run_s, args.admit_s, args.live_s, Path(tmp)
            )
            counts = collections.Counter(kind(m, p) for m, p in sent)
            writes = {k: n for k, n in counts.items() if not k.startswith("GET")}
            reads = {k: n for k, n in counts.items() if k.startswith("GET")}
            print(f"{mode}, {wait}: {len(sent)} requests, verdict {status}")
            print(f"  create/patch/delete: {dict(sorted(writes.items()))}")
            print(f"  looks: {dict(sorted(reads.items()))}\n")
    if args.smoke:
        print(
            f"smoke run: {len(groups)} groups in {time.perf_counter() - began:.0f} s; "
            "the counts are of shortened groups, not the per-minute figures"
        )


if __name__ == "__main__":
    main()
