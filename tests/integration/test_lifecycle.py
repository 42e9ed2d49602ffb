"""Bucket lifecycle against the real daemon, through boto3: the configuration API and its
AWS errors, x-amz-expiration, and the worker at work on a daemon whose lifecycle "day"
lasts one second ([lifecycle] day_seconds = 1, the testing aid) and which evaluates every
second: objects expire, versioned objects get delete markers and lose old versions, lone
markers go, stale uploads are aborted, locked versions survive, each action is audited.
Waits poll with deadlines."""

from __future__ import annotations

import base64
import datetime
import hashlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from objstore.http import sigv4
from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

FAST_LIFECYCLE = "[lifecycle]\ninterval_seconds = 1\nday_seconds = 1\n"
DEADLINE_SECONDS = 30.0
HTTP = urllib3.PoolManager(retries=False, timeout=30.0)


@pytest.fixture(scope="module", params=BACKENDS)
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    node = Daemon(tmp_path_factory.mktemp(f"lifecycle-{request.param}"),
                  backend=request.param, extra_config=FAST_LIFECYCLE)
    with running_daemon(request, node):
        yield node


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"lc-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def code_of(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


def wait_until(what: str, condition: Callable[[], bool],
               deadline_seconds: float = DEADLINE_SECONDS) -> None:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def rule(rule_id: str = "r", prefix: str = "", **actions: Any) -> dict[str, Any]:
    return {"ID": rule_id, "Status": "Enabled", "Filter": {"Prefix": prefix}, **actions}


def put_rules(s3: Any, bucket: str, *rules: dict[str, Any]) -> None:
    s3.put_bucket_lifecycle_configuration(Bucket=bucket,
                                          LifecycleConfiguration={"Rules": list(rules)})


def keys(s3: Any, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def raw_put(daemon: Daemon, bucket: str, body: bytes, *, md5: bool = True) -> Any:
    """PUT /bucket?lifecycle with exactly this body (what boto3 would refuse to send)."""
    url = f"{daemon.endpoint}/{bucket}?lifecycle="
    headers = {"content-type": "application/xml"}
    if md5:
        headers["content-md5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
    headers.update(sigv4.sign_headers(
        "PUT", url, headers, hashlib.sha256(body).hexdigest(), ROOT_ACCESS_KEY,
        ROOT_SECRET_KEY, "us-east-1", datetime.datetime.now(datetime.UTC)))
    return HTTP.request("PUT", url, body=body, headers=headers)


def error_code(response: Any) -> str:
    text = response.data.decode()
    return text.split("<Code>")[1].split("</Code>")[0]


# -- the configuration API ---------------------------------------------------------------


def test_put_get_delete(s3: Any, bucket: str) -> None:
    with pytest.raises(ClientError) as missing:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert code_of(missing) == "NoSuchLifecycleConfiguration"
    assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    rules = [
        rule("logs", "logs/", Expiration={"Days": 30}),
        {"ID": "tagged", "Status": "Disabled",
         "Filter": {"And": {"Prefix": "t/", "Tags": [{"Key": "a", "Value": "1"}],
                            "ObjectSizeGreaterThan": 5, "ObjectSizeLessThan": 500}},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 3, "NewerNoncurrentVersions": 2}},
        rule("uploads", "", AbortIncompleteMultipartUpload={"DaysAfterInitiation": 7}),
        rule("markers", "", Expiration={"ExpiredObjectDeleteMarker": True}),
        rule("date", "d/", Expiration={"Date": datetime.datetime(2031, 1, 1,
                                                                 tzinfo=datetime.UTC)}),
    ]
    put_rules(s3, bucket, *rules)
    got = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [r["ID"] for r in got] == ["logs", "tagged", "uploads", "markers", "date"]
    assert got[0]["Filter"] == {"Prefix": "logs/"} and got[0]["Expiration"] == {"Days": 30}
    assert got[1]["Filter"]["And"]["Tags"] == [{"Key": "a", "Value": "1"}]
    assert got[1]["Filter"]["And"]["ObjectSizeLessThan"] == 500
    assert got[1]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 3,
                                                     "NewerNoncurrentVersions": 2}
    assert got[1]["Status"] == "Disabled"
    assert got[2]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    assert got[3]["Expiration"] == {"ExpiredObjectDeleteMarker": True}
    assert got[4]["Expiration"]["Date"] == datetime.datetime(2031, 1, 1, tzinfo=datetime.UTC)
    s3.delete_bucket_lifecycle(Bucket=bucket)
    with pytest.raises(ClientError) as gone:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert code_of(gone) == "NoSuchLifecycleConfiguration"
    s3.delete_bucket_lifecycle(Bucket=bucket)  # nothing to delete: still 204


