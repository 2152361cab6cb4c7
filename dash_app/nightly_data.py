"""The Nightly page's own read and its one write.

- :func:`paired_tasks`: the tasks that have a paired night (a scheduled sweep that ran the
  reference stack beside tonight's), the newest night's first;
- :func:`write_triage`: a finding's triage state and note, stored. It is the dashboard's
  only write: on SQLite through an ordinary engine on the same file; on PostgreSQL as the
  dashboard's own login, which ``scalebench db grant-readonly`` lets update those columns of
  ``nightly_finding`` and nothing else (:data:`results_db.maintenance.TRIAGE_COLUMNS`).

What the page draws comes from :func:`results_db.service.nightly.nightly_history` and
:func:`results_db.queries.paired_nights.nightly_findings`, through
:class:`dash_app.data.Source`.
"""

from __future__ import annotations

from sqlalchemy import Connection, func, select, text
from sqlalchemy.exc import DBAPIError

from results_db.database import make_engine
from results_db.models import Run, Sweep
from results_db.regressions.triage import STATES, UnknownFinding, set_state
from scalebench.stacks import REFERENCE

# PostgreSQL's "insufficient privilege"
PERMISSION_DENIED = "42501"
NO_GRANT = (
    "The dashboard's database login may not change a finding's state. As the database's "
    "owner, run `scalebench db grant-readonly <the dashboard's role>` again (it lets the role "
    "update a finding's state and note, nothing else), or set the state with "
    "`scalebench regressions --finding {id} --state {state}`."
)
READ_ONLY_FILE = (
    "The results database cannot be written from here ({reason}); set the state with "
    "`scalebench regressions --finding {id} --state {state}` where it can."
)


class TriageRefused(ValueError):
    """A triage that was not stored: a state that is none of
    :data:`~results_db.regressions.triage.STATES`, a finding that is not there, a note too
    long, or a database this login may not write; the message is for the page."""


def paired_tasks(conn: Connection) -> list[str]:
    """The tasks with a paired night (a scheduled sweep with a run of the reference stack),
    the one with the newest such night first."""
    newest = func.max(Sweep.created_at)
    rows = conn.execute(
        select(Sweep.task, newest)
        .join(Run, Run.sweep_id == Sweep.id)
        .where(Sweep.trigger == "scheduled", Run.stack == REFERENCE)
        .group_by(Sweep.task)
        .order_by(newest.desc(), Sweep.task)
    ).all()
    return [task for task, _ in rows]


def write_triage(url: str, finding_id: int, state: str, note: str | None) -> str:
    """Give finding ``finding_id`` the triage ``state`` with ``note`` (None or empty: the
    note is kept) in the database at ``url``; returns the sentence the page shows.
    :class:`TriageRefused` says why nothing was stored; any other database error is raised."""
    if state not in STATES:
        raise TriageRefused(f"state: must be one of {', '.join(STATES)}, got {state!r}.")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                # The dashboard's login may default to read-only transactions (init.sql).
                conn.execute(text("SET TRANSACTION READ WRITE"))
            set_state(conn, finding_id, state, note or None)
    except UnknownFinding as exc:
        raise TriageRefused(f"There is no finding {finding_id} in the results database.") from exc
    except ValueError as exc:  # a note too long; a SQLite file in no folder
        raise TriageRefused(f"{exc}.") from exc
    except DBAPIError as exc:
        words = {"id": finding_id, "state": state}
        if getattr(exc.orig, "pgcode", None) == PERMISSION_DENIED:
            raise TriageRefused(NO_GRANT.format(**words)) from exc
        reason = str(exc.orig).strip().splitlines()[0][:200] if exc.orig else str(exc)
        if "readonly" in reason or "read-only" in reason:
            raise TriageRefused(READ_ONLY_FILE.format(reason=reason, **words)) from exc
        raise
    finally:
        engine.dispose()
    return f"Finding {finding_id} is now {state}."
