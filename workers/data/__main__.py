"""``python -m workers.data NAME --data-dir DIR [--download]``: data set ``NAME`` made ready
in ``DIR`` (:func:`workers.data.prepare.prepare`: fetched when asked and missing, then
verified) and one line said: where it is, or why it is not. What a data pod on the cluster
runs (:mod:`operators.kubernetes.data_pod`): the worker image holds ``workers``, not the
command line.

Exit status 0 when the set is ready, 1 when it is missing or damaged (the line says which
file and what to do), 2 for an unknown set.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalebench.datasets import DataSetCorrupt, DataSetMissing
from scalebench.diskspace import no_space, no_space_reason
from scalebench.rank import EXIT_FAILED, EXIT_REFUSED
from workers.data.prepare import PREPARERS, prepare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.data", description=__doc__)
    parser.add_argument("name", help=f"one of {', '.join(sorted(PREPARERS))}")
    parser.add_argument("--data-dir", type=Path, required=True, help="the data sets' folder")
    parser.add_argument("--download", action="store_true", help="fetch it when missing")
    args = parser.parse_args(argv)
    if args.name not in PREPARERS:
        print(f"workers.data: refused: unknown data set {args.name!r}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        prepared = prepare(args.name, args.data_dir, download=args.download)
    except (DataSetMissing, DataSetCorrupt) as exc:
        print(f"workers.data: {args.name}: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    except OSError as exc:
        if not no_space(exc):
            raise
        reason = no_space_reason(args.data_dir)
        print(f"workers.data: {args.name}: {reason}; the steps done are kept", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"{prepared.name}: {prepared.status}, {prepared.bytes / 1e6:.1f} MB at {prepared.location}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
