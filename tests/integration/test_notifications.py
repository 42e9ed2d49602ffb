"""Bucket notifications on a real daemon and each backend, delivered to a real HTTP
receiver the test starts (http.server on a thread): the configuration through boto3 and
minio-py (validation errors as AWS), every event kind delivered with its fields, retries
then success, FAILED after max_retries with each attempt's error in the events view,
test-webhook, the metrics, and a SIGKILL of the daemon in the middle of a burst losing
nothing (at-least-once: duplicates counted, none missing)."""

from __future__ import annotations

import json
import signal
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from minio import Minio

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon, free_port
from tests.integration.test_lifecycle_of_the_process import make_certificate

DEADLINE = 30.0
TOKEN = "s3cr3t-token-for-hooks"
# Broker targets through the daemon: a Redis list and a PostgreSQL access table, named
# uniquely per run (the servers are this machine's, shared with other runs).
RUN = f"{time.time_ns():x}"
REDIS_KEY = f"objstore-e2e-{RUN}"
PG_TABLE = f"objstore_e2e_{RUN}"
FAST = "[lifecycle]\ninterval_seconds = 1\nday_seconds = 1\n"


@dataclass
class Receiver:
    """Answers POSTs: a path's queued statuses first (then 200); `/down` always 500."""

    port: int
    got: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    script: dict[str, list[int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def records(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for p, body, _ in self.got if p == path for r in body.get("Records", [])]

    def answer(self, path: str, body: bytes, auth: str) -> int:
        with self.lock:
            queued = self.script.get(path)
            if path == "/down":
                return 500
            if queued:
                return queued.pop(0)
            self.got.append((path, json.loads(body), auth))
            return 200


def start_receiver() -> tuple[Receiver, ThreadingHTTPServer]:
    receiver = Receiver(free_port())

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status = receiver.answer(self.path, body, self.headers.get("Authorization", ""))
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", receiver.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver, server


@pytest.fixture(scope="module", params=BACKENDS)
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[Daemon, Receiver]]:
    receiver, server = start_receiver()
    config = (f"{FAST}[notifications]\nmax_retries = 2\nretry_base_seconds = 0.2\n"
              "webhook_timeout_seconds = 2\n"
              f"[notifications.targets.hooks]\nkind = \"webhook\"\n"
              f"url = \"{receiver.url('/hooks')}\"\nauth_token = \"{TOKEN}\"\n"
              f"[notifications.targets.redis]\nkind = \"redis\"\n"
              f"url = \"redis://127.0.0.1:6379/0\"\nkey = \"{REDIS_KEY}-{request.param}\"\n"
              f"[notifications.targets.pg]\nkind = \"postgresql\"\n"
              f"dsn = \"postgresql://postgres@127.0.0.1:5432/test\"\n"
              f"table = \"{PG_TABLE}_{request.param}\"\nformat = \"access\"\n")
    node = Daemon(tmp_path_factory.mktemp("notify"), backend=request.param,
                  extra_config=config)
    node.start()
    yield node, receiver
    s3: Any = make_client(node.endpoint)  # a clean stop while a delivery keeps failing
    s3.create_bucket(Bucket="nstop")
    s3.put_bucket_notification_configuration(Bucket="nstop", NotificationConfiguration=(
        queue_config(receiver.url("/down"), ["s3:ObjectCreated:*"])))
    s3.put_object(Bucket="nstop", Key="k", Body=b"x")
    time.sleep(0.5)
    assert node.stop() in (0, -signal.SIGTERM)
    node.assert_no_tracebacks()
    node.cleanup()
    server.shutdown()


HOOKS = "arn:objstore:sqs:us-east-1:hooks:webhook"


def queue_config(arn: str, events: list[str], prefix: str = "", suffix: str = "",
                 rule_id: str = "r1") -> dict[str, Any]:
    rules = [{"Name": n, "Value": v} for n, v in (("prefix", prefix), ("suffix", suffix)) if v]
    config: dict[str, Any] = {"Id": rule_id, "QueueArn": arn, "Events": events}
    if rules:
        config["Filter"] = {"Key": {"FilterRules": rules}}
    return {"QueueConfigurations": [config]}


def wait_for(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_configuration_through_boto3_and_minio(env: tuple[Daemon, Receiver]) -> None:
    node, receiver = env
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="nconf")
    empty = s3.get_bucket_notification_configuration(Bucket="nconf")
    assert not any(k.endswith("Configurations") for k in empty)
    wanted = {
        "QueueConfigurations": [{"Id": "q", "QueueArn": HOOKS, "Events": ["s3:ObjectCreated:*"],
                                 "Filter": {"Key": {"FilterRules": [
                                     {"Name": "Prefix", "Value": "in/"},
                                     {"Name": "Suffix", "Value": ".jpg"}]}}}],
        "TopicConfigurations": [{"Id": "t", "TopicArn": receiver.url("/adhoc"),
                                 "Events": ["s3:ObjectRemoved:Delete"]}],
    }
    s3.put_bucket_notification_configuration(Bucket="nconf",
                                             NotificationConfiguration=wanted)
    got = s3.get_bucket_notification_configuration(Bucket="nconf")
    assert got["QueueConfigurations"][0]["QueueArn"] == HOOKS
    assert got["QueueConfigurations"][0]["Events"] == ["s3:ObjectCreated:*"]
    rules = got["QueueConfigurations"][0]["Filter"]["Key"]["FilterRules"]
    assert {(r["Name"].lower(), r["Value"]) for r in rules} == {("prefix", "in/"),
                                                               ("suffix", ".jpg")}
    assert got["TopicConfigurations"][0]["TopicArn"] == receiver.url("/adhoc")

    host = urllib.parse.urlsplit(node.endpoint).netloc  # minio-py reads it too
    minio = Minio(host, access_key=ROOT_ACCESS_KEY, secret_key=ROOT_SECRET_KEY, secure=False)
    config = minio.get_bucket_notification("nconf")
    assert config.queue_config_list[0].queue == HOOKS
    assert config.queue_config_list[0].events == ["s3:ObjectCreated:*"]

    for refused in (
        queue_config("arn:objstore:sqs:us-east-1:nosuch:webhook", ["s3:ObjectCreated:*"]),
        queue_config(HOOKS, ["s3:NoSuchEvent:*"]),
        {"QueueConfigurations": [
            *queue_config(HOOKS, ["s3:ObjectCreated:*"], prefix="a/")["QueueConfigurations"],
            *queue_config(receiver.url("/x"), ["s3:ObjectCreated:Put"], prefix="a/b",
                          rule_id="r2")["QueueConfigurations"]]},
    ):
        with pytest.raises(ClientError) as error:
            s3.put_bucket_notification_configuration(Bucket="nconf",
                                                     NotificationConfiguration=refused)
        assert error.value.response["Error"]["Code"] == "InvalidArgument"
    # Nothing changed by the refusals; an empty configuration removes it.
    assert s3.get_bucket_notification_configuration(Bucket="nconf")["QueueConfigurations"]
    s3.put_bucket_notification_configuration(Bucket="nconf", NotificationConfiguration={})
    assert "QueueConfigurations" not in s3.get_bucket_notification_configuration(
        Bucket="nconf")
    with pytest.raises(ClientError) as error:
        s3.get_bucket_notification_configuration(Bucket="no-such-bucket-here")
    assert error.value.response["Error"]["Code"] == "NoSuchBucket"


def test_malformed_xml_is_refused(env: tuple[Daemon, Receiver]) -> None:
    node, _ = env
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="nxml")
    event = "before-sign.s3.PutBucketNotificationConfiguration"
    for body in (b"<NotificationConfiguration><Bogus/></NotificationConfiguration>",
                 b"<NotificationConfiguration", b"<Other/>"):
        s3.meta.events.register_first(event, _replace_body(body), unique_id="raw-body")
        try:
            with pytest.raises(ClientError) as error:
                s3.put_bucket_notification_configuration(Bucket="nxml",
                                                         NotificationConfiguration={})
        finally:
            s3.meta.events.unregister(event, unique_id="raw-body")
        assert error.value.response["Error"]["Code"] == "MalformedXML"


