"""The durable outbox across a crash, on a real daemon and each backend: with the
test-only file consumer (OBJSTORE_TEST_OUTBOX_FILE) every committed change a client was
told about (puts, overwrites, deletes) is delivered at least once, in commit order, even
when every process of the node is SIGKILLed in the middle of a burst of writes; and past
`[outbox] max_backlog` (a consumer that keeps failing) a client's PUT is refused with 503
SlowDown and Retry-After, and nothing of it is stored."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.conftest import BACKENDS, make_client
from tests.integration.daemon import Daemon

DEADLINE_SECONDS = 60.0


@pytest.fixture(params=BACKENDS)
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemon]:
    fresh = Daemon(tmp_path, backend=request.param,
                   extra_env={"OBJSTORE_TEST_OUTBOX_FILE": str(tmp_path / "events.jsonl")})
    fresh.start()
    yield fresh
    fresh.cleanup()


def delivered(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def test_every_acknowledged_change_is_delivered_across_a_sigkill(node: Daemon) -> None:
    events = node.workdir / "events.jsonl"
    s3: Any = make_client(node.endpoint, max_pool_connections=8)
    s3.create_bucket(Bucket="events")
    acknowledged: list[tuple[str, str, str]] = []  # (kind, key, etag)
    lock = threading.Lock()
    stop = threading.Event()

    def writer(worker: int) -> None:
        client: Any = make_client(node.endpoint)
        n, last = 0, ""
        while not stop.is_set():
            key = f"w{worker}/k{n % 5}"  # overwrites of the same keys
            body = f"{worker}-{n}".encode() * 100
            n += 1
            try:
                if n % 4 == 0:  # the key just written: a delete that removes a version
                    key = last
                    client.delete_object(Bucket="events", Key=key)
                    done = ("version_deleted", key, "")
                else:
                    client.put_object(Bucket="events", Key=key, Body=body)
                    done = ("object_written", key, hashlib.md5(body).hexdigest())
            except Exception:  # noqa: BLE001 - the daemon is being killed under us
                return
            last = key
            with lock:
                acknowledged.append(done)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + DEADLINE_SECONDS
    while len(acknowledged) < 60 and time.monotonic() < deadline:
        time.sleep(0.05)
    node.kill_tree()
    stop.set()
    for thread in threads:
        thread.join(60)
    assert len(acknowledged) >= 60
    node.start()
    s3 = make_client(node.endpoint)
    s3.put_object(Bucket="events", Key="after", Body=b"after")
    acknowledged.append(("object_written", "after", hashlib.md5(b"after").hexdigest()))

    def missing() -> list[tuple[str, str, str]]:
        got = delivered(events)
        seen = {(e["kind"], e["key"], e["etag"]) for e in got}
        seen_deletes = {(e["kind"], e["key"]) for e in got}
        return [a for a in acknowledged
                if (a not in seen if a[0] == "object_written" else a[:2] not in seen_deletes)]

    deadline = time.monotonic() + DEADLINE_SECONDS
    while missing() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert missing() == []
    seqs = [e["seq"] for e in delivered(events)]
    first_seen = list(dict.fromkeys(seqs))
    assert first_seen == sorted(first_seen)  # commit order; repeats only redeliver


def test_past_the_bound_a_put_is_refused_with_slowdown(tmp_path: Path) -> None:
    # The test-only consumer fails while its file's directory does not exist.
    node = Daemon(tmp_path, extra_config="[outbox]\nmax_backlog = 2\n",
                  extra_env={"OBJSTORE_TEST_OUTBOX_FILE": str(tmp_path / "no" / "e.jsonl")})
    node.start()
    try:
        s3: Any = make_client(node.endpoint)
        s3.create_bucket(Bucket="bounded")
        refused: ClientError | None = None
        deadline = time.monotonic() + DEADLINE_SECONDS
        n = 0
        while refused is None and time.monotonic() < deadline:
            try:
                s3.put_object(Bucket="bounded", Key=f"k{n}", Body=b"x")
                n += 1
            except ClientError as error:
                refused = error
            time.sleep(0.05)
        assert refused is not None
        response = refused.response
        assert response["Error"]["Code"] == "SlowDown"
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert "retry-after" in response["ResponseMetadata"]["HTTPHeaders"]
        assert n >= 2
        with pytest.raises(ClientError):
            s3.head_object(Bucket="bounded", Key=f"k{n}")
    finally:
        node.cleanup()
