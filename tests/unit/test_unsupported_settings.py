"""Settings this version cannot honour are refused at start, before other checks."""

from __future__ import annotations

from typing import Any

import pytest

from objstore.startup import EXPERIMENTAL_CLUSTER, unsupported_settings


@pytest.mark.parametrize(("data", "named"), [
    ({"cluster": {"enabled": True}, "server": {"workers": 2}}, "[cluster] enabled"),
    ({"cluster": {"enabled": True, "secret": "change-me"}, "server": {"workers": 4}},
     "[cluster] enabled"),
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


def test_the_partial_cluster_runs_only_when_the_environment_opts_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    data: dict[str, Any] = {"cluster": {"enabled": True}, "server": {"workers": 1}}
    monkeypatch.delenv(EXPERIMENTAL_CLUSTER, raising=False)
    message = unsupported_settings(data)
    assert message is not None and message.startswith("[cluster] enabled")
    assert EXPERIMENTAL_CLUSTER in message and "not available" in message
    monkeypatch.setenv(EXPERIMENTAL_CLUSTER, "1")
    assert unsupported_settings(data) is None  # a one-process cluster node


@pytest.mark.parametrize("server", [{"workers": 1}, {"workers": 4}, {}])
def test_a_cluster_node_may_have_several_workers(monkeypatch: pytest.MonkeyPatch,
                                                 server: dict[str, Any]) -> None:
    """One membership view per node is shared across the workers (cluster/shared_view.py):
    any [server] workers, absent (one per CPU) included, runs with the opt-in."""
    monkeypatch.setenv(EXPERIMENTAL_CLUSTER, "1")
    assert unsupported_settings({"cluster": {"enabled": True}, "server": server}) is None
