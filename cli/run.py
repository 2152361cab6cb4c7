"""``scalebench run``: a sweep run here, group after group, its records loaded as it goes.

The command's options are the request's fields (:data:`scalebench.request.FIELDS`,
:func:`add_request_option`; :func:`option_table` prints them for
``docs/command-line.md``). :func:`run_sweep` runs the planned groups one after the other
and records each verdict; :func:`load_group` and :func:`load_interrupted` load what was
measured into the results database while the sweep runs and when it is interrupted.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cli.cluster import prepare_on_cluster, read_cluster_nodes
from cli.data import prepare_data
from cli.report import print_report, print_sweep_directory
from cli.tasks import clock
from results_db import service
from scalebench import config, manifest
from scalebench.errors import describe
from scalebench.launchers import LAUNCHERS
from scalebench.rank import EXIT_FAILED, EXIT_OK
from scalebench.request import FIELDS
from scalebench.request_fields import InvalidParameter, RequestField
from scalebench.stacks import BadStack, stacks_from_options
from scalebench.statuses import FAILED, SUCCEEDED
from scalebench.sweep import GroupPlan, SweepRequest, start_sweep, validate_request
from scalebench.tasks import TrainingSpec


def run_sweep(
    request: SweepRequest,
    results_root: Path,
    publish: Callable[[GroupPlan], None] | None = None,
    stopped: Callable[[Path], None] | None = None,
    planned: Callable[[Path], None] | None = None,
    starting: Callable[[GroupPlan], None] | None = None,
) -> tuple[Path, int]:
    """Run every planned group, one after the other (the arms of a duet round together:
    :func:`scalebench.sweep.launches`); returns the sweep directory and exit status.

    ``planned`` is called with the sweep's folder as soon as its manifest is written, and
    ``starting`` with each group just before it starts (the command line stores the sweep
    with every group ``planned``, then each group as ``running``, so that the database shows
    the whole sweep from its first second).
    ``publish`` is called with each group once its verdict is recorded (the
    command line loads it into the results database, so the dashboard shows
    the sweep while it runs). Interrupted (Ctrl-C, SIGTERM), the running group
    is stopped by its launcher and recorded ``cancelled``, the groups not
    started ``skipped``, and ``stopped`` is called with the sweep's folder (the command
    line loads what was measured) before the interruption goes on. A group that found the
    results filesystem full ends the sweep: the groups after it are recorded ``failed``
    (not started) with the same reason.
    """
    from operators.group import LauncherFailed, record_verdict, run_together
    from operators.launcher import launcher_for
    from scalebench.diskspace import NO_SPACE
    from scalebench.sweep import launches

    service.close_vanished_sweeps(results_root)
    plan = start_sweep(request, results_root, trigger="cli", runner=manifest.this_process())
    groups = plan.groups
    print(f"sweep {plan.sweep_id}: {len(groups)} group(s) → {plan.sweep_dir}", flush=True)
    if planned is not None:
        planned(plan.sweep_dir)
    started = time.monotonic()
    exit_status = EXIT_OK
    running: list[str] = []
    done = 0  # groups ended so far
    try:
        for launch in launches(groups):
            elapsed = time.monotonic() - started
            eta = f", about {clock(elapsed / done * (len(groups) - done))} to go" if done else ""
            first = launch[0]
            arms = ""
            if len(launch) > 1:
                arms = ", a duet of stacks " + " and ".join(
                    f"{g.stack_name} (cores {','.join(map(str, g.cpus))})" for g in launch
                )
            elif first.stack:
                arms = ", stack " + first.stack_name
            numbers = f"{done + 1}" if len(launch) == 1 else f"{done + 1}-{done + len(launch)}"
            print(
                f"── group {numbers}/{len(groups)}: {first.world_size} worker(s), "
                f"repeat {first.repeat + 1}/{request.repeats}{arms} "
                f"(elapsed {clock(elapsed)}{eta})",
                flush=True,
            )
            if LAUNCHERS[first.request.launcher].on_this_host and first.world_size > 2:
                print(
                    f"   note: {first.world_size} processes share this machine's cores; "
                    "times reflect oversubscription, not a cluster",
                    flush=True,
                )
            running = [group.run_id for group in launch]
            if starting is not None:
                for group in launch:
                    starting(group)
            ended = run_together(launch, lambda group: launcher_for(group))
            running = []
            reasons = []
            for group, result in zip(launch, ended, strict=True):
                if isinstance(result, LauncherFailed):  # recorded failed; the sweep goes on
                    status, reason, seconds = FAILED, str(result), 0.0
                else:
                    (status, reason), seconds = record_verdict(group, result), result.seconds
                own = f" {group.stack_name}" if len(launch) > 1 else ""
                line = f"  {own} {status} in {seconds:.1f} s"
                print(line + (f": {reason}" if reason else ""), flush=True)
                if publish is not None:
                    publish(group)
                if status != SUCCEEDED:
                    exit_status = EXIT_FAILED
                reasons.append(reason)
            done += len(launch)
            full = next((r for r in reasons if r.startswith(NO_SPACE)), None)
            if full is not None:  # the next groups would only fill it further
                later = groups[done:]
                for entry in later:
                    manifest.record_verdict(
                        plan.sweep_dir, entry.run_id, FAILED, f"not started: {full}"
                    )
                if later:
                    print(f"   the {len(later)} other group(s) not started: {full}", flush=True)
                break
    except BaseException:
        try:
            manifest.cancel(plan.sweep_dir, running, "the sweep was interrupted")
        finally:
            manifest.finish(plan.sweep_dir)
        if stopped is not None:  # what was measured before the interruption
            stopped(plan.sweep_dir)
        raise
    manifest.finish(plan.sweep_dir)
    return plan.sweep_dir, exit_status


def load_group(url: str) -> Callable[[GroupPlan], None]:
    """A ``publish`` for :func:`run_sweep`: load the group that just ended into the results
    database at ``url``. A failure only delays it: the sweep's ingest at the end loads
    every group again."""

    def publish(group: GroupPlan) -> None:
        try:  # one line here, not the progress
            service.ingest(url, str(group.sweep_dir), only=[group.run_id], replace=True, say=None)
        except Exception as exc:  # the records are safe on disk either way
            print(
                f"   not loaded into the results database yet ({describe(exc)}); the sweep's "
                "ingest will",
                flush=True,
            )
        else:
            print("   loaded into the results database", flush=True)

    return publish


def store_plan(url: str) -> Callable[[Path], None]:
    """A ``planned`` for :func:`run_sweep`: store the sweep and a ``planned`` row for each of
    its groups at once. A failure is said, not raised: the groups still run, and each is
    loaded as it ends."""

    def load(sweep_dir: Path) -> None:
        try:
            service.load_plan(url, sweep_dir)
        except Exception as exc:
            print(f"   the plan is not in the results database yet ({describe(exc)})", flush=True)

    return load


def store_start(url: str) -> Callable[[GroupPlan], None]:
    """A ``starting`` for :func:`run_sweep`: the group's row reads ``running`` from its start.
    A failure is said, not raised: the group is loaded as it ends."""

    def mark(group: GroupPlan) -> None:
        try:
            service.group_started(url, group.sweep_dir, group.run_id)
        except Exception as exc:
            print(f"   not marked running in the results database ({describe(exc)})", flush=True)

    return mark


def load_interrupted(url: str) -> Callable[[Path], None]:
    """A ``stopped`` for :func:`run_sweep`: load what an interrupted sweep measured (its
    finished groups, the stopped one as cancelled, the rest skipped) before the command
    exits. A failure is said, not raised: the records stay on disk for `scalebench ingest`."""

    def load(sweep_dir: Path) -> None:
        print(f"\ninterrupted: loading what was measured into {service.redact(url)}", flush=True)
        try:
            service.ingest(url, str(sweep_dir), say=None)
        except Exception as exc:
            print(
                f"   not loaded ({describe(exc)}); `scalebench ingest {sweep_dir}` loads it",
                flush=True,
            )
        else:
            print(f"   loaded sweep {sweep_dir.name}", flush=True)

    return load


def cmd_run(args: argparse.Namespace) -> int:
    """Validate the request, run the sweep and print its report; the results are loaded into
    the database as groups end, unless ``--no-ingest``."""
    given = {field.name: getattr(args, field.name) for field in FIELDS}
    given["stacks"] = _stacks_given(args)
    # On a cluster, ranks_per_node auto and the fit are read from its nodes first.
    cluster = read_cluster_nodes() if (args.launcher or "local") == "kubernetes" else None
    request = validate_request(
        task=args.task, cluster=cluster, **{k: v for k, v in given.items() if v is not None}
    )
    try:
        results_root = config.results_path(args.results)
    except ValueError as exc:
        raise InvalidParameter("results", str(exc)) from None
    url = None if args.no_ingest else args.database or config.database_url()
    if url is not None:
        # Where the results go is checked (and migrated) before any worker starts, not
        # after hours of training; --no-ingest keeps them on disk only.
        service.upgrade(url)
    if not request.light and isinstance(request.spec, TrainingSpec):
        if request.launcher == "kubernetes":  # in the data claim, by a pod, before any group
            prepare_on_cluster(request.spec.data.name, request.download)
        elif request.download:
            prepare_data(request.spec.data.name, request.data_dir)
    if url is None:
        sweep_dir, status = run_sweep(request, results_root)
        print_sweep_directory(sweep_dir)
        return status
    sweep_dir, status = run_sweep(
        request,
        results_root,
        publish=load_group(url),
        stopped=load_interrupted(url),
        planned=store_plan(url),
        starting=store_start(url),
    )
    print(f"\ningesting into {service.redact(url)}")
    service.ingest(url, str(sweep_dir))
    print_report(url, sweep_dir.name)
    return status


def _stacks_given(args: argparse.Namespace) -> dict[str, Any] | None:
    """The request's stacks from ``--stack`` and ``--stack-env`` (None: none given): each an
    image where the launcher runs images, else an interpreter."""
    if not args.stacks and not args.stack_env:
        return None
    runs_images = LAUNCHERS[args.launcher or "local"].runs_images
    try:
        return stacks_from_options(args.stacks or [], args.stack_env or [], image=runs_images)
    except BadStack as exc:
        raise InvalidParameter("stacks", str(exc)) from None


def add_request_option(parser: argparse.ArgumentParser, field: RequestField) -> None:
    """A request field as a ``scalebench run`` option, with the field's default; the stacks
    as ``--stack NAME=VALUE`` and ``--stack-env NAME:KEY=VALUE``, each repeatable."""
    if field.kind == "stacks":
        parser.add_argument(
            field.option,
            dest=field.name,
            action="append",
            metavar="NAME=PYTHON_OR_IMAGE",
            help=field.describe(),
        )
        parser.add_argument(
            "--stack-env",
            dest="stack_env",
            action="append",
            metavar="NAME:KEY=VALUE",
            help="an environment variable of the stack NAME (repeatable), e.g. "
            "tonight:PYTHONPATH=/opt/tonight/src",
        )
        return
    shown = field.default
    if isinstance(shown, tuple):
        shown = ",".join(map(str, shown))
    default = "" if field.default in (None, "") else f" (default {shown})"
    choices = f" [{', '.join(field.choices)}]" if field.choices else ""
    extra: dict = {"action": argparse.BooleanOptionalAction} if field.kind == "bool" else {}
    parser.add_argument(
        field.option,
        dest=field.name,
        default=field.default,
        help=field.describe() + choices + default,
        **extra,
    )


def option_table() -> str:
    """The request fields as the Markdown table of ``docs/command-line.md`` (a test holds
    the page to it; print it with ``python -c "from cli.run import option_table as t;
    print(t())"``)."""
    rows = ["| option | meaning | default |", "|---|---|---|"]
    for field in FIELDS:
        choices = f" One of {', '.join(f'`{c}`' for c in field.choices)}." if field.choices else ""
        shown = field.default
        if isinstance(shown, tuple):
            shown = ",".join(map(str, shown))
        default = "" if shown in (None, "") else f"`{shown}`"
        meaning = field.describe().replace("|", "\\|") + choices
        rows.append(f"| `{field.option}` | {meaning} | {default} |")
    return "\n".join(rows) + "\n"


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``run`` command, an option for each request field."""
    run = commands.add_parser("run", help="run a sweep: one training group per worker count")
    run.add_argument("task", help="task id (see `scalebench tasks`)")
    for field in FIELDS:
        add_request_option(run, field)
    run.add_argument("--results", default=None, help="results directory (SCALEBENCH_RESULTS_URI)")
    run.add_argument(
        "--database", default=None, help="results database URL (SCALEBENCH_DATABASE_URL)"
    )
    run.add_argument(
        "--no-ingest",
        action="store_true",
        help="leave the results database alone (the table comes from a temporary SQLite copy)",
    )
    run.set_defaults(func=cmd_run)
