"""The request fields every rank is given, as options of ``python -m workers.run``.

A field declared ``to_ranks`` (:data:`scalebench.request.RANK_FIELDS`) reaches each rank
as its option (:meth:`~scalebench.request_fields.RequestField.argv` writes it,
:func:`add_rank_options` reads it back with the same checks).
"""

from __future__ import annotations

import argparse
from typing import Any

from scalebench.request import RANK_FIELDS
from scalebench.request_fields import InvalidParameter, RequestField


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
        default = field.usual if field.default is None else field.unvalidated_default
        parser.add_argument(
            field.option,
            dest=field.name,
            type=reader(field),
            default=default,
            choices=field.resolved_choices or None,
            metavar=field.name.upper() if not field.choices else None,
            help=f"{field.help} (a rank not told: {default})",
        )
