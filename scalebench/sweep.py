"""A sweep request, checked before anything starts, and the plan of its groups.

:func:`validate_request` takes raw values (strings from the command line, JSON
from an Airflow trigger form) and either returns a :class:`SweepRequest` or
raises :class:`InvalidParameter` naming the offending field and, for requests
no one can have meant, the limit (``MAX_REPEATS``, ``MAX_GROUPS``,
``MAX_GROUP_TIMEOUT_S``, and :mod:`scalebench.worker_request`'s ``MAX_SEED`` and collective
timeout bounds). No worker starts until a request has passed.
:func:`start_sweep` turns it into a :class:`SweepPlan`: one :class:`GroupPlan`
per (worker count, repeat), each with the :class:`~scalebench.worker_request.WorkerRequest`
its ranks run, and the sweep's manifest (:mod:`scalebench.manifest`). torch is
imported only to count GPUs, and only when the backend needs them.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scalebench import manifest
from scalebench.datasets import DataSetMissing, check_available, downloadable, published_checksums
from scalebench.host import local_gpu_count, mpi_available, shaping_problems
from scalebench.launchers import LAUNCHERS, LauncherSpec
from scalebench.network import BadProfile, NetworkProfile, parse_profile, parse_profiles
from scalebench.tasks import AllReduceSpec, TaskSpec, TrainingSpec, get_task, task_ids
from scalebench.tasks.specs import COMPILE_SETTINGS
from scalebench.tasks.specs import TRAINING_VARIANTS as VARIANTS
from scalebench.worker_request import (
    BACKENDS,
    DEFAULT_PRECISION,
    MAX_COLLECTIVE_TIMEOUT_S,
    MAX_SEED,
    MIN_COLLECTIVE_TIMEOUT_S,
    PRECISIONS,
    WorkerRequest,
)

DEVICES = ("auto", "cpu", "cuda")  # where the ranks' tensors live
# Where ranks run: spread, one rank per node (what the task texts measure: "a single
# process per node"), or pack, ranks may share a node (the local launcher: one machine;
# on a cluster, e.g. the 8 GPUs of one server). auto: spread on Kubernetes, pack locally.
PLACEMENTS = ("auto", "spread", "pack")
# Limits on what one request may ask (the trigger form states the same ones).
MAX_REPEATS = 100  # runs per worker count
MAX_GROUPS = 500  # worker counts × repeats
# Runs per worker count unless asked otherwise: three, so that MLPerf's rule (drop the
# fastest and slowest) has something to drop and one straggler cannot decide a result.
DEFAULT_REPEATS = 3
MAX_GROUP_TIMEOUT_S = 7 * 24 * 3600.0  # a week: the longest full task on one worker fits
# A container image reference: [registry[:port]/]name[:tag][@digest], no spaces.
IMAGE_REFERENCE = re.compile(r"[a-z0-9][a-zA-Z0-9._/:-]*(@sha256:[0-9a-f]{64})?")


class InvalidParameter(ValueError):
    """A request field with a value that cannot run; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class SweepRequest:
    """A validated sweep: one task at several worker counts, each repeated."""

    task: str
    world_sizes: tuple[int, ...]
    backend: str = "gloo"
    light: bool = False
    repeats: int = 1
    collective_timeout_s: float = 60.0
    group_timeout_s: float = 3600.0
    variant: str = "sync"
    seed: int = 0
    data_dir: Path = Path("var/data")
    precision: str = DEFAULT_PRECISION
    compile: str = "auto"
    launcher: str = "local"
    gpus_per_worker: int = 1  # Kubernetes: nvidia.com/gpu per pod; local ranks use the host's
    worker_image: str = ""  # Kubernetes: "" means SCALEBENCH_WORKER_IMAGE
    device: str = "auto"  # where tensors live: auto (a GPU when there is one), cpu or cuda
    placement: str = "pack"  # spread (one rank per node) or pack; "auto" is resolved
    download: bool = False  # fetch a missing full data set before the first group
    # Link profiles (scalebench.network), every worker count runs on each: "host" (unshaped),
    # or a rate with an optional one-way delay, e.g. "100mbit", "1gbit+2ms".
    network: tuple[str, ...] = ("host",)

    @property
    def spec(self) -> TaskSpec:
        return get_task(self.task)

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> SweepRequest:
        """The request back from :func:`request_fields` (how it crosses Airflow's XCom)."""
        return cls(
            **{
                **fields,
                "world_sizes": tuple(fields["world_sizes"]),
                "data_dir": Path(fields["data_dir"]),
                "network": tuple(fields.get("network", ("host",))),
            }
        )


