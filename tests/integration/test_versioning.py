"""Bucket versioning end to end through boto3: the versioning states, version ids on every
kind of write, delete markers, permanent deletes, the null version of Suspended buckets,
reads, copies and attributes by version id, ListObjectVersions (order, markers, delimiter,
encoding), DeleteObjects with VersionId, the version-specific permissions, and `recover`
rebuilding versions, markers, lock state and tags exactly."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError
from lxml import etree

from tests.integration.conftest import make_client
from tests.integration.daemon import Daemon, drop_database, objstore_cli
from tests.integration.test_object_operations import (
    allow,
    code_of,
    headers_of,
    new_bucket,
    signed,
    status_of,
    user_with,
    xml_code,
)

PART = 5 * 1024 * 1024


def versioned_bucket(s3: Any, status: str = "Enabled") -> str:
    bucket = new_bucket(s3)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": status})
    return bucket


def raw_listing(daemon: Daemon, bucket: str, query: str = "") -> etree._Element:
    response = signed(daemon, "GET", f"/{bucket}?versions{query}")
    assert response.status == 200, response.data
    return etree.fromstring(response.data)


def all_versions(daemon: Daemon, bucket: str) -> list[tuple[str, str, bool, bool]]:
    """(key, version id, is latest, is marker) in the document order of the listing
    (boto3 splits Version and DeleteMarker entries apart, losing that order)."""
    entries = []
    for item in raw_listing(daemon, bucket):
        tag = etree.QName(item).localname
        if tag in ("Version", "DeleteMarker"):
            fields = {etree.QName(c).localname: c.text for c in item}
            entries.append((fields["Key"] or "", fields["VersionId"] or "",
                            fields["IsLatest"] == "true", tag == "DeleteMarker"))
    return entries


def listing_order(daemon: Daemon, bucket: str, query: str = "") -> list[tuple[str, str]]:
    entries = []
    for item in raw_listing(daemon, bucket, query):
        if etree.QName(item).localname in ("Version", "DeleteMarker"):
            fields = {etree.QName(c).localname: c.text for c in item}
            entries.append((fields["Key"] or "", fields["VersionId"] or ""))
    return entries


# -- versioning configuration ----------------------------------------------------------


def test_versioning_states(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    for status in ("Enabled", "Suspended", "Enabled", "Enabled"):
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": status})
        assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == status
    refusals = {
        b"<VersioningConfiguration><Status>Disabled</Status></VersioningConfiguration>":
            "MalformedXML",
        b"<VersioningConfiguration><Status>enabled</Status></VersioningConfiguration>":
            "MalformedXML",
        b"<VersioningConfiguration><Status>Enabled</Status>": "MalformedXML",
        b"<Versioning><Status>Enabled</Status></Versioning>": "MalformedXML",
        b"<VersioningConfiguration><Status>Enabled</Status><MfaDelete>Enabled</MfaDelete>"
        b"</VersioningConfiguration>": "IllegalVersioningConfigurationException",
        b"<VersioningConfiguration/>": "IllegalVersioningConfigurationException",
    }
    for body, code in refusals.items():
        response = signed(daemon, "PUT", f"/{bucket}?versioning", body=body)
        assert (response.status, xml_code(response)) == (400, code), body
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    with pytest.raises(ClientError) as caught:
        s3.put_bucket_versioning(Bucket="no-such-" + uuid.uuid4().hex[:8],
                                 VersioningConfiguration={"Status": "Enabled"})
    assert code_of(caught) == "NoSuchBucket"


# -- versions on writes and reads ---------------------------------------------------------


def test_every_write_gets_a_version_and_every_version_stays_readable(
    s3: Any, daemon: Daemon
) -> None:
    bucket = versioned_bucket(s3)
    ids = [s3.put_object(Bucket=bucket, Key="k", Body=f"v{i}".encode())["VersionId"]
           for i in range(3)]
    assert len(set(ids)) == 3 and all(str(uuid.UUID(v)) == v for v in ids)
    for i, version_id in enumerate(ids):
        got = s3.get_object(Bucket=bucket, Key="k", VersionId=version_id)
        assert got["Body"].read() == f"v{i}".encode() and got["VersionId"] == version_id
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["VersionId"] == ids[-1]
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"
    assert all_versions(daemon, bucket) == [("k", ids[2], True, False), ("k", ids[1], False, False),
                                        ("k", ids[0], False, False)]
    copied = s3.copy_object(Bucket=bucket, Key="copy",
                            CopySource={"Bucket": bucket, "Key": "k", "VersionId": ids[0]})
    assert copied["CopySourceVersionId"] == ids[0] and copied["VersionId"] not in ids
    assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == b"v0"
    restored = s3.copy_object(Bucket=bucket, Key="k",
                              CopySource={"Bucket": bucket, "Key": "k", "VersionId": ids[1]})
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v1"
    assert s3.head_object(Bucket=bucket, Key="k")["VersionId"] == restored["VersionId"]


def test_multipart_completion_and_part_copy_by_version(s3: Any) -> None:
    bucket = versioned_bucket(s3)
    first = s3.put_object(Bucket=bucket, Key="src", Body=b"a" * PART)["VersionId"]
    s3.put_object(Bucket=bucket, Key="src", Body=b"b" * PART)
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    part = s3.upload_part_copy(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1,
                               CopySource={"Bucket": bucket, "Key": "src", "VersionId": first})
    assert part["CopySourceVersionId"] == first
    tail = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=2, Body=b"end")
    parts = [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]},
             {"PartNumber": 2, "ETag": tail["ETag"]}]
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload,
                                        MultipartUpload={"Parts": parts})
    assert str(uuid.UUID(done["VersionId"])) == done["VersionId"]
    got = s3.get_object(Bucket=bucket, Key="mp", VersionId=done["VersionId"])
    assert got["Body"].read() == b"a" * PART + b"end"
    attributes = s3.get_object_attributes(Bucket=bucket, Key="src", VersionId=first,
                                          ObjectAttributes=["ETag", "ObjectSize"])
    assert attributes["VersionId"] == first and attributes["ObjectSize"] == PART
    assert attributes["ETag"] == hashlib.md5(b"a" * PART).hexdigest()


# -- delete markers and permanent deletes -------------------------------------------------


def test_delete_inserts_a_marker_that_hides_the_key(s3: Any, daemon: Daemon) -> None:
    bucket = versioned_bucket(s3)
    kept = s3.put_object(Bucket=bucket, Key="k", Body=b"kept")["VersionId"]
    deleted = s3.delete_object(Bucket=bucket, Key="k")
    marker = deleted["VersionId"]
    assert deleted["DeleteMarker"] is True and marker != kept
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    for read in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as caught:
            read(Bucket=bucket, Key="k")
        assert status_of(caught) == 404
        assert headers_of(caught)["x-amz-delete-marker"] == "true"
        assert headers_of(caught)["x-amz-version-id"] == marker
        with pytest.raises(ClientError) as caught:
            read(Bucket=bucket, Key="k", VersionId=marker)
        assert status_of(caught) == 405
        assert headers_of(caught)["x-amz-delete-marker"] == "true"
        assert headers_of(caught)["x-amz-version-id"] == marker
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key="k")
    assert code_of(caught) == "NoSuchKey"
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key="k", VersionId=marker)
    assert code_of(caught) == "MethodNotAllowed"
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=kept)["Body"].read() == b"kept"
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert all_versions(daemon, bucket) == [("k", marker, True, True), ("k", kept, False, False)]
    with pytest.raises(ClientError) as caught:
        s3.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "k",
                                                           "VersionId": marker})
    assert code_of(caught) == "InvalidRequest"
    again = s3.delete_object(Bucket=bucket, Key="never-written")
    assert again["DeleteMarker"] is True  # a marker even for a key that never existed


def test_deleting_the_marker_brings_the_object_back(s3: Any, daemon: Daemon) -> None:
    bucket = versioned_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"back")
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    second = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    removed = s3.delete_object(Bucket=bucket, Key="k", VersionId=second)
    assert removed["VersionId"] == second and removed["DeleteMarker"] is True
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="k")
    s3.delete_object(Bucket=bucket, Key="k", VersionId=marker)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"back"
    assert [latest for _, _, latest, _ in all_versions(daemon, bucket)] == [True]


def test_deleting_the_latest_version_promotes_the_newest_remaining(s3: Any, daemon: Daemon) -> None:
    bucket = versioned_bucket(s3)
    ids = [s3.put_object(Bucket=bucket, Key="k", Body=f"v{i}".encode())["VersionId"]
           for i in range(3)]
    removed = s3.delete_object(Bucket=bucket, Key="k", VersionId=ids[2])
    assert removed["VersionId"] == ids[2] and "DeleteMarker" not in removed
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v1"
    s3.delete_object(Bucket=bucket, Key="k", VersionId=ids[0])  # a non-latest one
    assert all_versions(daemon, bucket) == [("k", ids[1], True, False)]
    s3.delete_object(Bucket=bucket, Key="k", VersionId=ids[1])
    assert all_versions(daemon, bucket) == []
    s3.delete_bucket(Bucket=bucket)


def test_unknown_and_malformed_version_ids(s3: Any) -> None:
    bucket = versioned_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    unknown = str(uuid.uuid4())
    for call in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as caught:
            call(Bucket=bucket, Key="k", VersionId=unknown)
        assert status_of(caught) == 404
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key="k", VersionId=unknown)
    assert code_of(caught) == "NoSuchVersion"
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=bucket, Key="k", VersionId="not-a-version")
    assert code_of(caught) == "InvalidArgument"
    assert caught.value.response["Error"]["Message"] == "Invalid version id specified"
    gone = s3.delete_object(Bucket=bucket, Key="k", VersionId=unknown)  # no error, as AWS
    assert gone["VersionId"] == unknown
    with pytest.raises(ClientError) as caught:
        s3.delete_object(Bucket=bucket, Key="k", VersionId="not-a-version")
    assert code_of(caught) == "InvalidArgument"
    for source_version in ("not-a-version", unknown):
        with pytest.raises(ClientError) as caught:
            s3.copy_object(Bucket=bucket, Key="c", CopySource={
                "Bucket": bucket, "Key": "k", "VersionId": source_version})
        assert code_of(caught) in ("InvalidArgument", "NoSuchVersion")
    with pytest.raises(ClientError) as caught:
        s3.get_object_attributes(Bucket=bucket, Key="k", VersionId=unknown,
                                 ObjectAttributes=["ETag"])
    assert code_of(caught) == "NoSuchVersion"


# -- Suspended buckets and the null version ----------------------------------------------------


def test_suspended_bucket_writes_the_null_version_and_keeps_real_ones(
    s3: Any, daemon: Daemon
) -> None:
    bucket = versioned_bucket(s3)
    real = s3.put_object(Bucket=bucket, Key="k", Body=b"real")["VersionId"]
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    written = s3.put_object(Bucket=bucket, Key="k", Body=b"null-1")
    assert "VersionId" not in written  # as AWS answers a write to a Suspended bucket
    assert s3.head_object(Bucket=bucket, Key="k")["VersionId"] == "null"
    s3.put_object(Bucket=bucket, Key="k", Body=b"null-2")
    assert all_versions(daemon, bucket) == [("k", "null", True, False), ("k", real, False, False)]
    assert s3.get_object(Bucket=bucket, Key="k", VersionId="null")["Body"].read() == b"null-2"
    deleted = s3.delete_object(Bucket=bucket, Key="k")
    assert deleted["DeleteMarker"] is True and deleted["VersionId"] == "null"
    assert all_versions(daemon, bucket) == [("k", "null", True, True),
                                            ("k", real, False, False)]
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=real)["Body"].read() == b"real"
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    newer = s3.put_object(Bucket=bucket, Key="k", Body=b"newer")["VersionId"]
    assert [v for _, v, _, _ in all_versions(daemon, bucket)] == [newer, "null", real]


def test_objects_from_before_versioning_are_the_null_version(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    plain = s3.put_object(Bucket=bucket, Key="k", Body=b"old")
    assert "VersionId" not in plain
    assert "VersionId" not in s3.head_object(Bucket=bucket, Key="k")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert s3.head_object(Bucket=bucket, Key="k")["VersionId"] == "null"
    new = s3.put_object(Bucket=bucket, Key="k", Body=b"new")["VersionId"]
    assert all_versions(daemon, bucket) == [("k", new, True, False), ("k", "null", False, False)]
    assert s3.get_object(Bucket=bucket, Key="k", VersionId="null")["Body"].read() == b"old"
    assert s3.delete_object(Bucket=bucket, Key="k", VersionId="null")["VersionId"] == "null"
    assert all_versions(daemon, bucket) == [("k", new, True, False)]


def test_unversioned_delete_and_null_version_id(s3: Any, daemon: Daemon) -> None:
    bucket = new_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    deleted = s3.delete_object(Bucket=bucket, Key="k")
    assert "DeleteMarker" not in deleted and "VersionId" not in deleted
    assert all_versions(daemon, bucket) == []
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert s3.delete_object(Bucket=bucket, Key="k", VersionId="null")["VersionId"] == "null"
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


# -- ListObjectVersions ------------------------------------------------------------------


@pytest.fixture(scope="module")
def history(daemon: Daemon) -> tuple[str, dict[str, list[str]]]:
    """A bucket of versions and markers: key -> version ids, newest first."""
    s3: Any = make_client(daemon.endpoint)
    bucket = versioned_bucket(s3)
    versions: dict[str, list[str]] = {}
    for key, count in [("a", 3), ("b/1", 2), ("b/2", 1), ("b/sub/x", 2), ("c d+é", 2),
                       ("z", 1)]:
        for i in range(count):
            version = s3.put_object(Bucket=bucket, Key=key, Body=f"{key}{i}".encode())
            versions.setdefault(key, []).insert(0, version["VersionId"])
    versions["a"].insert(0, s3.delete_object(Bucket=bucket, Key="a")["VersionId"])
    versions["z"].insert(0, s3.delete_object(Bucket=bucket, Key="z")["VersionId"])
    return bucket, versions


def expected_order(versions: dict[str, list[str]], prefix: str = "") -> list[tuple[str, str]]:
    return [(key, v) for key in sorted(versions) if key.startswith(prefix)
            for v in versions[key]]


def test_list_versions_in_aws_order(
    s3: Any, daemon: Daemon, history: tuple[str, dict[str, list[str]]]
) -> None:
    bucket, versions = history
    assert listing_order(daemon, bucket) == expected_order(versions)
    entries = all_versions(daemon, bucket)
    latest = {key: ids[0] for key, ids in versions.items()}
    for key, version_id, is_latest, marker in entries:
        assert is_latest == (latest[key] == version_id)
        assert marker == (version_id == versions[key][0] and key in ("a", "z"))
    listed = s3.list_object_versions(Bucket=bucket)
    version = listed["Versions"][0]
    assert version["Owner"]["DisplayName"] and version["Owner"]["ID"]
    assert version["ETag"].startswith('"') and version["StorageClass"] == "STANDARD"
    assert listed["DeleteMarkers"][0]["Owner"]["ID"]
    assert listed["IsTruncated"] is False and "NextKeyMarker" not in listed


@pytest.mark.parametrize("page_size", [1, 2, 3, 5])
def test_list_versions_pages_add_up(s3: Any, history: tuple[str, dict[str, list[str]]],
                                    page_size: int) -> None:
    bucket, versions = history
    collected: list[tuple[str, str]] = []
    params: dict[str, Any] = {"Bucket": bucket, "MaxKeys": page_size}
    while True:
        page = s3.list_object_versions(**params)
        items = page.get("Versions", []) + page.get("DeleteMarkers", [])
        assert len(items) <= page_size
        items.sort(key=lambda e: (e["Key"], -e["LastModified"].timestamp()))
        collected += [(e["Key"], e["VersionId"]) for e in items]
        if not page["IsTruncated"]:
            break
        assert page["NextKeyMarker"] == collected[-1][0]
        assert page["NextVersionIdMarker"] == collected[-1][1]
        params.update(KeyMarker=page["NextKeyMarker"],
                      VersionIdMarker=page["NextVersionIdMarker"])
    assert collected == expected_order(versions)


def test_list_versions_markers_prefix_and_delimiter(
    s3: Any, daemon: Daemon, history: tuple[str, dict[str, list[str]]]
) -> None:
    bucket, versions = history
    after_key = s3.list_object_versions(Bucket=bucket, KeyMarker="b/1")
    keys = {e["Key"] for e in after_key.get("Versions", []) + after_key["DeleteMarkers"]}
    assert "b/1" not in keys and "b/2" in keys and "a" not in keys
    middle = versions["a"][1]
    after_version = listing_order(daemon, bucket,
                                  f"&key-marker=a&version-id-marker={middle}")
    assert after_version == expected_order(versions)[2:]
    assert listing_order(daemon, bucket, "&prefix=b%2F") == expected_order(versions, "b/")
    grouped = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["b/"]
    assert {e["Key"] for e in grouped["Versions"]} == {"a", "c d+é", "z"}
    nested = s3.list_object_versions(Bucket=bucket, Prefix="b/", Delimiter="/")
    assert [p["Prefix"] for p in nested["CommonPrefixes"]] == ["b/sub/"]
    assert {e["Key"] for e in nested["Versions"]} == {"b/1", "b/2"}
    # a group counts once against max-keys, and the next page starts after it
    first = s3.list_object_versions(Bucket=bucket, Delimiter="/", MaxKeys=5)  # a: 4 entries
    shown = len(first.get("Versions", [])) + len(first.get("DeleteMarkers", [])) + \
        len(first.get("CommonPrefixes", []))
    assert shown == 5 and first["IsTruncated"] is True
    assert first["NextKeyMarker"] == "b/" and "NextVersionIdMarker" not in first
    rest = s3.list_object_versions(Bucket=bucket, Delimiter="/", KeyMarker="b/")
    assert {e["Key"] for e in rest["Versions"]} == {"c d+é", "z"}
    assert "CommonPrefixes" not in rest
    empty = s3.list_object_versions(Bucket=bucket, MaxKeys=0)
    assert empty["IsTruncated"] is False and "Versions" not in empty


def test_list_versions_url_encoding_and_refusals(
    s3: Any, daemon: Daemon, history: tuple[str, dict[str, list[str]]]
) -> None:
    bucket, versions = history
    raw = signed(daemon, "GET", f"/{bucket}?versions&encoding-type=url&prefix=c")
    assert raw.status == 200
    assert b"<Key>c%20d%2B%C3%A9</Key>" in raw.data and b"<EncodingType>url" in raw.data
    encoded = s3.list_object_versions(Bucket=bucket, Prefix="c", EncodingType="url")
    assert {v["Key"] for v in encoded["Versions"]} == {"c%20d%2B%C3%A9"}
    decoded = s3.list_object_versions(Bucket=bucket, Prefix="c")  # boto3 asks url, decodes
    assert {v["Key"] for v in decoded["Versions"]} == {"c d+é"}
    refusals = [
        f"/{bucket}?versions&version-id-marker={versions['a'][0]}",
        f"/{bucket}?versions&key-marker=a&version-id-marker=bogus",
        f"/{bucket}?versions&max-keys=-1",
        f"/{bucket}?versions&encoding-type=base64",
    ]
    for path in refusals:
        response = signed(daemon, "GET", path)
        assert (response.status, xml_code(response)) == (400, "InvalidArgument"), path
    missing = signed(daemon, "GET", "/no-such-bucket-zz?versions")
    assert (missing.status, xml_code(missing)) == (404, "NoSuchBucket")


# -- DeleteObjects ---------------------------------------------------------------------------


def test_delete_objects_with_version_ids_empties_a_versioned_bucket(
    s3: Any, daemon: Daemon
) -> None:
    bucket = versioned_bucket(s3)
    for i in range(3):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"1")
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"2")
    marked = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k0"}, {"Key": "k1"}]})
    assert all(d["DeleteMarker"] is True and d["DeleteMarkerVersionId"]
               for d in marked["Deleted"])
    markers = {d["Key"]: d["DeleteMarkerVersionId"] for d in marked["Deleted"]}
    with pytest.raises(ClientError) as caught:
        s3.delete_bucket(Bucket=bucket)
    assert code_of(caught) == "BucketNotEmpty"
    everything = [{"Key": key, "VersionId": version_id}
                  for key, version_id, _, _ in all_versions(daemon, bucket)]
    assert len(everything) == 8
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": everything})
    assert "Errors" not in result and len(result["Deleted"]) == 8
    for entry in result["Deleted"]:
        if entry["VersionId"] == markers.get(entry["Key"]):
            assert entry["DeleteMarker"] is True
            assert entry["DeleteMarkerVersionId"] == entry["VersionId"]
        else:
            assert "DeleteMarker" not in entry
    assert all_versions(daemon, bucket) == []
    s3.delete_bucket(Bucket=bucket)


def test_delete_objects_naming_one_key_often_keeps_every_marker_in_order(
    s3: Any, daemon: Daemon
) -> None:
    """Keys are deleted side by side, but entries naming the same key queue on its lock:
    each gets its own delete marker, and the result lists them in the request's order."""
    bucket = versioned_bucket(s3)
    s3.put_object(Bucket=bucket, Key="same", Body=b"1")
    names = ["same", "other-0", "same", "other-1", "same"]
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in names]})
    assert "Errors" not in result
    assert [d["Key"] for d in result["Deleted"]] == names
    markers = [d["DeleteMarkerVersionId"] for d in result["Deleted"] if d["Key"] == "same"]
    assert len(set(markers)) == 3
    listed = [(key, version_id) for key, version_id, _, _ in all_versions(daemon, bucket)
              if key == "same"]
    assert len(listed) == 4  # the version and three markers
    latest = s3.list_object_versions(Bucket=bucket, Prefix="same")["DeleteMarkers"]
    assert [m["VersionId"] for m in latest if m["IsLatest"]] == [markers[-1]]


