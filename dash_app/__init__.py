"""The dashboard: time-to-accuracy, speedup, communication ratio, cost, all-reduce curves.

It reads results through ``results_db`` query functions and never writes.

Where things are (read in this order):

- ``app.py``: ``create_app(database_url)``, the navbar shell; ``wsgi.py`` for gunicorn;
- ``pages/``: one package per page: ``__init__.py`` its layout from the URL, named outputs
  and pure update, ``figures.py`` its pure builders from query rows (tested without Dash);
- ``wiring.py``: what every page shares: registration, named outputs and their failure
  answer, the guard between Dash and a page's update;
- ``state.py``: the URL query string, parsed with friendly messages;
- ``data.py``: the read-only database access, cached per sweep;
- ``plots.py`` and ``tables.py``: what figures and tables of every page share;
- ``components.py``, ``choices.py``: shared page parts and sweep pickers;
- ``downloads.py``: CSV and text downloads of a run; ``client.py``: drives callbacks over
  HTTP without a browser (tests, ``benchmarks/dashboard_latency.py``).
"""