def _integer(field: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidParameter(field, f"must be a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
        return int(value.strip())
    raise InvalidParameter(field, f"must be a whole number, got {value!r}")


def _positive_number(field: str, value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidParameter(field, f"must be a number of seconds, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidParameter(field, f"must be a number of seconds, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise InvalidParameter(field, f"must be positive and finite, got {value!r}")
    return number


def parse_world_sizes(value: Any) -> tuple[int, ...]:
    """``"1,2,4"``, ``[1, 2, 4]`` or ``4`` → (1, 2, 4): distinct, ascending, each ≥ 1."""
    if value is None:
        items: Sequence[Any] = []
    elif isinstance(value, str):
        items = [part for part in value.split(",") if part.strip()]
    elif isinstance(value, Sequence):
        items = value
    else:
        items = [value]
    if not items:
        raise InvalidParameter("workers", "give at least one worker count, e.g. 1,2,4")
    sizes = [_integer("workers", item) for item in items]
    for size in sizes:
        if size < 1:
            raise InvalidParameter("workers", f"worker counts must be at least 1, got {size}")
    return tuple(sorted(set(sizes)))


def validate_request(
    *,
    task: Any,
    workers: Any = None,
    backend: Any = "gloo",
    light: Any = False,
    repeats: Any = DEFAULT_REPEATS,
    collective_timeout_s: Any = 60.0,
    group_timeout_s: Any = 3600.0,
    variant: Any = "sync",
    seed: Any = 0,
    data_dir: Any = None,
    precision: Any = DEFAULT_PRECISION,
    compile: Any = None,
    launcher: Any = "local",
    gpus_per_worker: Any = 1,
    worker_image: Any = "",
    device: Any = "auto",
    placement: Any = "auto",
    download: Any = None,
    network: Any = None,
    gpus: int | None = None,
    max_workers: int | None = None,
) -> SweepRequest:
    """Check every field; raise :class:`InvalidParameter` on the first bad one.

    ``compile`` ``None`` takes ``SCALEBENCH_COMPILE`` (default ``auto``).
    ``download`` ``None`` is on for a full data set whose publisher gives
    checksums (CIFAR-10); a missing set is then fetched by the sweep's data
    step instead of refused here. ``network`` lists link profiles (``None``:
    ``host``); a shaped one is refused where the launcher cannot emulate it.
    ``gpus`` is how many GPUs the local launcher can give (``None``: count the
    host's). ``nccl`` needs one GPU per worker: on the host, or
    ``gpus_per_worker`` ≥ 1 on Kubernetes. ``max_workers`` is the largest group
    allowed (``None``: ``SCALEBENCH_MAX_WORKERS``).
    """
    if not isinstance(task, str) or task not in task_ids():
        raise InvalidParameter(
            "task", f"unknown task {task!r}; known tasks: {', '.join(task_ids())}"
        )
    spec = get_task(task)
    world_sizes = parse_world_sizes(workers)
    unknown_sizes = [k for k in world_sizes if k not in spec.world_sizes]
    if unknown_sizes:
        raise InvalidParameter(
            "workers",
            f"{task} runs at {', '.join(map(str, spec.world_sizes))} workers (the task's "
            f"definition), not {', '.join(map(str, unknown_sizes))}",
        )
    if max_workers is None:
        from scalebench.config import max_workers as configured_max_workers

        max_workers = configured_max_workers()
    if max(world_sizes) > max_workers:
        raise InvalidParameter(
            "workers",
            f"{max(world_sizes)} workers asked, but the cluster allows at most {max_workers} "
            "(SCALEBENCH_MAX_WORKERS)",
        )
    if not isinstance(launcher, str) or launcher not in LAUNCHERS:
        raise InvalidParameter(
            "launcher", f"must be one of {', '.join(LAUNCHERS)}, got {launcher!r}"
        )
    gpus_each = _integer("gpus_per_worker", gpus_per_worker)
    if not 0 <= gpus_each <= 16:
        raise InvalidParameter("gpus_per_worker", f"must be between 0 and 16, got {gpus_each}")
    if not isinstance(worker_image, str) or (
        worker_image and not IMAGE_REFERENCE.fullmatch(worker_image)
    ):
        raise InvalidParameter(
            "worker_image", f"must be an image reference like repo/name:tag, got {worker_image!r}"
        )
    runner = LAUNCHERS[launcher]
    if worker_image and not runner.runs_images:
        imaging = " or ".join(n for n, spec in LAUNCHERS.items() if spec.runs_images)
        raise InvalidParameter("worker_image", f"only the {imaging} launcher runs images")
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise InvalidParameter("backend", f"must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if not isinstance(light, bool):
        raise InvalidParameter("light", f"must be true or false, got {light!r}")
    repeat_count = _integer("repeats", repeats)
    if repeat_count < 1:
        raise InvalidParameter("repeats", f"must be at least 1, got {repeat_count}")
    if repeat_count > MAX_REPEATS:
        raise InvalidParameter(
            "repeats", f"at most {MAX_REPEATS} runs per worker count, got {repeat_count}"
        )
    try:
        profiles = parse_profiles(network)
    except BadProfile as exc:
        raise InvalidParameter("network", str(exc)) from None
    planned = repeat_count * len(world_sizes) * len(profiles)
    if planned > MAX_GROUPS:
        per_profile = f" × {len(profiles)} network profiles" if len(profiles) > 1 else ""
        raise InvalidParameter(
            "repeats",
            f"{len(world_sizes)} worker count(s) × {repeat_count} repeats{per_profile} = "
            f"{planned} groups; a sweep plans at most {MAX_GROUPS}",
        )
    if variant not in VARIANTS:
        raise InvalidParameter("variant", f"must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if isinstance(spec, AllReduceSpec) and variant != "sync":
        raise InvalidParameter("variant", "the all-reduce task has no training variant")
    if not isinstance(spec, AllReduceSpec) and variant not in spec.variants:
        raise InvalidParameter(
            "variant", f"{spec.id} implements only {', '.join(spec.variants)}, not {variant!r}"
        )
    if precision not in PRECISIONS:
        raise InvalidParameter(
            "precision", f"must be one of {', '.join(PRECISIONS)}, got {precision!r}"
        )
    if isinstance(spec, AllReduceSpec) and precision != DEFAULT_PRECISION:
        raise InvalidParameter(
            "precision", "the all-reduce task measures the data types its spec lists"
        )
    if not isinstance(spec, AllReduceSpec) and precision not in spec.precisions:
        raise InvalidParameter(
            "precision", f"{spec.id} runs {', '.join(spec.precisions)} only, not {precision!r}"
        )
    if compile is None:
        from scalebench.config import default_compile

        try:
            compile = default_compile()
        except ValueError as exc:
            raise InvalidParameter("compile", str(exc)) from None
    if not isinstance(compile, str) or compile not in COMPILE_SETTINGS:
        raise InvalidParameter(
            "compile", f"must be one of {', '.join(COMPILE_SETTINGS)}, got {compile!r}"
        )
    if isinstance(spec, AllReduceSpec) and compile == "on":
        raise InvalidParameter("compile", "the all-reduce task has no model to compile")
    seed_value = _integer("seed", seed)
    if seed_value < 0:
        raise InvalidParameter("seed", f"must be 0 or more, got {seed_value}")
    if seed_value + repeat_count - 1 > MAX_SEED:  # repeat r runs with seed + r
        raise InvalidParameter(
            "seed",
            f"with {repeat_count} repeat(s) the seed may be at most "
            f"{MAX_SEED - repeat_count + 1} (seeds are 64-bit), got {seed_value}",
        )
    collective = _positive_number("collective_timeout_s", collective_timeout_s)
    if not MIN_COLLECTIVE_TIMEOUT_S <= collective <= MAX_COLLECTIVE_TIMEOUT_S:
        raise InvalidParameter(
            "collective_timeout_s",
            f"must be between {MIN_COLLECTIVE_TIMEOUT_S:g} s (time to form the group) and "
            f"{MAX_COLLECTIVE_TIMEOUT_S:.0f} s (7 days), got {collective:g} s",
        )
    group = _positive_number("group_timeout_s", group_timeout_s)
    if group > MAX_GROUP_TIMEOUT_S:
        raise InvalidParameter(
            "group_timeout_s",
            f"at most {MAX_GROUP_TIMEOUT_S:.0f} s (7 days) per group, got {group:g} s",
        )
    if group < collective:
        raise InvalidParameter(
            "group_timeout_s",
            f"{group:g} s is shorter than the collective timeout ({collective:g} s)",
        )
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise InvalidParameter(
            "placement", f"must be one of {', '.join(PLACEMENTS)}, got {placement!r}"
        )
    if not isinstance(device, str) or device not in DEVICES:
        raise InvalidParameter("device", f"must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cpu" and backend == "nccl":
        raise InvalidParameter("device", "nccl all-reduces GPU tensors only; use gloo for cpu")
    placement = _refuse_what_the_launcher_cannot_run(
        runner, placement, device, backend, gpus_each, max(world_sizes), profiles, gpus
    )
    if backend == "mpi" and not mpi_available():
        raise InvalidParameter(
            "backend", "mpi needs a torch build with MPI support, and this torch has none"
        )
    if data_dir is None:
        from scalebench.config import data_dir as default_data_dir

        data_dir = default_data_dir()
    if not isinstance(data_dir, str | Path) or not str(data_dir).strip() or "\0" in str(data_dir):
        raise InvalidParameter("data_dir", f"must be a folder's path, got {data_dir!r}")
    data_path = Path(data_dir)
    if download is None:  # on where the publisher's checksums prove the download intact
        download = published_checksums(spec.data.name) if isinstance(spec, TrainingSpec) else False
    if not isinstance(download, bool):
        raise InvalidParameter("download", f"must be true or false, got {download!r}")
    if not light and not isinstance(spec, AllReduceSpec):
        try:
            check_available(spec.data.name, data_path)
        except DataSetMissing as exc:
            if not downloadable(spec.data.name):
                raise InvalidParameter(
                    "data_dir", f"{exc} ({spec.data.name} cannot be downloaded by scalebench)"
                ) from None
            if not download:
                raise InvalidParameter(
                    "data_dir", f"{exc} Or ask for the download (download: true, --download)."
                ) from None
    return SweepRequest(
        task=task,
        world_sizes=world_sizes,
        backend=backend,
        light=light,
        repeats=repeat_count,
        collective_timeout_s=collective,
        group_timeout_s=group,
        variant=variant,
        seed=seed_value,
        data_dir=data_path,
        precision=precision,
        compile=compile,
        launcher=launcher,
        gpus_per_worker=gpus_each,
        worker_image=worker_image,
        device=device,
        placement=placement,
        download=download,
        network=tuple(p.name for p in profiles),
    )


def _refuse_what_the_launcher_cannot_run(
    runner: LauncherSpec,
    placement: str,
    device: str,
    backend: str,
    gpus_each: int,
    largest_group: int,
    profiles: Sequence[NetworkProfile],
    gpus: int | None,
) -> str:
    """Check the request against what ``runner`` declares it can do (and, for a launcher
    whose ranks run here, against this host); returns the placement ``auto`` resolves to."""
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

    ``worker`` is what each rank runs; ``sweep_dir`` and ``data_dir`` are the
    host's paths (a launcher maps them to what its ranks see); ``timeout_s`` is
    the group's wall-clock limit in seconds. Crosses Airflow's XCom as
    :meth:`to_xcom` / :meth:`from_xcom`.
    """

    run_id: str
    world_size: int
    repeat: int
    sweep_dir: str
    data_dir: str
    worker: WorkerRequest
    timeout_s: float
    launcher: str = "local"
    gpus_per_worker: int = 1
    worker_image: str = ""
    placement: str = "pack"  # spread: one rank per node (Kubernetes); pack: may share

    @property
    def run_dir(self) -> Path:
        """The host's directory of this group's records."""
        return Path(self.sweep_dir) / self.run_id

    def to_xcom(self) -> dict[str, Any]:
        return {**asdict(self), "worker": self.worker.as_dict()}

    @classmethod
    def from_xcom(cls, data: dict[str, Any]) -> GroupPlan:
        return cls(**{**data, "worker": WorkerRequest(**data["worker"])})


@dataclass(frozen=True)
class SweepPlan:
    """A started sweep: its id, its directory (holding the manifest) and its groups in order."""

    sweep_id: str
    sweep_dir: Path
    request: SweepRequest
    groups: tuple[GroupPlan, ...]


def run_id(sweep_id: str, world_size: int, repeat: int, network: str = "host") -> str:
    """``<sweep>-w<k>-r<repeat + 1>``, with the network profile's token before the repeat
    when it is shaped (``<sweep>-w2-n100mbit-r1``). Repeats count from 1 in run ids, as
    every table and log line does; ``repeat`` from 0."""
    token = parse_profile(network).token
    return f"{sweep_id}-w{world_size}{'-' + token if token else ''}-r{repeat + 1}"


def plan_groups(request: SweepRequest, sweep_id: str, sweep_dir: Path) -> tuple[GroupPlan, ...]:
    """Every (world size, network profile, repeat) of the sweep, interleaved.

    Interleaving (1, 2, 4, 1, 2, 4, ...; each profile in turn within a
    repeat) spreads slow drifts of the machine over all sizes and profiles
    instead of charging them to one. Repeat ``r`` runs with seed ``seed + r``.
    """
    training = not isinstance(request.spec, AllReduceSpec)
    return tuple(
        GroupPlan(
            run_id=run_id(sweep_id, k, repeat, network),
            world_size=k,
            repeat=repeat,
            sweep_dir=str(sweep_dir),
            data_dir=str(request.data_dir),
            worker=WorkerRequest(
                task=request.task,
                run_id=run_id(sweep_id, k, repeat, network),
                light=request.light,
                backend=request.backend,
                collective_timeout_s=request.collective_timeout_s,
                seed=request.seed + repeat,
                training=training,
                variant=request.variant,
                precision=request.precision,
                compile=request.compile,
                device=request.device,
                network=network,
            ),
            timeout_s=request.group_timeout_s,
            launcher=request.launcher,
            gpus_per_worker=request.gpus_per_worker,
            worker_image=request.worker_image,
            placement=request.placement,
        )
        for repeat in range(request.repeats)
        for network in request.network
        for k in request.world_sizes
    )


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
FORM_FIELDS = (
    "workers",
    "light",
    "backend",
    "repeats",
    "seed",
    "variant",
    "precision",
    "compile",
    "launcher",
    "gpus_per_worker",
    "worker_image",
    "device",
    "placement",
    "collective_timeout_s",
    "group_timeout_s",
    "data_dir",
    "download",
    "network",
)


def request_from_form(task: str, fields: Mapping[str, Any]) -> SweepRequest:
    """Validate a trigger's ``fields`` for ``task``; unknown fields are refused by name."""
    unknown = sorted(set(fields) - set(FORM_FIELDS))
    if unknown:
        raise InvalidParameter(
            unknown[0],
            f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known fields: {', '.join(FORM_FIELDS)}",
        )
    return validate_request(task=task, **fields)


def request_fields(request: SweepRequest) -> dict[str, Any]:
    """The request as plain JSON values (the manifest's ``request``, the hashed configuration)."""
    return {
        **asdict(request),
        "world_sizes": list(request.world_sizes),
        "data_dir": str(request.data_dir),
        "network": list(request.network),
    }


def new_manifest(
    request: SweepRequest,
    sweep_id: str,
    groups: Sequence[manifest.GroupEntry],
    trigger: str,
    created_at: str | None = None,
    runner: dict[str, Any] | None = None,
) -> manifest.Manifest:
    """The manifest of a new sweep of ``request`` (``created_at``: ISO 8601, default now;
    ``runner``: the process that runs it, :func:`scalebench.manifest.this_process`)."""
    config = request_fields(request)
    return manifest.Manifest(
        sweep_id=sweep_id,
        trigger=trigger,
        created_at=created_at or datetime.now(UTC).isoformat(),
        code_version=code_version(),
        config_hash=manifest.configuration_hash(config),
        request=config,
        groups=tuple(groups),
        extra={} if runner is None else {"runner": runner},
    )


def start_sweep(
    request: SweepRequest,
    results_root: Path,
    trigger: str,
    runner: dict[str, Any] | None = None,
) -> SweepPlan:
    """Plan the sweep and write its manifest into a new directory below ``results_root``.

    ``trigger`` is ``manual`` (a person, e.g. the Airflow form), ``scheduled``
    (the nightly run) or ``cli``; ``runner`` names the process that runs every group
    (the command line's), so that a sweep it left open can be closed once it is gone.
    """
    sweep_id = new_sweep_id(request.task)
    sweep_dir = results_root / sweep_id
    groups = plan_groups(request, sweep_id, sweep_dir)
    entries = [
        manifest.GroupEntry(g.run_id, g.world_size, g.repeat, network=g.worker.network)
        for g in groups
    ]
    manifest.create(sweep_dir, new_manifest(request, sweep_id, entries, trigger, runner=runner))
    return SweepPlan(sweep_id, sweep_dir, request, groups)
