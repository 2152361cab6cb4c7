"""Every page is a package of the same shape:

- ``__init__.py`` declares what is the page's own: its :class:`~dash_app.wiring.Page`
  (address, title, introduction), its URL state and ``parse_*`` of it, ``build(state,
  problems)`` (its layout), the named :class:`~dash_app.wiring.Outputs` of each callback
  with what each becomes on failure, the pure ``update(...)`` that answers them from the
  queries, and ``register(app)``, which registers the page and wires its callbacks;
- ``figures.py`` holds what it draws: pure functions from query results to figures,
  tables and the like, testable without Dash's server or a browser.

What they share (registration, the guard of layouts and callbacks, the refusal of inputs
of the wrong kind, answers and failures of named outputs) is :mod:`dash_app.wiring`. The
page for unknown addresses shows no data, so it has no ``figures.py``.
"""

from dash_app.pages import (
    communication,
    compare,
    cost,
    nightly,
    not_found_404,
    overview,
    run,
    runs,
    scaling,
    trend,
)

PAGES = (
    overview,
    scaling,
    communication,
    cost,
    runs,
    run,
    compare,
    trend,
    nightly,
    not_found_404,
)
