"""Bucket replication between two real daemons (A on each backend, B on SQLite), both
ways: an object written on either side arrives on the other as REPLICA and journals
nothing there (no loop); tags, delete markers and a multipart object (its ETag intact)
follow; the source's x-amz-replication-status goes PENDING -> COMPLETED. An outage of B
under writes is caught up in order per key, deletes and delete markers included; a
destination that never answers makes an entry FAILED only after its last attempt, and
POST /admin/replication/retry brings it back; credentials are never returned; a
SIGKILL of A in the middle of a burst loses nothing the clients were told about.
Short timers through [replication] (tick 0.1 s, backoff 0.2 s capped at 0.5 s)."""

from __future__ import annotations

import base64
import datetime
import hashlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from objstore.http import sigv4
from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon, free_port
from tests.integration.test_admin_cli import Cli
from tests.integration.test_rbac import Person, allow

REPLICATION = ("[replication]\ntick_seconds = 0.1\nretry_base_seconds = 0.2\n"
               "retry_max_seconds = 0.5\nmax_attempts = {attempts}\ntimeout_seconds = 2\n")
DEADLINE = 30.0
MIB = 1024 * 1024
_HTTP = urllib3.PoolManager(retries=False, timeout=30.0)


def rule_xml(endpoint: str, bucket: str, credential: str = "peer", *, prefix: str = "",
             markers: bool = True, existing: bool = False, versions: bool = False) -> str:
    on = {True: "Enabled", False: "Disabled"}
    return (
        "<ReplicationConfiguration><Role></Role><Rule><ID>to-peer</ID><Priority>1</Priority>"
        f"<Status>Enabled</Status><Filter><Prefix>{prefix}</Prefix></Filter>"
        f"<DeleteMarkerReplication><Status>{on[markers]}</Status></DeleteMarkerReplication>"
        f"<ExistingObjectReplication><Status>{on[existing]}</Status>"
        "</ExistingObjectReplication>"
        f"<DeleteReplication><Status>{on[versions]}</Status></DeleteReplication>"
        f"<Destination><Bucket>arn:aws:s3:::{bucket}</Bucket><Endpoint>{endpoint}</Endpoint>"
        f"<CredentialRef>{credential}</CredentialRef><Region>us-east-1</Region>"
        "</Destination></Rule></ReplicationConfiguration>")


def raw_put(s3: Any, bucket: str, xml: str) -> None:
    """PUT ?replication with our own XML (botocore's model has no Endpoint element),
    signed like any client's; a refusal raises ClientError as boto3 would."""
    endpoint = s3.meta.endpoint_url
    url = f"{endpoint}/{bucket}?replication="
    body = xml.encode()
    headers = {"content-md5": base64.b64encode(hashlib.md5(body).digest()).decode()}
    headers.update(sigv4.sign_headers("PUT", url, headers, hashlib.sha256(body).hexdigest(),
                                      ROOT_ACCESS_KEY, ROOT_SECRET_KEY, "us-east-1",
                                      datetime.datetime.now(datetime.UTC)))
    answer = _HTTP.request("PUT", url, body=body, headers=headers)
    if answer.status != 200:
        code = answer.data.split(b"<Code>")[1].split(b"</Code>")[0].decode()
        raise ClientError({"Error": {"Code": code, "Message": answer.data.decode()}},
                          "PutBucketReplication")


def wait_for(check: Callable[[], Any], what: str, deadline: float = DEADLINE) -> Any:
    end = time.monotonic() + deadline
    while True:
        try:
            found = check()
        except ClientError:
            found = None
        if found:
            return found
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def journal(node: Daemon, **query: str) -> dict[str, Any]:
    params = "&".join(f"{k}={v}" for k, v in query.items())
    return AdminClient(node.endpoint).ok("GET", f"/replication/journal?{params}")  # type: ignore[no-any-return]


def drained(node: Daemon) -> bool:
    return journal(node, status="PENDING")["total"] == 0


def make_node(path: Path, backend: str, attempts: int = 50, port: int | None = None
              ) -> Daemon:
    node = Daemon(path, backend=backend, extra_config=REPLICATION.format(attempts=attempts))
    if port is not None:
        node.port = port
    return node


