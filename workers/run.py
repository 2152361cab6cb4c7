"""What one rank runs: ``python -m workers.run --task <id> --results <run dir> [...]``.

The rank, world size and rendezvous address come from the environment (see
:mod:`workers.distributed`). The rank appends its records to
``<run dir>/rank-<r>.jsonl``; rank 0 also writes MLPerf lines to
``<run dir>/mllog-rank-0.log`` (a training task's submission lines from the
``SCALEBENCH_MLPERF_*`` settings of :mod:`scalebench.config`; a bad one is refused).

Exit status (defined with the request in :mod:`scalebench.rank`): 0 finished
(goal reached, epoch limit, or measurements done), 1 failed (a peer died, a
timeout, an error), 2 refused input (nothing started), 3 diverged, 143
terminated by SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from scalebench.config import BadSetting, check_mlperf_settings
from scalebench.datasets import DataSetMissing, check_available
from scalebench.diskspace import no_space, no_space_reason
from scalebench.network import BadProfile, parse_profile
from scalebench.rank import (
    EXIT_DIVERGED,
    EXIT_FAILED,
    EXIT_NO_SPACE,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_TERMINATED,
    LAUNCHER_PID_VARIABLE,
    MAX_SEED,
)
from scalebench.rank_options import add_rank_options
from scalebench.tasks import AllReduceSpec, TaskSpec, get_task
from workers.distributed import GroupConfigError, GroupEnv, group_env_from

if TYPE_CHECKING:
    import torch

    from workers.tracker import Tracker

log = logging.getLogger("scalebench.worker")


class Terminated(BaseException):
    """SIGTERM arrived (the launcher's timeout, a cancelled sweep, a deleted pod)."""


LAUNCHER_VANISHED = "the launcher vanished (its process ended), so this rank stopped"
_launcher_gone = threading.Event()
# Set once the rank has begun recording how it ended. A SIGTERM that comes then (the
# watchdog's, sent while a collective blocked and handled only when the collective failed
# because its peer left) must not cut that last record short: the rank is leaving anyway.
_recording_end = False


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if not _recording_end:
        raise Terminated()


def watch_launcher(launcher_pid: int, poll_s: float = 0.5, grace_s: float = 10.0) -> None:
    """Stop this rank once its launcher (the parent process ``launcher_pid``) is gone.

    A launcher killed outright (``kill -9``, an out-of-memory kill of an Airflow
    worker) cannot stop its ranks; they would train on, orphaned, for hours. So a
    thread checks the parent every ``poll_s`` seconds; when it has changed, the rank
    gets SIGTERM (it records why and exits), and if it is stuck in a collective it
    leaves anyway ``grace_s`` seconds later.
    """

    def watch() -> None:
        while os.getppid() == launcher_pid:
            time.sleep(poll_s)
        _launcher_gone.set()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(EXIT_TERMINATED)

    threading.Thread(target=watch, name="launcher-watchdog", daemon=True).start()


def _network_profile(text: str) -> str:
    try:
        return parse_profile(text).name
    except BadProfile as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The rank's arguments: where it runs and its group's seed and link, then the request
    fields given to every rank (light, backend, device, collective timeout, threads,
    variant, precision, compile), read and checked by their declarations
    (:func:`scalebench.rank_options.add_rank_options`)."""
    parser = argparse.ArgumentParser(prog="python -m workers.run", description=__doc__)
    parser.add_argument("--task", required=True, help="task id, e.g. task1a-resnet20-cifar10")
    parser.add_argument("--results", required=True, type=Path, help="this run's directory")
    parser.add_argument("--run-id", help="defaults to the results directory's name")
    parser.add_argument(
        "--network",
        default="host",
        type=_network_profile,
        help="the link profile the launcher runs this group on (recorded, not applied: the "
        "launcher shapes the network), e.g. host or 100mbit",
    )
    parser.add_argument("--seed", type=int, default=0, help="this group's seed")
    parser.add_argument("--data-dir", type=Path, default=None)
    add_rank_options(parser)
    return parser.parse_args(argv)


# The variables each native thread pool of a rank reads when its library loads: OpenMP's
# (torch's intra-op threads, and MKL's under it), OpenBLAS's (numpy's) and MKL's own.
THREAD_POOL_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def size_native_thread_pools(threads: int) -> None:
    """Give every native thread pool ``threads`` threads, before torch or numpy loads.

    ``torch.set_num_threads`` sizes torch's pool only, after the libraries have read their
    variables. numpy's OpenBLAS makes its pool when numpy is imported, from
    ``OPENBLAS_NUM_THREADS`` or else ``OMP_NUM_THREADS``, which the node starter sets to the
    rank's cores: a rank asked for one thread on two cores kept an OpenBLAS thread that
    spins after each of numpy's products. The rank's own request wins over what its
    environment says (measured in docs/benchmarks.md, "Sizing a rank's thread pools").
    """
    for name in THREAD_POOL_VARIABLES:
        os.environ[name] = str(threads)


def _configure_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO if rank == 0 else logging.WARNING,
        format="%(asctime)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stdout,
        force=True,
    )


def check_request(args: argparse.Namespace) -> tuple[TaskSpec, GroupEnv]:
    """The task and this rank's place in its group, once every check that needs no torch has
    passed: the seed in range, a training task's MLPerf settings and data set
    (``--data-dir`` filled in), and a writable ``--results``. Raises what :func:`main` reports
    as refused: ``KeyError`` (no such task), :class:`GroupConfigError`,
    :class:`DataSetMissing`, :class:`BadSetting` or ``OSError``."""
    spec = get_task(args.task)
    group = group_env_from(os.environ)
    if not 0 <= args.seed <= MAX_SEED:
        raise GroupConfigError(f"--seed must be between 0 and {MAX_SEED}, got {args.seed}")
    if not isinstance(spec, AllReduceSpec):
        check_mlperf_settings()  # what rank 0's MLPerf log will say (SCALEBENCH_MLPERF_*)
    if not args.light and not isinstance(spec, AllReduceSpec):
        from scalebench.config import data_dir

        args.data_dir = args.data_dir or data_dir()
        check_available(spec.data.name, args.data_dir)
    args.results.mkdir(parents=True, exist_ok=True)
    if not os.access(args.results, os.W_OK):
        raise PermissionError(13, "Permission denied", str(args.results))
    return spec, group


def rank_device(asked: str, local_rank: int) -> torch.device:
    """The rank's device: ``cuda:<local rank modulo the GPUs here>`` when ``asked`` is
    ``cuda``, or ``auto`` and a GPU is visible; else the CPU."""
    import torch

    use_cuda = torch.cuda.is_available() if asked == "auto" else asked == "cuda"
    return (
        torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
        if use_cuda
        else torch.device("cpu")
    )


def open_tracker(
    args: argparse.Namespace, spec: TaskSpec, group: GroupEnv, device: torch.device
) -> Tracker:
    """The rank's tracker: its records in ``<results>/rank-<r>.jsonl``, rank 0's MLPerf log,
    the task's goal and epoch limit (none for Task 0), and the link it runs on."""
    from workers.records import RecordWriter
    from workers.tracker import MLPerfLog, Tracker

    run_dir: Path = args.results
    writer = RecordWriter(run_dir, args.run_id or run_dir.name, group.rank, group.world_size)
    mlperf = MLPerfLog(run_dir / "mllog-rank-0.log" if group.rank == 0 else None)
    goal = None if isinstance(spec, AllReduceSpec) else spec.goal
    max_epochs = (
        0 if isinstance(spec, AllReduceSpec) else (args.max_epochs or spec.epochs(args.light))
    )
    return Tracker(
        writer,
        device,
        goal=goal,
        light=args.light,
        max_epochs=max_epochs,
        mlperf_log=mlperf,
        network=args.network,
    )


def failure_status(exc: BaseException, tracker: Tracker, rank: int, run_dir: Path) -> int:
    """Record why the run ended before its end (a last record, ``failed`` or ``diverged``) and
    return the rank's exit status: refused (``--compile on`` that cannot compile), diverged,
    terminated (SIGTERM, the launcher gone, SIGINT), no space left, or failed."""
    from workers.compile import CompileRefused
    from workers.engine import Diverged

    if isinstance(exc, CompileRefused):
        tracker.fail("failed", str(exc))
        print(f"workers.run: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if isinstance(exc, Diverged):
        tracker.fail("diverged", str(exc))
        log.error("diverged: %s", exc)
        return EXIT_DIVERGED
    if isinstance(exc, Terminated):
        reason = (
            LAUNCHER_VANISHED
            if _launcher_gone.is_set()
            else "terminated by SIGTERM (timeout or cancellation)"
        )
        tracker.fail("failed", reason)
        return EXIT_TERMINATED
    if isinstance(exc, KeyboardInterrupt):
        tracker.fail("failed", "interrupted (SIGINT)")
        return EXIT_TERMINATED
    if not no_space(exc):
        tracker.fail("failed", f"{type(exc).__name__}: {exc}")
        log.exception("rank %d failed", rank)
        return EXIT_FAILED
    # One line, no traceback; the launcher records the group failed for it.
    reason = no_space_reason(run_dir)
    with contextlib.suppress(OSError):  # the last record may still fit
        tracker.fail("failed", reason)
    print(f"workers.run: rank {rank}: {reason}", file=sys.stderr, flush=True)
    return EXIT_NO_SPACE


def main(argv: list[str] | None = None) -> int:
    global _recording_end
    args = parse_args(argv)
    try:
        spec, group = check_request(args)
    except (KeyError, GroupConfigError, DataSetMissing, BadSetting) as exc:
        print(f"workers.run: refused: {exc.args[0]}", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as exc:
        print(f"workers.run: refused: --results {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_REFUSED
    _configure_logging(group.rank)
    if args.threads_per_worker:
        size_native_thread_pools(args.threads_per_worker)

    # torch is imported only now: refusals above stay fast.
    import torch
    import torch.distributed as dist

    from scalebench.transports import nccl_debug_environment
    from workers import allreduce, engine
    from workers.adapter import TrainingOptions, adapter_for
    from workers.distributed import check_backend, environment, init_group
    from workers.mlperf import submission

    try:
        check_backend(args.backend, group.world_size)
    except GroupConfigError as exc:
        print(f"workers.run: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    threads = args.threads_per_worker or int(os.environ.get("OMP_NUM_THREADS") or 0)
    if threads:
        torch.set_num_threads(threads)
    device = rank_device(args.device, group.local_rank)
    tracker = open_tracker(args, spec, group, device)
    tracker.init_start()  # MLPerf: data, model and compilation are initialisation
    signal.signal(signal.SIGTERM, _on_sigterm)
    if os.environ.get(LAUNCHER_PID_VARIABLE, "").isdigit():
        watch_launcher(int(os.environ[LAUNCHER_PID_VARIABLE]))
    status = EXIT_FAILED
    try:
        # The env record opens every attempt: a rank restarted into the same
        # directory appends a new attempt, and readers keep the last one.
        info = environment(args.backend)
        tracker.environment(info)
        if not isinstance(spec, AllReduceSpec):
            tracker.submission(submission(spec, info, device, group.world_size))
        if args.backend == "nccl":  # its connections logged, after the env record took the user's
            os.environ.update(nccl_debug_environment(args.results, group.rank, dict(os.environ)))
        init_group(group, args.backend, args.collective_timeout_s)
        if isinstance(spec, AllReduceSpec):
            options = allreduce.AllReduceOptions(
                args.light, args.repetitions, args.max_elements, args.dtype
            )
            allreduce.run(spec, options, tracker, device)
        else:
            options = TrainingOptions(
                light=args.light,
                data_dir=args.data_dir or Path("."),
                seed=args.seed,
                variant=args.variant,
                max_epochs=args.max_epochs,
                precision=args.precision,
                compile=args.compile,
            )
            engine.train(adapter_for(spec, options, device), tracker)
        status = EXIT_OK
    except (Exception, Terminated, KeyboardInterrupt) as exc:
        # Before any call: a pending SIGTERM is handled at the next one.
        _recording_end = True
        status = failure_status(exc, tracker, group.rank, args.results)
    finally:
        _recording_end = True
        try:
            tracker.close()
        except OSError as exc:
            if not no_space(exc):
                raise
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # every record is written: just end
    if status == EXIT_OK and dist.is_initialized():
        dist.destroy_process_group()
    return status


if __name__ == "__main__":
    try:
        code = main()
    except OSError as exc:  # the disk filled up before the records' own handling began
        if not no_space(exc):
            raise
        print(f"workers.run: {no_space_reason(exc.filename or '.')}", file=sys.stderr)
        code = EXIT_NO_SPACE
    sys.stdout.flush()
    sys.stderr.flush()
    # After a failure the process group may wait on dead peers while tearing
    # down; leave at once, every record is already on disk.
    os._exit(code)
