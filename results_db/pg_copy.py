"""PostgreSQL's binary COPY format, for the two large tables.

Binary COPY spares both sides the text form of every float (Python's repr on
the way out, PostgreSQL's strtod on the way in), which is most of the cost of
loading step timings. The format (PostgreSQL manual, "COPY", binary format):

    header   b"PGCOPY\\n\\xff\\r\\n\\x00", int32 flags = 0, int32 extension length = 0
    tuple    int16 field count, then per field: int32 byte length (-1 = NULL) and the bytes
    trailer  int16 -1

Integers and floats are big-endian (``int4``, ``int8``, ``float8``); text is UTF-8.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Sequence
from typing import Any

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)
NULL = struct.pack(">i", -1)

# column kind -> (struct format of length and value, byte length)
_FIXED = {"int4": (">ii", 4), "int8": (">iq", 8), "float8": (">id", 8)}


def encode(kinds: Sequence[str], columns: Sequence[Sequence[Any]]) -> tuple[io.BytesIO, int]:
    """Columns of equal length as a binary COPY stream; ``kinds`` names their types.

    Kinds: ``text``, ``int4``, ``int8``, ``float8``. Returns the stream
    (positioned at its start) and the number of rows. Rows without NULLs are
    laid out at once as a NumPy record array when each text column has one
    byte length (the usual case: the run id repeats); other rows are packed
    one value at a time.
    """
    count = len(columns[0]) if columns else 0
    out = io.BytesIO()
    out.write(HEADER)
    if count and not _write_record_array(out, kinds, columns):
        # NULLs (or text of varying length): pack the rows with NULLs one by
        # one and try the rest at once again.
        null_rows = sorted(
            {
                i
                for column in columns
                if None in column
                for i, value in enumerate(column)
                if value is None
            }
        )
        if null_rows:
            skip = set(null_rows)
            _write_rows(out, kinds, [[column[i] for column in columns] for i in null_rows])
            columns = [[v for i, v in enumerate(column) if i not in skip] for column in columns]
        if columns[0] and not _write_record_array(out, kinds, columns):
            _write_rows(out, kinds, zip(*columns, strict=True))
    out.write(TRAILER)
    out.seek(0)
    return out, count


_NUMPY = {"int4": ">i4", "int8": ">i8", "float8": ">f8"}


def _write_record_array(
    out: io.BytesIO, kinds: Sequence[str], columns: Sequence[Sequence[Any]]
) -> bool:
    """Write columns as one record array; False (nothing written) on a NULL or on a
    text column whose values differ in byte length."""
    import numpy as np

    fields: list[tuple[str, str]] = [("count", ">i2")]
    values: dict[str, Any] = {"count": len(kinds)}
    for i, (kind, column) in enumerate(zip(kinds, columns, strict=True)):
        if kind == "text":
            distinct = set(column)
            encoded = {value: str(value).encode() for value in distinct}
            lengths = {len(b) for b in encoded.values()}
            if len(lengths) != 1:
                return False
            size = lengths.pop()
            fields += [(f"n{i}", ">i4"), (f"v{i}", f"S{size}")]
            values[f"v{i}"] = (
                encoded[next(iter(distinct))]
                if len(distinct) == 1
                else [encoded[value] for value in column]
            )
        else:
            size = _FIXED[kind][1]
            fields += [(f"n{i}", ">i4"), (f"v{i}", _NUMPY[kind])]
            values[f"v{i}"] = column
        values[f"n{i}"] = size
    table = np.empty(len(columns[0]), dtype=np.dtype(fields))
    try:
        for name, value in values.items():
            table[name] = value
    except TypeError:  # None in an integer column
        return False
    # NumPy turns None into NaN in a float column; records hold no NaN (JSON
    # has none), so a NaN here is a NULL to write as such.
    for i, kind in enumerate(kinds):
        if kind == "float8" and np.isnan(table[f"v{i}"]).any():
            return False
    out.write(table.tobytes())
    return True


def _write_rows(out: io.BytesIO, kinds: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    field_count = struct.pack(">h", len(kinds))
    for row in rows:
        out.write(field_count)
        for kind, value in zip(kinds, row, strict=True):
            if value is None:
                out.write(NULL)
            elif kind == "text":
                data = str(value).encode()
                out.write(struct.pack(">i", len(data)) + data)
            else:
                fmt, size = _FIXED[kind]
                out.write(struct.pack(fmt, size, value))


def kind_of(column: Any) -> str:
    """The COPY kind of a table column, from its SQLAlchemy type (the models say it once)."""
    from sqlalchemy import BigInteger, Float, Integer, String

    kind = column.type
    if isinstance(kind, BigInteger):
        return "int8"
    if isinstance(kind, Integer):
        return "int4"
    if isinstance(kind, Float):
        return "float8"
    if isinstance(kind, String):
        return "text"
    raise TypeError(f"{column.name}: no binary COPY encoding for {kind!r}")