def link(source: Daemon, target: Daemon, bucket: str, **rule: Any) -> None:
    """Credentials of `target` on `source` and a rule from source/bucket to target/bucket."""
    AdminClient(source.endpoint).ok("POST", "/replication/credentials/peer", {
        "access_key_id": ROOT_ACCESS_KEY, "secret_access_key": ROOT_SECRET_KEY})
    raw_put(make_client(source.endpoint), bucket, rule_xml(target.endpoint, bucket, **rule))


def versioned_bucket(*nodes: Daemon, name: str) -> None:
    for node in nodes:
        s3: Any = make_client(node.endpoint)
        s3.create_bucket(Bucket=name)
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})


@pytest.fixture(scope="module", params=BACKENDS)
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[Daemon, Daemon]]:
    with ExitStack() as stack:
        a = stack.enter_context(running_daemon(request, make_node(
            tmp_path_factory.mktemp("repl-a"), request.param)))
        b = stack.enter_context(running_daemon(request, make_node(
            tmp_path_factory.mktemp("repl-b"), "sqlite")))
        yield a, b


def test_configuration_errors_and_credentials_never_shown(pair: tuple[Daemon, Daemon]
                                                          ) -> None:
    a, b = pair
    s3: Any = make_client(a.endpoint)
    s3.create_bucket(Bucket="plain")
    with pytest.raises(ClientError) as raised:
        s3.get_bucket_replication(Bucket="plain")
    assert raised.value.response["Error"]["Code"] == "ReplicationConfigurationNotFoundError"
    with pytest.raises(ClientError) as raised:  # versioning must be Enabled
        link(a, b, "plain")
    assert raised.value.response["Error"]["Code"] == "InvalidRequest"
    s3.put_bucket_versioning(Bucket="plain", VersioningConfiguration={"Status": "Enabled"})
    with pytest.raises(ClientError) as raised:
        raw_put(s3, "plain", rule_xml(b.endpoint, "plain", credential="nobody"))
    assert raised.value.response["Error"]["Code"] == "InvalidArgument"
    with pytest.raises(ClientError) as raised:
        raw_put(s3, "plain", "<ReplicationConfiguration><Rule>")
    assert raised.value.response["Error"]["Code"] == "MalformedXML"
    admin = AdminClient(a.endpoint)
    for path, body in (("bad name", {"access_key_id": "x", "secret_access_key": "y"}),
                       ("ok", {"access_key_id": "x"}),
                       ("ok", {"access_key_id": "x", "secret_access_key": "y", "z": 1}),
                       ("ok", {"access_key_id": 1, "secret_access_key": "y"}),
                       ("ok", {"access_key_id": "x" * 5000, "secret_access_key": "y"})):
        assert admin.post(f"/replication/credentials/{path}", body).status == 400, body
    assert admin.call("POST", "/replication/credentials/ok", raw=b"[1,2").status == 400
    for query in ("status=NOPE", "limit=0", "limit=x", "cursor=abc", "cursor=-1"):
        assert admin.get(f"/replication/journal?{query}").status == 400, query
    assert admin.post("/replication/retry/abc").status == 400
    assert admin.post("/replication/existing/no-such-bucket").status == 404
    admin.ok("POST", "/replication/credentials/temp", {"access_key_id": "AK",
                                                       "secret_access_key": "TOPSECRET"})
    for path in ("/replication/credentials", "/settings/replication_credentials",
                 "/export"):
        assert b"TOPSECRET" not in admin.get(path).body, path
    admin.ok("DELETE", "/replication/credentials/temp", status=204)
    assert admin.delete("/replication/credentials/temp").status == 404
    assert admin.ok("GET", "/info")["replication_enabled"] is True



def test_a_replica_write_needs_replicate_object(pair: tuple[Daemon, Daemon]) -> None:
    once(pair)
    _, b = pair
    make_client(b.endpoint).create_bucket(Bucket="guarded")
    writer = Person(AdminClient(b.endpoint))
    writer.grant(allow(["s3:PutObject", "s3:GetObject"], ["*"]))
    s3: Any = writer.s3(b)

    def as_replica(request: Any, **_: Any) -> None:
        request.headers["x-amz-replication-status"] = "REPLICA"

    s3.put_object(Bucket="guarded", Key="plain", Body=b"x")
    s3.meta.events.register("before-sign.s3.PutObject", as_replica)
    with pytest.raises(ClientError) as raised:
        s3.put_object(Bucket="guarded", Key="claimed", Body=b"x")
    assert raised.value.response["Error"]["Code"] == "AccessDenied"
    writer.grant(allow(["s3:ReplicateObject"], ["*"]))
    s3.put_object(Bucket="guarded", Key="claimed", Body=b"x")
    assert s3.head_object(Bucket="guarded", Key="claimed")["ReplicationStatus"] == "REPLICA"
    assert "ReplicationStatus" not in s3.head_object(Bucket="guarded", Key="plain")


