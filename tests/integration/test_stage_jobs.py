"""The encrypt, decrypt, compress and decompress jobs on a real daemon (SQLite): a
versioned bucket with object lock (several versions per key, tags, user metadata, a legal
hold, a delete marker) is encrypted under live writes (new versions and tag changes made
while the job runs win and are kept), then compressed (after its compression setting was
turned on), decompressed and decrypted; after each job every version reads back byte-
identical with its ETag, tags, metadata and lock state, and the sidecars say what the job
did. On SQLite, a SIGKILL mid-job and a restart resume the job from its recorded progress;
then master key rotation (SSE-S3 and SSE-KMS objects): `objstore key rotate` adds a version
(offline), the node restarts on it and still reads every object (the old version unwraps),
a `rotate-key` job re-wraps every data key (sidecars name the new key id; the stored bytes
are untouched), the parts' keys of a completed multipart object and of an upload left open
too, and after the old version is removed from the key file and a restart, every object
still reads and the open upload completes."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import encrypted_daemon, make_client
from tests.integration.daemon import Daemon, objstore_cli
from tests.integration.test_maintenance_jobs import JOBS, poll

BUCKET = "restaged"
ROTATION_BUCKET = "rotation"
KMS_KEYS = ("kms", "kms-multi")  # SSE-KMS objects (the master key's): rotated alike
P = 64 * 1024


# SQLite only: the walk's and swaps' queries run on both backends in
# tests/unit/test_rewrap_queries.py; what is tested here does not depend on the backend.
@pytest.fixture(scope="module", params=["sqlite"])
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    with encrypted_daemon(request, tmp_path_factory, f"stage-jobs-{request.param}",
                          request.param) as running:
        yield running


def sidecars(daemon: Daemon) -> list[dict[str, Any]]:
    found = []
    for path in (daemon.data_dir / "blobs").glob("*/*/*.meta.json"):
        document = json.loads(path.read_text())
        if document.get("bucket") == BUCKET and document.get("kind") == "object" \
                and not document.get("is_delete_marker"):
            found.append(document)
    return found


def run_job(admin: AdminClient, job_type: str, **params: Any) -> dict[str, Any]:
    created = admin.ok("POST", JOBS, {"type": job_type, "params": params}, status=201)
    return wait_job(admin, created["id"])


def wait_job(admin: AdminClient, job_id: str) -> dict[str, Any]:
    done = poll(f"job {job_id}", lambda: (
        (found := admin.ok("GET", f"{JOBS}/{job_id}")["job"])["status"]
        in ("completed", "failed", "cancelled") and found))
    assert done["status"] == "completed", done
    return dict(done)


def check_versions(s3: Any, written: dict[tuple[str, str], bytes],
                   tags: dict[tuple[str, str], dict[str, str]]) -> None:
    listed = s3.list_object_versions(Bucket=BUCKET)
    have = {(v["Key"], v["VersionId"]) for v in listed.get("Versions", [])}
    assert have == set(written), (have ^ set(written))
    assert len(listed.get("DeleteMarkers", [])) == 1
    for (key, version_id), body in written.items():
        got = s3.get_object(Bucket=BUCKET, Key=key, VersionId=version_id)
        assert got["Body"].read() == body, (key, version_id)
        assert got["Metadata"] == {"origin": key}
        got_tags = s3.get_object_tagging(Bucket=BUCKET, Key=key, VersionId=version_id)
        assert {t["Key"]: t["Value"] for t in got_tags["TagSet"]} == tags[(key, version_id)]
    hold = s3.get_object_legal_hold(Bucket=BUCKET, Key="held",
                                    VersionId=next(v for k, v in written if k == "held"))
    assert hold["LegalHold"]["Status"] == "ON"


def put(s3: Any, written: dict[tuple[str, str], bytes],
        tags: dict[tuple[str, str], dict[str, str]], key: str, size: int,
        **extra: Any) -> str:
    body = os.urandom(size // 2) + b"z" * (size - size // 2)  # half compressible
    answer = s3.put_object(Bucket=BUCKET, Key=key, Body=body, Metadata={"origin": key},
                           Tagging=f"n={len(written)}", **extra)
    written[(key, answer["VersionId"])] = body
    tags[(key, answer["VersionId"])] = {"n": str(len(written) - 1)}
    return str(answer["VersionId"])


def test_rewrite_jobs_keep_every_version_under_live_writes(daemon: Daemon) -> None:
    s3: Any = make_client(daemon.endpoint)
    admin = AdminClient(daemon.endpoint)
    s3.create_bucket(Bucket=BUCKET, ObjectLockEnabledForBucket=True)
    written: dict[tuple[str, str], bytes] = {}
    tags: dict[tuple[str, str], dict[str, str]] = {}
    for index in range(16):
        put(s3, written, tags, f"k{index % 8}", 3000 + 70_000 * (index % 3))
    put(s3, written, tags, "held", 5000, ObjectLockLegalHoldStatus="ON",
        ChecksumAlgorithm="SHA256")
    s3.delete_object(Bucket=BUCKET, Key="k0")  # a delete marker, walked past

    stop = threading.Event()

    def live_writes() -> None:  # new versions and tag changes while the job runs
        n = 0
        while not stop.is_set() and n < 12:
            key = f"k{n % 8}"
            put(s3, written, tags, key, 2000)
            version = next(v for (k, v) in reversed(list(written)) if k == key and
                           (k, v) != list(written)[-1]) if n % 2 else None
            if version is not None:
                s3.put_object_tagging(Bucket=BUCKET, Key=key, VersionId=version,
                                      Tagging={"TagSet": [{"Key": "live", "Value": "yes"}]})
                tags[(key, version)] = {"live": "yes"}
            n += 1

    writer = threading.Thread(target=live_writes)
    writer.start()
    try:
        job = run_job(admin, "encrypt", bucket=BUCKET)
    finally:
        stop.set()
        writer.join()
    assert job["done"] == job["total"] >= 17
    check_versions(s3, written, tags)
    encrypted = [s for s in sidecars(daemon) if s.get("encryption_algorithm") == "AES256"]
    # Every version written before the job is encrypted (also those whose tags changed
    # meanwhile); live writes made after the walk passed their key stay plain.
    assert {(s["key"], s["version_id"]) for s in encrypted} >= set(list(written)[:17])
    assert run_job(admin, "encrypt", bucket=BUCKET)["total"] == len(written) - len(encrypted)
    assert all(s.get("encryption_algorithm") == "AES256" for s in sidecars(daemon))
    assert len(sidecars(daemon)) == len(written)  # old blobs removed, none left behind

    admin.ok("PUT", f"/buckets/{BUCKET}/compression", {"algorithm": "zstd", "level": 3})
    run_job(admin, "compress", bucket=BUCKET, prefix="k")
    assert all(s.get("compression") == "zstd" for s in sidecars(daemon) if s["key"] != "held")
    run_job(admin, "decompress", bucket=BUCKET)
    run_job(admin, "decrypt", bucket=BUCKET)
    assert all(s.get("compression") is None and s.get("encryption_algorithm") is None
               for s in sidecars(daemon))
    check_versions(s3, written, tags)
    assert len(sidecars(daemon)) == len(written)


def test_a_killed_job_resumes_where_it_stopped(daemon: Daemon) -> None:
    s3: Any = make_client(daemon.endpoint)
    admin = AdminClient(daemon.endpoint)
    s3.create_bucket(Bucket="resumed")
    bodies = {f"r{index:03d}": os.urandom(20_000) for index in range(40)}
    for key, body in bodies.items():
        s3.put_object(Bucket="resumed", Key=key, Body=body)
    created = admin.ok("POST", JOBS, {"type": "encrypt", "params": {
        "bucket": "resumed", "rate_bytes_per_sec": 300_000}}, status=201)
    poll("progress past the first page", lambda: admin.ok(
        "GET", f"{JOBS}/{created['id']}")["job"]["done"] >= 20, 30)
    daemon.kill()
    daemon.start()
    before = admin.ok("GET", f"{JOBS}/{created['id']}")
    assert 20 <= before["job"]["done"] < 40
    done = wait_job(admin, created["id"])
    logs = admin.ok("GET", f"{JOBS}/{created['id']}")["logs"]
    assert any(entry["message"].startswith("resumed at") for entry in logs)
    assert done["done"] == done["total"] == 40
    for key, body in bodies.items():
        got = s3.get_object(Bucket="resumed", Key=key)
        assert got["Body"].read() == body
        assert got["ServerSideEncryption"] == ("aws:kms" if key in KMS_KEYS else "AES256")


def key_file(daemon: Daemon) -> Path:
    return daemon.data_dir / "control" / "keys" / "master.key"


def sidecar_key_ids(daemon: Daemon) -> set[str]:
    """The key ids the objects' sidecars name (not a provisional sidecar: a rewrite the
    SIGKILL above cut short leaves its new blob for `check --repair`)."""
    found = set()
    for path in (daemon.data_dir / "blobs").glob("*/*/*.meta.json"):
        document = json.loads(path.read_text())
        if document.get("encryption_key_id") and document.get("kind") == "object":
            found.add(document["encryption_key_id"])
    return found


def part_key_ids(daemon: Daemon, upload_id: str) -> set[str]:
    """The key ids the part sidecars of an open upload name."""
    found = set()
    for path in (daemon.data_dir / "blobs").glob("*/*/*.meta.json"):
        document = json.loads(path.read_text())
        if document.get("kind") == "part" and document.get("upload_id") == upload_id:
            found.add(str((document.get("encryption_params") or {}).get("key_id")))
    return found


def read_all(s3: Any, written: dict[tuple[str, str], bytes]) -> None:
    for (key, version_id), body in written.items():
        got = s3.get_object(Bucket=ROTATION_BUCKET, Key=key, VersionId=version_id)
        assert got["Body"].read() == body
        assert got["ServerSideEncryption"] == ("aws:kms" if key in KMS_KEYS else "AES256")
        ranged = s3.get_object(Bucket=ROTATION_BUCKET, Key=key, VersionId=version_id,
                               Range=f"bytes={P - 3}-{P + 3}")
        assert ranged["Body"].read() == body[P - 3:P + 4]


def test_rotation_keeps_every_object_readable(daemon: Daemon) -> None:
    s3: Any = make_client(daemon.endpoint)
    s3.create_bucket(Bucket=ROTATION_BUCKET)
    s3.put_bucket_versioning(Bucket=ROTATION_BUCKET, VersioningConfiguration={"Status": "Enabled"})
    written: dict[tuple[str, str], bytes] = {}
    for key, size in (("a", P + 10), ("a", 2 * P), ("b", P + 100)):
        body = os.urandom(size)
        put = s3.put_object(Bucket=ROTATION_BUCKET, Key=key, Body=body,
                            ServerSideEncryption="AES256")
        written[(key, put["VersionId"])] = body
    copy = s3.copy_object(Bucket=ROTATION_BUCKET, Key="c", ServerSideEncryption="AES256",
                          CopySource={"Bucket": ROTATION_BUCKET, "Key": "b"})
    written[("c", copy["VersionId"])] = written[next(k for k in written if k[0] == "b")]
    s3.put_object(Bucket=ROTATION_BUCKET, Key="plain", Body=b"not encrypted")
    kms_body = os.urandom(P + 5)
    kms = s3.put_object(Bucket=ROTATION_BUCKET, Key="kms", Body=kms_body,
                        ServerSideEncryption="aws:kms", SSEKMSKeyId="alias/objstore")
    written[("kms", kms["VersionId"])] = kms_body
    kms_upload = s3.create_multipart_upload(Bucket=ROTATION_BUCKET, Key="kms-multi",
                                            ServerSideEncryption="aws:kms")["UploadId"]
    kms_part = s3.upload_part(Bucket=ROTATION_BUCKET, Key="kms-multi", UploadId=kms_upload,
                              PartNumber=1, Body=kms_body)["ETag"]
    kms_multi = s3.complete_multipart_upload(
        Bucket=ROTATION_BUCKET, Key="kms-multi", UploadId=kms_upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": kms_part}]})
    written[("kms-multi", kms_multi["VersionId"])] = kms_body
    # A completed multipart object (each part has its own data key) and an upload left
    # open across the rotation (its part's key is bound to the upload).
    part_bodies = [os.urandom(5 * 1024 * 1024), os.urandom(P + 9)]
    upload = s3.create_multipart_upload(Bucket=ROTATION_BUCKET, Key="multi",
                                        ServerSideEncryption="AES256")
    etags = [s3.upload_part(Bucket=ROTATION_BUCKET, Key="multi", UploadId=upload["UploadId"],
                            PartNumber=number, Body=body)["ETag"]
             for number, body in enumerate(part_bodies, 1)]
    done = s3.complete_multipart_upload(
        Bucket=ROTATION_BUCKET, Key="multi", UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e}
                                   for n, e in enumerate(etags, 1)]})
    written[("multi", done["VersionId"])] = b"".join(part_bodies)
    open_upload = s3.create_multipart_upload(Bucket=ROTATION_BUCKET, Key="open",
                                             ServerSideEncryption="AES256")["UploadId"]
    open_first = s3.upload_part(Bucket=ROTATION_BUCKET, Key="open", UploadId=open_upload,
                                PartNumber=1, Body=part_bodies[0])["ETag"]
    (first_id,) = sidecar_key_ids(daemon)  # the other tests' objects too

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
    old_arn = s3.head_object(Bucket=ROTATION_BUCKET, Key="kms")["SSEKMSKeyId"]
    assert old_arn == f"arn:aws:kms:{first_id}"  # until the rotate-key job re-wraps it
    again = s3.put_object(Bucket=ROTATION_BUCKET, Key="kms-again", Body=b"k",  # same KMS key
                          ServerSideEncryption="aws:kms", SSEKMSKeyId=old_arn)
    assert again["SSEKMSKeyId"] == f"arn:aws:kms:{new_id}"

    admin = AdminClient(daemon.endpoint)
    created = admin.ok("POST", JOBS, {"type": "rotate-key"}, status=201)
    done = poll("the rotate-key job", lambda: (
        (found := admin.ok("GET", f"{JOBS}/{created['id']}")["job"])["status"]
        in ("completed", "failed") and found))
    assert done["status"] == "completed", done
    assert done["done"] == done["total"] >= len(written) + 1  # the open part, other tests'
    assert sidecar_key_ids(daemon) == {new_id}
    assert part_key_ids(daemon, open_upload) == {new_id}

    for key in KMS_KEYS:  # SSE-KMS shows the version that wraps it now
        assert s3.head_object(Bucket=ROTATION_BUCKET, Key=key)["SSEKMSKeyId"] == \
            f"arn:aws:kms:{new_id}"

    daemon.stop()  # only the new version is left: every object must have been re-wrapped
    key_file(daemon).write_text(key_file(daemon).read_text().splitlines()[-1] + "\n")
    daemon.start()
    read_all(s3, written)
    assert s3.get_object(Bucket=ROTATION_BUCKET, Key="plain")["Body"].read() == b"not encrypted"
    # The upload left open completes with its part wrapped before the rotation.
    second = s3.upload_part(Bucket=ROTATION_BUCKET, Key="open", UploadId=open_upload,
                            PartNumber=2, Body=b"tail")["ETag"]
    completed = s3.complete_multipart_upload(
        Bucket=ROTATION_BUCKET, Key="open", UploadId=open_upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": open_first},
                                   {"PartNumber": 2, "ETag": second}]})
    read_all(s3, {("open", completed["VersionId"]): part_bodies[0] + b"tail"})
