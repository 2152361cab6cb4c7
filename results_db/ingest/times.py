"""Times from a manifest or a record as aware UTC instants, so that SQLite, which keeps
wall times, and PostgreSQL store and compare the same moment."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: str | None) -> datetime | None:
    """An ISO 8601 time as an aware UTC instant (one without an offset is taken as UTC),
    so that SQLite, which keeps wall times, and PostgreSQL store the same moment."""
    return utc(datetime.fromisoformat(value)) if value else None


def utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC instant (SQLite hands back naive UTC wall times)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
