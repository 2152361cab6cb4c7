"""A sweep request, checked before anything starts, and the plan of its groups.

:func:`validate_request` takes raw values (strings from the command line, JSON
from an Airflow trigger form) and either returns a :class:`SweepRequest` or
raises :class:`InvalidParameter` naming the offending field and, for requests
no one can have meant, the limit (``MAX_REPEATS``, ``MAX_GROUPS``,
``MAX_GROUP_TIMEOUT_S``, and :mod:`scalebench.rank`'s ``MAX_SEED`` and collective
timeout bounds). No worker starts until a request has passed.
:func:`start_sweep` turns it into a :class:`SweepPlan`: one :class:`GroupPlan`
per (worker count, network profile, repeat), each with the command line its
ranks run (:meth:`GroupPlan.worker_argv`), and the sweep's manifest
(:mod:`scalebench.manifest`). torch is imported only to count GPUs, and only when the
backend needs them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scalebench import manifest, pairing
from scalebench.cluster_fit import ClusterNodes, auto_ranks_per_node, fit_problem
from scalebench.config_hash import configuration_hash
from scalebench.datasets import DataSetMissing, check_available, downloadable, published_checksums
from scalebench.host import local_gpu_count, mpi_available, shaping_problems
from scalebench.launchers import LAUNCHERS, LauncherSpec
from scalebench.network import HOST_PROFILE, NetworkProfile, parse_profile
from scalebench.nodes import NodeShape, shape_problem
from scalebench.pairing import DUET, INTERLEAVED, host_cores
from scalebench.rank import DEFAULT_PRECISION, MAX_SEED
from scalebench.request import (
    FIELD,
    FORM_FIELDS,
    MAX_GROUPS,
    RANK_FIELDS,
    SweepRequest,
)
from scalebench.request_checks import check_implemented
from scalebench.request_fields import AUTO, InvalidParameter
from scalebench.stacks import BadStack, Stack, probe_interpreter, rank_environment, round_order
from scalebench.tasks import AllReduceSpec, TaskSpec, TrainingSpec, get_task, task_ids


def validate_request(
    *,
    task: Any,
    gpus: int | None = None,
    max_workers: int | None = None,
    cluster: ClusterNodes | None = None,
    **given: Any,
) -> SweepRequest:
    """Check every field of a request for ``task``; raise :class:`InvalidParameter` naming
    the first bad one. ``given`` holds the fields (:data:`~scalebench.request.FIELDS`) as
    the command line or a form gives them; a field not given takes its default.

    Each value is read by its own declaration, then checked against the task
    (its worker counts, variants, precisions), the request's size, what the
    launcher declares it can do and, for ranks that run here, this host:
    ``gpus`` is how many GPUs the local launcher can give (``None``: count the
    host's), ``max_workers`` the largest group allowed (``None``:
    ``SCALEBENCH_MAX_WORKERS``). A full data set must be in ``data_dir``, or
    ``download`` on where scalebench can fetch it (on by default where the
    publisher gives checksums). A request without ``group_timeout_s`` gets the task's own
    limit (:meth:`~scalebench.tasks.specs.TrainingSpec.group_time_limit_s`), one without
    ``gpus_per_worker`` a GPU per pod on Kubernetes and, locally, one per rank only where
    nccl or cuda tensors use it. ``backend: auto`` becomes nccl where the ranks ask for GPUs
    and gloo otherwise. ``cluster`` is what a reading of the cluster found (the Kubernetes
    launcher's callers read it): ``ranks_per_node: auto`` becomes the GPUs of one of its
    nodes per rank's GPUs (without a reading, or locally: 1), and a group its GPU nodes
    cannot hold is refused, naming the numbers.
    """
    if not isinstance(task, str) or task not in task_ids():
        raise InvalidParameter(
            "task", f"unknown task {task!r}; known tasks: {', '.join(task_ids())}"
        )
    unknown = sorted(set(given) - set(FIELD))
    if unknown:
        raise InvalidParameter(
            unknown[0],
            f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known fields: {', '.join(FORM_FIELDS)}",
        )
    spec = get_task(task)
    values = {name: field.read(given.get(name)) for name, field in FIELD.items()}
    asked = dict(values)  # before any default is decided
    # a form always gives repeats (its default); only another count competes with pairs
    _pairs_to_rounds(values, repeats_given=values["repeats"] != FIELD["repeats"].default)
    _check_against_task(spec, values)
    if values["group_timeout_s"] is None:  # the task's own limit, full or light
        values["group_timeout_s"] = spec.group_time_limit_s(values["light"])
    runner = LAUNCHERS[values["launcher"]]
    values["backend"] = _auto_backend(runner, values, gpus)
    if values["gpus_per_worker"] is None:  # a GPU per pod; locally, one where one is used
        uses_gpu = values["device"] == "cuda" or values["backend"] == "nccl"
        values["gpus_per_worker"] = 1 if runner.gpus_per_rank or uses_gpu else 0
    if values["ranks_per_node"] == AUTO:
        on_cluster = cluster is not None and not runner.on_this_host
        values["ranks_per_node"] = (
            auto_ranks_per_node(cluster, values["gpus_per_worker"]) if on_cluster else 1
        )
    _check_size(values, max_workers)
    for name, field in FIELD.items():
        if field.needs and asked[name] != field.default and not getattr(runner, field.needs):
            able = " or ".join(n for n, s in LAUNCHERS.items() if getattr(s, field.needs))
            raise InvalidParameter(name, f"only the {able} launcher takes {name}")
    if values["device"] == "cpu" and values["backend"] == "nccl":
        raise InvalidParameter("device", "nccl all-reduces GPU tensors only; use gloo for cpu")
    values["stacks"] = _check_stacks(runner, values["stacks"])
    profiles = values["network"]
    values["placement"] = _refuse_what_the_launcher_cannot_run(
        runner, values, max(values["workers"]), profiles, gpus
    )
    values["pairing"] = _pairing(runner, values, gpus)
    if values["backend"] == "mpi" and not mpi_available():
        raise InvalidParameter(
            "backend", "mpi needs a torch build with MPI support, and this torch has none"
        )
    if cluster is not None and not runner.on_this_host:
        problem = fit_problem(
            cluster,
            max(values["workers"]),
            values["ranks_per_node"],
            values["gpus_per_worker"],
            values["placement"],
        )
        if problem:
            raise InvalidParameter("workers", problem)
    values["data_dir"], values["download"] = _data_set(spec, values)
    return SweepRequest(task=task, **values)


def _auto_backend(runner: LauncherSpec, values: dict[str, Any], gpus: int | None) -> str:
    """The backend ``auto`` stands for: nccl where the ranks ask for GPUs (a pod's GPUs by
    default on a cluster; here cuda tensors or ``gpus_per_worker``, with a GPU for every
    worker of the largest group), gloo otherwise."""
    backend = values["backend"]
    if backend != "auto":
        return backend
    if values["device"] == "cpu" or "nccl" not in runner.backends:
        return "gloo"
    gpus_each = values["gpus_per_worker"]
    if runner.gpus_per_rank:  # a pod asks for a GPU unless told 0
        return "nccl" if gpus_each is None or gpus_each > 0 else "gloo"
    if values["device"] != "cuda" and not gpus_each:
        return "gloo"
    available = local_gpu_count() if gpus is None else gpus
    return "nccl" if available >= max(values["workers"]) else "gloo"


def _pairing(runner: LauncherSpec, values: dict[str, Any], gpus: int | None) -> str:
    """``duet`` or ``interleaved``: how the arms of the request's rounds run on the cores
    this process may use (:mod:`scalebench.pairing`); an asked duet nothing can run is
    refused, naming ``pairing``."""
    if values["pairing"] == DUET and len(values["stacks"]) < 2:
        raise InvalidParameter("pairing", pairing.why_not_duet(values, True, False))
    if values["pairing"] == INTERLEAVED or len(values["stacks"]) < 2:
        return INTERLEAVED
    if values["pairing"] == AUTO and values["threads_per_worker"] <= 0:
        return INTERLEAVED  # a duet would shrink each rank's share of the machine
    gpus_used = values["gpus_per_worker"] > 0 or values["device"] == "cuda"
    if values["device"] == "auto" and not gpus_used and runner.on_this_host:
        gpus_used = (local_gpu_count() if gpus is None else gpus) > 0  # the rank takes cuda
    try:
        return pairing.resolve(values, runner.on_this_host, gpus_used, len(host_cores()))
    except ValueError as exc:
        raise InvalidParameter("pairing", str(exc)) from None


def _pairs_to_rounds(values: dict[str, Any], repeats_given: bool) -> None:
    """``pairs`` needs two stacks and stands for the repeats: each round (a repeat) runs
    every stack once, so a pair of arms is one repeat of each."""
    pairs, stacks = values["pairs"], values["stacks"]
    if pairs is None:
        return
    if len(stacks) < 2:
        raise InvalidParameter(
            "pairs",
            f"pairs compare two or more stacks, and {len(stacks)} is named; name them with "
            "--stack NAME=PYTHON (the stacks field), or ask for repeats instead",
        )
    if repeats_given and values["repeats"] != pairs:
        raise InvalidParameter(
            "pairs",
            f"give pairs or repeats, not both: {pairs} pairs are {pairs} repeats of every "
            f"stack, and repeats asks {values['repeats']}",
        )
    values["repeats"] = pairs


def _check_stacks(runner: LauncherSpec, stacks: Sequence[Stack]) -> tuple[Stack, ...]:
    """Each stack is what the launcher starts (an interpreter here, an image on a cluster),
    and a local interpreter starts and imports torch as a rank of it would; returns the
    stacks with each interpreter as an absolute path (a later task may run elsewhere)."""
    checked = []
    for stack in stacks:
        if stack.python and not runner.on_this_host:
            raise InvalidParameter(
                "stacks",
                f"{stack.name}: the {runner.name} launcher runs container images; give "
                '{"image": "repo/name:tag"} instead of an interpreter',
            )
        if stack.image and not runner.runs_images:
            images = " or ".join(n for n, spec in LAUNCHERS.items() if spec.runs_images)
            raise InvalidParameter(
                "stacks",
                f"{stack.name}: only the {images} launcher runs images; the {runner.name} "
                'launcher takes {"python": "/path/to/bin/python"}',
            )
        if stack.python:
            # asked once per interpreter and variables, whatever the stack's name
            problem = _interpreter_problem(
                dataclasses.replace(stack, name=""), os.environ.get("PYTHONPATH", "")
            )
            if problem:
                raise InvalidParameter("stacks", f"{stack.name}: {problem}")
            found = shutil.which(stack.python) or stack.python
            stack = dataclasses.replace(stack, python=os.path.abspath(found))
        checked.append(stack)
    return tuple(checked)


@functools.lru_cache(maxsize=64)
def _interpreter_problem(stack: Stack, pythonpath: str) -> str:
    """Why ``stack``'s interpreter cannot run a rank here (empty: it can), asked once a
    process for each stack and ``PYTHONPATH`` (starting it imports torch: seconds)."""
    try:
        probe_interpreter(stack, rank_environment(stack, {**os.environ, "PYTHONPATH": pythonpath}))
    except BadStack as exc:
        return str(exc)
    return ""


def _check_against_task(spec: TaskSpec, values: dict[str, Any]) -> None:
    """Worker counts the task defines; training fields only where there is training."""
    unknown_sizes = [k for k in values["workers"] if k not in spec.world_sizes]
    if unknown_sizes:
        raise InvalidParameter(
            "workers",
            f"{spec.id} runs at {', '.join(map(str, spec.world_sizes))} workers (the task's "
            f"definition), not {', '.join(map(str, unknown_sizes))}",
        )
    if values["compile"] is None:
        from scalebench.config import default_compile

        try:
            values["compile"] = default_compile()
        except ValueError as exc:
            raise InvalidParameter("compile", str(exc)) from None
    from scalebench.config import check_mlperf_settings

    # Rank 0 of a training group writes an MLPerf log; a bad SCALEBENCH_MLPERF_* is refused
    # for every task all the same, so that a setting is never taken without a word.
    check_mlperf_settings()
    for name, field in FIELD.items():
        if field.allreduce_only and values[name] is not None and isinstance(spec, TrainingSpec):
            raise InvalidParameter(name, f"only the all-reduce task takes {name}, not {spec.id}")
    if isinstance(spec, AllReduceSpec):  # its sizes start at 1 element: max_elements keeps one
        refusals = {
            "variant": (values["variant"] != "sync", "the all-reduce task has no training variant"),
            "precision": (
                values["precision"] != DEFAULT_PRECISION,
                "the all-reduce task measures the data types its spec lists",
            ),
            "compile": (values["compile"] == "on", "the all-reduce task has no model to compile"),
            "max_epochs": (values["max_epochs"] is not None, "the all-reduce task has no epochs"),
        }
        for name, (refused, message) in refusals.items():
            if refused:
                raise InvalidParameter(name, message)
        return
    check_implemented(spec, values)


def _check_size(values: dict[str, Any], max_workers: int | None) -> None:
    """Requests no one can have meant: too many workers, groups, seeds, too short a limit, or
    a group that does not fill its nodes."""
    if max_workers is None:
        from scalebench.config import max_workers as configured_max_workers

        max_workers = configured_max_workers()
    largest, repeats = max(values["workers"]), values["repeats"]
    if largest > max_workers:
        raise InvalidParameter(
            "workers",
            f"{largest} workers asked, but the cluster allows at most {max_workers} "
            "(SCALEBENCH_MAX_WORKERS)",
        )
    profiles, stacks = len(values["network"]), max(1, len(values["stacks"]))
    planned = repeats * len(values["workers"]) * profiles * stacks
    if planned > MAX_GROUPS:
        per_profile = f" × {profiles} network profiles" if profiles > 1 else ""
        per_stack = f" × {stacks} stacks" if stacks > 1 else ""
        raise InvalidParameter(
            "pairs" if values["pairs"] is not None else "repeats",
            f"{len(values['workers'])} worker count(s) × {repeats} repeats{per_profile}"
            f"{per_stack} = {planned} groups; a sweep plans at most {MAX_GROUPS}",
        )
    if values["seed"] + repeats - 1 > MAX_SEED:  # repeat r runs with seed + r
        raise InvalidParameter(
            "seed",
            f"with {repeats} repeat(s) the seed may be at most "
            f"{MAX_SEED - repeats + 1} (seeds are 64-bit), got {values['seed']}",
        )
    for size in values["workers"]:
        problem = shape_problem(size, values["ranks_per_node"])
        if problem:
            raise InvalidParameter("workers", problem)
    group, collective = values["group_timeout_s"], values["collective_timeout_s"]
    if group < collective:
        raise InvalidParameter(
            "group_timeout_s",
            f"{group:g} s is shorter than the collective timeout ({collective:g} s)",
        )


def _data_set(spec: TaskSpec, values: dict[str, Any]) -> tuple[Path, bool]:
    """The data folder, and whether to download: a missing full set is refused unless it
    can and may be fetched."""
    data_dir = values["data_dir"]
    if data_dir is None:
        from scalebench.config import data_dir as default_data_dir

        data_dir = default_data_dir()
    training = isinstance(spec, TrainingSpec)
    download = values["download"]
    if download and training and not downloadable(spec.data.name):
        raise InvalidParameter(
            "download",
            f"{spec.data.name} cannot be downloaded by scalebench: put it in the data folder "
            "(data_dir, SCALEBENCH_DATA_DIR; see docs/tasks.md)",
        )
    if download is None:  # on where the publisher's checksums prove the download intact
        download = published_checksums(spec.data.name) if training else False
    if values["light"] or not training:
        return data_dir, download
    if not LAUNCHERS[values["launcher"]].on_this_host:  # in the cluster's data claim: a data
        return data_dir, download  # pod checks it (operators.kubernetes.data_pod), not this host
    try:
        check_available(spec.data.name, data_dir)
    except DataSetMissing as exc:
        if not downloadable(spec.data.name):
            raise InvalidParameter(
                "data_dir", f"{exc} ({spec.data.name} cannot be downloaded by scalebench)"
            ) from None
        if not download:
            raise InvalidParameter(
                "data_dir", f"{exc} Or ask for the download (download: true, --download)."
            ) from None
    return data_dir, download


def _refuse_what_the_launcher_cannot_run(
    runner: LauncherSpec,
    values: dict[str, Any],
    largest_group: int,
    profiles: Sequence[NetworkProfile],
    gpus: int | None,
) -> str:
    """Check the request against what ``runner`` declares it can do (and, for a launcher
    whose ranks run here, against this host); returns the placement ``auto`` resolves to."""
    placement, device, backend = values["placement"], values["device"], values["backend"]
    gpus_each = values["gpus_per_worker"]
    name = runner.name
    if placement == "spread" and not runner.spreads:
        spreading = " or ".join(n for n, spec in LAUNCHERS.items() if spec.spreads)
        raise InvalidParameter(
            "placement",
            f"the {name} launcher runs every rank on this machine: spread needs "
            f"the {spreading} launcher (use pack or auto)",
        )
    if backend not in runner.backends:
        raise InvalidParameter(
            "backend", f"the {name} launcher starts {' or '.join(runner.backends)} groups"
        )
    if runner.on_this_host and gpus_each > 1:
        raise InvalidParameter(
            "gpus_per_worker",
            f"the {name} launcher gives each rank at most one of this host's GPUs; use 0 or "
            f"1, not {gpus_each}",
        )
    needs_gpu = device == "cuda" or backend == "nccl"
    if needs_gpu and runner.gpus_per_rank and gpus_each == 0:
        raise InvalidParameter(
            "gpus_per_worker",
            "cuda tensors need a GPU in every pod"
            if device == "cuda"
            else "nccl needs at least one GPU per worker",
        )
    if needs_gpu and runner.on_this_host:
        available = local_gpu_count() if gpus is None else gpus
        if available == 0 and device == "cuda":
            raise InvalidParameter(
                "device", "cuda asked, but this host has no GPU; use cpu or auto"
            )
        if available == 0:
            raise InvalidParameter("backend", "nccl needs GPUs and none is available; use gloo")
        if backend == "nccl" and largest_group > available:
            raise InvalidParameter(
                "workers",
                f"nccl needs one GPU per worker: {largest_group} workers asked, "
                f"{available} GPUs available",
            )
    shaped = [p for p in profiles if p.shaped]
    if shaped and backend == "mpi":
        raise InvalidParameter("network", "the emulated networks carry gloo and nccl groups")
    delayed = [p.name for p in shaped if p.delay_s]
    if delayed and not runner.delays:
        raise InvalidParameter(
            "network",
            f"{', '.join(delayed)}: the {name} launcher can limit rates (the CNI "
            "bandwidth plugin) but not add delay; ask for the rate alone",
        )
    problems = shaping_problems(shaped) if shaped and runner.on_this_host else []
    if problems:
        raise InvalidParameter(
            "network",
            f"{', '.join(p.name for p in shaped)} cannot be emulated here: "
            f"{'; '.join(problems)}. Ask for host alone to run unshaped",
        )
    return runner.default_placement if placement == "auto" else placement


def new_sweep_id(task: str, now: datetime | None = None) -> str:
    """A readable, unique sweep id: ``<task>-<UTC time>-<4 hex>``."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{task}-{stamp}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class GroupPlan:
    """One training group of a sweep: everything a launcher needs to run it.

    ``request`` is the sweep's: what the ranks run (its fields declared
    ``to_ranks``, see :meth:`worker_argv`) and how the launcher starts them
    (``launcher``, and fields only some launchers read, such as
    ``gpus_per_worker``). The group adds its worker count, its repeat (so its
    seed) and its link. ``sweep_dir`` is the host's path of the sweep (a
    launcher maps it, and ``data_dir``, to what its ranks see). Crosses
    Airflow's XCom as :meth:`to_xcom` / :meth:`from_xcom`.
    """

    request: SweepRequest
    run_id: str
    world_size: int
    repeat: int
    network: NetworkProfile
    sweep_dir: str
    stack: Stack | None = None  # None: the launcher's own interpreter or image
    # The host's cores its ranks are pinned to: an arm of a duet, started with the other arms
    # of its round (scalebench.pairing); empty: the cores the launcher has.
    cpus: tuple[int, ...] = ()
    # the run ids of its duet round's arms, itself among them (empty: not a duet's arm)
    arms: tuple[str, ...] = ()

    @property
    def duet(self) -> bool:
        """Whether the group is an arm of a duet: it starts with its round's other arms."""
        return bool(self.cpus)

    @property
    def stack_name(self) -> str:
        """The stack's name, empty where the request names none."""
        return "" if self.stack is None else self.stack.name

    @property
    def run_dir(self) -> Path:
        """The host's directory of this group's records."""
        return Path(self.sweep_dir) / self.run_id

    @property
    def shape(self) -> NodeShape:
        """The group's nodes: ``world_size`` ranks on nodes of the request's ranks per node."""
        return NodeShape(self.world_size, self.request.ranks_per_node)

    @property
    def seed(self) -> int:
        """Repeat ``r`` runs with the request's seed + ``r``."""
        return self.request.seed + self.repeat

    @property
    def timeout_s(self) -> float:
        """The group's wall-clock limit, seconds."""
        return self.request.group_timeout_s

    @property
    def data_dir(self) -> str:
        """The host's folder of the full data sets."""
        return str(self.request.data_dir)

    @property
    def training(self) -> bool:
        """False for the all-reduce task, which is given no training field."""
        return not isinstance(self.request.spec, AllReduceSpec)

    def worker_argv(self, results_dir: str, data_dir: str) -> list[str]:
        """The arguments of ``python -m workers.run`` for every rank of this group, with the
        run directory and data directory as the launcher's ranks see them: the request's
        fields declared ``to_ranks`` (training-only ones only for training), then this
        group's run id, seed and link. ``workers.run`` reads them by the same declarations."""
        args = ["--task", self.request.task, "--results", results_dir, "--run-id", self.run_id]
        for field in RANK_FIELDS:
            value = getattr(self.request, field.name)
            if field.asked_of(self.training) and value is not None:
                args += field.argv(value)
        args += ["--seed", str(self.seed), "--data-dir", data_dir]
        if self.network.shaped:
            args += ["--network", self.network.name]
        return args

    def to_xcom(self) -> dict[str, Any]:
        """Plain JSON values; the request as its fields, the link by its name."""
        return {
            "request": self.request.to_fields(),
            "run_id": self.run_id,
            "world_size": self.world_size,
            "repeat": self.repeat,
            "network": self.network.name,
            "sweep_dir": self.sweep_dir,
            "stack": None if self.stack is None else self.stack.name,
            "cpus": list(self.cpus),
            "arms": list(self.arms),
        }

    @classmethod
    def from_xcom(cls, data: dict[str, Any]) -> GroupPlan:
        """The plan back from :meth:`to_xcom`."""
        data = {k: v for k, v in data.items() if k != PARTNERS}  # a launch's lead carries them
        request = SweepRequest.from_fields(data["request"])
        named = {stack.name: stack for stack in request.stacks}
        stack = None if data.get("stack") is None else named[data["stack"]]
        return cls(
            **{
                **data,
                "request": request,
                "network": parse_profile(data["network"]),
                "stack": stack,
                "cpus": tuple(data.get("cpus") or ()),
                "arms": tuple(data.get("arms") or ()),
            }
        )


@dataclass(frozen=True)
class SweepPlan:
    """A started sweep: its id, its directory (holding the manifest) and its groups in order."""

    sweep_id: str
    sweep_dir: Path
    request: SweepRequest
    groups: tuple[GroupPlan, ...]


def run_id(
    sweep_id: str,
    world_size: int,
    repeat: int,
    network: NetworkProfile = HOST_PROFILE,
    stack: str = "",
) -> str:
    """``<sweep>-w<k>-r<repeat + 1>``, with the network profile's token before the repeat
    when it is shaped (``<sweep>-w2-n100mbit-r1``) and then the stack's name, where the
    request names stacks (``<sweep>-w2-stonight-r1``). Repeats count from 1 in run ids, as
    every table and log line does; ``repeat`` from 0."""
    tokens = [token for token in (network.token, f"s{stack}" if stack else "") if token]
    return f"{sweep_id}-w{world_size}{''.join('-' + t for t in tokens)}-r{repeat + 1}"


def plan_groups(
    request: SweepRequest, sweep_id: str, sweep_dir: Path, cores: Sequence[int] | None = None
) -> tuple[GroupPlan, ...]:
    """Every (world size, network profile, repeat, stack) of the sweep, interleaved.

    Interleaving (1, 2, 4, 1, 2, 4, ...; each profile in turn within a
    repeat) spreads slow drifts of the machine over all sizes and profiles
    instead of charging them to one. Repeat ``r`` runs with seed ``seed + r``. With
    stacks, a repeat is a round: each group runs once per stack, one stack right after the
    other, in the round's order (:func:`~scalebench.stacks.round_order`), so that the
    runs of a pair are as close in time as they can be; in a duet (``pairing``), at the
    worker counts whose arms fit on ``cores`` (default: this process's), the arms start
    together, each pinned to its own of those cores.
    """
    orders: list[tuple[Stack | None, ...]] = (
        list(round_order(request.stacks, request.seed, request.repeats))
        if request.stacks
        else [(None,)] * request.repeats
    )
    arms = len(request.stacks)
    duets = {
        k: pairing.duet_cores(
            k, request.threads_per_worker, host_cores() if cores is None else cores, arms
        )
        for k in request.world_sizes
        if request.pairing == DUET
    }

    def named(k: int, repeat: int, network: NetworkProfile, stack: Stack | None) -> str:
        return run_id(sweep_id, k, repeat, network, "" if stack is None else stack.name)

    return tuple(
        GroupPlan(
            request=request,
            run_id=named(k, repeat, network, stack),
            world_size=k,
            repeat=repeat,
            network=network,
            sweep_dir=str(sweep_dir),
            stack=stack,
            cpus=duets[k][arm] if duets.get(k) else (),
            arms=tuple(named(k, repeat, network, s) for s in orders[repeat])
            if duets.get(k)
            else (),
        )
        for repeat in range(request.repeats)
        for network in request.network
        for k in request.world_sizes
        for arm, stack in enumerate(orders[repeat])
    )


# The key of a launch's XCom under which its lead group carries the other arms of its duet.
PARTNERS = "partners"


def launch_to_xcom(launch: Sequence[GroupPlan]) -> dict[str, Any]:
    """One launch as one XCom value (one mapped training task): its first group, carrying
    the other arms of its duet under :data:`PARTNERS` (none: a group alone)."""
    lead = launch[0].to_xcom()
    if len(launch) > 1:
        lead[PARTNERS] = [group.to_xcom() for group in launch[1:]]
    return lead


def launch_from_xcom(data: dict[str, Any]) -> tuple[GroupPlan, ...]:
    """The groups of a launch back from :func:`launch_to_xcom` (a plain group: itself)."""
    partners = [GroupPlan.from_xcom(p) for p in data.get(PARTNERS) or ()]
    return (GroupPlan.from_xcom(data), *partners)


def launches(groups: Sequence[GroupPlan]) -> list[tuple[GroupPlan, ...]]:
    """``groups`` in the order they start, the arms of a duet round (same repeat, link and
    worker count) together in one launch; every other group alone."""
    started: list[tuple[GroupPlan, ...]] = []
    for group in groups:
        last = started[-1][-1] if started else None
        if (
            last is not None
            and group.duet
            and last.duet
            and (last.repeat, last.network.name, last.world_size)
            == (group.repeat, group.network.name, group.world_size)
        ):
            started[-1] += (group,)
        else:
            started.append((group,))
    return started


def code_version() -> str:
    """``git describe`` of the checkout scalebench runs from, else the package version."""
    import subprocess

    from scalebench import __version__

    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return __version__
    if described.returncode != 0:
        return __version__
    return described.stdout.strip() or __version__


# The fields a trigger (the Airflow form, a nightly's settings, the REST API's conf)
# may set; the task comes from the DAG.
def request_from_form(
    task: str, fields: Mapping[str, Any], cluster: ClusterNodes | None = None
) -> SweepRequest:
    """Validate a trigger's ``fields`` for ``task`` (``cluster``: the Kubernetes launcher's
    nodes, as read); unknown fields are refused by name."""
    return validate_request(task=task, cluster=cluster, **fields)


def new_manifest(
    request: SweepRequest,
    sweep_id: str,
    groups: Sequence[manifest.GroupEntry],
    trigger: str,
    created_at: str | None = None,
    runner: dict[str, Any] | None = None,
    night: str | None = None,
) -> manifest.Manifest:
    """The manifest of a new sweep of ``request`` (``created_at``: ISO 8601, default now;
    ``runner``: the process that runs it, :func:`scalebench.manifest.this_process`;
    ``night``: the logical date, ISO 8601, of the scheduled run it stands for)."""
    config = request.to_fields()
    return manifest.Manifest(
        sweep_id=sweep_id,
        trigger=trigger,
        created_at=created_at or datetime.now(UTC).isoformat(),
        code_version=code_version(),
        config_hash=configuration_hash(config),
        request=config,
        groups=tuple(groups),
        night=night,
        extra={} if runner is None else {"runner": runner},
    )


def start_sweep(
    request: SweepRequest,
    results_root: Path,
    trigger: str,
    runner: dict[str, Any] | None = None,
    night: str | None = None,
) -> SweepPlan:
    """Plan the sweep and write its manifest into a new directory below ``results_root``.

    ``trigger`` is ``manual`` (a person, e.g. the Airflow form), ``scheduled``
    (the nightly run) or ``cli``; ``runner`` names the process that runs every group
    (the command line's), so that a sweep it left open can be closed once it is gone;
    ``night`` the logical date (ISO 8601) of the scheduled Airflow run it stands for.
    """
    sweep_id = new_sweep_id(request.task)
    sweep_dir = results_root / sweep_id
    groups = plan_groups(request, sweep_id, sweep_dir)
    entries = [
        manifest.GroupEntry(
            g.run_id,
            g.world_size,
            g.repeat,
            network=g.network.name,
            stack=g.stack_name,
            pairing=(DUET if g.duet else INTERLEAVED) if g.stack else "",
        )
        for g in groups
    ]
    manifest.create(
        sweep_dir, new_manifest(request, sweep_id, entries, trigger, runner=runner, night=night)
    )
    return SweepPlan(sweep_id, sweep_dir, request, groups)
