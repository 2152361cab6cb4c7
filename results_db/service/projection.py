"""The scaling projection on the command line (:func:`project`, the dashboard's view
printed) and the all-reduce fits it rests on, fitted again (:func:`refit`)."""

from __future__ import annotations

from results_db.fits import refit as refit_sweeps
from results_db.projection import DEFAULT_PROJECTED_WORKERS, ProjectionRefused
from results_db.queries.projection import projection_view
from results_db.queries.sweeps import sweep_info
from results_db.report import fit_table, leave_one_out_table, projection_table
from results_db.service.engines import CommandError, engine_for
from scalebench.network import BadProfile, parse_profiles
from scalebench.request import FIELD
from scalebench.request_fields import InvalidParameter


def refit(url: str | None, sweep_id: str | None = None) -> int:
    """Fit the ring model again to every all-reduce configuration of one sweep (or of every
    sweep with all-reduce curves), store the fits and print them."""
    engine = engine_for(url)
    try:
        if sweep_id is not None:
            with engine.connect() as conn:
                if sweep_info(conn, sweep_id) is None:
                    raise CommandError(f"sweep: no sweep {sweep_id!r} in the results database")
        done = refit_sweeps(engine, sweep_id)
    finally:
        engine.dispose()
    for sweep, fits in done.items():
        print(f"{sweep}: {len(fits)} fit(s)")
        if fits:
            print(fit_table(fits))
    if not done:
        print("no sweep with all-reduce curves to fit")
    return 0


def _world_sizes(text: str) -> list[int]:
    """Worker counts as ``scalebench run`` reads them (ASCII digits, 1 to the largest group)."""
    try:
        return list(FIELD["workers"].read(text))
    except InvalidParameter as exc:
        raise CommandError(str(exc)) from None


def _sweep_ids(text: str) -> list[str]:
    """Sweep ids from a comma-separated argument, in order, each once. An id holds no white
    space, so one with a space or a line end is refused as written, as every other command
    that looks a sweep up by id would find no such sweep."""
    spaced = [part for part in text.split(",") if part != "".join(part.split())]
    if spaced:
        raise CommandError(
            f"sweep: {spaced[0][:60]!r} holds white space, which no sweep id does; separate "
            "ids by commas alone"
        )
    ids = list(dict.fromkeys(part for part in text.split(",") if part))
    if not ids:
        raise CommandError(f"a sweep id, or several separated by commas, got {text!r}")
    return ids


def project(
    url: str | None,
    training_sweep: str,
    allreduce_sweep: str,
    workers: str | None = None,
    networks: str | None = None,
    instance: str = "n1-standard-4",
    gpu: str | None = "nvidia-tesla-t4",
) -> int:
    """Print the projection of a training sweep to ``workers`` on ``networks`` (default: the
    profiles the sweep measured) with the all-reduce fits of ``allreduce_sweep``, then the
    leave-one-out checks of the model on the sweep's measured points: the view the dashboard
    draws (:func:`results_db.queries.projection.projection_view`), with what it would leave
    out refused naming it.

    Both sweep arguments may name several sweeps, comma-separated: training sweeps of one task
    and configuration (say, one on host and one on 10mbit) are projected as one, and the fits
    of several Task 0 sweeps are pooled (where two fit the same configuration, the first
    named wins)."""
    sizes = _world_sizes(workers) if workers is not None else list(DEFAULT_PROJECTED_WORKERS)
    try:
        profiles = None if networks is None else [p.name for p in parse_profiles(networks)]
    except BadProfile as exc:
        raise CommandError(f"network: {exc}") from None
    trained, fitted = _sweep_ids(training_sweep), _sweep_ids(allreduce_sweep)
    engine = engine_for(url)
    try:
        with engine.connect() as conn:
            view = projection_view(conn, trained, fitted, sizes, instance, gpu, profiles, True)
    except ProjectionRefused as exc:
        raise CommandError(str(exc)) from None
    finally:
        engine.dispose()
    sweep, prices = view.sweep, view.prices
    assert sweep is not None  # strict: a sweep that cannot be read is refused
    print(
        f"projection of {training_sweep} ({sweep.task}, {sweep.backend} on {sweep.device}, "
        f"{sweep.variant}) with the all-reduce fits of {allreduce_sweep}"
    )
    print(
        "step = compute + gradient packing + all-reduce (ring model at the gradient's "
        f"{sweep.points[0].gradient_bytes:,} bytes) + wait for the slowest rank; per-worker "
        "batch fixed, so an unmeasured worker count takes the nearest measured one's compute"
    )
    if prices is None:
        print(f"no price for {instance}" + (f" and {gpu}" if gpu else "") + ": cost left out")
    else:
        print(
            f"cost at {instance}" + (f" + {gpu}" if gpu else "") + f" per worker: "
            f"${prices.regular_per_hour:.4g}/h regular, ${prices.preemptible_per_hour:.4g}/h "
            "preemptible"
        )
    print()
    print(projection_table(view.points))
    print("\nleave-one-out: each measured point predicted from the others")
    print(
        leave_one_out_table(view.held)
        if view.held
        else "no measured point could be predicted from others"
    )
    print(
        "\nleaving out its worker count: each measured point predicted without any point of "
        "its worker count (compute, packing and steps from another worker count)"
    )
    print(
        leave_one_out_table(view.across)
        if view.across
        else "no measured point could be predicted from another worker count"
    )
    return 0
