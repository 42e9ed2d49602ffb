"""A rewrite job reaches every node (docs/CLUSTER.md, "Maintenance jobs across nodes"): on
a real two-node cluster sharing one master key file, plain versions written through both
nodes (a tag changed through node-b) are encrypted by an `encrypt` job that only the
worker leader runs; its rewritten rows take a fresh seq and a stages stamp, so node-b
takes them at its next anti-entropy pass and fetches the new stored bytes from the leader
(ciphertext: it never sees the plaintext of the new form). Afterwards every node serves
every version byte-identical as SSE-S3 with its tags, both nodes hold the same stored
bytes, and no file in either node's data or temp directory holds the plaintext marker.
A client overwrite made after the job on node-b wins on both nodes.

Then key rotation across the cluster: a new master key version is added to the shared
file (both nodes restarted on it), a `rotate-key` job re-wraps on the leader the data
keys of SSE-S3 versions and a multipart object's part keys written through node-b; the
re-wrapped rows reach node-b, and after the old version is removed from the file and both
nodes restart, both still read every object."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from objstore.crypto.master_key import load_or_create
from tests.cluster.harness import Node, all_trusted, start_cluster, wait_for
from tests.integration.daemon import objstore_cli

pytestmark = pytest.mark.timeout(150)

NAMES = ("a", "b")
BUCKET = "rewritten"
JOBS = "/maintenance/jobs"
P = 64 * 1024
MARKER = b"CLUSTER-REWRITE-PLAINTEXT-MARKER-4c1d"


def _body(size: int) -> bytes:
    chunk = MARKER + os.urandom(1024 - len(MARKER))
    return (chunk * (size // len(chunk) + 1))[:size]


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shared-key") / "master.key"
    load_or_create(str(path))
    return path


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          key_file: Path) -> Iterator[dict[str, Node]]:
    encryption = f'[encryption]\nenabled = true\nmaster_key_file = "{key_file}"\n'
    overrides = {name: {"anti_entropy_interval_seconds": "0.5"} for name in NAMES}
    with start_cluster(request, tmp_path_factory, NAMES, cluster_overrides=overrides,
                       extra_config={name: encryption for name in NAMES}) as started:
        for name in NAMES:
            wait_for(f"node {name} trusts its peer",
                     lambda name=name: all_trusted(started[name], 1), deadline=30)
        yield started


def _reads(node: Node, key: str, version_id: str, body: bytes, sse: str | None) -> bool:
    try:
        got = node.s3.get_object(Bucket=BUCKET, Key=key, VersionId=version_id)
    except ClientError:
        return False
    return bool(got["Body"].read() == body and got.get("ServerSideEncryption") == sse)


def _stored(node: Node) -> dict[tuple[str, str], bytes]:
    """(key, version id) -> the stored bytes of each object version on `node`'s disk."""
    found = {}
    for path in (node.daemon.data_dir / "blobs").glob("*/*/*.meta.json"):
        document = json.loads(path.read_text())
        if document.get("bucket") == BUCKET and document.get("kind") == "object":
            blob = path.with_name(path.name[:-len(".meta.json")])
            found[(document["key"], document["version_id"])] = blob.read_bytes()
    return found


def _plaintext_files(node: Node) -> list[Path]:
    return [path for root in (node.daemon.data_dir, node.daemon.temp_dir)
            for path in Path(root).rglob("*")
            if path.is_file() and MARKER in path.read_bytes()]


def test_an_encrypt_job_reaches_every_node(nodes: dict[str, Node]) -> None:
    a, b = nodes["a"], nodes["b"]
    a.s3.create_bucket(Bucket=BUCKET)
    wait_for("the bucket on node-b", lambda: BUCKET in {
        entry["Name"] for entry in b.s3.list_buckets()["Buckets"]})
    b.s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    wait_for("versioning on node-a", lambda: a.s3.get_bucket_versioning(
        Bucket=BUCKET).get("Status") == "Enabled")
    written: dict[tuple[str, str], bytes] = {}
    for index, (node, key, size) in enumerate(((a, "k1", 2 * P + 7), (b, "k1", P - 1),
                                               (b, "k2", 3 * P), (a, "k3", 100))):
        body = _body(size + index)
        put = node.s3.put_object(Bucket=BUCKET, Key=key, Body=body)
        written[(key, put["VersionId"])] = body
    tagged = next(version for key, version in written if key == "k2")
    b.s3.put_object_tagging(Bucket=BUCKET, Key="k2", VersionId=tagged,
                            Tagging={"TagSet": [{"Key": "kept", "Value": "yes"}]})
    for node in (a, b):
        for (key, version), body in written.items():
            wait_for(f"{key} {version} plain on {node.node_id}", lambda node=node, key=key,
                     version=version, body=body: _reads(node, key, version, body, None))
    wait_for("node-a has the tag", lambda: a.s3.get_object_tagging(
        Bucket=BUCKET, Key="k2", VersionId=tagged)["TagSet"] == [
            {"Key": "kept", "Value": "yes"}])

    created = b.admin.post(JOBS, {"type": "encrypt", "params": {"bucket": BUCKET}})
    assert created.status == 201, created.body
    job_id = created.json["id"]

    def completed() -> bool:
        reply = a.admin.get(f"{JOBS}/{job_id}")
        return reply.status == 200 and reply.json["job"]["status"] == "completed"
    wait_for("the encrypt job completes on the leader", completed, deadline=40)

    for node in (a, b):
        for (key, version), body in written.items():
            wait_for(f"{key} {version} encrypted on {node.node_id}",
                     lambda node=node, key=key, version=version, body=body:
                     _reads(node, key, version, body, "AES256"))
        tags = node.s3.get_object_tagging(Bucket=BUCKET, Key="k2", VersionId=tagged)
        assert tags["TagSet"] == [{"Key": "kept", "Value": "yes"}], node.node_id
    wait_for("both nodes hold the same stored bytes", lambda: _stored(a) == _stored(b)
             and set(_stored(a)) == set(written))
    for node in (a, b):
        wait_for(f"no plaintext on {node.node_id}'s disk",
                 lambda node=node: _plaintext_files(node) == [])

    # A client's overwrite after the job wins everywhere (a newer last_modified).
    after = b.s3.put_object(Bucket=BUCKET, Key="k3", Body=b"newer")
    wait_for("the overwrite on node-a", lambda: _reads(a, "k3", after["VersionId"],
                                                      b"newer", None))
    latest = a.s3.list_object_versions(Bucket=BUCKET, Prefix="k3")["Versions"]
    assert [v["VersionId"] for v in latest if v["IsLatest"]] == [after["VersionId"]]


