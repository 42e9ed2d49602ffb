"""Settings this version cannot honour are refused at start, before other checks."""

from __future__ import annotations

from typing import Any

import pytest

from objstore.startup import unsupported_settings


@pytest.mark.parametrize(("data", "named"), [
    ({"logging": {"format": "json"}}, '[logging] format = "json"'),
    ({"logging": {"level": "debug"}}, "[logging] level"),
])
def test_refused(data: dict[str, Any], named: str) -> None:
    message = unsupported_settings(data)
    assert message is not None and message.startswith(named) and "not available" in message


@pytest.mark.parametrize("data", [
    {}, {"cluster": {"enabled": False}}, {"encryption": {"enabled": False}},
    {"encryption": {"enabled": True}}, {"encryption": {"enabled": True, "kms_provider": "local"}},
    {"encryption": {"enabled": True, "kms_provider": "vault"}},
    {"logging": {"level": "info", "format": "text"}}, {"notifications": {}},
    {"logging": {"level": "loud"}},  # invalid: the validation names it, not this check
    {"cluster": "not a table"},
])
def test_accepted(data: dict[str, Any]) -> None:
    assert unsupported_settings(data) is None


@pytest.mark.parametrize("server", [{"workers": 1}, {"workers": 4}, {}])
def test_a_cluster_node_may_have_several_workers(server: dict[str, Any]) -> None:
    """[cluster] enabled is a supported setting, whatever the environment; one membership
    view per node is shared across the workers (cluster/shared_view.py): any [server]
    workers, absent (one per CPU) included."""
    assert unsupported_settings({"cluster": {"enabled": True}, "server": server}) is None
