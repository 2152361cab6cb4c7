"""A sweep request and its fields, each declared once.

Every field of :class:`SweepRequest` carries a :class:`RequestField`: the name
users type, a title, one sentence of help, its kind, default, choices and
bounds. From that declaration come the command line's options
(``cli.main``), the Airflow trigger form's Params
(``operators.benchmark_dag.params``), the nightly run's
``SCALEBENCH_NIGHTLY_<FIELD>`` settings (:mod:`scalebench.nightly`), the
field-by-field checks of :func:`scalebench.sweep.validate_request` (which adds
the rules that tie fields together), the option table of
``docs/command-line.md`` (a test holds it to this list) and, for a field
declared ``to_ranks``, the rank's own option (:func:`add_rank_options`, which
``workers.run`` parses) and, for a field declared ``compared``, its part in
the configuration hash (:func:`scalebench.manifest.configuration_hash`).
Adding a field is one attribute here and the code that uses it.

A value is read by :meth:`RequestField.read`: strings as the command line
gives them, JSON values as a form gives them, ``None`` for "not given"
(the default). A bad value raises :class:`InvalidParameter` naming the field.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalebench.kubernetes_names import LABELLED_NAME_PATTERN
from scalebench.launchers import LAUNCHERS
from scalebench.network import (
    HOST_PROFILE,
    MAX_PROFILES,
    NETWORK_PATTERN,
    BadProfile,
    NetworkProfile,
    listed,
    parse_profiles,
)
from scalebench.nodes import MAX_RANKS_PER_NODE
from scalebench.quantities import MAX_WORLD_SIZE
from scalebench.rank import (
    BACKENDS,
    DEFAULT_PRECISION,
    MAX_COLLECTIVE_TIMEOUT_S,
    MAX_SEED,
    MIN_COLLECTIVE_TIMEOUT_S,
    PRECISIONS,
)
from scalebench.tasks.specs import COMPILE_SETTINGS, TRAINING_VARIANTS

DEVICES = ("auto", "cpu", "cuda")  # where the ranks' tensors live
# Where ranks run: spread, one rank per node (what the task texts measure: "a single
# process per node"), or pack, ranks may share a node (the local launcher: one machine;
# on a cluster, e.g. the 8 GPUs of one server). auto: spread on Kubernetes, pack locally.
PLACEMENTS = ("auto", "spread", "pack")
# Limits on what one request may ask (the trigger form states the same ones).
MAX_REPEATS = 100  # runs per worker count
MAX_GROUPS = 500  # worker counts × repeats × network profiles
# Runs per worker count unless asked otherwise: three, so that MLPerf's rule (drop the
# fastest and slowest) has something to drop and one straggler cannot decide a result.
DEFAULT_REPEATS = 3
MAX_GROUP_TIMEOUT_S = 7 * 24 * 3600.0  # a week: the longest full task on one worker fits
MAX_GPUS_PER_WORKER = 16
MAX_ELEMENTS = 2**31 - 1  # one message of Task 0: a tensor index torch takes anywhere
MAX_REPETITIONS = 100_000
MAX_THREADS_PER_WORKER = 256
# A container image reference: [registry[:port]/]name[:tag][@digest], no spaces.
IMAGE_REFERENCE = r"[a-z0-9][a-zA-Z0-9._/:-]*(@sha256:[0-9a-f]{64})?"


class InvalidParameter(ValueError):
    """A request field with a value that cannot run; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


# What a field holds, and so how a value is read and how the form and the command line ask
# for it: a whole number, seconds, true/false, one of ``choices``, free text (matching
# ``pattern``), a folder, worker counts ("1,2,4") or network profiles ("host,1gbit").
KINDS = ("int", "seconds", "bool", "choice", "text", "path", "counts", "profiles")


# The ``usual`` of a compared field without one: the field enters every configuration hash.
ALWAYS = "(always)"


