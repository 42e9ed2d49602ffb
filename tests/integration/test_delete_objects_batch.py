"""DeleteObjects as one batch (engine `delete_many`, one transaction for the versions it
removes), end to end through boto3 on both backends: one request mixing keys under
retention and legal hold, missing keys, a named version, delete markers of a versioned
bucket, a bad version id and a key named twice gets each key's own answer, exactly as
DeleteObject would give it; a large batch on an unversioned bucket leaves no row, no blob,
no withdrawn sidecar behind, and every deleted key's tombstone."""

from __future__ import annotations

import datetime
import os
import time
import uuid
from typing import Any

from objstore.meta.store import SyncMetaStore
from objstore.meta.tombstones import TOMBSTONE_OBJECT, object_tombstone_key
from tests.integration.daemon import Daemon
from tests.integration.test_object_operations import count_blobs, meta, new_bucket

__all__ = ["meta"]  # the fixture, imported for its use below

FAR = datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC)


def test_one_batch_answers_each_key_as_delete_object_would(s3: Any) -> None:
    bucket = f"l-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)  # versioned
    governed = s3.put_object(Bucket=bucket, Key="governed", Body=b"g", ObjectLockMode=
                             "GOVERNANCE", ObjectLockRetainUntilDate=FAR)["VersionId"]
    held = s3.put_object(Bucket=bucket, Key="held", Body=b"h",
                         ObjectLockLegalHoldStatus="ON")["VersionId"]
    old = s3.put_object(Bucket=bucket, Key="two", Body=b"old")["VersionId"]
    new = s3.put_object(Bucket=bucket, Key="two", Body=b"new")["VersionId"]
    free = [s3.put_object(Bucket=bucket, Key=f"free-{i}", Body=b"f")["VersionId"]
            for i in range(3)]
    gone = s3.put_object(Bucket=bucket, Key="missing", Body=b"m")["VersionId"]
    s3.delete_object(Bucket=bucket, Key="missing", VersionId=gone)
    objects = [
        {"Key": "governed", "VersionId": governed},  # refused: retention
        {"Key": "held", "VersionId": held},  # refused: legal hold
        {"Key": "missing", "VersionId": gone},  # no such version (any more)
        {"Key": "two", "VersionId": old},  # a named version, not the latest
        {"Key": "free-0", "VersionId": free[0]},
        {"Key": "free-1", "VersionId": free[1]},
        {"Key": "free-1", "VersionId": free[1]},  # the same version twice
        {"Key": "free-2"},  # a delete marker
        {"Key": "governed"},  # a delete marker is always allowed
        {"Key": "nothing-here"},  # a delete marker too
        {"Key": "bad", "VersionId": "not a version id"},
    ]
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
    errors = sorted((e["Key"], e["Code"]) for e in result["Errors"])
    assert errors == [("bad", "InvalidArgument"), ("governed", "AccessDenied"),
                      ("held", "AccessDenied")]
    deleted = [(d["Key"], d.get("VersionId"), d.get("DeleteMarker", False))
               for d in result["Deleted"]]
    assert sorted(d for d in deleted if d[1] is not None) == sorted([
        ("missing", gone, False), ("two", old, False),
        ("free-0", free[0], False), ("free-1", free[1], False), ("free-1", free[1], False)])
    markers = {d["Key"]: d["DeleteMarkerVersionId"] for d in result["Deleted"]
               if d.get("VersionId") is None}
    assert sorted(markers) == ["free-2", "governed", "nothing-here"]
    assert all(d["DeleteMarker"] for d in result["Deleted"] if d.get("VersionId") is None)
    versions = s3.list_object_versions(Bucket=bucket)
    left = sorted((v["Key"], v["VersionId"]) for v in versions.get("Versions", []))
    assert left == sorted([("governed", governed), ("held", held), ("two", new),
                           ("free-2", free[2])])
    latest_markers = {m["Key"]: m["VersionId"] for m in versions["DeleteMarkers"]
                      if m["IsLatest"]}
    assert latest_markers == markers
    assert s3.get_object(Bucket=bucket, Key="two")["Body"].read() == b"new"
    # the refused keys' versions are whole
    assert s3.get_object(Bucket=bucket, Key="held", VersionId=held)["Body"].read() == b"h"
    bypassed = s3.delete_objects(Bucket=bucket, BypassGovernanceRetention=True, Delete={
        "Objects": [{"Key": "governed", "VersionId": governed},
                    {"Key": "held", "VersionId": held}]})
    assert [(e["Key"], e["Code"]) for e in bypassed["Errors"]] == [("held", "AccessDenied")]
    assert [d["Key"] for d in bypassed["Deleted"]] == ["governed"]


