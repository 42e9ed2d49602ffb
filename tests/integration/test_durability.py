"""Crash safety, recovery from the data volume, and flat memory for large uploads."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import make_client
from tests.integration.daemon import Daemon, drop_database, objstore_cli

OBJSTORE = str(Path(sys.executable).with_name("objstore"))






def test_sigkill_during_concurrent_puts_loses_nothing_acknowledged(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint, max_pool_connections=16)
    s3.create_bucket(Bucket="crash")
    acknowledged: dict[str, str] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(worker: int) -> None:
        client: Any = make_client(node.endpoint)
        n = 0
        while not stop.is_set():
            size = (1024, 200_000, 2_000_000)[n % 3]
            body = os.urandom(size)
            key = f"w{worker}/obj-{n}"
            n += 1
            try:
                client.put_object(Bucket="crash", Key=key, Body=body)
            except Exception:  # noqa: BLE001 - the daemon is being killed under us
                return
            with lock:
                acknowledged[key] = hashlib.md5(body).hexdigest()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while len(acknowledged) < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    node.kill()
    stop.set()
    for thread in threads:
        thread.join(60)
    assert len(acknowledged) >= 40

    node.start()
    s3 = make_client(node.endpoint)
    for key, md5 in acknowledged.items():
        got = s3.get_object(Bucket="crash", Key=key)
        assert hashlib.md5(got["Body"].read()).hexdigest() == md5, key
    listed = [o for page in s3.get_paginator("list_objects_v2").paginate(Bucket="crash")
              for o in page.get("Contents", [])]
    assert {o["Key"] for o in listed} >= set(acknowledged)
    for item in listed:  # nothing partial is visible, acknowledged or not
        body = s3.get_object(Bucket="crash", Key=item["Key"])["Body"].read()
        assert len(body) == item["Size"]
        assert f'"{hashlib.md5(body).hexdigest()}"' == item["ETag"]
    node.stop()

    report = objstore_cli(node, "check", "--orphan-grace-seconds", "0")
    problems = [line for line in report.stdout.splitlines()
                if line and not line.startswith(("  ", "orphans", "problems", "ok"))]
    assert problems == [], report.stdout
    repaired = objstore_cli(node, "check", "--repair", "--orphan-grace-seconds", "0")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    final = objstore_cli(node, "check", "--orphan-grace-seconds", "0", "--deep")
    assert final.returncode == 0, final.stdout
    assert "ok: database and files agree" in final.stdout


def snapshot(s3: Any) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for bucket in s3.list_buckets()["Buckets"]:
        name = bucket["Name"]
        objects = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            for item in page.get("Contents", []):
                got = s3.get_object(Bucket=name, Key=item["Key"])
                objects[item["Key"]] = (
                    item["ETag"], item["Size"], got["ContentType"], got["Metadata"],
                    got["LastModified"], hashlib.md5(got["Body"].read()).hexdigest(),
                )
        state[name] = (bucket["CreationDate"], objects)
    return state




def test_recover_rebuilds_what_clients_see(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint)
    for bucket in ("alpha", "beta-2"):
        s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket="empty-one")
    admin = AdminClient(node.endpoint)
    admin.ok("PUT", "/buckets/beta-2/compression", {"algorithm": "zstd", "level": 2})
    s3.put_object(Bucket="beta-2", Key="compressed.log", Body=b"a log line\n" * 100_000)
    for i in range(30):
        s3.put_object(Bucket="alpha", Key=f"dir/{i:03d}.txt", Body=os.urandom(100 + i),
                      ContentType="text/plain", Metadata={"n": str(i)})
    s3.put_object(Bucket="alpha", Key="dir/", Body=b"")
    s3.put_object(Bucket="beta-2", Key="ünï code/file +1.bin", Body=os.urandom(600_000))
    s3.put_object(Bucket="alpha", Key="dir/005.txt", Body=b"overwritten")
    s3.delete_object(Bucket="alpha", Key="dir/006.txt")
    before = snapshot(s3)
    node.stop()

    drop_database(node)
    refused_live = objstore_cli(node, "recover")
    assert refused_live.returncode == 0, refused_live.stderr
    assert "recovered 3 buckets" in refused_live.stderr
    again = objstore_cli(node, "recover")
    assert again.returncode == 1 and "not empty" in again.stderr

    node.start()
    s3 = make_client(node.endpoint)
    assert snapshot(s3) == before
    assert AdminClient(node.endpoint).ok("GET", "/buckets/beta-2/compression")["level"] == 2
    with pytest.raises(ClientError):
        s3.head_object(Bucket="alpha", Key="dir/006.txt")


@pytest.mark.parametrize("node", ["sqlite"], indirect=True)
def test_two_gib_streamed_put_keeps_memory_flat(node: Daemon, tmp_path: Path) -> None:
    source = tmp_path / "sparse.bin"
    with open(source, "wb") as handle:
        handle.truncate(2 * 1024**3)
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="mem")
    with open(source, "rb") as body:
        s3.put_object(Bucket="mem", Key="big", Body=body)
    head = s3.head_object(Bucket="mem", Key="big")
    assert head["ContentLength"] == 2 * 1024**3
    peak = node.largest_peak_rss_bytes()  # the process that took the upload, at most
    print(f"daemon peak RSS after a 2 GiB PUT: {peak / 2**20:.1f} MiB")
    assert peak < 150 * 1024**2
    got = s3.get_object(Bucket="mem", Key="big", Range="bytes=2147483000-")
    assert got["Body"].read() == b"\0" * (2 * 1024**3 - 2147483000)




def test_concurrent_overwrites_of_one_key_leave_a_readable_object(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint, max_pool_connections=32)
    s3.create_bucket(Bucket="hot")
    bodies = [os.urandom(4096 + i) for i in range(32)]

    def put(body: bytes) -> None:
        make_client(node.endpoint).put_object(  # type: ignore[attr-defined]
            Bucket="hot", Key="same", Body=body)

    threads = [threading.Thread(target=put, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    got = s3.get_object(Bucket="hot", Key="same")
    data = got["Body"].read()
    assert data in bodies
    assert got["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    node.stop()
    report = objstore_cli(node, "check", "--deep")
    assert report.returncode == 0, report.stdout