def test_delete_objects_reports_bad_version_ids_per_key(s3: Any) -> None:
    bucket = versioned_bucket(s3)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "k", "VersionId": "bogus"}, {"Key": "k", "VersionId": str(uuid.uuid4())}]})
    assert [(e["Key"], e["Code"]) for e in result["Errors"]] == [("k", "InvalidArgument")]
    assert len(result["Deleted"]) == 1
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x"


# -- permissions --------------------------------------------------------------------------


def test_version_requests_need_the_version_actions(s3: Any, daemon: Daemon) -> None:
    bucket = versioned_bucket(s3)
    version = s3.put_object(Bucket=bucket, Key="k", Body=b"x")["VersionId"]
    reader = user_with(daemon, allow(["s3:GetObject", "s3:ListBucket", "s3:DeleteObject"],
                                     [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]))
    assert reader.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x"
    # The spec's coarse actions cover the version actions (S3-ACTIONS.md): s3:GetObject
    # GetObjectVersion, s3:ListBucket ListBucketVersions, s3:DeleteObject DeleteObjectVersion.
    assert reader.get_object(Bucket=bucket, Key="k", VersionId=version)["Body"].read() == b"x"
    assert len(reader.list_object_versions(Bucket=bucket)["Versions"]) == 1
    for attempt in (
        lambda: reader.get_bucket_versioning(Bucket=bucket),
        lambda: reader.put_bucket_versioning(Bucket=bucket,
                                             VersioningConfiguration={"Status": "Suspended"}),
    ):
        with pytest.raises(ClientError) as caught:
            attempt()
        assert code_of(caught) == "AccessDenied"
    assert reader.delete_object(Bucket=bucket, Key="k")["DeleteMarker"] is True
    # An explicit Deny of the granular version action still refuses.
    denied = user_with(daemon, allow(["s3:GetObject", "s3:ListBucket"],
                                     [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]),
                       {"Effect": "Deny", "Action": ["s3:GetObjectVersion",
                                                     "s3:ListBucketVersions"],
                        "Resource": ["*"]})
    for attempt in (lambda: denied.get_object(Bucket=bucket, Key="k", VersionId=version),
                    lambda: denied.list_object_versions(Bucket=bucket)):
        with pytest.raises(ClientError) as caught:
            attempt()
        assert code_of(caught) == "AccessDenied"
    versioned = user_with(daemon, allow(["s3:GetObjectVersion", "s3:ListBucketVersions"],
                                        [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]))
    assert versioned.get_object(Bucket=bucket, Key="k", VersionId=version)["Body"].read() == b"x"
    assert len(versioned.list_object_versions(Bucket=bucket)["Versions"]) == 1
    reader.delete_object(Bucket=bucket, Key="k", VersionId=version)


