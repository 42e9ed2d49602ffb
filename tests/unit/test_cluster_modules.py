"""The cluster's pure modules import no Twisted (they run in tools and tests without a
reactor), cluster/secrets.py can be called by config.py and cluster/wiring.py by
service.py (no import cycle)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE = ["objstore.convergence.lww", "objstore.cluster.auth", "objstore.cluster.membership",
        "objstore.cluster.gate", "objstore.cluster.secrets", "objstore.cluster.certs",
        "objstore.cli.gen_certs", "objstore.cluster.blob_repair_rules",
        "objstore.cluster.leader_rule", "objstore.cluster.view_merge",
        "objstore.cluster.view_snapshot", "objstore.cluster.tombstone_purge_rules",
        "objstore.convergence.sync_rules", "objstore.cluster.manifest_wire",
        "objstore.cluster.sync_state", "objstore.convergence.ack",
        "objstore.convergence.control_merge", "objstore.convergence.cert_binding",
        "objstore.http.error_xml"]


def imported_after(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    return set(result.stdout.split())


@pytest.mark.parametrize("module", PURE)
def test_a_pure_cluster_module_imports_no_twisted(module: str) -> None:
    loaded = imported_after(module)
    assert not {name for name in loaded if name.split(".")[0] in ("twisted", "klein", "treq")}


def test_secrets_does_not_import_the_config_module_it_validates() -> None:
    assert "objstore.config" not in imported_after("objstore.cluster.secrets")


def test_the_cluster_wiring_imports_without_the_composition_root_that_calls_it() -> None:
    assert "objstore.service" not in imported_after("objstore.cluster.wiring")
