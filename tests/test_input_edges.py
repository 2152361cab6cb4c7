"""Inputs at the edge of what can be read or stored, on every entry point: a clear refusal
naming the field, file or setting, never a traceback, a silent drop or a row one database
keeps and the other refuses.

- whole numbers typed with thousands of leading zeros (options, settings, the form);
- a dashboard callback request whose JSON is nested deeper than Python can decode;
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalebench import config
from scalebench.request import SweepRequest
from scalebench.request_fields import InvalidParameter, RequestField
from scalebench.whole_numbers import NotWholeNumber, parse_whole


def examples(count: int) -> settings:
    """``count`` examples, the same ones on every run, no deadline (2 cores shared with
    other tests), nothing written into the checkout."""
    return settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


# --- whole numbers with thousands of leading zeros ----------------------------------------

WHOLE_FIELDS = [
    f.metadata["request_field"]
    for f in dataclasses.fields(SweepRequest)
    if "request_field" in f.metadata and f.metadata["request_field"].kind in ("int", "counts")
]


@examples(200)
@given(
    field=st.sampled_from(WHOLE_FIELDS),
    sign=st.sampled_from(["", "+", "-"]),
    zeros=st.integers(0, 9000),
    digits=st.text("0123456789", max_size=45),
    space=st.sampled_from(["", " ", "\t", " \n"]),
)
def test_a_whole_number_padded_with_any_number_of_zeros_is_read_as_its_digits(
    field: RequestField, sign: str, zeros: int, digits: str, space: str
) -> None:
    text = f"{space}{sign}{'0' * zeros}{digits}{space}"
    significant = digits.lstrip("0")
    try:
        value = field.read(text)
    except InvalidParameter as exc:
        assert exc.field == field.name and len(str(exc)) < 200, str(exc)[:300]
        if len(significant) > 40:
            assert "at most 40 digits" in exc.reason
        return
    assert len(significant) <= 40 and (zeros or digits)
    number = int(sign + (significant or "0"))
    assert value == (tuple([number]) if field.kind == "counts" else number)


@pytest.mark.parametrize(
    "option, maximum",
    [
        ("--repeats", 100),
        ("--seed", 2**63 - 1),
        ("--gpus-per-worker", 16),
        ("--threads-per-worker", 256),
        ("--max-epochs", 10000),
        ("--workers", 4096),
    ],
)
def test_the_command_line_reads_thousands_of_leading_zeros_as_the_number_they_pad(
    option: str, maximum: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    field = option.removeprefix("--").replace("-", "_")
    database = f"sqlite:///{tmp_path / 'r.db'}"
    given = "0" * 5000 + str(maximum + 1)  # its number just beyond the field's range
    argv = ["run", "task2a-logreg-epsilon", "--light", option, given]
    assert cli.main([*argv, "--results", str(tmp_path / "r"), "--database", database]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {field}: " in err, err[:400]
    assert f"at most {maximum}" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_settings_and_the_dashboards_port_read_leading_zeros_alike(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli import main as cli

    monkeypatch.setenv("SCALEBENCH_MAX_WORKERS", "0" * 5000 + "8")
    assert config.max_workers() == 8
    monkeypatch.setenv("SCALEBENCH_MAX_WORKERS", "0" * 5000 + "9" * 50)
    with pytest.raises(
        config.BadSetting,
        match="SCALEBENCH_MAX_WORKERS must be a whole number of at most 40 digits",
    ):
        config.max_workers()
    assert cli.main(["dashboard", "--port", "0" * 5000 + "70000", "--database", "sqlite://"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "port: must be from 1 to 65535, got 70000" in err, err[:300]
    assert parse_whole(" -0007 ") == -7 and parse_whole("0" * 10000) == 0
    for bad in ("", "+", "-", "1e3", "0x10", "٣", "1 2", "+-1"):
        with pytest.raises(NotWholeNumber, match="must be a whole number, got"):
            parse_whole(bad)


# --- the dashboard: bodies no decoder can read ------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b'{"output": "x.children", "inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"output": "x.children", "inputs": [{"id": "x", "property": "value", "value": '
        + b"[" * 50_000
        + b"]" * 50_000
        + b"}]}",
    ],
    ids=["lists", "objects", "inputs", "a value"],
)
def test_a_callback_body_nested_beyond_the_recursion_limit_gets_a_400_and_one_log_line(
    body: bytes, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from dash_app.app import create_app

    server = create_app(f"sqlite:///{tmp_path / 'r.db'}", stylesheets=[]).server
    caplog.set_level(logging.WARNING)
    caplog.clear()
    answer = server.test_client().post(
        "/_dash-update-component", data=body, content_type="application/json"
    )
    assert answer.status_code == 400
    assert "Traceback" not in answer.get_data(as_text=True)
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and not lines[0].exc_info, [r.getMessage()[:200] for r in lines]
    assert "callback request refused (RecursionError" in lines[0].getMessage()