def test_two_way_replication_without_loops(pair: tuple[Daemon, Daemon]) -> None:
    a, b = pair
    versioned_bucket(a, b, name="both")
    link(a, b, "both")
    link(b, a, "both")
    got = make_client(a.endpoint).get_bucket_replication(Bucket="both")
    assert got["ReplicationConfiguration"]["Rules"][0]["ID"] == "to-peer"
    sa: Any = make_client(a.endpoint)
    sb: Any = make_client(b.endpoint)
    put = sa.put_object(Bucket="both", Key="from-a", Body=b"alpha", ContentType="text/x-a",
                        Metadata={"colour": "red"}, Tagging="t=1")
    assert sa.head_object(Bucket="both", Key="from-a")["ReplicationStatus"] in (
        "PENDING", "COMPLETED")
    sb.put_object(Bucket="both", Key="from-b", Body=b"beta")
    copy = wait_for(lambda: sb.head_object(Bucket="both", Key="from-a"), "from-a on B")
    assert copy["ReplicationStatus"] == "REPLICA"
    assert copy["ETag"] == put["ETag"] and copy["VersionId"] == put["VersionId"]
    assert (copy["ContentType"], copy["Metadata"]) == ("text/x-a", {"colour": "red"})
    assert sb.get_object_tagging(Bucket="both", Key="from-a")["TagSet"] == [
        {"Key": "t", "Value": "1"}]
    wait_for(lambda: sa.head_object(Bucket="both", Key="from-b"), "from-b on A")
    wait_for(lambda: sa.head_object(Bucket="both", Key="from-a")["ReplicationStatus"]
             == "COMPLETED", "COMPLETED on A")
    # Tags and a delete marker follow.
    sa.put_object_tagging(Bucket="both", Key="from-a",
                          Tagging={"TagSet": [{"Key": "t", "Value": "2"}]})
    wait_for(lambda: sb.get_object_tagging(Bucket="both", Key="from-a")["TagSet"] == [
        {"Key": "t", "Value": "2"}], "tags on B")
    sa.delete_object(Bucket="both", Key="from-a")
    wait_for(lambda: _deleted(sb, "both", "from-a"), "the delete marker on B")
    wait_for(lambda: drained(a) and drained(b), "both journals drained")
    time.sleep(0.5)  # a loop would show as more entries by now
    on_a = journal(a, bucket="both")["entries"]
    on_b = journal(b, bucket="both")["entries"]
    assert sorted(e["kind"] for e in on_a) == ["delete_marker", "put", "tags"]
    assert [e["kind"] for e in on_b] == ["put"]
    assert all(e["status"] == "COMPLETED" for e in on_a + on_b)