def test_missing_bucket(s3: Any) -> None:
    for call in (lambda: s3.get_bucket_lifecycle_configuration(Bucket="no-such-lc-bucket"),
                 lambda: s3.delete_bucket_lifecycle(Bucket="no-such-lc-bucket"),
                 lambda: put_rules(s3, "no-such-lc-bucket", rule(Expiration={"Days": 1}))):
        with pytest.raises(ClientError) as caught:
            call()
        assert code_of(caught) == "NoSuchBucket"


@pytest.mark.parametrize(("rules", "code"), [
    ([rule(Expiration={"Days": 0})], "InvalidArgument"),
    ([rule("same", Expiration={"Days": 1}), rule("same", Expiration={"Days": 2})],
     "InvalidArgument"),
    ([rule("x" * 256, Expiration={"Days": 1})], "InvalidArgument"),
    ([rule(Expiration={"Date": datetime.datetime(2031, 1, 1, 12, tzinfo=datetime.UTC)})],
     "InvalidArgument"),
    ([rule(NoncurrentVersionExpiration={"NoncurrentDays": 0})], "InvalidArgument"),
    ([rule(AbortIncompleteMultipartUpload={"DaysAfterInitiation": 0})], "InvalidArgument"),
    ([rule(Transitions=[{"Days": 30, "StorageClass": "GLACIER"}])], "InvalidStorageClass"),
    ([rule(NoncurrentVersionTransitions=[{"NoncurrentDays": 30,
                                          "StorageClass": "STANDARD_IA"}])],
     "InvalidStorageClass"),
    ([{"ID": "t", "Status": "Enabled", "Filter": {"Tag": {"Key": "k", "Value": "v"}},
       "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}], "InvalidRequest"),
    ([rule()], "InvalidRequest"),
])
def test_refused_configurations(s3: Any, bucket: str, rules: list[dict[str, Any]],
                                code: str) -> None:
    with pytest.raises(ClientError) as caught:
        put_rules(s3, bucket, *rules)
    assert code_of(caught) == code
    with pytest.raises(ClientError):
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)  # nothing was stored


def test_malformed_bodies(daemon: Daemon, bucket: str) -> None:
    good = (b'<LifecycleConfiguration><Rule><ID>a</ID><Filter/><Status>Enabled</Status>'
            b'<Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>')
    assert raw_put(daemon, bucket, good).status == 200
    for body in (b"", b"<LifecycleConfiguration/>", b"<nope",
                 good.replace(b"<Status>Enabled</Status>", b""),
                 good.replace(b"<Filter/>", b"<Filter/><Prefix>x</Prefix>"),
                 good.replace(b"<Days>1</Days>", b"<Days>1</Days><Date>2030-01-01</Date>"),
                 b"<LifecycleConfiguration>" + good[24:-25] * 1001
                 + b"</LifecycleConfiguration>"):
        response = raw_put(daemon, bucket, body)
        assert (response.status, error_code(response)) == (400, "MalformedXML"), body[:80]
    response = raw_put(daemon, bucket, good, md5=False)
    assert (response.status, error_code(response)) == (400, "InvalidRequest")


def test_expiration_header(s3: Any, bucket: str) -> None:
    put_rules(s3, bucket, rule("soon", "tmp/", Expiration={"Days": 3}),
              rule("later", "", Expiration={"Days": 10}))
    put = s3.put_object(Bucket=bucket, Key="tmp/a", Body=b"x")
    assert 'rule-id="soon"' in put["Expiration"]
    head = s3.head_object(Bucket=bucket, Key="tmp/a")
    expected = head["LastModified"] + datetime.timedelta(seconds=3)
    expiry = datetime.datetime.strptime(head["Expiration"].split('"')[1],
                                        "%a, %d %b %Y %H:%M:%S GMT").replace(
        tzinfo=datetime.UTC)
    assert expected <= expiry <= expected + datetime.timedelta(seconds=1)
    s3.put_object(Bucket=bucket, Key="other", Body=b"y")
    assert 'rule-id="later"' in s3.get_object(Bucket=bucket, Key="other")["Expiration"]
    s3.delete_bucket_lifecycle(Bucket=bucket)
    assert "Expiration" not in s3.head_object(Bucket=bucket, Key="other")


# -- the worker ----------------------------------------------------------------------------


def test_objects_expire(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="keep/a", Body=b"1")
    s3.put_object(Bucket=bucket, Key="tmp/a", Body=b"2")
    s3.put_object(Bucket=bucket, Key="tmp/b", Body=b"3", Tagging="x=1")
    put_rules(s3, bucket, rule("tmp", "tmp/", Expiration={"Days": 1}))
    wait_until("tmp/ objects to expire", lambda: keys(s3, bucket) == ["keep/a"])
    admin = AdminClient(s3.meta.endpoint_url)

    def audited() -> bool:
        found = admin.ok("GET", "/audit?operation=Lifecycle::ExpireObject&bucket=" + bucket)
        return sorted(e["key"] for e in found["entries"]) == ["tmp/a", "tmp/b"]

    wait_until("the audit log to show the expirations", audited)


def test_stale_uploads_are_aborted(s3: Any, bucket: str) -> None:
    stale = s3.create_multipart_upload(Bucket=bucket, Key="up/a")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="up/a", UploadId=stale, PartNumber=1, Body=b"part")
    other = s3.create_multipart_upload(Bucket=bucket, Key="keep/b")["UploadId"]
    put_rules(s3, bucket, rule("abort", "up/", AbortIncompleteMultipartUpload={
        "DaysAfterInitiation": 1}))

    def open_uploads() -> list[str]:
        listed = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
        return [u["UploadId"] for u in listed]

    wait_until("the stale upload to be aborted", lambda: open_uploads() == [other])
    with pytest.raises(ClientError) as caught:
        s3.list_parts(Bucket=bucket, Key="up/a", UploadId=stale)
    assert code_of(caught) == "NoSuchUpload"


def versions_of(s3: Any, bucket: str) -> list[tuple[str, bool]]:
    """(key, is a delete marker) of every version, listing order."""
    listed = s3.list_object_versions(Bucket=bucket)
    entries = [(v["Key"], False, v["LastModified"], v["VersionId"])
               for v in listed.get("Versions", [])]
    entries += [(m["Key"], True, m["LastModified"], m["VersionId"])
                for m in listed.get("DeleteMarkers", [])]
    return [(key, marker) for key, marker, *_ in sorted(entries, key=lambda e: (e[0], e[2]))]


def test_versioned_life(s3: Any, bucket: str) -> None:
    """Expiration makes a delete marker; the old version, noncurrent, goes after a day;
    the marker, alone, goes too."""
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key="k", Body=b"v1")
    put_rules(s3, bucket, rule("all", "", Expiration={"Days": 1},
                               NoncurrentVersionExpiration={"NoncurrentDays": 1}))
    wait_until("a delete marker", lambda: ("k", True) in versions_of(s3, bucket))
    wait_until("every version and marker to go", lambda: versions_of(s3, bucket) == [])


