"""Settings this version cannot honour are refused at start, before other checks."""

from __future__ import annotations

from typing import Any

import pytest

from objstore.startup import unsupported_settings


@pytest.mark.parametrize(("data", "named"), [
    ({"cluster": {"enabled": True}}, "[cluster] enabled"),
    ({"cluster": {"enabled": True, "secret": "change-me"}}, "[cluster] enabled"),
    ({"encryption": {"enabled": True}}, "[encryption] enabled"),
    ({"notifications": {}}, "[notifications]"),
    ({"logging": {"format": "json"}}, '[logging] format = "json"'),
    ({"logging": {"level": "debug"}}, "[logging] level"),
])
def test_refused(data: dict[str, Any], named: str) -> None:
    message = unsupported_settings(data)
    assert message is not None and message.startswith(named) and "not available" in message


@pytest.mark.parametrize("data", [
    {}, {"cluster": {"enabled": False}}, {"encryption": {"enabled": False}},
    {"logging": {"level": "info", "format": "text"}},
    {"logging": {"level": "loud"}},  # invalid: the validation names it, not this check
    {"cluster": "not a table"},
])
def test_accepted(data: dict[str, Any]) -> None:
    assert unsupported_settings(data) is None