def test_a_marker_and_a_version_delete_of_one_key_run_in_the_request_order(
        s3: Any) -> None:
    """On a Suspended bucket a marker replaces the null version: a marker then a delete
    of version "null" leaves no version; the other way round leaves the marker."""
    bucket = new_bucket(s3)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    for key in ("marker-first", "version-first"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"null version")
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "marker-first"}, {"Key": "marker-first", "VersionId": "null"},
        {"Key": "version-first", "VersionId": "null"}, {"Key": "version-first"}]})
    assert "Errors" not in result
    versions = s3.list_object_versions(Bucket=bucket)
    assert versions.get("Versions", []) == []
    assert [(m["Key"], m["VersionId"]) for m in versions.get("DeleteMarkers", [])] == [
        ("version-first", "null")]


def _deleting_dir(daemon: Daemon) -> list[str]:
    path = daemon.data_dir / "deleting"
    return sorted(os.listdir(path)) if path.is_dir() else []


def test_a_large_batch_leaves_no_row_blob_or_withdrawn_sidecar(
        s3: Any, daemon: Daemon, meta: SyncMetaStore) -> None:
    bucket = new_bucket(s3)
    blobs_before = count_blobs(daemon)
    keys = [f"k/{i:04d}" for i in range(300)]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    s3.put_object(Bucket=bucket, Key="kept", Body=b"kept")
    doomed = keys + [f"never/{i}" for i in range(5)]
    result = s3.delete_objects(Bucket=bucket, Delete={
        "Objects": [{"Key": key} for key in doomed], "Quiet": True})
    assert "Errors" not in result and "Deleted" not in result  # quiet: errors only
    listed = s3.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in listed["Contents"]] == ["kept"]
    for key in keys:
        assert meta.get_object(bucket, key) is None
        assert meta.get_tombstone(TOMBSTONE_OBJECT,
                                  object_tombstone_key(bucket, key, "null")) is not None
    assert meta.get_tombstone(TOMBSTONE_OBJECT,
                              object_tombstone_key(bucket, "never/0", "null")) is None
    # the files go after the answer: soon, and all of them
    deadline = time.monotonic() + 20
    while (count_blobs(daemon) != blobs_before + 1 or _deleting_dir(daemon)) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count_blobs(daemon) == blobs_before + 1
    assert _deleting_dir(daemon) == []
    assert s3.get_object(Bucket=bucket, Key="kept")["Body"].read() == b"kept"


def test_a_large_batch_of_markers_gives_each_key_its_own_latest_marker(s3: Any) -> None:
    """The markers of one batch are inserted together (their sidecars and rows share
    syncs and commits): each key still gets its own marker as its latest version, the
    one the answer names, and keeps the version it had."""
    bucket = new_bucket(s3)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    keys = [f"m/{i:04d}" for i in range(200)]
    kept = {key: s3.put_object(Bucket=bucket, Key=key, Body=key.encode())["VersionId"]
            for key in keys}
    result = s3.delete_objects(Bucket=bucket, Delete={
        "Objects": [{"Key": key} for key in keys + ["never"]]})
    assert "Errors" not in result
    answered = {d["Key"]: d["DeleteMarkerVersionId"] for d in result["Deleted"]}
    assert sorted(answered) == sorted(keys + ["never"])
    assert len(set(answered.values())) == len(answered)
    versions = s3.get_paginator("list_object_versions").paginate(Bucket=bucket)
    markers: dict[str, str] = {}
    left: dict[str, str] = {}
    for page in versions:
        markers.update({m["Key"]: m["VersionId"] for m in page.get("DeleteMarkers", [])
                        if m["IsLatest"]})
        left.update({v["Key"]: v["VersionId"] for v in page.get("Versions", [])})
    assert markers == answered and left == kept
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    assert s3.get_object(Bucket=bucket, Key=keys[7], VersionId=kept[keys[7]])[
        "Body"].read() == keys[7].encode()