def _replace_body(body: bytes) -> Callable[..., None]:
    def replace(request: Any, **_: Any) -> None:
        request.data = body
        for name in ("Content-MD5", "Content-Length"):
            if name in request.headers:
                del request.headers[name]
        request.headers["Content-Length"] = str(len(body))

    return replace


def test_every_event_kind_is_delivered_with_its_fields(env: tuple[Daemon, Receiver]) -> None:
    node, receiver = env
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="nevents")
    s3.put_bucket_notification_configuration(
        Bucket="nevents", NotificationConfiguration=queue_config(
            HOOKS, ["s3:ObjectCreated:*", "s3:ObjectRemoved:*", "s3:ObjectTagging:*",
                    "s3:ObjectAcl:Put", "s3:LifecycleExpiration:*"], prefix="k/"))
    put = s3.put_object(Bucket="nevents", Key="k/a b+c.txt", Body=b"hello")
    request_id = put["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
    s3.put_object(Bucket="nevents", Key="other", Body=b"not matched")
    s3.copy_object(Bucket="nevents", Key="k/copy", CopySource="nevents/k/a b+c.txt")
    upload = s3.create_multipart_upload(Bucket="nevents", Key="k/multi")
    part = s3.upload_part(Bucket="nevents", Key="k/multi", UploadId=upload["UploadId"],
                          PartNumber=1, Body=b"m" * 1024)
    s3.complete_multipart_upload(Bucket="nevents", Key="k/multi",
                                 UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": [{"ETag": part["ETag"],
                                                             "PartNumber": 1}]})
    s3.put_object_tagging(Bucket="nevents", Key="k/copy",
                          Tagging={"TagSet": [{"Key": "a", "Value": "b"}]})
    s3.delete_object_tagging(Bucket="nevents", Key="k/copy")
    s3.put_bucket_ownership_controls(Bucket="nevents", OwnershipControls={
        "Rules": [{"ObjectOwnership": "ObjectWriter"}]})  # ACLs enabled: stored, notified
    s3.put_object_acl(Bucket="nevents", Key="k/copy", ACL="authenticated-read")
    s3.delete_object(Bucket="nevents", Key="k/copy")
    s3.delete_objects(Bucket="nevents", Delete={"Objects": [{"Key": "k/multi"}]})
    # A versioned bucket: a delete marker; a lifecycle rule expiring a version.
    s3.create_bucket(Bucket="neventsv")
    s3.put_bucket_versioning(Bucket="neventsv",
                             VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_notification_configuration(
        Bucket="neventsv", NotificationConfiguration=queue_config(
            HOOKS, ["s3:ObjectRemoved:*", "s3:LifecycleExpiration:*"]))
    s3.put_object(Bucket="neventsv", Key="marked", Body=b"x")
    s3.delete_object(Bucket="neventsv", Key="marked")
    s3.put_object(Bucket="neventsv", Key="expiring", Body=b"x")
    s3.put_bucket_lifecycle_configuration(
        Bucket="neventsv", LifecycleConfiguration={"Rules": [
            {"ID": "exp", "Status": "Enabled", "Filter": {"Prefix": "expiring"},
             "Expiration": {"Days": 1}}]})

    wanted = {"ObjectCreated:Put", "ObjectCreated:Copy", "ObjectCreated:CompleteMultipartUpload",
              "ObjectTagging:Put", "ObjectTagging:Delete", "ObjectAcl:Put",
              "ObjectRemoved:Delete",
              "ObjectRemoved:DeleteMarkerCreated", "LifecycleExpiration:DeleteMarkerCreated"}

    def names() -> set[str]:
        return {r["eventName"] for r in receiver.records("/hooks")
                if r["s3"]["bucket"]["name"] in ("nevents", "neventsv")}

    wait_for(lambda: wanted <= names(), f"events {wanted}")
    records = receiver.records("/hooks")
    assert any(r["eventName"] == "ObjectRemoved:Delete" and r["s3"]["object"]["key"] ==
               "k/multi" for r in records)  # DeleteObjects too
    assert not any(r["s3"]["object"]["key"] == "other" for r in records)
    first = next(r for r in records if r["eventName"] == "ObjectCreated:Put"
                 and r["s3"]["bucket"]["name"] == "nevents")
    assert first["eventVersion"] == "2.1" and first["eventSource"] == "aws:s3"
    assert first["awsRegion"] == "us-east-1"
    assert first["eventTime"].endswith("Z")
    assert first["requestParameters"]["sourceIPAddress"] == "127.0.0.1"
    assert first["responseElements"]["x-amz-request-id"] == request_id
    assert "x-amz-id-2" in first["responseElements"]
    assert first["userIdentity"]["principalId"]
    assert first["s3"]["configurationId"] == "r1"
    assert first["s3"]["bucket"]["arn"] == "arn:aws:s3:::nevents"
    assert first["s3"]["bucket"]["ownerIdentity"]["principalId"]
    obj = first["s3"]["object"]
    assert obj["key"] == "k/a+b%2Bc.txt"
    assert obj["size"] == 5 and obj["eTag"] == put["ETag"].strip('"')
    assert len(obj["sequencer"]) == 16
    marker = next(r for r in records if r["eventName"] == "ObjectRemoved:DeleteMarkerCreated")
    assert marker["s3"]["object"]["versionId"]
    auths = {auth for path, _, auth in receiver.got if path == "/hooks"}
    assert auths == {f"Bearer {TOKEN}"}


def events(admin: AdminClient, **query: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = admin.ok(
        "GET", "/notifications/events?" + urllib.parse.urlencode(query))["events"]
    return found


def test_retries_then_success_and_failed_after_max_retries(
        env: tuple[Daemon, Receiver]) -> None:
    node, receiver = env
    admin = AdminClient(node.endpoint)
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="nretry")
    receiver.script["/flaky"] = [500, 503]
    s3.put_bucket_notification_configuration(
        Bucket="nretry", NotificationConfiguration={"QueueConfigurations": [
            {"Id": "flaky", "QueueArn": receiver.url("/flaky"),
             "Events": ["s3:ObjectCreated:*"], "Filter": {"Key": {"FilterRules": [
                 {"Name": "prefix", "Value": "f"}]}}},
            {"Id": "down", "QueueArn": receiver.url("/down"),
             "Events": ["s3:ObjectCreated:*"], "Filter": {"Key": {"FilterRules": [
                 {"Name": "prefix", "Value": "d"}]}}}]})
    s3.put_object(Bucket="nretry", Key="f1", Body=b"1")
    s3.put_object(Bucket="nretry", Key="d1", Body=b"1")
    wait_for(lambda: receiver.records("/flaky"), "the flaky target's delivery")
    delivered = wait_for(lambda: events(admin, bucket="nretry", status="delivered"),
                         "the delivered row")
    assert delivered[0]["attempts"] == 3 and len(delivered[0]["errors"]) == 2
    assert "HTTP 500" in delivered[0]["errors"][0]["error"]
    assert delivered[0]["target"] == receiver.url("/flaky")
    failed = wait_for(lambda: events(admin, bucket="nretry", status="failed"),
                      "the failed row")
    assert failed[0]["attempts"] == 3 and failed[0]["key"] == "d1"  # 1 + max_retries
    assert all("HTTP 500" in e["error"] for e in failed[0]["errors"])
    assert failed[0]["event"]["Records"][0]["eventName"] == "ObjectCreated:Put"
    # Filters and pagination
    assert events(admin, bucket="nretry", target=receiver.url("/down"))[0]["key"] == "d1"
    page = admin.ok("GET", "/notifications/events?bucket=nretry&limit=1")
    assert len(page["events"]) == 1 and page["next_cursor"] and page["node"]
    rest = admin.ok("GET", "/notifications/events?bucket=nretry&limit=1&cursor="
                    + page["next_cursor"])
    assert rest["events"][0]["id"] < page["events"][0]["id"]
    assert admin.get("/notifications/events?status=bogus").status == 400
    for bad in ("cursor=zz", "cursor=99999999999999999999999", "limit=abc", "limit=0",
                "limit=1001", "node=nosuch"):
        assert admin.get(f"/notifications/events?{bad}").status in (400, 404), bad
    every = admin.ok("GET", "/notifications/events?node=all&bucket=nretry")
    assert len(every["events"]) == 2 and every["sources"]
    metrics = admin.get("/metrics").body.decode()
    assert 'objstore_notifications_failed_total{target="' + receiver.url("/down") in metrics
    assert "objstore_notifications_retried_total" in metrics
    assert "objstore_notifications_queue_depth" in metrics
    assert "objstore_notifications_oldest_pending_age_seconds" in metrics


def test_test_webhook(env: tuple[Daemon, Receiver]) -> None:
    node, receiver = env
    admin = AdminClient(node.endpoint)
    assert admin.ok("POST", "/notifications/test-webhook", {"target": "hooks"}) == \
        {"target": "hooks", "delivered": True}
    assert any(body.get("Event") == "s3:TestEvent" for p, body, _ in receiver.got
               if p == "/hooks")
    down = admin.ok("POST", "/notifications/test-webhook", {"url": receiver.url("/down")})
    assert down["delivered"] is False and "HTTP 500" in down["error"]
    assert admin.post("/notifications/test-webhook", {"target": "nosuch"}).status == 404
    assert admin.post("/notifications/test-webhook", {"url": "ftp://x"}).status == 400
    assert admin.post("/notifications/test-webhook", {}).status == 400


def test_tls_verification_on_and_off(env: tuple[Daemon, Receiver], tmp_path: Path) -> None:
    node, _ = env
    admin = AdminClient(node.endpoint)
    cert, key = make_certificate(tmp_path)  # self-signed: no system root knows it
    secure, server = start_receiver()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    try:
        url = f"https://localhost:{secure.port}/tls"
        checked = admin.ok("POST", "/notifications/test-webhook", {"url": url})
        assert checked["delivered"] is False and checked["error"]
        trusting = admin.ok("POST", "/notifications/test-webhook",
                            {"url": url, "tls_verify": False})
        assert trusting == {"target": url, "delivered": True}
        assert secure.got and secure.got[0][1]["Event"] == "s3:TestEvent"
    finally:
        server.shutdown()


def test_sigkill_mid_burst_loses_nothing(env: tuple[Daemon, Receiver]) -> None:
    node, receiver = env
    s3: Any = make_client(node.endpoint, max_pool_connections=8)
    s3.create_bucket(Bucket="nburst")
    s3.put_bucket_notification_configuration(
        Bucket="nburst", NotificationConfiguration=queue_config(
            receiver.url("/burst"), ["s3:ObjectCreated:*"]))
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(worker: int) -> None:
        client: Any = make_client(node.endpoint)
        n = 0
        while not stop.is_set():
            key = f"w{worker}-{n}"
            n += 1
            try:
                client.put_object(Bucket="nburst", Key=key, Body=b"x")
            except Exception:  # noqa: BLE001 - the daemon is being killed under us
                return
            with lock:
                acknowledged.append(key)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acknowledged) >= 60, "60 acknowledged writes")
    node.kill_tree()
    stop.set()
    for thread in threads:
        thread.join(30)
    node.start()

    def missing() -> set[str]:
        seen = {r["s3"]["object"]["key"] for r in receiver.records("/burst")}
        return set(acknowledged) - seen

    wait_for(lambda: not missing(), "every acknowledged write's event")
    keys = [r["s3"]["object"]["key"] for r in receiver.records("/burst")]
    duplicates = len(keys) - len(set(keys))
    print(f"burst: {len(acknowledged)} acknowledged, {len(keys)} delivered, "
          f"{duplicates} duplicates")


