"""The audit log end to end: every S3 and admin call made with real clients appears in
GET /admin/audit with the right fields (who, what, where, result, request id, sizes), refused
requests have no user, no signature is ever recorded, filters and pagination work, records
queued at shutdown are written, and [audit] enabled = false records nothing."""

from __future__ import annotations

import datetime
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import urllib3
from botocore.exceptions import ClientError

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import ROOT_ACCESS_KEY, Daemon

WAIT_SECONDS = 15.0
Entry = dict[str, Any]


@pytest.fixture(scope="module", params=BACKENDS)
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Daemon]:
    with running_daemon(request, Daemon(tmp_path_factory.mktemp(f"audit-{request.param}"),
                                        backend=request.param)) as daemon:
        yield daemon


@pytest.fixture
def admin(node: Daemon) -> AdminClient:
    return AdminClient(node.endpoint)


@pytest.fixture
def s3(node: Daemon) -> Any:
    return make_client(node.endpoint)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def query(admin: AdminClient, **params: Any) -> dict[str, Any]:
    path = "/audit"
    if params:
        path += "?" + urlencode(params, quote_via=quote)
    return admin.ok("GET", path)  # type: ignore[no-any-return]


def wait_for(admin: AdminClient, done: Callable[[list[Entry]], bool], **params: Any
             ) -> list[Entry]:
    """Entries matching `params` once `done(entries)` holds (records reach the database
    within about a second)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        entries: list[Entry] = query(admin, limit=1000, **params)["entries"]
        if done(entries):
            return entries
        if time.monotonic() > deadline:
            summary = [(e["operation"], e["status"], e["bucket"], e["key"]) for e in entries]
            raise AssertionError(f"audit entries never satisfied the wait: {summary}")
        time.sleep(0.2)


def by_operation(entries: list[Entry]) -> dict[str, list[Entry]]:
    found: dict[str, list[Entry]] = {}
    for entry in entries:
        found.setdefault(entry["operation"], []).append(entry)
    return found


def test_every_s3_call_is_recorded(admin: AdminClient, s3: Any, node: Daemon) -> None:
    bucket = unique("audit")
    request_ids = {}
    request_ids["CreateBucket"] = s3.create_bucket(Bucket=bucket)["ResponseMetadata"]["RequestId"]
    s3.put_object(Bucket=bucket, Key="dir/a.txt", Body=b"hello")
    got = s3.get_object(Bucket=bucket, Key="dir/a.txt")
    assert got["Body"].read() == b"hello"
    request_ids["GetObject"] = got["ResponseMetadata"]["RequestId"]
    s3.head_object(Bucket=bucket, Key="dir/a.txt")
    s3.list_objects_v2(Bucket=bucket, Prefix="dir/")
    s3.list_objects(Bucket=bucket)
    s3.copy_object(Bucket=bucket, Key="b.txt", CopySource={"Bucket": bucket, "Key": "dir/a.txt"})
    upload = s3.create_multipart_upload(Bucket=bucket, Key="big")
    part = s3.upload_part(Bucket=bucket, Key="big", UploadId=upload["UploadId"], PartNumber=1,
                          Body=b"x" * 100)
    s3.complete_multipart_upload(
        Bucket=bucket, Key="big", UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    with pytest.raises(ClientError):
        s3.get_object(Bucket=bucket, Key="missing")
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "b.txt"}, {"Key": "big"}]})
    s3.delete_object(Bucket=bucket, Key="dir/a.txt")
    s3.delete_bucket(Bucket=bucket)

    expected = {"CreateBucket", "PutObject", "GetObject", "HeadObject", "ListObjectsV2",
                "ListObjects", "CopyObject", "CreateMultipartUpload", "UploadPart",
                "CompleteMultipartUpload", "DeleteObjects", "DeleteObject", "DeleteBucket"}
    entries = wait_for(admin, lambda found: expected <= {e["operation"] for e in found},
                       bucket=bucket)
    ops = by_operation(entries)
    node_id = query(admin, limit=1)["node"]
    for entry in entries:
        assert entry["bucket"] == bucket
        assert entry["node_id"] == node_id
        assert entry["username"] == "root" and entry["user_id"]
        assert entry["access_key"] == ROOT_ACCESS_KEY
        assert entry["source_ip"] == "127.0.0.1"
        assert "Boto3" in entry["user_agent"] or "botocore" in entry["user_agent"]
        assert entry["request_id"] and entry["duration_ms"] >= 0
        datetime.datetime.fromisoformat(entry["time"])
    put = ops["PutObject"][0]
    assert (put["key"], put["status"], put["bytes_in"]) == ("dir/a.txt", 200, 5)
    reads = [e for e in ops["GetObject"] if e["status"] == 200]
    assert reads[0]["bytes_out"] == 5
    assert reads[0]["request_id"] == request_ids["GetObject"]
    assert ops["CreateBucket"][0]["request_id"] == request_ids["CreateBucket"]
    missing = [e for e in ops["GetObject"] if e["status"] == 404]
    assert missing[0]["error_code"] == "NoSuchKey" and missing[0]["key"] == "missing"
    assert ops["UploadPart"][0]["details"]["upload_id"] == upload["UploadId"]
    assert ops["UploadPart"][0]["bytes_in"] == 100
    assert ops["DeleteBucket"][0]["status"] == 204
    # Newest first.
    times = [e["time"] for e in entries]
    assert times == sorted(times, reverse=True)


def test_refused_requests_have_no_user(admin: AdminClient, node: Daemon) -> None:
    bucket = unique("refused")
    wrong_secret = make_client(node.endpoint, secret_key="not-the-secret-0123456789")
    with pytest.raises(ClientError) as bad_signature:
        wrong_secret.list_objects_v2(Bucket=bucket)
    assert bad_signature.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    unknown = make_client(node.endpoint, access_key="AKIANOBODYATALL00000")
    with pytest.raises(ClientError):
        unknown.put_object(Bucket=bucket, Key="k", Body=b"x")
    anonymous = urllib3.PoolManager(retries=False).request("GET", f"{node.endpoint}/{bucket}/k")
    assert anonymous.status == 403

    entries = wait_for(admin, lambda found: len(found) >= 3, bucket=bucket)
    codes = {e["error_code"]: e for e in entries}
    assert set(codes) == {"SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied"}
    for entry in entries:
        assert entry["user_id"] is None and entry["username"] is None
        assert entry["status"] == 403
    assert codes["SignatureDoesNotMatch"]["access_key"] == ROOT_ACCESS_KEY
    assert codes["SignatureDoesNotMatch"]["operation"] == "ListObjectsV2"
    assert codes["InvalidAccessKeyId"]["access_key"] == "AKIANOBODYATALL00000"
    assert codes["InvalidAccessKeyId"]["operation"] == "PutObject"
    assert codes["AccessDenied"]["access_key"] is None


def test_admin_calls_are_recorded(admin: AdminClient) -> None:
    created = admin.post("/users", {"username": unique("auditee")})
    assert created.status == 201
    user_path = f"/admin/users/{created.json['user_id']}"
    calls = {
        "create": created,
        "get": admin.get(user_path[len("/admin"):]),
        "missing": admin.get("/users/no-such-user"),
        "delete": admin.delete(user_path[len("/admin"):]),
    }
    ids = {name: reply.headers["x-amz-request-id"] for name, reply in calls.items()}

    entries = wait_for(admin, lambda found: set(ids.values()) <= {e["request_id"] for e in found},
                       user="root")
    mine = {e["request_id"]: e for e in entries if e["request_id"] in ids.values()}
    create, get, missing, delete = (mine[ids[name]] for name in ids)
    assert (create["operation"], create["status"]) == ("admin:CreateUser", 201)
    assert create["bytes_in"] > 0 and create["bytes_out"] > 0
    assert (get["operation"], get["status"], get["details"]["path"]) == (
        "admin:GetUser", 200, user_path)
    assert (missing["operation"], missing["status"], missing["error_code"]) == (
        "admin:GetUser", 404, "NotFound")
    assert (delete["operation"], delete["status"]) == ("admin:DeleteUser", 204)
    for entry in mine.values():
        assert entry["bucket"] is None and entry["username"] == "root"
        assert entry["access_key"] == ROOT_ACCESS_KEY
    assert by_operation(entries)["admin:GetAuditLog"][0]["status"] == 200  # the queries


def test_non_admin_gets_403_and_that_is_audited(admin: AdminClient) -> None:
    name = unique("viewer")
    user = admin.ok("POST", "/users", {"username": name}, status=201)
    credential = admin.ok("POST", f"/users/{user['user_id']}/credentials", {}, status=201)
    viewer = admin.as_user(credential["access_key_id"], credential["secret_access_key"])
    reply = viewer.get("/audit")
    assert reply.status == 403 and reply.error == "AccessDenied"
    entries = wait_for(admin, lambda found: bool(found), user=name,
                       operation="admin:GetAuditLog")
    assert entries[0]["status"] == 403 and entries[0]["error_code"] == "AccessDenied"
    assert entries[0]["access_key"] == credential["access_key_id"]


def test_presigned_signature_is_never_recorded(admin: AdminClient, s3: Any, node: Daemon) -> None:
    bucket = unique("presign")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    url = admin.ok("POST", "/presign", {"bucket": bucket, "key": "k"})["url"]
    signature = url.split("X-Amz-Signature=")[1].split("&")[0]
    fetched = urllib3.PoolManager(retries=False).request("GET", url)
    assert fetched.status == 200 and fetched.data == b"data"

    wait_for(admin, lambda found: any(e["operation"] == "GetObject" for e in found),
             bucket=bucket)
    raw = admin.get("/audit?limit=1000")
    assert signature.encode() not in raw.body
    assert b"X-Amz-Signature" not in raw.body
    presigned = query(admin, bucket=bucket, operation="GetObject")["entries"][0]
    assert presigned["key"] == "k" and presigned["access_key"] == ROOT_ACCESS_KEY


def test_filters_and_pagination(admin: AdminClient, s3: Any) -> None:
    bucket = unique("pages")
    s3.create_bucket(Bucket=bucket)
    for n in range(7):
        s3.put_object(Bucket=bucket, Key=f"k{n}", Body=b"x")
    entries = wait_for(admin, lambda found: len(found) == 8, bucket=bucket)
    first, last = entries[-1]["time"], entries[0]["time"]

    walked: list[Entry] = []
    page = query(admin, bucket=bucket, limit=3)
    while True:
        assert len(page["entries"]) <= 3
        walked += page["entries"]
        if page["next_cursor"] is None:
            break
        page = query(admin, bucket=bucket, limit=3, cursor=page["next_cursor"])
    assert [e["id"] for e in walked] == [e["id"] for e in entries]

    puts = query(admin, bucket=bucket, operation="PutObject")["entries"]
    assert {e["key"] for e in puts} == {f"k{n}" for n in range(7)}
    assert query(admin, bucket=bucket, user="nobody-at-all")["entries"] == []
    assert len(query(admin, bucket=bucket, user="root")["entries"]) == 8
    window = query(admin, bucket=bucket, since=first, until=last)["entries"]
    assert window and all(first <= e["time"] < last for e in window)
    assert query(admin, bucket=bucket, since=last)["entries"][0]["time"] == last
    later = datetime.datetime.fromisoformat(last) + datetime.timedelta(hours=1)
    assert query(admin, bucket=bucket, since=later.isoformat())["entries"] == []


def test_node_label_and_bad_queries(admin: AdminClient) -> None:
    body = query(admin, limit=1)
    node_id = body["node"]
    assert node_id and set(body) >= {"node", "entries", "next_cursor"}
    assert query(admin, limit=1, node=node_id)["node"] == node_id
    everywhere = query(admin, limit=1, node="all")
    assert everywhere["node"] == node_id and everywhere["sources"][0]["node_id"] == node_id
    assert admin.get("/audit?node=some-other-node").status == 404
    for bad in ("limit=0", "limit=1001", "since=yesterday", "cursor=garbage!"):
        reply = admin.get(f"/audit?{bad}")
        assert reply.status == 400 and reply.error == "BadRequest", bad


def test_records_queued_at_shutdown_are_written(tmp_path_factory: pytest.TempPathFactory
                                               ) -> None:
    daemon = Daemon(tmp_path_factory.mktemp("audit-shutdown"))
    daemon.start()
    try:
        bucket = unique("shutdown")
        make_client(daemon.endpoint).create_bucket(Bucket=bucket)
        # At once: the record is still queued. twistd ends by re-raising the signal.
        assert daemon.stop() in (0, -signal.SIGTERM)
        daemon.start()
        entries = wait_for(AdminClient(daemon.endpoint), lambda found: bool(found),
                           bucket=bucket)
        assert entries[0]["operation"] == "CreateBucket"
    finally:
        daemon.cleanup()


def test_disabled_audit_records_nothing(tmp_path_factory: pytest.TempPathFactory) -> None:
    daemon = Daemon(tmp_path_factory.mktemp("audit-off"),
                    extra_config="[audit]\nenabled = false\n")
    daemon.start()
    try:
        admin = AdminClient(daemon.endpoint)
        bucket = unique("quiet")
        make_client(daemon.endpoint).create_bucket(Bucket=bucket)
        time.sleep(2.0)  # two flush intervals: had it been recorded, it would be written
        body = query(admin)
        assert body["entries"] == [] and body["node"]
    finally:
        daemon.cleanup()
