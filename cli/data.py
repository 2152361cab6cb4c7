"""``scalebench data``: a data set downloaded (when asked) and verified, before a sweep or
on its own."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalebench.diskspace import no_space, no_space_reason
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
    except OSError as exc:
        if not no_space(exc):
            raise
        raise InvalidParameter("data_dir", f"{name}: {no_space_reason(data_dir)}") from None
    print(f"{prepared.name}: {prepared.status} at {prepared.location}", flush=True)


def cmd_data(args: argparse.Namespace) -> int:
    """Verify data set ``args.name`` (fetching it first when asked) and say where it is; or,
    for ``import DIR``, take the archives a user already has."""
    from scalebench import config
    from scalebench.datasets import DataSetMissing
    from workers.data.prepare import DataSetCorrupt, prepare

    data_dir = Path(args.data_dir) if args.data_dir else config.data_dir()
    if args.name == "import":
        return import_folder(args.folder, data_dir)
    if args.folder is not None:
        print(f"scalebench: error: data {args.name} takes no folder", file=sys.stderr)
        return EXIT_FAILED
    try:
        prepared = prepare(args.name, data_dir, download=args.download)
    except (DataSetMissing, DataSetCorrupt) as exc:
        print(f"scalebench: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        if not no_space(exc):
            raise
        print(
            f"scalebench: error: {args.name}: {no_space_reason(data_dir)}; the steps done are "
            "kept: free some space and run the same command again",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(
        f"{prepared.name}: {prepared.status}, {prepared.bytes / 1e6:.1f} MB at {prepared.location}"
    )
    return 0


def import_folder(folder: str | None, data_dir: Path) -> int:
    """``scalebench data import DIR``: every archive of a data set found in DIR, checked and
    copied into the downloads folder, where preparing the set finds it."""
    from scalebench.datasets import DataSetCorrupt, DataSetMissing
    from workers.data.archives import downloads_folder, import_archives
    from workers.data.catalogue import archives_by_set

    if folder is None:
        print(
            "scalebench: error: data import needs the folder the archives are in (DIR)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    catalogue = archives_by_set()
    everything = [archive for archives in catalogue.values() for archive in archives]
    try:
        taken = import_archives(Path(folder), data_dir, everything)
    except (DataSetMissing, DataSetCorrupt) as exc:
        print(f"scalebench: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if not taken:
        print(f"scalebench: error: no archive of a data set in {folder}", file=sys.stderr)
        return EXIT_FAILED
    sets = [name for name, archives in catalogue.items() if any(a in archives for a in taken)]
    print(
        f"{len(taken)} archive(s) taken into {downloads_folder(data_dir)}; prepare with "
        + ", ".join(f"`scalebench data {name}`" for name in sets)
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
            "import",
        ),
        help="a data set, or import (then DIR: archives you already have, checked and taken)",
    )
    data.add_argument("folder", nargs="?", default=None, metavar="DIR", help="with import")
    data.add_argument("--download", action="store_true", help="fetch it when missing")
    data.add_argument("--data-dir", default=None, help="data sets (SCALEBENCH_DATA_DIR)")
    data.set_defaults(func=cmd_data)