def _deleted(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as error:
        return error.response["Error"]["Code"] in ("404", "NoSuchKey")
    return False


def test_a_multipart_object_arrives_with_its_etag(pair: tuple[Daemon, Daemon]) -> None:
    once(pair)
    a, b = pair
    versioned_bucket(a, b, name="multi")
    link(a, b, "multi")
    sa: Any = make_client(a.endpoint)
    upload = sa.create_multipart_upload(Bucket="multi", Key="big", Metadata={"m": "1"})
    parts = []
    for number, body in ((1, b"a" * (5 * MIB)), (2, b"b" * 1000)):
        answer = sa.upload_part(Bucket="multi", Key="big", PartNumber=number,
                                UploadId=upload["UploadId"], Body=body)
        parts.append({"PartNumber": number, "ETag": answer["ETag"]})
    done = sa.complete_multipart_upload(Bucket="multi", Key="big", UploadId=upload["UploadId"],
                                        MultipartUpload={"Parts": parts})
    sb: Any = make_client(b.endpoint)
    copy = wait_for(lambda: sb.head_object(Bucket="multi", Key="big"), "big on B")
    assert copy["ETag"] == done["ETag"] and copy["ContentLength"] == 5 * MIB + 1000
    assert copy["VersionId"] == done["VersionId"] and copy["ReplicationStatus"] == "REPLICA"
    data = sb.get_object(Bucket="multi", Key="big")["Body"].read()
    assert hashlib.md5(data).hexdigest() == hashlib.md5(b"a" * (5 * MIB) + b"b" * 1000
                                                        ).hexdigest()


def test_an_outage_is_caught_up_in_order_with_deletes(pair: tuple[Daemon, Daemon]) -> None:
    a, b = pair
    versioned_bucket(a, b, name="outage")
    link(a, b, "outage")
    sa: Any = make_client(a.endpoint)
    b.stop()
    try:
        final: dict[str, str | None] = {}
        for n in range(30):
            key = f"k{n % 6}"
            if n % 5 == 4:
                sa.delete_object(Bucket="outage", Key=key)
                final[key] = None
            else:
                body = f"{key}-{n}".encode()
                sa.put_object(Bucket="outage", Key=key, Body=body)
                final[key] = hashlib.md5(body).hexdigest()
        time.sleep(0.5)  # attempts fail and back off meanwhile
        assert journal(a, bucket="outage", status="PENDING")["total"] > 0
    finally:
        b.start()
    wait_for(lambda: drained(a), "A's journal drained")
    sb: Any = make_client(b.endpoint)
    for key, etag in final.items():
        if etag is None:
            assert _deleted(sb, "outage", key), key
        else:
            assert sb.head_object(Bucket="outage", Key=key)["ETag"] == f'"{etag}"', key
    versions = sb.list_object_versions(Bucket="outage")
    assert len(versions.get("DeleteMarkers", [])) == sum(1 for n in range(30) if n % 5 == 4)
    assert len(versions["Versions"]) == sum(1 for n in range(30) if n % 5 != 4)


@pytest.fixture(scope="module")
def solo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[Daemon]:
    """A node of its own (SQLite) whose entries fail after 4 attempts, for the tests that
    kill it or give up."""
    with running_daemon(request, make_node(tmp_path_factory.mktemp("repl-solo"), "sqlite",
                                           attempts=4)) as node:
        yield node


def once(pair: tuple[Daemon, Daemon]) -> None:
    """Tests whose subject does not depend on the source's backend run in its first pass."""
    if pair[0].backend != BACKENDS[0]:
        pytest.skip("backend-independent: runs in the first backend's pass only")


def test_failed_only_after_the_last_attempt_then_retried(pair: tuple[Daemon, Daemon],
                                                         solo: Daemon) -> None:
    once(pair)
    dead = f"http://127.0.0.1:{free_port()}"
    node = solo
    versioned_bucket(node, name="nowhere")
    AdminClient(node.endpoint).ok("POST", "/replication/credentials/peer", {
        "access_key_id": "AK", "secret_access_key": "SK"})
    s3: Any = make_client(node.endpoint)
    raw_put(s3, "nowhere", rule_xml(dead, "nowhere"))
    s3.put_object(Bucket="nowhere", Key="k", Body=b"x")
    seen: set[tuple[str, int]] = set()

    def failed() -> bool:
        # The object first: its FAILED commits with the entry's, so an entry still
        # PENDING after it means the object was PENDING when read.
        status = s3.head_object(Bucket="nowhere", Key="k")["ReplicationStatus"]
        entries = journal(node, bucket="nowhere")["entries"]
        if not entries:
            return False  # not journaled yet
        entry = entries[0]
        seen.add((entry["status"], entry["attempts"]))
        if entry["status"] == "PENDING":
            assert status == "PENDING"
        return bool(entry["status"] == "FAILED")

    wait_for(failed, "FAILED")
    assert ("FAILED", 4) in seen and not any(s == "FAILED" and n < 4 for s, n in seen)
    wait_for(lambda: s3.head_object(Bucket="nowhere", Key="k")["ReplicationStatus"]
             == "FAILED", "the object FAILED")
    entry = journal(node, bucket="nowhere")["entries"][0]
    assert entry["last_error"]
    retried = AdminClient(node.endpoint).ok("POST", f"/replication/retry/{entry['id']}")
    assert (retried["status"], retried["attempts"]) == ("PENDING", 0)
    assert AdminClient(node.endpoint).post("/replication/retry/999999").status == 404


def test_a_sigkill_mid_burst_loses_nothing(pair: tuple[Daemon, Daemon], solo: Daemon
                                           ) -> None:
    once(pair)
    _, b = pair
    node = solo
    versioned_bucket(node, name="burst")
    make_client(b.endpoint).create_bucket(Bucket="burst-dest")
    AdminClient(node.endpoint).ok("POST", "/replication/credentials/peer", {
        "access_key_id": ROOT_ACCESS_KEY, "secret_access_key": ROOT_SECRET_KEY})
    raw_put(make_client(node.endpoint), "burst", rule_xml(b.endpoint, "burst-dest"))
    acknowledged: dict[str, str] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(worker: int) -> None:
        client: Any = make_client(node.endpoint)
        n = 0
        while not stop.is_set():
            key, body = f"w{worker}/k{n}", f"{worker}-{n}".encode()
            n += 1
            try:
                client.put_object(Bucket="burst", Key=key, Body=body)
            except Exception:  # noqa: BLE001 - the daemon is being killed under us
                return
            with lock:
                acknowledged[key] = hashlib.md5(body).hexdigest()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acknowledged) >= 40, "40 writes")
    node.kill_tree()
    stop.set()
    for thread in threads:
        thread.join()
    node.start()
    sb: Any = make_client(b.endpoint)
    for key, etag in sorted(acknowledged.items()):
        head = wait_for(lambda k=key: sb.head_object(Bucket="burst-dest", Key=k),
                        f"{key} on B")
        assert head["ETag"] == f'"{etag}"'


