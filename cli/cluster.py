"""``scalebench cluster check``: what a sweep needs of the Kubernetes cluster, asked of it
before anything starts, as a table of PASS, WARN and FAIL lines
(:func:`operators.kubernetes.cluster.check_cluster`); and the reading of the cluster that
``scalebench run --launcher kubernetes`` takes ``ranks_per_node: auto`` and the fit from."""

from __future__ import annotations

import argparse
import sys

from cli.errors import debugging
from scalebench.cluster_fit import ClusterNodes
from scalebench.rank import EXIT_FAILED, EXIT_REFUSED


def cmd_check(args: argparse.Namespace) -> int:
    """Print each look as it is found; exit non-zero on a FAIL or an unreachable cluster."""
    from operators.kubernetes.cluster import (
        ClusterApis,
        ClusterUnreachable,
        check_cluster,
        failures,
        table,
    )
    from operators.kubernetes.settings import KubernetesSettings

    try:
        settings = KubernetesSettings.from_env()
    except ValueError as exc:
        print(f"scalebench: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        apis = ClusterApis.connect(settings, args.kubeconfig)
        print(f"cluster check of namespace {settings.namespace}, image {settings.image}")
        lines = check_cluster(
            apis, settings, pull=not args.no_pull_check, say=lambda line: print(table([line]))
        )
    except ClusterUnreachable as exc:
        if debugging(args):
            raise
        print(f"scalebench: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    failed = failures(lines)
    if failed:
        print(f"\n{len(failed)} check(s) failed: a sweep would not run as asked", flush=True)
        return EXIT_FAILED
    print("\nno check failed", flush=True)
    return 0


def read_cluster_nodes() -> ClusterNodes | None:
    """The nodes the worker pods may run on, for ``scalebench run --launcher kubernetes``
    (``None`` where they may not be listed); raises
    :class:`~scalebench.request_fields.InvalidParameter` (``launcher``) naming what failed,
    before anything starts."""
    from operators.kubernetes.cluster import ClusterUnreachable, nodes_for_sweep
    from scalebench.request_fields import InvalidParameter

    try:
        return nodes_for_sweep()
    except ClusterUnreachable as exc:
        raise InvalidParameter("launcher", str(exc)) from None


def prepare_on_cluster(data_set: str, download: bool) -> None:
    """Data set ``data_set`` made ready in the cluster's data claim by a data pod
    (:func:`operators.kubernetes.data_pod.prepare_with_api`: fetched first when
    ``download``), its lines said as they come; raises
    :class:`~scalebench.request_fields.InvalidParameter` (``data_dir``) with the pod's own
    words when it is not there, before any group starts."""
    from operators.kubernetes.cluster import ClusterApis, ClusterUnreachable
    from operators.kubernetes.data_pod import DataPodFailed, prepare_with_api
    from operators.kubernetes.settings import KubernetesSettings
    from scalebench.request_fields import InvalidParameter

    try:
        settings = KubernetesSettings.from_env()
        apis = ClusterApis.connect(settings)
        print(f"{data_set}: checked in the data claim {settings.data_claim or '(none)'} by a pod")
        print(prepare_with_api(apis.core, settings, data_set, download), flush=True)
    except (ClusterUnreachable, ValueError) as exc:
        raise InvalidParameter("launcher", str(exc)) from None
    except DataPodFailed as exc:
        hint = "" if download else " Or ask for the download (--download)."
        raise InvalidParameter("data_dir", f"{exc}{hint}") from None


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``cluster`` command and its ``check``."""
    cluster = commands.add_parser("cluster", help="the Kubernetes cluster the launcher uses")
    cluster_commands = cluster.add_subparsers(dest="cluster_command", required=True)
    check = cluster_commands.add_parser(
        "check",
        help="ask the cluster what a sweep needs (access, GPU nodes, RDMA, claims, Kueue, "
        "image, DNS); non-zero on a FAIL",
    )
    check.add_argument(
        "--no-pull-check",
        action="store_true",
        help="skip the short-lived pod that pulls and runs the worker image",
    )
    check.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="a kube config to use instead of the Airflow connection SCALEBENCH_K8S_CONN_ID",
    )
    check.set_defaults(func=cmd_check)
