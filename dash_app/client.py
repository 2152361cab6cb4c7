"""Drive the dashboard over HTTP as the browser does, without a browser.

Used by the tests and ``benchmarks/dashboard_latency.py``: :class:`Client`
posts to ``/_dash-update-component`` exactly what Dash's renderer posts when
a control changes, so a call covers the query, the figure building and the
JSON encoding of the response.

    client = Client(create_app(url))
    page = client.open("/scaling", "?sweep=...")         # the page's layout (router callback)
    out = client.call("scaling-tta.figure", {"scaling-sweep.value": "..."})
    out["scaling-tta"]["figure"]["data"][0]["y"]
"""

from __future__ import annotations

import json
from typing import Any

from dash import Dash


def _split(output: str) -> list[tuple[str, str]]:
    """``..a.b...c.d..`` or ``a.b`` → ``[("a", "b"), ("c", "d")]``."""
    parts = output.strip(".").split("...") if output.startswith("..") else [output]
    return [tuple(part.rsplit(".", 1)) for part in parts]  # type: ignore[misc]


class Client:
    """Calls the callbacks of one app through Flask's test client."""

    def __init__(self, app: Dash) -> None:
        self.app = app
        self.http = app.server.test_client()
        response = self.http.get("/_dash-dependencies")
        assert response.status_code == 200, response.status_code
        self.dependencies: list[dict[str, Any]] = response.get_json()

    def dependency(self, output: str) -> dict[str, Any]:
        """The callback that has ``output`` (``"id.property"``) among its outputs."""
        for dependency in self.dependencies:
            if any(f"{i}.{p}" == output for i, p in _split(dependency["output"])):
                return dependency
        raise KeyError(f"no callback outputs {output}")

    def post(self, output: str, values: dict[str, Any], changed: str | None = None) -> Any:
        """The raw HTTP response of the callback that outputs ``output``."""
        dependency = self.dependency(output)
        inputs = [
            {
                "id": i["id"],
                "property": i["property"],
                "value": values.get(f"{i['id']}.{i['property']}"),
            }
            for i in dependency["inputs"]
        ]
        state = [
            {
                "id": s["id"],
                "property": s["property"],
                "value": values.get(f"{s['id']}.{s['property']}"),
            }
            for s in dependency["state"]
        ]
        outputs = [{"id": i, "property": p} for i, p in _split(dependency["output"])]
        payload = {
            "output": dependency["output"],
            "outputs": outputs if len(outputs) > 1 else outputs[0],
            "inputs": inputs,
            "state": state,
            "changedPropIds": [changed] if changed else [],
        }
        return self.http.post(
            "/_dash-update-component",
            data=json.dumps(payload),
            content_type="application/json",
        )

    def call(self, output: str, values: dict[str, Any], changed: str | None = None) -> Any:
        """The callback's outputs as ``{id: {property: value}}``; 204 (nothing to update) is
        ``{}``; any other status raises."""
        response = self.post(output, values, changed)
        if response.status_code == 204:
            return {}
        if response.status_code != 200:
            raise RuntimeError(f"{output}: HTTP {response.status_code}: {response.data[:500]!r}")
        return response.get_json()["response"]

    def open(self, path: str, search: str = "") -> Any:
        """The layout the page router renders for ``path`` and query string ``search``."""
        values = {"_pages_location.pathname": path, "_pages_location.search": search}
        return self.call("_pages_content.children", values, "_pages_location.pathname")
