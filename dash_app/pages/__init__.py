"""One module per page. Each has ``register(app)``, which calls ``dash.register_page`` with
its path and layout function and adds its callbacks to ``app``; ``layout(**params)``
receives the URL's query parameters and never raises."""

from dash_app.pages import (
    communication,
    compare,
    cost,
    not_found_404,
    overview,
    run,
    runs,
    scaling,
    trend,
)

PAGES = (overview, scaling, communication, cost, runs, run, compare, trend, not_found_404)