def _restart(nodes: dict[str, Node], between: Any = None) -> None:
    """Stop every node, run `between()`, start them all again, trusting each other."""
    for node in nodes.values():
        node.daemon.terminate()
    for node in nodes.values():
        node.daemon.stop()
    if between is not None:
        between()
    for node in nodes.values():
        node.daemon.launch()
    for node in nodes.values():
        node.daemon.wait_ready(60)
    for name, node in nodes.items():
        wait_for(f"node {name} trusts its peer", lambda node=node: all_trusted(node, 1),
                 deadline=30)


def _key_ids(node: Node) -> set[str]:
    found = set()
    for path in (node.daemon.data_dir / "blobs").glob("*/*/*.meta.json"):
        document = json.loads(path.read_text())
        if document.get("kind") == "object" and document.get("encryption_key_id"):
            found.add(document["encryption_key_id"])
    return found


def _stored_here(write: Any) -> None:
    """Run a write; a 503 for too few acknowledgements within the peers' request timeout
    (a loaded machine) still stored it on this node, and it reaches the others by the
    fan-out's retries and anti-entropy, which the tests wait for: the quorum itself is
    tests/cluster/test_quorum.py's subject."""
    try:
        write()
    except ClientError as error:
        if error.response["Error"]["Code"] != "ServiceUnavailable":
            raise


def test_rotate_key_reaches_every_node(nodes: dict[str, Node], key_file: Path) -> None:
    a, b = nodes["a"], nodes["b"]
    bucket = "rotated"
    b.s3.create_bucket(Bucket=bucket)
    written: dict[str, bytes] = {"single": os.urandom(P + 3)}
    _stored_here(lambda: b.s3.put_object(Bucket=bucket, Key="single",
                                         Body=written["single"],
                                         ServerSideEncryption="AES256"))
    parts = [os.urandom(5 * 1024 * 1024), os.urandom(100)]
    upload = b.s3.create_multipart_upload(Bucket=bucket, Key="multi",
                                          ServerSideEncryption="AES256")["UploadId"]
    etags = [b.s3.upload_part(Bucket=bucket, Key="multi", UploadId=upload, PartNumber=n,
                              Body=body)["ETag"] for n, body in enumerate(parts, 1)]
    _stored_here(lambda: b.s3.complete_multipart_upload(
        Bucket=bucket, Key="multi", UploadId=upload, MultipartUpload={"Parts": [
            {"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]}))
    written["multi"] = b"".join(parts)

    def reads_all(node: Node) -> bool:
        try:
            return all(node.s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
                       for key, body in written.items())
        except ClientError:
            return False
    wait_for("node-a reads both", lambda: reads_all(a))
    (old_id,) = _key_ids(a)

    def rotate() -> None:
        rotated = objstore_cli(a.daemon, "key", "rotate")
        assert rotated.returncode == 0, rotated.stderr
    _restart(nodes, rotate)
    created = b.admin.post(JOBS, {"type": "rotate-key"})
    assert created.status == 201, created.body

    def completed() -> bool:
        reply = a.admin.get(f"{JOBS}/{created.json['id']}")
        return reply.status == 200 and reply.json["job"]["status"] == "completed"
    wait_for("the rotate-key job completes on the leader", completed, deadline=40)
    for node in (a, b):
        wait_for(f"{node.node_id}'s rows re-wrapped", lambda node=node: len(
            _key_ids(node)) == 1 and _key_ids(node) != {old_id})

    def drop_the_old_version() -> None:  # only the new version is left
        key_file.write_text(key_file.read_text().splitlines()[-1] + "\n")
    _restart(nodes, drop_the_old_version)
    for node in (a, b):
        assert reads_all(node), node.node_id
