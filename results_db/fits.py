"""The ring model fitted to every all-reduce configuration of a sweep, stored in
``allreduce_fit`` (:class:`results_db.models.AllReduceFit`): at ingest, and again on demand
(``scalebench db refit``), from the curves ingest stored."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, delete, insert, select

from results_db.models import AllReduceCurve, AllReduceFit, Run
from results_db.projection import RingFit, SizeTime, fit_ring
from results_db.queries.communication import AllReduceRow, allreduce_curves


def fits_of(sweep_id: str, rows: Sequence[AllReduceRow]) -> list[RingFit]:
    """A fit per (backend, device, dtype, network, worker count) of the curves ``rows`` (their
    p50 seconds per size); configurations that cannot be fitted (one worker, fewer than two
    sizes) are left out."""
    curves: dict[tuple[str, str, str, str, int], list[AllReduceRow]] = defaultdict(list)
    for row in rows:
        curves[(row.backend, row.device, row.dtype, row.network, row.world_size)].append(row)
    fits = []
    for (backend, device, dtype, network, world_size), curve in sorted(curves.items()):
        points = [SizeTime(r.bytes, r.p50_s) for r in curve]
        try:
            alpha, beta, residual, median, worst = fit_ring(points, world_size)
        except ValueError:
            continue
        fits.append(
            RingFit(
                sweep_id=sweep_id,
                backend=backend,
                device=device,
                dtype=dtype,
                network=network,
                world_size=world_size,
                alpha_s=alpha,
                beta_bytes_per_s=beta,
                residual=residual,
                median_error=median,
                max_error=worst,
                sizes=len(points),
                min_bytes=min(r.bytes for r in curve),
                max_bytes=max(r.bytes for r in curve),
            )
        )
    return fits


def refit_sweep(conn: Connection, sweep_id: str) -> list[RingFit]:
    """Replace the stored fits of ``sweep_id`` with fits of its stored curves, within
    ``conn``'s transaction; returns them (none for a sweep without all-reduce curves)."""
    fits = fits_of(sweep_id, allreduce_curves(conn, sweep_id))
    conn.execute(delete(AllReduceFit).where(AllReduceFit.sweep_id == sweep_id))
    if fits:
        now = datetime.now(UTC)
        conn.execute(
            insert(AllReduceFit),
            [
                {
                    "sweep_id": f.sweep_id,
                    "backend": f.backend,
                    "device": f.device,
                    "dtype": f.dtype,
                    "network": f.network,
                    "world_size": f.world_size,
                    "alpha_s": f.alpha_s,
                    "beta_bytes_per_s": f.beta_bytes_per_s,
                    "residual": f.residual,
                    "median_error": f.median_error,
                    "max_error": f.max_error,
                    "sizes": f.sizes,
                    "min_bytes": f.min_bytes,
                    "max_bytes": f.max_bytes,
                    "fitted_at": now,
                }
                for f in fits
            ],
        )
    return fits


def allreduce_sweeps(conn: Connection) -> list[str]:
    """Sweeps with stored all-reduce curves, by id."""
    query = (
        select(Run.sweep_id)
        .join(AllReduceCurve, AllReduceCurve.run_id == Run.id)
        .distinct()
        .order_by(Run.sweep_id)
    )
    return list(conn.execute(query).scalars())


def refit(engine: Engine, sweep_id: str | None = None) -> dict[str, list[RingFit]]:
    """Fit again one sweep (``sweep_id``) or every sweep with all-reduce curves, each in its
    own transaction; returns the fits per sweep."""
    with engine.connect() as conn:
        sweeps = [sweep_id] if sweep_id is not None else allreduce_sweeps(conn)
    done = {}
    for sweep in sweeps:
        with engine.begin() as conn:
            done[sweep] = refit_sweep(conn, sweep)
    return done
