"""``scalebench compare SWEEP``: a sweep's stacks side by side, each against the first.

A sweep run with several stacks (``scalebench run TASK --stack base=PYTHON --stack
tonight=PYTHON --pairs 5``) pairs them round by round; this command prints, per worker
count, each stack's ratio to the first for the steady step, its phases, evaluation and
time to accuracy, with a 95 % interval over the pairs (:mod:`results_db.service.stacks`).
``--json`` prints the same as JSON: each metric ``{"ratio", "low", "high", "pairs"}``.
"""

from __future__ import annotations

import argparse
import json

from results_db import service
from scalebench import config


def cmd_compare(args: argparse.Namespace) -> int:
    """Print the comparison of the sweep's stacks, as a table or as JSON."""
    report = service.compare_sweep(args.database or config.database_url(), args.sweep)
    if args.json:
        print(json.dumps(service.comparison_json(report), indent=2))
    else:
        print(service.comparison_table(report))
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``compare`` command."""
    compare = commands.add_parser(
        "compare", help="compare a sweep's stacks: each against the first, with intervals"
    )
    compare.add_argument("sweep", help="the id of an ingested sweep run with two or more stacks")
    compare.add_argument("--json", action="store_true", help="print JSON instead of a table")
    compare.add_argument(
        "--database", default=None, help="results database URL (SCALEBENCH_DATABASE_URL)"
    )
    compare.set_defaults(func=cmd_compare)
