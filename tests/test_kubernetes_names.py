"""Kubernetes' name rules are declared once: the request form's pattern and the site settings
accept the same queue and priority class names."""

from __future__ import annotations

import re

import pytest

from operators.kubernetes.settings import KubernetesSettings
from scalebench.kubernetes_names import (
    LABELLED_NAME_PATTERN,
    is_label,
    is_label_value,
    is_labelled_name,
    is_qualified_name,
    is_subdomain,
)
from scalebench.sweep import InvalidParameter, validate_request

NAMES = [
    "team-a",
    "high-priority",
    "a.b-c.d",
    "a" * 63,
    "a" * 64,  # a subdomain, but too long for a label value
    "a." + "b" * 61,
    "High_Priority",
    "-team",
    "team-",
    "team..a",
    "",
    "ü",
]


@pytest.mark.parametrize("name", NAMES)
def test_the_form_and_the_settings_take_the_same_queue_and_priority_names(name: str) -> None:
    by_pattern = re.fullmatch(LABELLED_NAME_PATTERN, name) is not None
    assert by_pattern == is_labelled_name(name)
    for variable in ("SCALEBENCH_K8S_QUEUE_NAME", "SCALEBENCH_K8S_PRIORITY_CLASS"):
        if not name:
            continue  # empty: the setting is unset
        try:
            KubernetesSettings.from_env({variable: name})
            setting_takes = True
        except ValueError as exc:
            assert variable in str(exc)
            setting_takes = False
        assert setting_takes == by_pattern, (variable, name)
    for field in ("queue_name", "priority_class"):
        if not name:
            continue  # empty: the field falls back to the setting
        try:
            validate_request(
                task="task0-allreduce",
                workers=[1],
                launcher="kubernetes",
                **{field: name},
            )
            form_takes = True
        except InvalidParameter as exc:
            assert exc.field == field
            form_takes = False
        assert form_takes == by_pattern, (field, name)


def test_each_rule_has_its_limits() -> None:
    assert is_label("a" * 63) and not is_label("a" * 64) and not is_label("a.b")
    assert is_subdomain("a." * 126 + "a") and not is_subdomain("a" * 254)
    assert is_labelled_name("a.b") and not is_labelled_name("a" * 64)
    assert is_label_value("") and is_label_value("A_b.c") and not is_label_value("-a")
    assert is_qualified_name("example.com/team") and is_qualified_name("team")
    assert not is_qualified_name("/team") and not is_qualified_name("Example.com/team")
