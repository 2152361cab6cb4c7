"""The dashboard: time-to-accuracy, speedup, communication ratio, cost, all-reduce curves.

It reads results through ``results_db`` query functions and never writes.

Where things are (read in this order):

- ``app.py``: ``create_app(database_url)``, the navbar shell; ``wsgi.py`` for gunicorn;
- ``pages/``: one module per page (layout from the URL, callbacks wired to builders);
- ``state.py``: each page's URL query string, parsed with friendly messages;
- ``data.py``: the read-only database access, cached per sweep;
- ``figures.py`` and ``tables.py``: pure builders from query rows (tested without Dash);
- ``units.py``: seconds, bytes, GB/s, dollars as text;
- ``components.py``, ``choices.py``: shared page parts and sweep pickers;
- ``downloads.py``: CSV and text downloads of a run; ``client.py``: drives callbacks over
  HTTP without a browser (tests, ``benchmarks/dashboard_latency.py``).
"""