@dataclass(frozen=True)
class RequestField:
    """One field of a request. ``name`` is what users type (form key, ``--name-with-dashes``
    unless ``flag`` says otherwise); ``default`` None means decided when validated (the help
    says how). ``minimum``/``maximum`` bound numbers (seconds for ``seconds``);
    ``training_only`` fields are not asked of the all-reduce task, ``allreduce_only`` ones only
    of it, nor ``in_form`` false ones
    in the trigger form (they are still accepted there); ``needs`` names the
    launcher capability (:class:`~scalebench.launchers.LauncherSpec`) a value other than the
    default requires. ``to_ranks``: every rank is given the value (its option in
    ``python -m workers.run`` is ``option``). ``compared``: runs with different values are
    different configurations (they enter the configuration hash), except ``usual``, the value
    every run had before the field existed, which is left out so older runs keep their
    identity (:data:`ALWAYS`: no such value, the field always enters)."""

    name: str
    title: str
    help: str
    kind: str
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    flag: str = ""
    training_only: bool = False
    allreduce_only: bool = False
    needs: str = ""
    in_form: bool = True
    pattern: str = ""
    pattern_help: str = ""
    to_ranks: bool = False
    compared: bool = False
    usual: Any = ALWAYS
    meanings: tuple[tuple[str, str], ...] = ()  # (choice, what it means or needs)
    allreduce_help: str = ""  # the all-reduce task's words, where ``help`` speaks of training

    def describe(self, offered: Sequence[str] | None = None, allreduce: bool = False) -> str:
        """The field's help for a form or an option: the all-reduce task's own words where
        it has them (``allreduce``), then what each choice means, for the ``offered``
        choices only (``None``: every choice)."""
        text = self.allreduce_help if allreduce and self.allreduce_help else self.help
        shown = [(c, m) for c, m in self.meanings if offered is None or c in offered]
        if shown:
            text += " " + "; ".join(f"{choice}: {meaning}" for choice, meaning in shown) + "."
        return text

    def asked_of(self, training: bool) -> bool:
        """Whether a training task (``training``) or the all-reduce task takes this field."""
        return not ((self.training_only and not training) or (self.allreduce_only and training))

    @property
    def option(self) -> str:
        """The command-line option."""
        return self.flag or "--" + self.name.replace("_", "-")

    def argv(self, value: Any) -> list[str]:
        """``value`` as this field's option in a command line (a flag alone for true,
        nothing for false); :meth:`read` reads it back."""
        if self.kind == "bool":
            return [self.option] if value else []
        if self.kind == "seconds":
            return [self.option, f"{value:g}"]
        return [self.option, str(value)]

    def read(self, value: Any) -> Any:
        """The value, checked and converted; ``None`` gives the default."""
        if value is None:
            value = self.default
        if value is None:
            return None  # decided when validated (the help says how)
        return _READERS[self.kind](self, value)


def ask(**declaration: Any) -> Any:
    """A :class:`SweepRequest` attribute declared by a :class:`RequestField`."""
    field = RequestField(**declaration)
    return dataclasses.field(default=field.default, metadata={"request_field": field})


