"""The dashboard as a WSGI application, for a production server:

    gunicorn --workers 2 --threads 4 'dash_app.wsgi:server'

The database comes from ``SCALEBENCH_DATABASE_URL`` (see ``scalebench.config``).
"""

from dash_app.app import create_app

app = create_app()
server = app.server
