"""``scalebench network clean``: what shaped (emulated-network) groups of launchers that no
longer run left behind, taken down (``run`` and ``ingest`` do it first, quietly)."""

from __future__ import annotations

import argparse
import sys

from scalebench.rank import EXIT_FAILED, EXIT_REFUSED


def clean_network_leftovers(asked: bool = False) -> int:
    """Take down what shaped (emulated-network) groups of launchers that no longer run left
    behind: namespaces, bridges, veth pairs, ``/etc/netns`` entries, firewall rules.

    ``scalebench run`` and ``scalebench ingest`` do it first, quietly where they may not
    (not root); ``scalebench network clean`` (``asked``) says what it did or why it cannot.
    """
    from operators.shaped_network import ShapingError, remove_leftovers
    from scalebench.host import cleaning_problem

    problem = cleaning_problem()
    if problem is not None:
        if asked:
            print(f"scalebench: error: network clean {problem}", file=sys.stderr)
            return EXIT_REFUSED
        return 0
    try:
        removed = remove_leftovers()
    except ShapingError as exc:
        print(
            f"scalebench: warning: left-over emulated networks not removed: {exc}", file=sys.stderr
        )
        return EXIT_FAILED
    if removed:
        print(f"removed what ended shaped groups left: {', '.join(removed)}", flush=True)
    elif asked:
        print("nothing left over by shaped groups")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``network`` command and its ``clean``."""
    network = commands.add_parser("network", help="emulated networks of shaped local groups")
    network_commands = network.add_subparsers(dest="network_command", required=True)
    clean = network_commands.add_parser(
        "clean", help="remove what shaped groups of killed launchers left (root)"
    )
    clean.set_defaults(func=lambda _: clean_network_leftovers(asked=True))