@dataclass(frozen=True)
class SweepRequest:
    """A validated sweep: one task at several worker counts, each repeated, on each link."""

    task: str
    workers: tuple[int, ...] = ask(
        name="workers",
        title="Worker counts",
        help="One training group per worker count (and repeat), e.g. 1,2,4.",
        allreduce_help="One all-reduce group per worker count (and repeat), e.g. 2,4: each "
        "times every message size of the task.",
        kind="counts",
        default=(1, 2),
    )
    light: bool = ask(
        name="light",
        title="Light variant",
        help="Laptop-sized data and target; off for the full task.",
        allreduce_help="Fewer message sizes and repetitions, for a quick look; off: every size "
        "and repetition the task defines.",
        kind="bool",
        default=False,
        to_ranks=True,
        compared=True,
    )
    backend: str = ask(
        name="backend",
        title="Backend",
        help="The torch.distributed backend the ranks communicate with; a backend this host "
        "(or the cluster) cannot run is refused before any worker starts.",
        meanings=(
            ("gloo", "CPU or GPU tensors, runs anywhere"),
            ("nccl", "NVIDIA GPUs only, one per worker"),
            ("mpi", "a torch built with MPI support, local launcher only"),
        ),
        kind="choice",
        choices=BACKENDS,
        default="gloo",
        to_ranks=True,
        compared=True,
    )
    repeats: int = ask(
        name="repeats",
        title="Repeats",
        help="Runs per worker count; 3 or more drop the fastest and slowest, 1 is allowed "
        "but marked as one repeat.",
        kind="int",
        default=DEFAULT_REPEATS,
        minimum=1,
        maximum=MAX_REPEATS,
    )
    seed: int = ask(
        name="seed",
        title="Seed of the first repeat",
        help="Seeds every random choice of a rank (initial weights, data order, augmentation); "
        "repeat r runs with seed + r, so repeats differ and the same request draws the same "
        "again (seeds are 64-bit).",
        allreduce_help="The all-reduce task draws nothing at random: the seed is recorded with "
        "each repeat (repeat r: seed + r) and changes no measurement.",
        kind="int",
        default=0,
        minimum=0,
        maximum=MAX_SEED,  # and seed + repeats - 1 too: scalebench.sweep checks it
    )
    max_elements: int | None = ask(
        name="max_elements",
        title="Largest message (elements)",
        help="Task 0 only: message sizes above this many elements are left out, for a quick "
        "look at the small ones (with --light and --repetitions 2, a sweep of seconds); not "
        "given: every size of the task.",
        kind="int",
        minimum=1,
        maximum=MAX_ELEMENTS,
        allreduce_only=True,
        to_ranks=True,
        compared=True,
        usual=None,
    )
    repetitions: int | None = ask(
        name="repetitions",
        title="Timed repetitions",
        help="Task 0 only: timed all-reduces of each size (after its untimed warm-up ones); "
        "not given: the task's (100, light 10).",
        kind="int",
        minimum=1,
        maximum=MAX_REPETITIONS,
        allreduce_only=True,
        to_ranks=True,
        compared=True,
        usual=None,
    )
    dtype: str | None = ask(
        name="dtype",
        title="Data type",
        help="Task 0 only: the one data type to all-reduce; not given: each the task lists "
        "(float32 and float16).",
        kind="choice",
        choices=("float32", "float16"),
        allreduce_only=True,
        to_ranks=True,
        compared=True,
        usual=None,
    )
    variant: str = ask(
        name="variant",
        title="Training variant",
        help="How the workers' gradients are averaged each step.",
        meanings=(
            ("sync", "one flat all-reduce of every gradient, timed as its own phase"),
            ("ddp", "torch's DistributedDataParallel (bucketed all-reduces during the backward)"),
        ),
        kind="choice",
        choices=TRAINING_VARIANTS,
        default="sync",
        training_only=True,
        to_ranks=True,
        compared=True,
    )
    precision: str = ask(
        name="precision",
        title="Precision",
        help="The arithmetic of the training step.",
        meanings=(
            ("fp32", "32-bit floats throughout"),
            ("bf16", "forward and loss under bfloat16 autocast, fp32 weights and optimizer"),
        ),
        kind="choice",
        choices=PRECISIONS,
        default=DEFAULT_PRECISION,
        training_only=True,
        to_ranks=True,
        compared=True,
    )
    compile: str = ask(
        name="compile",
        title="Compile",
        help="torch.compile the training step before the clock starts. auto: where measured "
        "to pay (see docs/training-engine.md); on: refuse a run that cannot compile. "
        "Not given: SCALEBENCH_COMPILE, else auto.",
        kind="choice",
        choices=COMPILE_SETTINGS,
        training_only=True,
        to_ranks=True,
        compared=True,
        usual="off",  # eager, as every run was before compile could be asked
    )
    launcher: str = ask(
        name="launcher",
        title="Launcher",
        help="; ".join(f"{name}: {spec.description}" for name, spec in LAUNCHERS.items()) + ".",
        kind="choice",
        choices=tuple(LAUNCHERS),
        default="local",
    )
    gpus_per_worker: int = ask(
        name="gpus_per_worker",
        title="GPUs per worker (Kubernetes)",
        help="nvidia.com/gpu for each rank (a Kubernetes pod asks for this times its ranks); "
        "0 for CPU pods. Not given: 1 on Kubernetes; local ranks take one of the host's GPUs "
        "each with nccl or cuda tensors, none otherwise.",
        kind="int",
        minimum=0,
        maximum=MAX_GPUS_PER_WORKER,
    )
    worker_image: str = ask(
        name="worker_image",
        title="Worker image (Kubernetes)",
        help="The container image every pod of the group runs (Kubernetes launcher only); "
        "empty: SCALEBENCH_WORKER_IMAGE.",
        kind="text",
        default="",
        needs="runs_images",
        pattern=IMAGE_REFERENCE,
        pattern_help="an image reference like repo/name:tag",
    )
    threads_per_worker: int = ask(
        name="threads_per_worker",
        title="CPU threads per worker",
        help="torch's intra-op threads in each rank. 0: the launcher's share (here, this "
        "machine's cores divided among the ranks; on Kubernetes, torch's own default). The "
        "count can change the result, not only the speed: it is part of the configuration.",
        kind="int",
        default=0,
        minimum=0,
        maximum=MAX_THREADS_PER_WORKER,
        to_ranks=True,
        compared=True,
        usual=0,  # the launcher's share, as before the count could be asked
    )
    device: str = ask(
        name="device",
        title="Tensors on",
        help="auto: a GPU when the rank has one; cpu; cuda (Task 0: time CPU or GPU tensors).",
        kind="choice",
        choices=DEVICES,
        default="auto",
        to_ranks=True,
        compared=True,
        usual="auto",
    )
    placement: str = ask(
        name="placement",
        title="Placement",
        help="spread: one rank per node (Kubernetes); pack: ranks may share a node; "
        "auto: spread on Kubernetes, pack locally.",
        kind="choice",
        choices=PLACEMENTS,
        default="auto",
        compared=True,
        usual="pack",  # what every run was before spread could be asked
    )
    ranks_per_node: int = ask(
        name="ranks_per_node",
        title="Ranks per node",
        help="Ranks that share a node (e.g. 8 for the 8 GPUs of one server): a group of k "
        "workers runs on k / ranks_per_node nodes, and a group larger than one node must "
        "fill its nodes. Ranks of a node talk through its memory, nodes over the network: "
        "locally each node is emulated and an emulated network shapes only the links "
        "between nodes.",
        kind="int",
        default=1,
        minimum=1,
        maximum=MAX_RANKS_PER_NODE,
        needs="nodes",
        compared=True,
        usual=1,  # one rank per node, as every run was before nodes could hold more
    )
    collective_timeout_s: float = ask(
        name="collective_timeout_s",
        title="Collective timeout (s)",
        help="Seconds one collective (the group's set-up, an all-reduce) may wait for its "
        "peers before the rank fails: a dead or stuck peer ends the group within this time "
        "instead of holding it until the group's limit.",
        kind="seconds",
        default=60.0,
        minimum=MIN_COLLECTIVE_TIMEOUT_S,
        maximum=MAX_COLLECTIVE_TIMEOUT_S,
        flag="--timeout",
        to_ranks=True,
    )
    group_timeout_s: float = ask(
        name="group_timeout_s",
        title="Time limit per group (s)",
        help="Wall-clock limit of one group (a worker count's repeat) in seconds; past it "
        "every rank is stopped and the group recorded timed_out. Not given: the task's own "
        "limit, which fits its slowest group (one worker on a CPU) with room to spare "
        "(`scalebench tasks` lists them).",
        kind="seconds",
        maximum=MAX_GROUP_TIMEOUT_S,
        flag="--group-timeout",
    )
    data_dir: Path = ask(  # noqa: RUF009 (a dataclasses.field, as every ask)
        name="data_dir",
        title="Data sets",
        help="The folder of the full data sets; not given: SCALEBENCH_DATA_DIR.",
        kind="path",
        in_form=False,  # where the Airflow workers keep data is the deployment's to say
    )
    download: bool = ask(
        name="download",
        title="Download the data set",
        help="Fetch a missing full data set before the first group; not given: on for a set "
        "whose publisher gives checksums (CIFAR-10).",
        kind="bool",
        training_only=True,
    )
    network: tuple[NetworkProfile, ...] = ask(
        name="network",
        title="Network profiles",
        help="Every worker count runs on each: host (the machines' own network) or an "
        "emulated link, e.g. 100mbit, 1gbit, 10gbit, 1gbit+2ms (a one-way delay; local "
        "launcher only, where the kernel has netem).",
        kind="profiles",
        default=(HOST_PROFILE,),
        maximum=MAX_PROFILES,
        pattern=NETWORK_PATTERN,
        compared=True,
        usual="host",  # a run's profile, or a sweep's list of them
    )
    # Where a shared cluster schedules the groups (Kubernetes): not part of the configuration.
    queue_name: str = ask(
        name="queue_name",
        title="Kueue queue (Kubernetes)",
        help="The Kueue LocalQueue the groups wait in for admission; empty: "
        "SCALEBENCH_K8S_QUEUE_NAME (unset: no queue).",
        kind="text",
        default="",
        needs="queues",
        pattern=LABELLED_NAME_PATTERN,
        pattern_help="a DNS-1123 subdomain of at most 63 characters, such as team-a",
    )
    priority_class: str = ask(
        name="priority_class",
        title="Priority class (Kubernetes)",
        help="The PriorityClass of the pods; empty: SCALEBENCH_K8S_PRIORITY_CLASS (unset: "
        "the cluster's default).",
        kind="text",
        default="",
        needs="queues",
        pattern=LABELLED_NAME_PATTERN,
        pattern_help="a DNS-1123 subdomain of at most 63 characters, such as high-priority",
    )

    @property
    def world_sizes(self) -> tuple[int, ...]:
        """The worker counts (``workers``), ascending."""
        return self.workers

    @property
    def spec(self) -> Any:
        from scalebench.tasks import get_task

        return get_task(self.task)

    def to_fields(self) -> dict[str, Any]:
        """The request as plain JSON values (the manifest's ``request``, the hashed
        configuration, Airflow's XCom). Worker counts are stored as ``world_sizes``."""
        values = dataclasses.asdict(self)
        values["world_sizes"] = list(values.pop("workers"))
        network = [profile.name for profile in self.network]
        return {**values, "data_dir": str(self.data_dir), "network": network}

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> SweepRequest:
        """The request back from :meth:`to_fields`."""
        values = {k: v for k, v in fields.items() if k != "world_sizes"}
        return cls(
            **{
                **values,
                "workers": tuple(fields["world_sizes"]),
                "data_dir": Path(fields["data_dir"]),
                "network": parse_profiles(fields.get("network")),
            }
        )


