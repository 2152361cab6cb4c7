"""Prices in force and what a sweep cost at each worker count."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from results_db import analytics
from results_db.models import Price
from results_db.projection import Prices
from results_db.queries.sweeps import scaling


@dataclass(frozen=True)
class CostRow:
    world_size: int
    time_to_accuracy_s: float
    cost_regular: float
    cost_preemptible: float
    speedup: float
    price_index_regular: float
    price_index_preemptible: float


@dataclass(frozen=True)
class PriceRow:
    kind: str
    name: str
    regular_per_hour: float
    preemptible_per_hour: float
    source: str
    valid_from: datetime


def prices_in_force(conn: Connection, at: datetime | None = None) -> list[PriceRow]:
    """For each (kind, name), the newest price valid at ``at`` (default: now)."""
    rows = conn.execute(
        select(
            Price.kind,
            Price.name,
            Price.regular_per_hour,
            Price.preemptible_per_hour,
            Price.source,
            Price.valid_from,
        ).order_by(Price.kind, Price.name, Price.valid_from)
    ).all()
    latest: dict[tuple[str, str], Any] = {}
    for price in rows:
        valid_from = price.valid_from
        if at is not None and _aware(valid_from) > _aware(at):
            continue
        latest[(price.kind, price.name)] = price
    return [
        PriceRow(
            p.kind,
            p.name,
            float(p.regular_per_hour),
            float(p.preemptible_per_hour),
            p.source,
            p.valid_from,
        )
        for p in latest.values()
    ]


def worker_prices(conn: Connection, instance: str, gpu: str | None) -> Prices | None:
    """Dollars per hour of one worker in force now: its machine type's and, where ``gpu`` is
    named, its GPU's together (None: either price is missing)."""
    prices = {(p.kind, p.name): p for p in prices_in_force(conn)}
    node = prices.get(("instance", instance))
    card = prices.get(("gpu", gpu)) if gpu else None
    if node is None or (gpu and card is None):
        return None
    return Prices(
        instance=instance,
        gpu=gpu,
        regular_per_hour=node.regular_per_hour + (card.regular_per_hour if card else 0.0),
        preemptible_per_hour=node.preemptible_per_hour
        + (card.preemptible_per_hour if card else 0.0),
    )


def _aware(moment: datetime) -> datetime:
    from datetime import UTC

    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class PriceMissing(LookupError):
    """No price for the instance or GPU type at that date."""


def costs(
    conn: Connection,
    sweep_id: str,
    instance: str = "n1-standard-4",
    gpu: str | None = "nvidia-tesla-t4",
    at: datetime | None = None,
    network: str | None = None,
) -> list[CostRow]:
    """Cost and price index per worker count, for regular and preemptible prices, of the
    runs on one ``network`` profile (None: the sweep's first)."""
    prices = {(p.kind, p.name): p for p in prices_in_force(conn, at)}
    node = prices.get(("instance", instance))
    if node is None:
        raise PriceMissing(f"no price for instance type {instance!r}")
    card = None
    if gpu is not None:
        card = prices.get(("gpu", gpu))
        if card is None:
            raise PriceMissing(f"no price for GPU type {gpu!r}")
    regular = (node.regular_per_hour, card.regular_per_hour if card else 0.0)
    preemptible = (node.preemptible_per_hour, card.preemptible_per_hour if card else 0.0)
    rows = [r for r in scaling(conn, sweep_id, network) if r.time_to_accuracy_s is not None]
    base = next((r for r in rows if r.world_size == 1), None)
    if base is None:
        return []
    base_regular = analytics.cost(1, *regular, base.time_to_accuracy_s)
    base_preemptible = analytics.cost(1, *preemptible, base.time_to_accuracy_s)
    result = []
    for row in rows:
        reg = analytics.cost(row.world_size, *regular, row.time_to_accuracy_s)
        pre = analytics.cost(row.world_size, *preemptible, row.time_to_accuracy_s)
        result.append(
            CostRow(
                world_size=row.world_size,
                time_to_accuracy_s=row.time_to_accuracy_s,
                cost_regular=reg,
                cost_preemptible=pre,
                speedup=row.speedup or 1.0,
                price_index_regular=analytics.price_index(reg, base_regular, row.speedup or 1.0),
                price_index_preemptible=analytics.price_index(
                    pre, base_preemptible, row.speedup or 1.0
                ),
            )
        )
    return result
