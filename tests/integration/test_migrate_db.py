"""migrate-db on a real daemon: a populated SQLite node (users, teams, grants, credentials,
bucket versioning, tags, lifecycle, settings, object versions with tags and metadata) is
copied to a fresh PostgreSQL database and switched to it at its restart, then copied back
to SQLite (force: its old database is replaced) and switched again; after each restart the
configuration export (IAM, settings, bucket configuration, secrets included), the version
listing and every object's bytes, tags and metadata are identical. A second copy into the
non-empty target without force fails and switches nothing; a live-mode migrate-db is 400."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import make_client, running_daemon
from tests.integration.daemon import Daemon, create_postgres_database, drop_postgres_database
from tests.integration.test_maintenance_jobs import JOBS, poll
from tests.integration.test_transfer import populate

BUCKET = "migrated"


@pytest.fixture(scope="module")
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    node = Daemon(tmp_path_factory.mktemp("migrate-db"), backend="sqlite")
    with running_daemon(request, node) as running:
        yield running


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    name = create_postgres_database()
    yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    drop_postgres_database(name)


def snapshot(daemon: Daemon) -> dict[str, Any]:
    admin = AdminClient(daemon.endpoint)
    exported = admin.ok("GET", "/export?include_secrets=true")
    exported.pop("exported_at")
    s3: Any = make_client(daemon.endpoint)
    versions = s3.list_object_versions(Bucket=BUCKET)
    objects = {}
    for version in versions["Versions"]:
        key, version_id = version["Key"], version["VersionId"]
        got = s3.get_object(Bucket=BUCKET, Key=key, VersionId=version_id)
        tags = s3.get_object_tagging(Bucket=BUCKET, Key=key, VersionId=version_id)["TagSet"]
        objects[f"{key}@{version_id}"] = (got["Body"].read().hex(), got["ETag"],
                                          got["Metadata"], tags)
    listing = [(v["Key"], v["VersionId"], v["ETag"], v["Size"], v["IsLatest"],
                v["LastModified"].isoformat()) for v in versions["Versions"]]
    markers = [(m["Key"], m["VersionId"]) for m in versions.get("DeleteMarkers", [])]
    return {"export": exported, "listing": listing, "markers": markers, "objects": objects}


def migrate(daemon: Daemon, params: dict[str, Any], *, expect: str = "completed"
            ) -> dict[str, Any]:
    admin = AdminClient(daemon.endpoint)
    created = admin.ok("POST", JOBS, {"type": "migrate-db", "mode": "maintenance",
                                      "params": params}, status=201)
    done = poll("the migrate-db job", lambda: (
        (found := admin.ok("GET", f"{JOBS}/{created['id']}")["job"])["status"]
        in ("completed", "failed") and found))
    assert done["status"] == expect, done
    return dict(done)


def backend(daemon: Daemon) -> str:
    return str(AdminClient(daemon.endpoint).ok("GET", "/info")["metadata_backend"])


def test_sqlite_to_postgres_and_back(daemon: Daemon, postgres_url: str) -> None:
    populate(daemon)
    s3: Any = make_client(daemon.endpoint)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    for index in range(6):
        s3.put_object(Bucket=BUCKET, Key=f"k{index % 3}", Body=os.urandom(100 + index),
                      Metadata={"n": str(index)}, Tagging=f"n={index}")
    s3.delete_object(Bucket=BUCKET, Key="k0")
    before = snapshot(daemon)
    refused = AdminClient(daemon.endpoint).post(JOBS, {"type": "migrate-db", "params": {
        "target": "postgres", "postgres_url": postgres_url}})
    assert refused.status == 400

    migrate(daemon, {"target": "postgres", "postgres_url": postgres_url})
    override = daemon.data_dir / "control" / "metadata-backend.json"
    assert json.loads(override.read_text())["metadata_backend"] == "postgres"
    assert oct(override.stat().st_mode & 0o777) == "0o600"
    daemon.stop()
    daemon.start()
    assert backend(daemon) == "postgres"
    assert snapshot(daemon) == before

    failed = migrate(daemon, {"target": "sqlite"}, expect="failed")  # the old SQLite file
    assert "not empty" in (failed["last_error"] or "")
    assert json.loads(override.read_text())["metadata_backend"] == "postgres"
    migrate(daemon, {"target": "sqlite", "force": True})
    daemon.stop()
    daemon.start()
    assert backend(daemon) == "sqlite"
    after = snapshot(daemon)
    assert after == before
