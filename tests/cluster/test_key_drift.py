"""Two nodes that share the cluster secret and settings but each hold their own master key
(both create one at first start): each authenticates the other but shows it config_ok=false
and not eligible, because the master key ids are part of the config fingerprint; neither
would serve its peer's encrypted objects as garbage. /admin/info names the provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.harness import Node, peers_of, start_cluster, wait_for

pytestmark = pytest.mark.timeout(90)

NAMES = ("x", "y")


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    encryption = "[encryption]\nenabled = true\n"  # each node creates its own key
    overrides = {name: {"probe_interval_seconds": "0.5"} for name in NAMES}
    with start_cluster(request, tmp_path_factory, NAMES, cluster_overrides=overrides,
                       extra_config={name: encryption for name in NAMES}) as started:
        yield started


def test_another_master_key_is_config_drift(nodes: dict[str, Node]) -> None:
    def drift_shown(name: str, other: str) -> bool:
        found = [entry for entry in peers_of(nodes[name])
                 if entry["node_id"] == f"node-{other}"]
        return bool(found) and found[0]["authenticated"] is True \
            and found[0]["config_ok"] is False and found[0]["eligible"] is False

    wait_for("x shows y drifted", lambda: drift_shown("x", "y"), deadline=30)
    wait_for("y shows x drifted", lambda: drift_shown("y", "x"), deadline=30)
    info = nodes["x"].admin.get("/info").json
    assert info["encryption_enabled"] is True and info["kms_provider"] == "local"
    assert "kms_endpoint" not in info