def check_stored(fields: dict[str, Any]) -> None:
    """Raise :class:`InvalidParameter` for a stored request (a manifest's ``request``, as
    :meth:`SweepRequest.to_fields` writes it) holding a value no validated request can hold:
    a task that does not exist, a field no request has, a value its declaration refuses, a
    variant or precision its task does not implement. A field missing is allowed (a sweep
    written before the field existed); what only the launching host can judge (its GPUs,
    its data folder) is not checked."""
    from scalebench.tasks import TrainingSpec, get_task, task_ids

    task = fields.get("task")
    if not isinstance(task, str) or task not in task_ids():
        raise InvalidParameter("task", f"unknown task {task!r}")
    stored_names = {"task", "world_sizes", *(f.name for f in FIELDS)} - {"workers"}
    unknown = sorted(set(fields) - stored_names)
    if unknown:
        raise InvalidParameter(unknown[0], "no request has this field")
    for name, value in fields.items():
        if name == "task" or value is None:
            continue
        FIELD["workers" if name == "world_sizes" else name].read(value)
    spec = get_task(task)
    if isinstance(spec, TrainingSpec):
        check_implemented(spec, fields)


def check_implemented(spec: Any, values: dict[str, Any]) -> None:
    """Raise :class:`InvalidParameter` for a variant or precision (those of ``values`` given)
    that the training task ``spec`` does not implement."""
    for name, offered in (("variant", spec.variants), ("precision", spec.precisions)):
        if name in values and values[name] not in offered:
            raise InvalidParameter(
                name, f"{spec.id} implements only {', '.join(offered)}, not {values[name]!r}"
            )