@pytest.fixture(scope="module")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server (moto[server]) as a foreign S3 endpoint."""
    port = free_port()
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("wb")
    process = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H",
                                "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(endpoint), "moto", deadline=30.0)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _answers(endpoint: str) -> bool:
    try:
        _HTTP.request("GET", endpoint + "/", timeout=1.0)
    except urllib3.exceptions.HTTPError:
        return False
    return True


def test_replication_to_moto_as_a_foreign_s3(pair: tuple[Daemon, Daemon],
                                             moto_endpoint: str) -> None:
    once(pair)
    a, _ = pair
    foreign: Any = make_client(moto_endpoint, access_key="moto", secret_key="moto")
    foreign.create_bucket(Bucket="foreign")
    foreign.put_bucket_versioning(Bucket="foreign",
                                  VersioningConfiguration={"Status": "Enabled"})
    versioned_bucket(a, name="to-moto")
    AdminClient(a.endpoint).ok("POST", "/replication/credentials/moto", {
        "access_key_id": "moto", "secret_access_key": "moto"})
    sa: Any = make_client(a.endpoint)
    raw_put(sa, "to-moto", rule_xml(moto_endpoint, "foreign", credential="moto"))
    put = sa.put_object(Bucket="to-moto", Key="dir/one", Body=b"x" * 5000,
                        ContentType="text/plain", Metadata={"k": "v"}, Tagging="a=b")
    # moto makes the key visible before its PUT has set the metadata and tags (a HEAD
    # racing the PUT saw the object without them): look once moto has answered the copy.
    wait_for(lambda: [e["status"] for e in journal(a, bucket="to-moto")["entries"]]
             == ["COMPLETED"], "moto's answer to the copy")
    head = foreign.head_object(Bucket="foreign", Key="dir/one")
    assert head["ETag"] == put["ETag"] and head["Metadata"] == {"k": "v"}
    assert head["ContentType"] == "text/plain"
    assert foreign.get_object_tagging(Bucket="foreign", Key="dir/one")["TagSet"] == [
        {"Key": "a", "Value": "b"}]
    sa.delete_object(Bucket="to-moto", Key="dir/one")
    wait_for(lambda: _deleted(foreign, "foreign", "dir/one"), "the delete marker on moto")
    wait_for(lambda: drained(a), "the journal drained")
    entries = journal(a, bucket="to-moto")["entries"]
    assert {e["status"] for e in entries} == {"COMPLETED"}


def test_existing_objects_through_the_cli(pair: tuple[Daemon, Daemon], tmp_path: Path
                                          ) -> None:
    once(pair)
    a, b = pair
    cli = Cli(a, tmp_path / "home")
    versioned_bucket(a, b, name="older")
    sa: Any = make_client(a.endpoint)
    for n in range(3):  # written before any rule
        sa.put_object(Bucket="older", Key=f"old{n}", Body=b"o" * n)
    cli.run("replication", "credential", "set", "peer", "--access-key-id", ROOT_ACCESS_KEY,
            stdin=ROOT_SECRET_KEY.encode() + b"\n")
    listed = cli.run("replication", "credential", "list").stdout
    assert "peer" in listed and ROOT_SECRET_KEY not in listed
    raw_put(sa, "older", rule_xml(b.endpoint, "older", existing=True))
    assert cli.json("replication", "existing", "older")["journaled"] == 3
    assert cli.json("replication", "existing", "older")["journaled"] == 0  # asked twice
    sb: Any = make_client(b.endpoint)
    for n in range(3):
        wait_for(lambda n=n: sb.head_object(Bucket="older", Key=f"old{n}"), f"old{n} on B")
    wait_for(lambda: drained(a), "the journal drained")
    shown = cli.run("replication", "journal", "--bucket", "older").stdout
    assert shown.splitlines()[0].split()[:3] == ["ID", "TIME", "KIND"]
    assert shown.count("COMPLETED") == 3
    page = cli.json("replication", "journal", "--bucket", "older", "--limit", "2")
    assert len(page["entries"]) == 2 and page["next_cursor"]
    rest = cli.json("replication", "journal", "--bucket", "older", "--cursor",
                    page["next_cursor"])
    assert len(rest["entries"]) == 1
    everywhere = cli.json("replication", "journal", "--bucket", "older", "--node", "all")
    assert len(everywhere["entries"]) == 3


def test_version_deletes_follow_when_the_rule_asks(pair: tuple[Daemon, Daemon]) -> None:
    once(pair)
    a, b = pair
    versioned_bucket(a, b, name="versions")
    link(a, b, "versions", versions=True)
    sa: Any = make_client(a.endpoint)
    sb: Any = make_client(b.endpoint)
    first = sa.put_object(Bucket="versions", Key="k", Body=b"one")["VersionId"]
    second = sa.put_object(Bucket="versions", Key="k", Body=b"two")["VersionId"]
    wait_for(lambda: len(sb.list_object_versions(Bucket="versions").get("Versions", []))
             == 2, "both versions on B")
    sa.delete_object(Bucket="versions", Key="k", VersionId=first)
    wait_for(lambda: [v["VersionId"] for v in sb.list_object_versions(
        Bucket="versions").get("Versions", [])] == [second], "the first version gone on B")
    wait_for(lambda: drained(a), "the journal drained")
    kinds = sorted(e["kind"] for e in journal(a, bucket="versions")["entries"])
    assert kinds == ["delete", "put", "put"]


def test_legal_hold_and_retention_set_later_follow_the_version(
        pair: tuple[Daemon, Daemon]) -> None:
    once(pair)
    a, b = pair
    for node in (a, b):  # object lock buckets are versioned
        make_client(node.endpoint).create_bucket(Bucket="locks",  # type: ignore[attr-defined]
                                                 ObjectLockEnabledForBucket=True)
    link(a, b, "locks")
    sa: Any = make_client(a.endpoint)
    sb: Any = make_client(b.endpoint)
    old = sa.put_object(Bucket="locks", Key="k", Body=b"old")["VersionId"]
    new = sa.put_object(Bucket="locks", Key="k", Body=b"new")["VersionId"]
    wait_for(lambda: len(sb.list_object_versions(Bucket="locks").get("Versions", [])) == 2,
             "both versions on B")
    sa.put_object_legal_hold(Bucket="locks", Key="k", VersionId=old,
                             LegalHold={"Status": "ON"})
    until = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(
        days=2)
    sa.put_object_retention(Bucket="locks", Key="k", VersionId=new,
                            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until})
    wait_for(lambda: sb.get_object_legal_hold(Bucket="locks", Key="k", VersionId=old)[
        "LegalHold"]["Status"] == "ON", "the hold on B")
    retention = wait_for(lambda: sb.get_object_retention(Bucket="locks", Key="k",
                                                         VersionId=new)["Retention"],
                         "the retention on B")
    assert (retention["Mode"], retention["RetainUntilDate"]) == ("GOVERNANCE", until)
    sa.put_object_legal_hold(Bucket="locks", Key="k", VersionId=old,
                             LegalHold={"Status": "OFF"})
    wait_for(lambda: sb.get_object_legal_hold(Bucket="locks", Key="k", VersionId=old)[
        "LegalHold"]["Status"] == "OFF", "the hold lifted on B")
    wait_for(lambda: drained(a), "the journal drained")
    kinds = sorted(e["kind"] for e in journal(a, bucket="locks")["entries"])
    assert kinds == ["lock", "lock", "lock", "put", "put"]
    assert sb.head_object(Bucket="locks", Key="k", VersionId=old)["ReplicationStatus"] == (
        "REPLICA")


def test_existing_objects_through_a_maintenance_job(pair: tuple[Daemon, Daemon]) -> None:
    once(pair)
    a, b = pair
    versioned_bucket(a, b, name="olderjob")
    sa: Any = make_client(a.endpoint)
    for n in range(3):  # written before any rule
        sa.put_object(Bucket="olderjob", Key=f"old{n}", Body=b"o" * n)
    link(a, b, "olderjob", existing=True)
    admin = AdminClient(a.endpoint)
    refused = admin.post("/maintenance/jobs", {"type": "replicate-existing", "params": {}})
    assert refused.status == 400
    created = admin.ok("POST", "/maintenance/jobs", {
        "type": "replicate-existing", "params": {"bucket": "olderjob"}}, status=201)
    job = wait_for(lambda: (lambda found: found if found["status"] == "completed" else None)(
        admin.ok("GET", f"/maintenance/jobs/{created['id']}")["job"]), "the job completed")
    assert (job["done"], job["total"]) == (3, 3)
    sb: Any = make_client(b.endpoint)
    for n in range(3):
        wait_for(lambda n=n: sb.head_object(Bucket="olderjob", Key=f"old{n}"), f"old{n} on B")
    make_client(a.endpoint).create_bucket(Bucket="norule")  # type: ignore[attr-defined]
    failed = admin.ok("POST", "/maintenance/jobs", {
        "type": "replicate-existing", "params": {"bucket": "norule"}}, status=201)
    ended = wait_for(lambda: (lambda found: found if found["status"] == "failed" else None)(
        admin.ok("GET", f"/maintenance/jobs/{failed['id']}")["job"]), "the job failed")
    assert "ReplicationConfigurationNotFoundError" in ended["last_error"] or (
        "replication configuration" in ended["last_error"]), ended


def test_a_legal_hold_reaches_a_foreign_s3_on_its_current_object(
        pair: tuple[Daemon, Daemon], moto_endpoint: str) -> None:
    """moto keeps its own version ids: the hold set on our latest version lands on moto's
    current object, its copy."""
    once(pair)
    a, _ = pair
    foreign: Any = make_client(moto_endpoint, access_key="moto", secret_key="moto")
    foreign.create_bucket(Bucket="foreign-locks", ObjectLockEnabledForBucket=True)
    make_client(a.endpoint).create_bucket(  # type: ignore[attr-defined]
        Bucket="locks-to-moto", ObjectLockEnabledForBucket=True)
    AdminClient(a.endpoint).ok("POST", "/replication/credentials/moto", {
        "access_key_id": "moto", "secret_access_key": "moto"})
    sa: Any = make_client(a.endpoint)
    raw_put(sa, "locks-to-moto", rule_xml(moto_endpoint, "foreign-locks", credential="moto"))
    version = sa.put_object(Bucket="locks-to-moto", Key="held", Body=b"x")["VersionId"]
    wait_for(lambda: foreign.head_object(Bucket="foreign-locks", Key="held"), "on moto")
    sa.put_object_legal_hold(Bucket="locks-to-moto", Key="held", VersionId=version,
                             LegalHold={"Status": "ON"})
    wait_for(lambda: foreign.get_object_legal_hold(Bucket="foreign-locks", Key="held")[
        "LegalHold"].get("Status") == "ON", "the hold on moto")
    wait_for(lambda: drained(a), "the journal drained")
    entries = journal(a, bucket="locks-to-moto")["entries"]
    assert sorted((e["kind"], e["status"]) for e in entries) == [
        ("lock", "COMPLETED"), ("put", "COMPLETED")]
    foreign.put_object_legal_hold(Bucket="foreign-locks", Key="held",
                                  LegalHold={"Status": "OFF"})  # moto's teardown may delete