def test_broker_targets_through_the_daemon(env: tuple[Daemon, Receiver]) -> None:
    """One configuration names a Redis list (keys under logs/) and a PostgreSQL table
    (keys under pg/): a PUT and a DELETE reach each, as S3 event documents, in order."""
    import psycopg2
    import redis

    node, _ = env
    backend = node.backend
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="nbrokers")
    s3.put_bucket_notification_configuration(Bucket="nbrokers", NotificationConfiguration={
        "QueueConfigurations": [
            {"Id": "to-redis", "QueueArn": "arn:objstore:sqs:us-east-1:redis:redis",
             "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
             "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "logs/"}]}}},
            {"Id": "to-pg", "QueueArn": "arn:objstore:sqs:us-east-1:pg:postgresql",
             "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
             "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "pg/"}]}}}]})
    s3.put_object(Bucket="nbrokers", Key="logs/a b.txt", Body=b"12345")
    s3.delete_object(Bucket="nbrokers", Key="logs/a b.txt")
    s3.put_object(Bucket="nbrokers", Key="pg/x", Body=b"1")
    s3.delete_object(Bucket="nbrokers", Key="pg/x")
    client = redis.Redis(host="127.0.0.1", port=6379)
    key = f"{REDIS_KEY}-{backend}"
    try:
        listed = wait_for(lambda: (lambda items: items if len(items) >= 2 else None)(
            client.lrange(key, 0, -1)), "two events in the Redis list")
        names = [json.loads(item)["Records"][0]["eventName"] for item in listed[:2]]
        assert names == ["ObjectCreated:Put", "ObjectRemoved:Delete"]
        record = json.loads(listed[0])["Records"][0]
        assert record["s3"]["bucket"]["name"] == "nbrokers"
        assert record["s3"]["object"]["key"] == "logs/a+b.txt"
        assert record["s3"]["object"]["size"] == 5
    finally:
        client.delete(key)
        client.close()
    table = f"{PG_TABLE}_{backend}"

    def pg_rows() -> list[Any] | None:
        conn = psycopg2.connect("host=127.0.0.1 dbname=test user=postgres")
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT to_regclass(%s)", (table,))
                if cursor.fetchone()[0] is None:
                    return None
                cursor.execute(f'SELECT * FROM "{table}"')
                rows = cursor.fetchall()
                return rows if len(rows) >= 2 else None
        finally:
            conn.close()

    try:
        rows = wait_for(pg_rows, "two events in the PostgreSQL table")
        assert len(rows) == 2
        assert "ObjectRemoved:Delete" in json.dumps([list(map(str, row)) for row in rows])
    finally:
        conn = psycopg2.connect("host=127.0.0.1 dbname=test user=postgres")
        conn.autocommit = True
        with conn.cursor() as cursor:
            cursor.execute(f'DROP TABLE IF EXISTS "{table}"')
        conn.close()


def test_a_form_upload_is_object_created_post(env: tuple[Daemon, Receiver]) -> None:
    """A browser form upload (POST Object) is s3:ObjectCreated:Post, to a webhook and to a
    Redis list; a selection of :Post alone does not take a PUT."""
    import redis
    import requests

    node, receiver = env
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="nform")
    s3.put_bucket_notification_configuration(Bucket="nform", NotificationConfiguration={
        "QueueConfigurations": [
            {"Id": "hook", "QueueArn": HOOKS, "Events": ["s3:ObjectCreated:Post"],
             "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "form/"}]}}},
            {"Id": "list", "QueueArn": "arn:objstore:sqs:us-east-1:redis:redis",
             "Events": ["s3:ObjectCreated:*"],
             "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "list/"}]}}}]})
    for prefix in ("form/", "list/"):
        s3.put_object(Bucket="nform", Key=f"{prefix}put", Body=b"by PUT")
        presigned = s3.generate_presigned_post("nform", prefix + "${filename}",
                                               ExpiresIn=300)
        answer = requests.post(presigned["url"], data=presigned["fields"],
                               files={"file": ("a.txt", b"by form")}, timeout=30)
        assert answer.status_code == 204, answer.text

    def hooked() -> list[dict[str, Any]]:
        return [r for r in receiver.records("/hooks") if r["s3"]["bucket"]["name"] == "nform"]

    record = wait_for(lambda: hooked(), "the form upload's event")[0]
    assert record["eventName"] == "ObjectCreated:Post"
    assert record["s3"]["object"]["key"] == "form/a.txt"
    assert record["s3"]["object"]["size"] == len(b"by form")
    client = redis.Redis(host="127.0.0.1", port=6379)
    key = f"{REDIS_KEY}-{node.backend}"
    try:
        def listed() -> list[tuple[str, str]] | None:
            records = [json.loads(item)["Records"][0] for item in client.lrange(key, 0, -1)]
            found = [(r["eventName"], r["s3"]["object"]["key"]) for r in records
                     if r["s3"]["bucket"]["name"] == "nform"]
            return found if len(found) >= 2 else None

        assert wait_for(listed, "both events in the Redis list") == [
            ("ObjectCreated:Put", "list/put"), ("ObjectCreated:Post", "list/a.txt")]
    finally:
        client.delete(key)
        client.close()
    assert [r["eventName"] for r in hooked()] == ["ObjectCreated:Post"]