FIELDS: tuple[RequestField, ...] = tuple(
    f.metadata["request_field"] for f in dataclasses.fields(SweepRequest) if f.metadata
)
FORM_FIELDS = tuple(field.name for field in FIELDS)
FIELD = {field.name: field for field in FIELDS}
RANK_FIELDS = tuple(field for field in FIELDS if field.to_ranks)


def add_rank_options(parser: argparse.ArgumentParser) -> None:
    """The ``to_ranks`` fields as options of ``python -m workers.run``: each read and
    checked by its declaration (a bad value is refused, naming the option), with the
    field's default when not given."""

    def reader(field: RequestField) -> Any:
        def read(text: str) -> Any:
            try:
                return field.read(text)
            except InvalidParameter as exc:  # argparse names the option
                raise argparse.ArgumentTypeError(exc.reason) from None

        read.__name__ = field.kind  # what argparse calls the type in its messages
        return read

    for field in RANK_FIELDS:
        if field.kind == "bool":
            parser.add_argument(field.option, dest=field.name, action="store_true", help=field.help)
            continue
        # decided when validated (compile): a rank not told takes the usual value
        default = field.usual if field.default is None else field.default
        parser.add_argument(
            field.option,
            dest=field.name,
            type=reader(field),
            default=default,
            choices=field.choices or None,
            metavar=field.name.upper() if not field.choices else None,
            help=f"{field.help} (a rank not told: {default})",
        )


