"""The price table: prices read from the command line or a CSV file, checked against what
the table holds, and stored."""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from results_db.maintenance import store_prices
from results_db.service.engines import CommandError, engine_for

PRICE_COLUMNS = ("kind", "name", "regular_per_hour", "preemptible_per_hour", "source", "valid_from")


# What the price table holds (results_db.models.Price): names of up to 100 characters and
# dollars per hour as NUMERIC(12, 4); both databases are refused the same values.
MAX_PRICE_NAME = 100
MAX_PRICE_PER_HOUR = 99_999_999
PRICE_PLACES = 4
PRICE_STEP = Decimal(1).scaleb(-PRICE_PLACES)  # 0.0001 dollars per hour


def price_values(raw: dict[str, str], where: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if raw.get("kind") not in ("instance", "gpu"):
        raise CommandError(f"{where}kind: must be instance or gpu, got {raw.get('kind')!r}")
    name = (raw.get("name") or "").strip()
    if not name:
        raise CommandError(f"{where}name: must not be empty")
    if len(name) > MAX_PRICE_NAME:
        raise CommandError(f"{where}name: at most {MAX_PRICE_NAME} characters, got {len(name)}")
    if not name.isprintable():  # a line end, a tab, a NUL: the table and the CSVs would break
        raise CommandError(f"{where}name: must be one line of printable text, got {name!r}")
    values["kind"], values["name"] = raw["kind"], name
    for field in ("regular_per_hour", "preemptible_per_hour"):
        try:
            price = Decimal(str(raw[field]).strip())
        except (KeyError, TypeError, ValueError, ArithmeticError):
            raise CommandError(
                f"{where}{field}: must be dollars per hour, got {raw.get(field)!r}"
            ) from None
        if not price.is_finite() or not 0 <= price <= MAX_PRICE_PER_HOUR:
            raise CommandError(
                f"{where}{field}: must be between 0 and {MAX_PRICE_PER_HOUR:g} dollars per "
                f"hour, got {raw[field]!r}"
            )
        if price != price.quantize(PRICE_STEP):  # each database would round it its own way
            raise CommandError(
                f"{where}{field}: at most {PRICE_PLACES} decimal places (the price table keeps "
                f"dollars per hour to {PRICE_STEP}), got {raw[field]!r}"
            )
        values[field] = price.quantize(PRICE_STEP)
    try:
        valid_from = datetime.fromisoformat(raw["valid_from"])
        # One instant on both databases (SQLite keeps wall times): in UTC, within years 1-9999.
        valid_from = (
            valid_from.astimezone(UTC) if valid_from.tzinfo else valid_from.replace(tzinfo=UTC)
        )
    except (KeyError, TypeError, ValueError, OverflowError):
        raise CommandError(
            f"{where}valid_from: must be a date (YYYY-MM-DD) or a time in years 1 to 9999 "
            f"(UTC), got {str(raw.get('valid_from'))[:60]!r}"
        ) from None
    values["valid_from"] = valid_from
    values["source"] = raw.get("source") or "entered by hand"
    if "\x00" in values["source"]:  # PostgreSQL's text cannot hold it; SQLite's would
        raise CommandError(f"{where}source: must not hold a NUL character")
    return values


def set_prices(url: str | None, rows: list[dict[str, Any]]) -> int:
    """Insert or replace prices keyed by (kind, name, valid_from); returns how many."""
    engine = engine_for(url)
    count = store_prices(engine, rows)
    engine.dispose()
    return count


def load_price_file(path: Path) -> list[dict[str, Any]]:
    """Read a price CSV; its header names the columns of :data:`PRICE_COLUMNS`."""
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise CommandError(f"file: {path} {what}")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            try:
                missing = set(PRICE_COLUMNS) - set(reader.fieldnames or ()) - {"source"}
                if missing:
                    columns = ", ".join(sorted(missing))
                    raise CommandError(f"file: {path} lacks column(s) {columns}")
                return [
                    price_values(row, f"{path.name} line {n}: ") for n, row in enumerate(reader, 2)
                ]
            except csv.Error as exc:  # a field over the csv module's limit, a bad quote
                line = reader.line_num
                raise CommandError(
                    f"file: {path}: not CSV the price table reads after line {line} ({exc})"
                ) from None
    except UnicodeDecodeError:
        raise CommandError(f"file: {path} is not UTF-8 text") from None
