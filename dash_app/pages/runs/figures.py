"""What the Runs page draws: its grid's columns, and the sort the grid's column state
names."""

from __future__ import annotations

from typing import Any

from dash_app import components as ui
from dash_app import tables
from scalebench.run_metrics import shown_on

# The server sorts: the grid keeps the rows in the order they are sent (every pair equal).
KEEP_ORDER = {"comparator": {"function": "0"}}
# A run that did not succeed: its status in red and bold.
NOT_SUCCEEDED = {"color": "#b02a37", "fontWeight": "bold"}
STATUS_STYLE = {
    "styleConditions": [{"condition": "params.value != 'succeeded'", "style": NOT_SUCCEEDED}]
}
COLUMNS = [
    {
        **ui.column(field, header, link=field == "run", wrap=field == "reason"),
        **KEEP_ORDER,
        **({"cellStyle": STATUS_STYLE} if field == "status" else {}),
    }
    for field, header in (
        ("run", "run"),
        ("sweep", "sweep"),
        ("task", "task"),
        ("workers", "workers"),
        ("repeat", "repeat"),
        ("status", "status"),
        ("time_to_accuracy_s", "time to accuracy"),
        ("samples_per_s", "samples/s"),
        ("communication_ratio", "communication ratio"),
        *((m.name, m.label) for m in shown_on("runs_table")),
        ("started", "started"),
        ("reason", "reason"),
    )
]


def sorted_columns(sort: str, order: str) -> list[dict[str, Any]]:
    """:data:`COLUMNS`, ``sort`` shown sorted in ``order`` (its arrow in the header)."""
    return [{**c, "sort": order} if c["field"] == sort else c for c in COLUMNS]


def column_state(sort: str, order: str) -> list[dict[str, Any]]:
    """The grid's column state with ``sort`` sorted in ``order``, every column in place."""
    return [{"colId": c["field"], "sort": order if c["field"] == sort else None} for c in COLUMNS]


def sort_of(state: Any) -> tuple[str, str]:
    """The sorted column and its order in the grid's column state; the newest first when no
    column it names is sorted (or the state is not the grid's)."""
    for entry in state if isinstance(state, list) else []:
        if isinstance(entry, dict) and entry.get("sort") in ("asc", "desc"):
            column = entry.get("colId")
            if isinstance(column, str) and column in tables.RUN_SORT_KEYS:
                return column, entry["sort"]
    return "started", "desc"
