"""API calls a Kubernetes group costs: per group, and per minute while it runs, in each mode.

What it measures: one 4-rank group through the launcher against the API server
emulator of the tests (``tests/kube_emulator.py``, real HTTP on 127.0.0.1), once
with the blocking wait (``KubernetesGroup.wait`` through the provider's
KubernetesHook) and once deferred (``GroupTrigger`` through AsyncKubernetesHook,
then the resumed task's clean-up). The emulated pods run for ``--run-s``
seconds and then rank 1 fails, so the count includes the failed rank's log
tail. Every request the server received is counted by kind: the calls to start
the group, the looks while it runs (per minute, at the poll interval given),
and the calls that end it.

    .venv/bin/python benchmarks/kubernetes_api_calls.py [--poll-s 1] [--run-s 12]

With ``--poll-s`` below the default ``SCALEBENCH_K8S_POLL_S`` (5 s) it finishes
sooner; the per-minute figure at the default is the per-look count × 12.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from kube_emulator import EmulatedCluster, Stage, exited, running  # noqa: E402

from operators.kubernetes import KubernetesGroup, KubernetesSettings, group_names  # noqa: E402
from scalebench.network import HOST_PROFILE  # noqa: E402
from scalebench.request import SweepRequest  # noqa: E402
from scalebench.sweep import GroupPlan  # noqa: E402

CONN_ID = "emulated_k8s"


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
    resource = (
        "pods/log"
        if parts[-1] == "log"
        else next(p for p in reversed(parts) if p in ("jobs", "pods", "services"))
    )
    return f"{method} {resource}"


def one_group(mode: str, poll_s: float, run_s: float, work: Path) -> tuple[list, float]:
    """Run one group in ``mode``; the requests sent and how long it ran (s)."""
    import os

    stages = [
        Stage(0, running(), logs={0: "step\n" * 10}),
        Stage(run_s, exited(143), ranks={1: exited(1)}, logs={0: "step\n" * 10, 1: "boom\n" * 60}),
    ]
    with EmulatedCluster(stages) as cluster:
        config = cluster.kube_config(work / f"kube-{mode}")
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = cluster.connection_uri(config)
        settings = KubernetesSettings(conn_id=CONN_ID, poll_interval_s=poll_s)
        names = group_names("bench", f"run-{mode}", 0, 1, 4)
        group = KubernetesGroup(
            plan(work),
            names=names,
            settings=settings,
            results_root=work,
            data_root=work,
            sink=lambda line: None,
        )
        group.start()
        if mode == "blocking":
            result = group.wait(3600)
            seconds = result.seconds
        else:
            trigger = group.trigger(3600)

            async def first_event() -> dict:
                async for fired in trigger.run():
                    return fired.payload
                raise RuntimeError("the trigger ended without an event")

            event = asyncio.run(first_event())
            seconds = event["seconds"]
            KubernetesGroup(
                plan(work), names=names, settings=settings, results_root=work, data_root=work
            ).resumed(event["started_s"]).stop()
        return [(m, p) for m, p, _, _ in cluster.requests()], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--poll-s", type=float, default=1.0, help="seconds between looks")
    parser.add_argument("--run-s", type=float, default=12.0, help="seconds the pods run")
    args = parser.parse_args()
    print(
        f"one 4-rank group, pods running {args.run_s:g} s, a look every {args.poll_s:g} s, "
        "then rank 1 fails\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("blocking", "deferred"):
            sent, seconds = one_group(mode, args.poll_s, args.run_s, Path(tmp))
            start, end = sent[:3], sent[-2:]
            looks = sent[3:-2]
            reads = collections.Counter(kind(m, p) for m, p in looks)
            polls = reads["GET jobs"]
            steady = (len(looks) - 1) / polls  # less the failed rank's log tail, read once
            print(f"{mode}: {len(sent)} requests in {seconds:.1f} s")
            print(f"  start: {', '.join(kind(m, p) for m, p in start)}")
            print(f"  while it runs: {polls} looks, {dict(reads)}")
            print(f"    {steady:.2f} requests per look, and the failed rank's log tail once")
            print(
                f"    {len(looks) / seconds * 60:.0f} requests per minute at a look every "
                f"{args.poll_s:g} s; {steady * 60 / 5:.0f} per minute at the default 5 s"
            )
            print(f"  end: {', '.join(kind(m, p) for m, p in end)}\n")


if __name__ == "__main__":
    main()