# -- recover ---------------------------------------------------------------------------------




def versioned_snapshot(s3: Any, bucket: str) -> dict[str, Any]:
    """Everything a client can see of a versioned bucket."""
    listed = s3.list_object_versions(Bucket=bucket)
    strip = ("ResponseMetadata",)
    state: dict[str, Any] = {"listing": {k: v for k, v in listed.items() if k not in strip}}
    state["versioning"] = s3.get_bucket_versioning(Bucket=bucket).get("Status")
    for version in listed.get("Versions", []):
        key, version_id = version["Key"], version["VersionId"]
        got = s3.get_object(Bucket=bucket, Key=key, VersionId=version_id)
        body = hashlib.md5(got["Body"].read()).hexdigest()
        meta = {k: got.get(k) for k in ("ETag", "ContentType", "Metadata", "LastModified",
                                        "ObjectLockMode", "ObjectLockRetainUntilDate",
                                        "ObjectLockLegalHoldStatus", "TagCount")}
        named = {"Bucket": bucket, "Key": key, "VersionId": version_id}
        state[f"{key}@{version_id}"] = (
            body, meta, answer(s3.get_object_tagging, "TagSet", **named),
            answer(s3.get_object_retention, "Retention", **named),
            answer(s3.get_object_legal_hold, "LegalHold", **named))
    for key in {v["Key"] for v in listed.get("Versions", []) + listed.get("DeleteMarkers", [])}:
        state[f"latest:{key}"] = answer(s3.head_object, "VersionId", Bucket=bucket, Key=key)
    state["lock"] = answer(s3.get_object_lock_configuration, "ObjectLockConfiguration",
                           Bucket=bucket)
    state["bucket-tags"] = answer(s3.get_bucket_tagging, "TagSet", Bucket=bucket)
    return state