# -- reading one value ----------------------------------------------------------------------


# The most digits a whole number of a request may have: every field's range ends far below
# (Python refuses to convert more than 4,300 digits at all, and the databases hold 64 bits).
MAX_DIGITS = 40


def _whole_number(field: RequestField, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidParameter(field.name, f"must be a whole number, got {value!r}")
    if isinstance(value, int):
        if abs(value) >= 10**MAX_DIGITS:  # str() of one of 4,300 digits or more raises
            raise InvalidParameter(
                field.name,
                f"must be a whole number of at most {MAX_DIGITS} digits, got one of "
                f"{value.bit_length():,} bits",
            )
        return value
    if isinstance(value, float) and value.is_integer():
        return _whole_number(field, int(value))
    if isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
        digits = value.strip().lstrip("+-").lstrip("0")
        if len(digits) > MAX_DIGITS:
            raise InvalidParameter(
                field.name,
                f"must be a whole number of at most {MAX_DIGITS} digits, got one of "
                f"{len(digits):,}",
            )
        return int(value.strip())
    shown = (
        repr(value) if not isinstance(value, str) or len(value) < 60 else repr(value[:57]) + "..."
    )
    raise InvalidParameter(field.name, f"must be a whole number, got {shown}")


def _within(field: RequestField, number: float, unit: str = "") -> None:
    def shown(value: float) -> str:
        return f"{value:g}{unit}" if unit else str(value)

    if field.minimum is not None and number < field.minimum:
        raise InvalidParameter(
            field.name, f"must be at least {shown(field.minimum)}, got {shown(number)}"
        )
    if field.maximum is not None and number > field.maximum:
        raise InvalidParameter(
            field.name, f"must be at most {shown(field.maximum)}, got {shown(number)}"
        )


def _read_int(field: RequestField, value: Any) -> int:
    number = _whole_number(field, value)
    _within(field, number)
    return number


def _read_seconds(field: RequestField, value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidParameter(field.name, f"must be a number of seconds, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidParameter(field.name, f"must be a number of seconds, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise InvalidParameter(field.name, f"must be positive and finite, got {value!r}")
    _within(field, number, " s")
    return number


def _read_bool(field: RequestField, value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InvalidParameter(field.name, f"must be true or false, got {value!r}")


def _read_choice(field: RequestField, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value in field.choices):
        return value
    raise InvalidParameter(field.name, f"must be one of {', '.join(field.choices)}, got {value!r}")


def _read_text(field: RequestField, value: Any) -> str:
    if not isinstance(value, str) or (
        value and field.pattern and not re.fullmatch(field.pattern, value)
    ):
        raise InvalidParameter(field.name, f"must be {field.pattern_help}, got {value!r}")
    return value


def _read_path(field: RequestField, value: Any) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str | Path) or not str(value).strip() or "\0" in str(value):
        raise InvalidParameter(field.name, f"must be a folder's path, got {value!r}")
    return Path(value)


def _read_counts(field: RequestField, value: Any) -> tuple[int, ...]:
    """``"1,2,4"``, ``[1, 2, 4]`` or ``4`` → (1, 2, 4): distinct, ascending, each ≥ 1."""
    items = listed(value)
    if not items:
        raise InvalidParameter(field.name, "give at least one worker count, e.g. 1,2,4")
    sizes = [_whole_number(field, item) for item in items]
    for size in sizes:
        if size < 1:
            raise InvalidParameter(field.name, f"worker counts must be at least 1, got {size}")
        if size > MAX_WORLD_SIZE:
            raise InvalidParameter(
                field.name, f"worker counts must be at most {MAX_WORLD_SIZE}, got {size}"
            )
    return tuple(sorted(set(sizes)))


def _read_profiles(field: RequestField, value: Any) -> tuple[NetworkProfile, ...]:
    try:
        return parse_profiles(value)
    except BadProfile as exc:
        raise InvalidParameter(field.name, str(exc)) from None


_READERS = {
    "int": _read_int,
    "seconds": _read_seconds,
    "bool": _read_bool,
    "choice": _read_choice,
    "text": _read_text,
    "path": _read_path,
    "counts": _read_counts,
    "profiles": _read_profiles,
}
assert set(_READERS) == set(KINDS)


def parse_world_sizes(value: Any) -> tuple[int, ...]:
    """Worker counts as the command line or a form gives them (see :func:`_read_counts`)."""
    return _read_counts(FIELD["workers"], value)
