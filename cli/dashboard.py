"""``scalebench dashboard``: the dashboard served read-only by Dash's own server."""

from __future__ import annotations

import argparse
import sys

from results_db import service
from scalebench import config
from scalebench.request_fields import InvalidParameter
from scalebench.whole_numbers import NotWholeNumber, parse_whole


def _check_can_listen(host: str, port: int) -> None:
    """Refuse, naming the option, a host that is no address of this machine or a port taken
    or not allowed, before the server starts (its own message would be one bare line)."""
    import errno
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InvalidParameter("host", f"{host!r} is no address to listen on ({reason})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            field = "port" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "host"
            raise InvalidParameter(
                field, f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Serve the dashboard (read-only) with Dash's own server until Ctrl-C."""
    try:
        port = parse_whole(str(args.port))
    except NotWholeNumber as exc:
        raise InvalidParameter("port", str(exc)) from None
    if not 1 <= port <= 65535:
        raise InvalidParameter("port", f"must be from 1 to 65535, got {port}")
    _check_can_listen(args.host, port)
    from dash_app.app import create_app
    from results_db.database import readonly_engine

    url = args.database or config.database_url()
    readonly_engine(url).dispose()  # a URL no engine can be made of is refused here, by name
    app = create_app(url)
    problem = app.server.extensions["scalebench"].health()
    if problem:  # served anyway: the database may come up; pages say why until then
        print(f"scalebench: warning: {problem}", file=sys.stderr, flush=True)
    print(
        f"dashboard of {service.redact(url)} on http://{args.host}:{port}/ (Ctrl-C stops it)",
        flush=True,
    )
    try:
        app.run(host=args.host, port=port, debug=False)
    except KeyboardInterrupt:
        print("dashboard stopped", file=sys.stderr)
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The ``dashboard`` command."""
    dashboard = commands.add_parser("dashboard", help="serve the dashboard (read-only)")
    dashboard.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    dashboard.add_argument("--port", default="8050", help="port (default 8050)")
    dashboard.add_argument(
        "--database", default=None, help="results database URL (SCALEBENCH_DATABASE_URL)"
    )
    dashboard.set_defaults(func=cmd_dashboard)
