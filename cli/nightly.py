"""``scalebench nightly pin|unpin|show``: the reference stack the nightly runs beside tonight's.

A paired nightly runs, round by round, tonight's stack (the Airflow worker's interpreter,
or ``SCALEBENCH_NIGHTLY_TONIGHT_STACK``) and a pinned reference stack, so that a change of
the machines falls on both arms and a change of our software on one
(:mod:`results_db.service.reference`, :mod:`results_db.service.nightly`). The reference is
``SCALEBENCH_NIGHTLY_REFERENCE_STACK`` where set, else the stack pinned here, stored in the
results database:

    scalebench nightly pin /opt/reference/bin/python [--env PYTHONPATH=/opt/reference/src]
    scalebench nightly pin repo/worker@sha256:… --image      # the Kubernetes launcher
    scalebench nightly show
    scalebench nightly unpin
"""

from __future__ import annotations

import argparse

from results_db.service.reference import pin_reference, shown_pin, unpin_reference


def cmd_pin(args: argparse.Namespace) -> int:
    print(pin_reference(args.database, args.stack, args.env, args.image, args.note))
    return 0


def cmd_unpin(args: argparse.Namespace) -> int:
    print(unpin_reference(args.database))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    print(shown_pin(args.database))
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``nightly`` command and its ``pin``, ``unpin`` and ``show``."""
    nightly = commands.add_parser("nightly", help="the nightly's pinned reference stack")
    which = nightly.add_subparsers(dest="nightly_command", required=True)
    pin = which.add_parser("pin", help="pin the reference stack the nightly runs beside tonight's")
    pin.add_argument(
        "stack", help='an interpreter\'s path, an image (--image), or JSON {"python": …, "env": …}'
    )
    pin.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="a variable it sets"
    )
    pin.add_argument("--image", action="store_true", help="STACK is an image (Kubernetes)")
    pin.add_argument("--note", default="", help="why this reference (shown with it)")
    pin.set_defaults(func=cmd_pin)
    unpin = which.add_parser("unpin", help="run the nightly unpaired from the next night")
    unpin.set_defaults(func=cmd_unpin)
    show = which.add_parser("show", help="the reference stack the next night runs")
    show.set_defaults(func=cmd_show)
    for command in (pin, unpin, show):
        command.add_argument(
            "--database", default=None, help="results database URL (SCALEBENCH_DATABASE_URL)"
        )
