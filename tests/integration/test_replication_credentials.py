"""Replication credentials on a node with a master key (`[encryption] enabled`): the secret
is never written in clear (not in the database, not on the control record), an export
shows it masked, and after a restart the worker still opens it and replicates with it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import make_client, running_daemon
from tests.integration.daemon import Daemon
from tests.integration.test_rbac import Person, allow
from tests.integration.test_replication import (
    REPLICATION,
    raw_put,
    rule_xml,
    versioned_bucket,
    wait_for,
)


@pytest.fixture
def sealed_pair(request: pytest.FixtureRequest, tmp_path: Path
                ) -> Iterator[tuple[Daemon, Daemon]]:
    source = Daemon(tmp_path / "source", backend="sqlite",
                    extra_config=REPLICATION.format(attempts=50)
                    + "[encryption]\nenabled = true\n")
    dest = Daemon(tmp_path / "dest", backend="sqlite",
                  extra_config=REPLICATION.format(attempts=50))
    with running_daemon(request, dest), running_daemon(request, source):
        yield source, dest


def files_holding(root: Path, secret: bytes) -> list[str]:
    return [str(path) for path in root.rglob("*")
            if path.is_file() and secret in path.read_bytes()]


def test_a_sealed_secret_survives_a_restart_and_never_shows(
        sealed_pair: tuple[Daemon, Daemon]) -> None:
    source, dest = sealed_pair
    person = Person(AdminClient(dest.endpoint))  # a secret only this test knows
    person.grant(allow(["s3:*"], ["*"]))
    versioned_bucket(source, dest, name="sealed")
    admin = AdminClient(source.endpoint)
    admin.ok("POST", "/replication/credentials/peer", {
        "access_key_id": person.access_key, "secret_access_key": person.secret_key})
    raw_put(make_client(source.endpoint), "sealed", rule_xml(dest.endpoint, "sealed"))
    secret = person.secret_key.encode()
    assert files_holding(source.data_dir, secret) == []
    stored = admin.ok("GET", "/settings/replication_credentials")
    assert secret not in str(stored).encode()
    assert secret not in admin.get("/export").body
    source.stop()
    source.start()
    assert files_holding(source.data_dir, secret) == []
    s3: Any = make_client(source.endpoint)
    s3.put_object(Bucket="sealed", Key="after-restart", Body=b"sealed credentials")
    target: Any = make_client(dest.endpoint)
    wait_for(lambda: target.head_object(Bucket="sealed", Key="after-restart"),
             "the object on the destination")
    assert target.get_object(Bucket="sealed", Key="after-restart")["Body"].read() == (
        b"sealed credentials")
    assert s3.head_object(Bucket="sealed", Key="after-restart")["ReplicationStatus"] == (
        "COMPLETED")
