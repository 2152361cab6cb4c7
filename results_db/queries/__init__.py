"""Named queries for the command line and the dashboard; each returns plain rows.

One module a subject: ``sweeps``, ``runs``, ``communication``, ``costs``,
``nightly``, ``projection``, ``export``.

Every function takes a SQLAlchemy ``Connection`` and returns dataclass rows
(numbers in seconds, dollars, bytes and bytes/second, as named), computed
with the definitions of :mod:`results_db.analytics`, or plain values: a
count, an outcome, table rows as tuples (or, for exports, pandas DataFrames).
"""
