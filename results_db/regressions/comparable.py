"""Which sweeps and runs a comparison takes: the earlier scheduled nights of the same
configuration, in the order of their nights, and of their runs those that succeeded on the
same network profile, were not contended, ran on the same hardware and over the same
transports."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, and_, func, or_, select

from results_db.models import Run, Sweep
from scalebench.statuses import SUCCEEDED

# When a sweep happened, for the nightly's history: the night a scheduled sweep stands for
# (its run's logical date: a backfilled night sits among the nights, not at today), else
# when it was created.
NIGHT = func.coalesce(Sweep.night, Sweep.created_at)


# A run's transports at its worker count: (world_size, within its nodes, between them).
TransportKey = tuple[int, str, str]


@dataclass(frozen=True)
class Comparable:
    """Which runs a comparison takes: those on ``network``, not ``contended``, (where
    ``hardware`` is given) on that hardware or on hardware not recorded, and (where
    ``transports`` are given) at each worker count over the same transports as those, or
    over transports not recorded: a measurement over sockets is never judged against one
    over RDMA (:mod:`scalebench.transports`)."""

    network: str
    hardware: str | None = None
    transports: tuple[TransportKey, ...] | None = None

    def conditions(self) -> list[ColumnElement[bool]]:
        keep = [Run.status == SUCCEEDED, Run.network == self.network, Run.contended.is_(False)]
        if self.hardware is not None:
            keep.append(or_(Run.hardware == self.hardware, Run.hardware.is_(None)))
        if self.transports is not None:
            unknown = and_(Run.transport_within_node == "", Run.transport_between_nodes == "")
            same = [
                and_(
                    Run.world_size == size,
                    Run.transport_within_node == within,
                    Run.transport_between_nodes == between,
                )
                for size, within, between in self.transports
            ]
            keep.append(or_(unknown, *same))
        return keep

    def left_out(self, conn: Connection, sweep_ids: list[str], world_size: int) -> tuple[int, int]:
        """(contended runs, runs on other hardware) of ``sweep_ids`` at ``world_size`` that
        succeeded on ``network`` but are not compared."""
        base = (Run.sweep_id.in_(sweep_ids), Run.status == SUCCEEDED)
        base += (Run.network == self.network, Run.world_size == world_size)
        contended = conn.execute(
            select(func.count()).select_from(Run).where(*base, Run.contended.is_(True))
        ).scalar_one()
        other = 0
        if self.hardware is not None:
            other = conn.execute(
                select(func.count())
                .select_from(Run)
                .where(
                    *base,
                    Run.contended.is_(False),
                    Run.hardware.is_not(None),
                    Run.hardware != self.hardware,
                )
            ).scalar_one()
        return contended, other


def baseline_sweeps(conn: Connection, sweep_id: str, window: int) -> list[str]:
    """The ids of up to ``window`` scheduled sweeps of ``sweep_id``'s configuration (task and
    configuration hash) whose night came before its night, the latest night first."""
    latest = conn.execute(
        select(Sweep.task, Sweep.config_hash, NIGHT.label("night")).where(Sweep.id == sweep_id)
    ).one()
    return list(
        conn.execute(
            select(Sweep.id)
            .where(
                Sweep.task == latest.task,
                Sweep.config_hash == latest.config_hash,
                Sweep.trigger == "scheduled",
                latest.night > NIGHT,
                Sweep.id != sweep_id,
            )
            .order_by(NIGHT.desc())
            .limit(window)
        ).scalars()
    )


def sweep_hardware(conn: Connection, sweep_id: str, network: str) -> str | None:
    """The hardware most of the sweep's runs on ``network`` ran on (None: not recorded)."""
    return conn.execute(
        select(Run.hardware)
        .where(Run.sweep_id == sweep_id, Run.network == network, Run.hardware.is_not(None))
        .group_by(Run.hardware)
        .order_by(func.count().desc(), Run.hardware)
        .limit(1)
    ).scalar()


def sweep_transports(conn: Connection, sweep_id: str, network: str) -> tuple[TransportKey, ...]:
    """The transports the sweep's runs on ``network`` took, at each worker count (each
    combination once, known ones only)."""
    rows = conn.execute(
        select(Run.world_size, Run.transport_within_node, Run.transport_between_nodes)
        .where(Run.sweep_id == sweep_id, Run.network == network)
        .where(or_(Run.transport_within_node != "", Run.transport_between_nodes != ""))
        .distinct()
        .order_by(Run.world_size, Run.transport_within_node, Run.transport_between_nodes)
    )
    return tuple((int(size), within, between) for size, within, between in rows)
