"""`objstore recover` after crashes in the worst places, against the real daemon.

The crash is injected, not timed: the daemon runs with a `sitecustomize` module (on its
PYTHONPATH only) that SIGKILLs the process on the first blob removal while a switch file
exists. Blobs are removed right after the commit that made them unreachable, so a delete
or an abort dies between its row commit and the removal of its files. Then the database
is lost, `objstore recover` rebuilds it from the data volume, and boto3 checks that open
uploads came back with their parts (and complete), and that deleted versions and aborted
uploads stayed gone.
"""

from __future__ import annotations

import hashlib
import os
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.conftest import BACKENDS, make_client
from tests.integration.daemon import Daemon, drop_database, objstore_cli

PART_BYTES = 5 * 1024 * 1024

CRASH_HOOK = textwrap.dedent('''
    """Test-only: SIGKILL this process at the first blob removal while the switch exists."""
    import os
    import signal

    from objstore.blobs import store

    _switch = os.environ["OBJSTORE_TEST_CRASH_SWITCH"]
    _delete = store.BlobStore.delete


    def _crashing_delete(self, blob_id):
        if os.path.exists(_switch):
            os.kill(os.getpid(), signal.SIGKILL)
        return _delete(self, blob_id)


    store.BlobStore.delete = _crashing_delete
''')


@dataclass
class CrashingDaemon(Daemon):
    """A daemon that dies at the next blob removal after `arm()`."""

    hook_dir: Path | None = None

    @property
    def switch(self) -> Path:
        return self.workdir / "crash-at-next-blob-removal"

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.hook_dir is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(self.hook_dir), env.get("PYTHONPATH", "")) if p)
            env["OBJSTORE_TEST_CRASH_SWITCH"] = str(self.switch)
        return env

    def crash_during(self, action: Any) -> None:
        """Run `action` (a request) with the switch on: the daemon must die in it. The
        files of deletes answered before are removed first (their removal runs after the
        answer, engine/removals.py: armed meanwhile, the switch would fire there)."""
        self.wait_for_removals()
        self.switch.touch()
        try:
            action()
        except Exception:  # noqa: BLE001 - the daemon died under the request
            pass
        finally:
            assert self.process is not None
            code = self.process.wait(30)
            self.process = None
            self.switch.unlink()
        assert code == -9, f"the daemon was expected to die, exit status {code}"


    def wait_for_removals(self, seconds: float = 30.0) -> None:
        """Until no withdrawn sidecar waits in `deleting/` (a delete's files still to go)."""
        deleting = self.data_dir / "deleting"
        deadline = time.monotonic() + seconds
        while deleting.is_dir() and any(deleting.iterdir()):
            assert time.monotonic() < deadline, "deleted files were not removed in time"
            time.sleep(0.02)


@pytest.fixture(params=BACKENDS)
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CrashingDaemon]:
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(CRASH_HOOK)
    daemon = CrashingDaemon(tmp_path / "node", backend=request.param, workers=1,
                            hook_dir=hook_dir)
    daemon.start()
    yield daemon
    daemon.cleanup()


def _upload(s3: Any, key: str, *bodies: bytes) -> tuple[str, list[dict[str, Any]]]:
    upload_id = s3.create_multipart_upload(Bucket="bkt", Key=key)["UploadId"]
    parts = []
    for number, body in enumerate(bodies, start=1):
        etag = s3.upload_part(Bucket="bkt", Key=key, UploadId=upload_id, PartNumber=number,
                              Body=body)["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    return upload_id, parts


def _missing(call: Any) -> bool:
    try:
        call()
    except ClientError as error:
        return error.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    return False


def test_recover_reopens_uploads_and_keeps_deletes_after_crashes(node: CrashingDaemon) -> None:
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.create_bucket(Bucket="ver")
    s3.put_bucket_versioning(Bucket="ver", VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket="bkt", Key="kept", Body=b"kept bytes")
    for key in ("deleted", "deleted-in-crash"):
        s3.put_object(Bucket="bkt", Key=key, Body=key.encode())
    first = s3.put_object(Bucket="ver", Key="doc", Body=b"first")["VersionId"]
    second = s3.put_object(Bucket="ver", Key="doc", Body=b"second")["VersionId"]
    big, tail = os.urandom(PART_BYTES), b"tail"
    s3.complete_multipart_upload(Bucket="bkt", Key="multipart-deleted-in-crash",
                                 UploadId=(done := _upload(s3, "multipart-deleted-in-crash",
                                                           big, tail))[0],
                                 MultipartUpload={"Parts": done[1]})
    open_id, open_parts = _upload(s3, "open", big, tail)
    replaced_id, _ = _upload(s3, "replaced-part", b"old part")
    newer = s3.upload_part(Bucket="bkt", Key="replaced-part", UploadId=replaced_id,
                           PartNumber=1, Body=b"new part")["ETag"]
    aborted_id, _ = _upload(s3, "aborted", b"aborted part")
    s3.delete_object(Bucket="bkt", Key="deleted")

    crashes = [
        lambda: s3.delete_object(Bucket="bkt", Key="deleted-in-crash"),
        lambda: s3.delete_object(Bucket="ver", Key="doc", VersionId=first),
        lambda: s3.delete_object(Bucket="bkt", Key="multipart-deleted-in-crash"),
        lambda: s3.abort_multipart_upload(Bucket="bkt", Key="aborted", UploadId=aborted_id),
    ]
    for number, crash in enumerate(crashes):
        if number:
            node.start()
            s3 = make_client(node.endpoint)
        node.crash_during(crash)

    drop_database(node)
    recovered = objstore_cli(node, "recover")
    assert recovered.returncode == 0, recovered.stderr
    assert "2 object versions, 2 open multipart uploads" in recovered.stderr
    node.hook_dir = None
    node.start()
    s3 = make_client(node.endpoint)

    assert s3.get_object(Bucket="bkt", Key="kept")["Body"].read() == b"kept bytes"
    for key in ("deleted", "deleted-in-crash", "multipart-deleted-in-crash"):
        assert _missing(lambda key=key: s3.head_object(Bucket="bkt", Key=key)), key
    versions = s3.list_object_versions(Bucket="ver")["Versions"]
    assert [v["VersionId"] for v in versions] == [second]

    uploads = s3.list_multipart_uploads(Bucket="bkt")["Uploads"]
    assert sorted((u["Key"], u["UploadId"]) for u in uploads) == [
        ("open", open_id), ("replaced-part", replaced_id)]
    listed = s3.list_parts(Bucket="bkt", Key="open", UploadId=open_id)["Parts"]
    assert [(p["PartNumber"], p["ETag"]) for p in listed] == [
        (p["PartNumber"], p["ETag"]) for p in open_parts]
    assert [p["ETag"] for p in s3.list_parts(Bucket="bkt", Key="replaced-part",
                                              UploadId=replaced_id)["Parts"]] == [newer]
    s3.complete_multipart_upload(Bucket="bkt", Key="open", UploadId=open_id,
                                 MultipartUpload={"Parts": open_parts})
    body = s3.get_object(Bucket="bkt", Key="open")["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(big + tail).digest()
    s3.complete_multipart_upload(Bucket="bkt", Key="replaced-part", UploadId=replaced_id,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": newer}]})
    assert s3.get_object(Bucket="bkt", Key="replaced-part")["Body"].read() == b"new part"
    assert _missing(lambda: s3.list_parts(Bucket="bkt", Key="aborted", UploadId=aborted_id))
