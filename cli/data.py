"""``scalebench data``: a data set downloaded (when asked) and verified, before a sweep or
on its own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalebench.rank import EXIT_FAILED
from scalebench.request_fields import InvalidParameter


def prepare_data(name: str, data_dir: Path) -> None:
    """Fetch data set ``name`` when it is missing and verify it, before a sweep starts."""
    from scalebench.datasets import DataSetCorrupt, DataSetMissing
    from workers.data.prepare import prepare

    try:
        prepared = prepare(name, data_dir, download=True)
    except (DataSetMissing, DataSetCorrupt) as exc:
        raise InvalidParameter("download", str(exc)) from None
    print(f"{prepared.name}: {prepared.status} at {prepared.location}", flush=True)


def cmd_data(args: argparse.Namespace) -> int:
    """Verify data set ``args.name`` (fetching it first when asked) and say where it is."""
    from scalebench import config
    from scalebench.datasets import DataSetMissing
    from workers.data.prepare import DataSetCorrupt, prepare

    data_dir = Path(args.data_dir) if args.data_dir else config.data_dir()
    try:
        prepared = prepare(args.name, data_dir, download=args.download)
    except (DataSetMissing, DataSetCorrupt) as exc:
        print(f"scalebench: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"{prepared.name}: {prepared.status}, {prepared.bytes / 1e6:.1f} MB at {prepared.location}"
    )
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``data`` command."""
    data = commands.add_parser(
        "data", help="download (optionally) and verify a data set: checksums and format"
    )
    data.add_argument(
        "name",
        choices=(
            "cifar10",
            "epsilon",
            "wikitext2",
            "wmt16-en-de",
            "wmt17-en-de",
            "digits",
            "digits32",
            "epsilon_like",
            "markov",
            "synthetic",
        ),
    )
    data.add_argument("--download", action="store_true", help="fetch it when missing")
    data.add_argument("--data-dir", default=None, help="data sets (SCALEBENCH_DATA_DIR)")
    data.set_defaults(func=cmd_data)
