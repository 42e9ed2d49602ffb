"""The everyday S3 tools users bring, each driven against the real daemon: rclone, s3cmd,
s5cmd, restic and minio-py (boto3 and the aws CLI have their own test files). Keys with
spaces, `+`, `%`, unicode and trailing slashes must round-trip in every client."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import make_client
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

ODD_NAMES = ["plain.txt", "with space.txt", "plus+sign.txt", "per%cent.txt", "ünïcödé.txt",
             "nested/deeper/file.bin"]


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed: run scripts/install-test-clients")
    return found


def make_tree(root: Path) -> dict[str, bytes]:
    contents = {}
    for index, name in enumerate(ODD_NAMES):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = os.urandom(1000 + index * 7919)
        path.write_bytes(data)
        contents[name] = data
    return contents


def read_tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in root.rglob("*") if path.is_file()
    }


def run(args: list[str], env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


def bucket_keys(daemon: Daemon, bucket: str) -> set[str]:
    s3: Any = make_client(daemon.endpoint)
    return {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])}


def test_rclone(daemon: Daemon, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.update({
        "RCLONE_CONFIG": str(tmp_path / "rclone.conf"),
        "RCLONE_CONFIG_OBJ_TYPE": "s3",
        "RCLONE_CONFIG_OBJ_PROVIDER": "Other",
        "RCLONE_CONFIG_OBJ_ENDPOINT": daemon.endpoint,
        "RCLONE_CONFIG_OBJ_ACCESS_KEY_ID": ROOT_ACCESS_KEY,
        "RCLONE_CONFIG_OBJ_SECRET_ACCESS_KEY": ROOT_SECRET_KEY,
        "RCLONE_CONFIG_OBJ_REGION": "us-east-1",
        "RCLONE_CONFIG_OBJ_FORCE_PATH_STYLE": "true",
    })
    rclone = tool("rclone")
    bucket = f"rclone-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "src"
    contents = make_tree(source)
    run([rclone, "mkdir", f"obj:{bucket}"], env)
    run([rclone, "copy", str(source), f"obj:{bucket}/tree"], env)
    assert bucket_keys(daemon, bucket) == {f"tree/{name}" for name in ODD_NAMES}
    run([rclone, "check", str(source), f"obj:{bucket}/tree"], env)
    listed = run([rclone, "lsf", "-R", f"obj:{bucket}/tree"], env).stdout.split("\n")
    assert set(ODD_NAMES) <= set(listed)
    (source / "plain.txt").write_bytes(b"changed")
    (source / "with space.txt").unlink()
    run([rclone, "sync", str(source), f"obj:{bucket}/tree"], env)
    target = tmp_path / "back"
    run([rclone, "copy", f"obj:{bucket}/tree", str(target)], env)
    contents["plain.txt"] = b"changed"
    del contents["with space.txt"]
    assert read_tree(target) == contents
    run([rclone, "delete", f"obj:{bucket}"], env)
    assert bucket_keys(daemon, bucket) == set()


def test_s3cmd(daemon: Daemon, tmp_path: Path) -> None:
    host = daemon.endpoint.removeprefix("http://")
    config = tmp_path / "s3cfg"
    config.write_text(
        "[default]\n"
        f"access_key = {ROOT_ACCESS_KEY}\nsecret_key = {ROOT_SECRET_KEY}\n"
        f"host_base = {host}\nhost_bucket = {host}\n"
        "use_https = False\nsignature_v2 = False\nbucket_location = us-east-1\n"
    )
    s3cmd = [tool("s3cmd"), "-c", str(config)]
    bucket = f"s3cmd-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "src"
    contents = make_tree(source)
    run([*s3cmd, "mb", f"s3://{bucket}"])
    run([*s3cmd, "put", str(source / "with space.txt"), f"s3://{bucket}/single/with space.txt"])
    run([*s3cmd, "sync", f"{source}/", f"s3://{bucket}/tree/"])
    assert {f"tree/{n}" for n in ODD_NAMES} <= bucket_keys(daemon, bucket)
    listing = run([*s3cmd, "ls", "-r", f"s3://{bucket}"]).stdout
    assert "ünïcödé.txt" in listing and "per%cent.txt" in listing
    fetched = tmp_path / "fetched.txt"
    run([*s3cmd, "get", f"s3://{bucket}/tree/plus+sign.txt", str(fetched)])
    assert fetched.read_bytes() == contents["plus+sign.txt"]
    target = tmp_path / "back"
    target.mkdir()
    run([*s3cmd, "sync", f"s3://{bucket}/tree/", f"{target}/"])
    assert read_tree(target) == contents
    run([*s3cmd, "del", "--recursive", "--force", f"s3://{bucket}"])
    assert bucket_keys(daemon, bucket) == set()


def test_s5cmd(daemon: Daemon, aws_env: dict[str, str], tmp_path: Path) -> None:
    s5cmd = [tool("s5cmd"), "--endpoint-url", daemon.endpoint]
    bucket = f"s5cmd-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "src"
    contents = make_tree(source)
    run([*s5cmd, "mb", f"s3://{bucket}"], aws_env)
    run([*s5cmd, "cp", f"{source}/*", f"s3://{bucket}/tree/"], aws_env, cwd=tmp_path)
    assert bucket_keys(daemon, bucket) == {f"tree/{n}" for n in ODD_NAMES}
    listing = run([*s5cmd, "ls", f"s3://{bucket}/tree/*"], aws_env).stdout
    assert "with space.txt" in listing
    target = tmp_path / "back"
    run([*s5cmd, "cp", f"s3://{bucket}/tree/*", f"{target}/"], aws_env)
    assert read_tree(target) == contents
    run([*s5cmd, "rm", f"s3://{bucket}/tree/*"], aws_env)
    assert bucket_keys(daemon, bucket) == set()


def test_restic(daemon: Daemon, tmp_path: Path) -> None:
    bucket = f"restic-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    env.update({
        "AWS_ACCESS_KEY_ID": ROOT_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": ROOT_SECRET_KEY,
        "RESTIC_REPOSITORY": f"s3:{daemon.endpoint}/{bucket}",
        "RESTIC_PASSWORD": "correct horse battery staple",
        "RESTIC_CACHE_DIR": str(tmp_path / "cache"),
    })
    restic = tool("restic")
    source = tmp_path / "src"
    contents = make_tree(source)
    (source / "big.bin").write_bytes(os.urandom(6 * 1024 * 1024))
    contents["big.bin"] = (source / "big.bin").read_bytes()
    run([restic, "init"], env)
    run([restic, "backup", str(source)], env)
    run([restic, "check", "--read-data"], env)
    target = tmp_path / "restored"
    run([restic, "restore", "latest", "--target", str(target)], env)
    assert read_tree(target / source.relative_to("/")) == contents


def test_minio_py(daemon: Daemon, tmp_path: Path) -> None:
    minio = pytest.importorskip("minio")
    client = minio.Minio(daemon.endpoint.removeprefix("http://"), access_key=ROOT_ACCESS_KEY,
                         secret_key=ROOT_SECRET_KEY, secure=False, region="us-east-1")
    bucket = f"minio-{uuid.uuid4().hex[:8]}"
    client.make_bucket(bucket)
    assert client.bucket_exists(bucket)
    source = tmp_path / "src"
    contents = make_tree(source)
    for name in ODD_NAMES:
        client.fput_object(bucket, name, str(source / name))
    names = {o.object_name for o in client.list_objects(bucket, recursive=True)}
    assert names == set(ODD_NAMES)
    for name in ODD_NAMES:
        target = tmp_path / "back" / name
        client.fget_object(bucket, name, str(target))
        assert target.read_bytes() == contents[name]
    client.put_object(bucket, "dir/", data=__import__("io").BytesIO(b""), length=0)
    listed = client.list_objects(bucket, prefix="dir/", recursive=True)
    assert "dir/" in {o.object_name for o in listed}
    # spec: with a delimiter, the marker equal to the prefix is not listed
    assert "dir/" not in {o.object_name for o in client.list_objects(bucket, prefix="dir/")}
    for name in ODD_NAMES + ["dir/"]:
        client.remove_object(bucket, name)
    client.remove_bucket(bucket)
    assert not client.bucket_exists(bucket)
