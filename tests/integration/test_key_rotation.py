"""Master key rotation end to end, on each backend: SSE-S3 objects (two versions of one
key, a copy) written under the first master key version; `objstore key rotate` adds a
version (offline), the node restarts on it and still reads every object (the old version
unwraps); a `rotate-key` job re-wraps every data key (rows and sidecars name the new key
id, the stored bytes are untouched); then the old version is removed from the key file and,
after a restart, every object still reads back byte-identical."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import Daemon, objstore_cli
from tests.integration.test_maintenance_jobs import JOBS, poll

BUCKET = "rotation"
P = 64 * 1024


@pytest.fixture(scope="module", params=BACKENDS)
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    node = Daemon(tmp_path_factory.mktemp(f"rotation-{request.param}"),
                  backend=request.param, extra_config="[encryption]\nenabled = true\n")
    with running_daemon(request, node) as running:
        yield running


def key_file(daemon: Daemon) -> Path:
    return daemon.data_dir / "control" / "keys" / "master.key"


def sidecar_key_ids(daemon: Daemon) -> set[str]:
    found = set()
    for path in (daemon.data_dir / "blobs").glob("*/*/*.meta.json"):
        document = json.loads(path.read_text())
        if document.get("encryption_key_id"):
            found.add(document["encryption_key_id"])
    return found


def read_all(s3: Any, written: dict[tuple[str, str], bytes]) -> None:
    for (key, version_id), body in written.items():
        got = s3.get_object(Bucket=BUCKET, Key=key, VersionId=version_id)
        assert got["Body"].read() == body and got["ServerSideEncryption"] == "AES256"
        ranged = s3.get_object(Bucket=BUCKET, Key=key, VersionId=version_id,
                               Range=f"bytes={P - 3}-{P + 3}")
        assert ranged["Body"].read() == body[P - 3:P + 4]


def test_rotation_keeps_every_object_readable(daemon: Daemon) -> None:
    s3: Any = make_client(daemon.endpoint)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    written: dict[tuple[str, str], bytes] = {}
    for key, size in (("a", P + 10), ("a", 2 * P), ("b", P + 100)):
        body = os.urandom(size)
        put = s3.put_object(Bucket=BUCKET, Key=key, Body=body, ServerSideEncryption="AES256")
        written[(key, put["VersionId"])] = body
    copy = s3.copy_object(Bucket=BUCKET, Key="c", CopySource={"Bucket": BUCKET, "Key": "b"},
                          ServerSideEncryption="AES256")
    written[("c", copy["VersionId"])] = written[next(k for k in written if k[0] == "b")]
    s3.put_object(Bucket=BUCKET, Key="plain", Body=b"not encrypted")
    (first_id,) = sidecar_key_ids(daemon)

    daemon.stop()
    rotated = objstore_cli(daemon, "key", "rotate")
    assert rotated.returncode == 0, rotated.stderr
    listed = objstore_cli(daemon, "key", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == first_id and lines[1].endswith("(active)")
    new_id = lines[1].split()[0]
    assert new_id != first_id and new_id not in key_file(daemon).read_text()
    daemon.start()
    read_all(s3, written)  # the old version still unwraps

    admin = AdminClient(daemon.endpoint)
    created = admin.ok("POST", JOBS, {"type": "rotate-key", "params": {"bucket": BUCKET}},
                       status=201)
    done = poll("the rotate-key job", lambda: (
        (found := admin.ok("GET", f"{JOBS}/{created['id']}")["job"])["status"]
        in ("completed", "failed") and found))
    assert done["status"] == "completed", done
    assert done["done"] == done["total"] == len(written)
    assert sidecar_key_ids(daemon) == {new_id}

    daemon.stop()  # only the new version is left: every object must have been re-wrapped
    key_file(daemon).write_text(key_file(daemon).read_text().splitlines()[-1] + "\n")
    daemon.start()
    read_all(s3, written)
    assert s3.get_object(Bucket=BUCKET, Key="plain")["Body"].read() == b"not encrypted"
