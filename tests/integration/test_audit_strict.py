"""[audit] strict against the real daemon: with it on, every request a client got an
answer to is in the audit log after a SIGKILL that follows the answers at once (S3 PUTs,
GETs and errors, admin calls, concurrently; SQLite and PostgreSQL); when the database
refuses the record, the answer is a 503 (S3 XML, admin JSON), never the real one, and the
503 is recorded once the database takes records again. With it off (the default), answers
never wait for the audit log: the same refusing database leaves them as they were."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from botocore.exceptions import ClientError

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client
from tests.integration.daemon import Daemon
from tests.integration.probes import database
from tests.integration.test_audit import query, wait_for

STRICT = "\n[audit]\nstrict = true\n"
ANSWERED = 80  # answers collected before the kill
LARGE = 300_000


@pytest.fixture(params=BACKENDS)
def strict_node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemon]:
    node = Daemon(tmp_path, backend=request.param, extra_config=STRICT)
    node.start()
    yield node
    node.cleanup()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def request_id_of(call: Any) -> tuple[str, int]:
    """(request id, status) of a boto3 call, answered with success or an S3 error."""
    try:
        metadata = call()["ResponseMetadata"]
    except ClientError as error:
        metadata = error.response["ResponseMetadata"]
    return metadata["RequestId"], metadata["HTTPStatusCode"]


def test_strict_every_answered_request_survives_sigkill(strict_node: Daemon) -> None:
    node = strict_node
    bucket = unique("strict")
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="seed", Body=b"s" * 5000)
    s3.put_object(Bucket=bucket, Key="large", Body=b"L" * LARGE)  # streamed (sendfile)
    answered: dict[str, int] = {}  # request id -> status the client saw
    lock = threading.Lock()
    stop = threading.Event()

    def client(worker: int) -> None:
        c: Any = make_client(node.endpoint)
        forged: Any = make_client(node.endpoint, secret_key="not-the-secret")
        admin = AdminClient(node.endpoint)
        n = 0
        while not stop.is_set():
            n += 1
            new, missing = f"w{worker}/{n}", f"missing-{n}"
            calls = (
                lambda: c.put_object(Bucket=bucket, Key=new, Body=b"x" * 3000),  # noqa: B023
                lambda: c.get_object(Bucket=bucket, Key="seed"),
                lambda: c.get_object(Bucket=bucket, Key=missing),  # noqa: B023 (404)
                # Refused from its headers, its body unread (answered early): 403.
                lambda: forged.put_object(Bucket=bucket, Key="forged", Body=b"f" * 1000),
            )
            try:
                if worker == 0 and n % 4 == 0:
                    reply = admin.call("GET", "/users")
                    found = (reply.headers["x-amz-request-id"], reply.status)
                elif n % 5 == 3:
                    response = c.get_object(Bucket=bucket, Key="large")
                    whole = len(response["Body"].read()) == LARGE  # else no status matches
                    found = (response["ResponseMetadata"]["RequestId"], 200 if whole else -1)
                else:
                    found = request_id_of(calls[min(n % 5, 3)])
            except Exception:  # noqa: BLE001 - the daemon is being killed under us
                return
            with lock:
                answered[found[0]] = found[1]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while len(answered) < ANSWERED and time.monotonic() < deadline:
        time.sleep(0.01)
    node.kill_tree()  # SIGKILL of every process at once: nothing is flushed
    stop.set()
    for thread in threads:
        thread.join(60)
    assert len(answered) >= ANSWERED
    assert {200, 403, 404} <= set(answered.values())

    node.start()
    admin = AdminClient(node.endpoint)
    recorded: dict[str, dict[str, Any]] = {}
    page = query(admin, limit=1000)
    recorded = {entry["request_id"]: entry for entry in page["entries"]}
    missing = set(answered) - set(recorded)
    assert not missing, f"{len(missing)} of {len(answered)} answered requests not recorded"
    for request_id, status in answered.items():
        assert recorded[request_id]["status"] == status
    gets = [e for e in recorded.values()
            if e["operation"] == "GetObject" and e["status"] == 200 and e["key"] == "seed"]
    assert gets and all(e["bytes_out"] == 5000 for e in gets)
    large = [e for e in recorded.values() if e["key"] == "large" and e["status"] == 200
             and e["operation"] == "GetObject"]
    assert large and all(e["bytes_out"] == LARGE for e in large)
    assert 403 in {e["status"] for e in recorded.values() if e["key"] == "forged"}
    missing_keys = [e for e in recorded.values() if e["status"] == 404]
    assert missing_keys and all(e["error_code"] == "NoSuchKey" for e in missing_keys)


# -- a database that refuses audit records -----------------------------------------------

_SQLITE_REFUSE = ("CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log "
                  "BEGIN SELECT RAISE(ABORT, 'audit records refused by the test'); END")
_PG_FUNCTION = ("CREATE FUNCTION refuse_audit() RETURNS trigger AS $$ BEGIN "
                "RAISE EXCEPTION 'audit records refused by the test'; END $$ LANGUAGE plpgsql")
_PG_REFUSE = ("CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log "
              "FOR EACH ROW EXECUTE FUNCTION refuse_audit()")


@contextlib.contextmanager
def audit_refused(node: Daemon) -> Iterator[None]:
    """Every INSERT into the node's audit_log fails (a trigger), object writes do not."""
    with database(node) as engine:
        with engine.begin() as conn:
            if node.backend == "postgres":
                conn.execute(sa.text(_PG_FUNCTION))
                conn.execute(sa.text(_PG_REFUSE))
            else:
                conn.execute(sa.text(_SQLITE_REFUSE))
        try:
            yield
        finally:
            with engine.begin() as conn:
                suffix = " ON audit_log" if node.backend == "postgres" else ""
                conn.execute(sa.text("DROP TRIGGER refuse_audit" + suffix))