def answer(call: Any, field: str, **params: Any) -> Any:
    """A field of the answer, or the error code (and version header) it gave."""
    try:
        return call(**params)[field]
    except ClientError as error:
        return ("error", error.response["Error"]["Code"],
                error.response["ResponseMetadata"]["HTTPHeaders"].get("x-amz-version-id"))


def build_history(s3: Any) -> list[str]:
    locked = "recover-locked"
    s3.create_bucket(Bucket=locked, ObjectLockEnabledForBucket=True)
    s3.put_object_lock_configuration(Bucket=locked, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
    s3.put_bucket_tagging(Bucket=locked, Tagging={"TagSet": [{"Key": "team", "Value": "x"}]})
    first = s3.put_object(Bucket=locked, Key="doc", Body=b"one", Metadata={"n": "1"},
                          Tagging="a=1")["VersionId"]
    s3.put_object(Bucket=locked, Key="doc", Body=b"two", ObjectLockLegalHoldStatus="ON")
    s3.put_object_retention(Bucket=locked, Key="doc", VersionId=first, Retention={
        "Mode": "COMPLIANCE", "RetainUntilDate": "2099-01-01T00:00:00Z"},
        BypassGovernanceRetention=True)  # the default retention is GOVERNANCE
    s3.put_object_tagging(Bucket=locked, Key="doc", VersionId=first,
                          Tagging={"TagSet": [{"Key": "b", "Value": "2"}]})
    s3.delete_object(Bucket=locked, Key="doc")
    s3.put_object(Bucket=locked, Key="other", Body=b"x" * 1000)
    s3.put_object_legal_hold(Bucket=locked, Key="other", LegalHold={"Status": "OFF"})
    plain = "recover-plain"
    s3.create_bucket(Bucket=plain)
    s3.put_bucket_versioning(Bucket=plain, VersioningConfiguration={"Status": "Enabled"})
    for i in range(3):
        s3.put_object(Bucket=plain, Key="k", Body=f"v{i}".encode())
    s3.delete_object(Bucket=plain, Key="k")
    s3.delete_object(Bucket=plain, Key="gone")
    upload = s3.create_multipart_upload(Bucket=plain, Key="mp")["UploadId"]
    part = s3.upload_part(Bucket=plain, Key="mp", UploadId=upload, PartNumber=1, Body=b"p")
    s3.complete_multipart_upload(Bucket=plain, Key="mp", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    s3.put_bucket_versioning(Bucket=plain, VersioningConfiguration={"Status": "Suspended"})
    s3.put_object(Bucket=plain, Key="k", Body=b"null")
    return [locked, plain]


def test_recover_restores_versions_markers_lock_state_and_tags(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint)
    buckets = build_history(s3)
    before = {bucket: versioned_snapshot(s3, bucket) for bucket in buckets}
    node.stop()
    report = objstore_cli(node, "check", "--deep", "--orphan-grace-seconds", "0")
    assert report.returncode == 0, report.stdout

    drop_database(node)
    recovered = objstore_cli(node, "recover")
    assert recovered.returncode == 0, recovered.stderr
    node.start()
    s3 = make_client(node.endpoint)
    after = {bucket: versioned_snapshot(s3, bucket) for bucket in buckets}
    assert after == before
    oldest = [v["VersionId"] for v in before[buckets[0]]["listing"]["Versions"]
              if v["Key"] == "doc"][-1]
    with pytest.raises(ClientError) as caught:  # the lock rules hold after recovery too
        s3.delete_object(Bucket=buckets[0], Key="doc", VersionId=oldest)
    assert code_of(caught) == "AccessDenied"
