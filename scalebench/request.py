"""A sweep request and its fields, each declared once.

Every field of :class:`SweepRequest` carries a
:class:`~scalebench.request_fields.RequestField`, declared here with ``ask(...)``: the
name users type, a title, one sentence of help, its kind, default, choices and
bounds. From that declaration come the command line's options (``cli.run``), the
Airflow trigger form's Params (``operators.benchmark_dag.params``), the nightly
run's ``SCALEBENCH_NIGHTLY_<FIELD>`` settings (:mod:`scalebench.nightly`), the
field-by-field checks of :func:`scalebench.sweep.validate_request` (which adds the
rules that tie fields together), the option table of ``docs/command-line.md`` (a
test holds it to this list) and, for a field declared ``to_ranks``, the rank's own
option (:func:`scalebench.rank_options.add_rank_options`, which ``workers.run``
parses) and, for a field declared ``compared``, its part in the configuration hash
(:func:`scalebench.config_hash.configuration_hash`). Adding a field is one
attribute here and the code that uses it.

This module holds the declarations and the limits they name; how a field is declared
and a value of it read is :mod:`scalebench.request_fields` (a bad value raises
:class:`~scalebench.request_fields.InvalidParameter` naming the field), and the checks
of a whole stored request are :mod:`scalebench.request_checks`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalebench.kubernetes_names import LABELLED_NAME_PATTERN
from scalebench.launchers import LAUNCHERS
from scalebench.network import (
    HOST_PROFILE,
    MAX_PROFILES,
    NETWORK_PATTERN,
    NetworkProfile,
    parse_profiles,
)
from scalebench.nodes import MAX_RANKS_PER_NODE
from scalebench.pairing import INTERLEAVED, PAIRINGS
from scalebench.rank import (
    BACKENDS,
    DEFAULT_PRECISION,
    MAX_COLLECTIVE_TIMEOUT_S,
    MAX_SEED,
    MIN_COLLECTIVE_TIMEOUT_S,
    PRECISIONS,
)
from scalebench.request_fields import RequestField, ask, read_counts
from scalebench.stacks import IMAGE_REFERENCE, MAX_STACKS, Stack, parse_stacks
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
MAX_EPOCHS = 10_000  # an epoch limit: far above any task's own (the longest, Task 3a's, is 750)
MAX_THREADS_PER_WORKER = 256


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
            (
                "auto",
                "nccl where the ranks ask for GPUs (on Kubernetes by default; locally with "
                "cuda tensors or gpus_per_worker, when the host has a GPU per worker), gloo "
                "otherwise",
            ),
            ("gloo", "CPU or GPU tensors, runs anywhere"),
            ("nccl", "NVIDIA GPUs only, one per worker"),
            ("mpi", "a torch built with MPI support, local launcher only"),
        ),
        kind="choice",
        choices=("auto", *BACKENDS),
        default="auto",
        built_default="gloo",
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
    max_epochs: int | None = ask(
        name="max_epochs",
        title="Epoch limit",
        help="Training tasks only: each run ends after this many epochs, its goal reached or "
        "not (a run that ends short of its goal has no time to accuracy), for a quick look at "
        "a machine or a cluster; not given: the task's own limit (Task 1a: 164, light 30).",
        kind="int",
        minimum=1,
        maximum=MAX_EPOCHS,
        training_only=True,
        to_ranks=True,
        compared=True,
        usual=None,
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
        "between nodes. auto: on Kubernetes, the GPUs of one of the nodes the pods may run "
        "on divided by gpus_per_worker (1 for CPU pods); locally, 1.",
        kind="int",
        default="auto",
        built_default=1,
        takes_auto=True,
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
    # What the ranks run: not part of the configuration, which the stacks are compared within.
    stacks: tuple[Stack, ...] = ask(
        name="stacks",
        title="Stacks",
        help='Named ways a rank is started, each run in turn: {"name": {"python": '
        '"/path/bin/python"}} (local launcher) or {"name": {"image": "repo/name:tag"}} '
        '(Kubernetes), each with an optional "env": {"KEY": "VALUE"} (PYTHONPATH '
        "among them); every group runs once per stack. On the command line: --stack "
        "NAME=PYTHON_OR_IMAGE, repeated, and --stack-env NAME:KEY=VALUE. Empty: the "
        "launcher's own interpreter or image.",
        kind="stacks",
        default=(),
        maximum=MAX_STACKS,
        flag="--stack",
    )
    pairs: int | None = ask(
        name="pairs",
        title="Paired rounds",
        help="With two or more stacks: rounds of one run of every stack each, in an order "
        "drawn from the seed, at the round's seed (so each round pairs the stacks on the same "
        "machine and data); replaces repeats. Not given: repeats.",
        kind="int",
        minimum=1,
        maximum=MAX_REPEATS,
    )
    pairing: str = ask(
        name="pairing",
        title="Pairing",
        help="How the arms of a paired round run: interleaved, one after the other, each with "
        "the whole machine; duet, all at once, each pinned to cores of its own (the local "
        "launcher, CPU ranks, the host's network), at the worker counts whose arms fit; auto: "
        "duet where the arms fit and threads_per_worker is given, else interleaved.",
        kind="choice",
        choices=PAIRINGS,
        default="auto",
        compared=True,
        usual=INTERLEAVED,  # every run before a duet could be asked, paired or not
        built_default=INTERLEAVED,
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
        configuration, Airflow's XCom). Worker counts are stored as ``world_sizes``, stacks
        as a list (:meth:`~scalebench.stacks.Stack.stored`)."""
        values = dataclasses.asdict(self)
        values["world_sizes"] = list(values.pop("workers"))
        network = [profile.name for profile in self.network]
        stacks = [stack.stored() for stack in self.stacks]  # a list keeps their order
        return {
            **values,
            "data_dir": str(self.data_dir),
            "network": network,
            "stacks": stacks,
        }

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
                "stacks": parse_stacks(fields.get("stacks")),
            }
        )


FIELDS: tuple[RequestField, ...] = tuple(
    f.metadata["request_field"] for f in dataclasses.fields(SweepRequest) if f.metadata
)
FORM_FIELDS = tuple(field.name for field in FIELDS)
FIELD = {field.name: field for field in FIELDS}
RANK_FIELDS = tuple(field for field in FIELDS if field.to_ranks)


def parse_world_sizes(value: Any) -> tuple[int, ...]:
    """Worker counts as the command line or a form gives them (see
    :func:`~scalebench.request_fields.read_counts`)."""
    return read_counts(FIELD["workers"], value)