def test_strict_answers_503_when_the_record_can_not_be_written(strict_node: Daemon) -> None:
    node = strict_node
    bucket = unique("refused")
    s3: Any = make_client(node.endpoint)
    admin = AdminClient(node.endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="there", Body=b"t" * 100)
    with audit_refused(node):
        with pytest.raises(ClientError) as got:
            s3.get_object(Bucket=bucket, Key="there")
        refused_get = got.value.response
        with pytest.raises(ClientError) as put:
            s3.put_object(Bucket=bucket, Key="new", Body=b"n" * 10)
        refused_put = put.value.response
        reply = admin.call("GET", "/users")
    for response in (refused_get, refused_put):
        assert response["Error"]["Code"] == "ServiceUnavailable"
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert response["ResponseMetadata"]["HTTPHeaders"]["retry-after"]
    assert reply.status == 503 and reply.error == "ServiceUnavailable"
    # The PUT took effect although it was answered 503 (as documented).
    assert s3.get_object(Bucket=bucket, Key="new")["Body"].read() == b"n" * 10
    # The 503s are recorded once the database takes records again (queued, retried).
    ids = {refused_get["ResponseMetadata"]["RequestId"]: 200,
           refused_put["ResponseMetadata"]["RequestId"]: 200,
           reply.headers["x-amz-request-id"]: 200}
    entries = wait_for(admin, lambda found: set(ids) <= {e["request_id"] for e in found})
    for entry in entries:
        if entry["request_id"] in ids:
            assert entry["status"] == 503 and entry["error_code"] == "ServiceUnavailable"
            assert entry["details"]["withheld_status"] == ids[entry["request_id"]]


@pytest.mark.parametrize("node", ["sqlite"], indirect=True)
def test_not_strict_answers_never_wait_for_the_audit_log(node: Daemon) -> None:
    bucket = unique("relaxed")
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket=bucket)
    with audit_refused(node):
        s3.put_object(Bucket=bucket, Key="k", Body=b"v" * 10)
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v" * 10
        assert AdminClient(node.endpoint).call("GET", "/users").status == 200
