"""The `aws` CLI against the daemon: the acceptance scenario of the foundation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.integration.daemon import Daemon

AWS = str(Path(sys.executable).with_name("aws"))


def aws(env: dict[str, str], endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AWS, "--endpoint-url", endpoint, *args], env=env, text=True,
                          capture_output=True, timeout=300)


def test_s3api_100_mib_round_trip(daemon: Daemon, aws_env: dict[str, str],
                                  tmp_path: Path) -> None:
    bucket = f"cli-{uuid.uuid4().hex[:10]}"
    source = tmp_path / "big.bin"
    with open(source, "wb") as handle:
        for _ in range(100):
            handle.write(os.urandom(1024 * 1024))
    made = aws(aws_env, daemon.endpoint, "s3api", "create-bucket", "--bucket", bucket)
    assert made.returncode == 0, made.stderr
    put = aws(aws_env, daemon.endpoint, "s3api", "put-object", "--bucket", bucket,
              "--key", "big.bin", "--body", str(source))
    assert put.returncode == 0, put.stderr
    copy = tmp_path / "copy.bin"
    got = aws(aws_env, daemon.endpoint, "s3api", "get-object", "--bucket", bucket,
              "--key", "big.bin", str(copy))
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["ContentLength"] == 100 * 1024 * 1024
    assert copy.read_bytes() == source.read_bytes()
    part = tmp_path / "part.bin"
    ranged = aws(aws_env, daemon.endpoint, "s3api", "get-object", "--bucket", bucket,
                 "--key", "big.bin", "--range", "bytes=1048576-2097151", str(part))
    assert ranged.returncode == 0, ranged.stderr
    with open(source, "rb") as handle:
        handle.seek(1048576)
        assert part.read_bytes() == handle.read(1048576)
    listed = aws(aws_env, daemon.endpoint, "s3", "ls", f"s3://{bucket}")
    assert "big.bin" in listed.stdout and str(100 * 1024 * 1024) in listed.stdout
    removed = aws(aws_env, daemon.endpoint, "s3", "rm", f"s3://{bucket}/big.bin")
    assert removed.returncode == 0, removed.stderr
    gone = aws(aws_env, daemon.endpoint, "s3", "rb", f"s3://{bucket}")
    assert gone.returncode == 0, gone.stderr


def test_s3_sync_and_recursive_rm(daemon: Daemon, aws_env: dict[str, str],
                                  tmp_path: Path) -> None:
    bucket = f"sync-{uuid.uuid4().hex[:10]}"
    config = tmp_path / "aws-config"
    config.write_text("[default]\ns3 =\n    multipart_threshold = 8MB\n"
                      "    multipart_chunksize = 8MB\n")
    env = {**aws_env, "AWS_CONFIG_FILE": str(config)}
    source = tmp_path / "tree"
    files = {"a.txt": os.urandom(1000), "sub dir/b+c.bin": os.urandom(20 * 1024 * 1024),
             "ünï/ç.txt": b"unicode"}
    for name, data in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(data)
    assert aws(env, daemon.endpoint, "s3", "mb", f"s3://{bucket}").returncode == 0
    synced = aws(env, daemon.endpoint, "s3", "sync", str(source), f"s3://{bucket}/t")
    assert synced.returncode == 0, synced.stderr
    again = aws(env, daemon.endpoint, "s3", "sync", str(source), f"s3://{bucket}/t")
    assert again.returncode == 0 and "upload:" not in again.stdout  # nothing changed
    back = tmp_path / "back"
    down = aws(env, daemon.endpoint, "s3", "sync", f"s3://{bucket}/t", str(back))
    assert down.returncode == 0, down.stderr
    for name, data in files.items():
        assert (back / name).read_bytes() == data
    removed = aws(env, daemon.endpoint, "s3", "rm", "--recursive", f"s3://{bucket}/t")
    assert removed.returncode == 0, removed.stderr
    listed = aws(env, daemon.endpoint, "s3", "ls", "--recursive", f"s3://{bucket}")
    assert listed.stdout.strip() == ""