def test_newer_noncurrent_versions_are_kept(s3: Any, bucket: str) -> None:
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for n in range(4):
        s3.put_object(Bucket=bucket, Key="k", Body=f"v{n}".encode())
    put_rules(s3, bucket, rule("n", "", NoncurrentVersionExpiration={
        "NoncurrentDays": 1, "NewerNoncurrentVersions": 1}))
    wait_until("two versions left", lambda: len(versions_of(s3, bucket)) == 2)
    bodies = [s3.get_object(Bucket=bucket, Key="k", VersionId=v["VersionId"])["Body"].read()
              for v in s3.list_object_versions(Bucket=bucket)["Versions"]]
    assert bodies == [b"v3", b"v2"]


def test_locked_versions_survive(s3: Any) -> None:
    bucket = f"lc-lock-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    locked = s3.put_object(Bucket=bucket, Key="locked", Body=b"keep me",
                           ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate=until)
    held = s3.put_object(Bucket=bucket, Key="held", Body=b"keep me too",
                         ObjectLockLegalHoldStatus="ON")
    s3.put_object(Bucket=bucket, Key="free", Body=b"old")
    put_rules(s3, bucket, rule("all", "", Expiration={"Days": 1},
                               NoncurrentVersionExpiration={"NoncurrentDays": 1}))
    # The unprotected key shows the rule has run to its end: its version went, then its
    # lone marker.
    wait_until("the free key to vanish",
               lambda: all(key != "free" for key, _ in versions_of(s3, bucket)))
    assert versions_of(s3, bucket) == [("held", False), ("held", True),
                                       ("locked", False), ("locked", True)]
    for key, version in (("locked", locked["VersionId"]), ("held", held["VersionId"])):
        body = s3.get_object(Bucket=bucket, Key=key, VersionId=version)["Body"].read()
        assert body.startswith(b"keep me")
    s3.put_object_legal_hold(Bucket=bucket, Key="held", VersionId=held["VersionId"],
                             LegalHold={"Status": "OFF"})
    wait_until("the released version to go",
               lambda: all(key != "held" for key, _ in versions_of(s3, bucket)))


def test_settings_interval_is_accepted(daemon: Daemon) -> None:
    """The runtime override exists and the worker keeps running after a change."""
    admin = AdminClient(daemon.endpoint)
    admin.ok("PUT", "/settings/lifecycle_evaluation_interval", {"value": 1})
    s3 = make_client(daemon.endpoint)
    name = f"lc-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="a", Body=b"1")
    put_rules(s3, name, rule("a", "", Expiration={"Days": 1}))
    wait_until("the object to expire", lambda: keys(s3, name) == [])
    admin.ok("DELETE", "/settings/lifecycle_evaluation_interval", status=204)
