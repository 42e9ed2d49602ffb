"""The container image, built from the Dockerfile and run: buildah builds it, then runs the
image's own ENTRYPOINT and CMD (the packaged config replaced by one on a free port) as the
image's user, and boto3 creates a bucket, PUTs and GETs an object through it.

Skipped without buildah (`apt-get install buildah`). Both steps use buildah's chroot
isolation and the host's network: in a sandbox without a usable OCI runtime (crun refused
to set the image's rlimits and cgroups here) that still runs the image's files, user and
command. The base image must be local or pullable; the test skips when it is neither (no
registry reachable: docs/PACKAGING.md says how the image was built here). When the host
trusts an extra CA (a TLS-intercepting proxy before PyPI), its CA bundle and /etc/pip.conf
are lent to the build. Building installs every dependency (minutes, cached afterwards):
marked `packaging`, like the Debian package's test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from tests.integration.daemon import free_port

REPO = Path(__file__).resolve().parents[2]
BUILDAH = shutil.which("buildah")
IMAGE = "localhost/objstore-test:latest"
ACCESS_KEY = "containeraccess"
SECRET_KEY = "container-secret-key-0123456789"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PIP_CONF = Path("/etc/pip.conf")

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(BUILDAH is None, reason="needs a container tool (buildah)"),
]


def buildah(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert BUILDAH is not None
    return subprocess.run([BUILDAH, *args], capture_output=True, text=True, timeout=timeout)


def base_image() -> str:
    (line,) = [line for line in (REPO / "Dockerfile").read_text().splitlines()
               if line.startswith("FROM ")][:1]
    return line.split()[1]


@pytest.fixture(scope="module")
def image() -> str:
    base = base_image()
    if buildah("inspect", "--type", "image", base).returncode != 0:
        pulled = buildah("pull", base, timeout=600)
        if pulled.returncode != 0:
            pytest.skip(f"the base image {base} is not here and cannot be pulled: "
                        f"{pulled.stderr.strip()[-300:]}")
    lent = [f"--volume={path}:{path}:ro" for path in (CA_BUNDLE, PIP_CONF) if path.exists()]
    built = buildah("bud", "--isolation", "chroot", "--network", "host", "--pull-never",
                    *lent, "--tag", IMAGE, str(REPO), timeout=1500)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return IMAGE


@pytest.fixture
def container(image: str) -> Iterator[str]:
    name = f"objstore-test-{uuid.uuid4().hex[:8]}"
    made = buildah("from", "--pull-never", "--name", name, image)
    assert made.returncode == 0, made.stderr
    try:
        yield name
    finally:
        buildah("rm", name)


def image_config(image: str) -> dict[str, object]:
    inspected = json.loads(buildah("inspect", "--type", "image", image).stdout)
    config: dict[str, object] = inspected["OCIv1"]["config"]
    return config


def test_image_layout_and_user(image: str, container: str) -> None:
    config = image_config(image)
    assert config["User"] == "objstore"
    def run(*command: str) -> str:
        done = buildah("run", "--isolation", "chroot", container, "--", *command)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()
    assert run("id", "-un") == "objstore"
    assert run("stat", "-c", "%U %a", "/var/lib/objstore") == "objstore 700"
    assert run("/usr/local/bin/objstore", "--version").startswith("objstore ")
    assert "port = 9000" in run("cat", "/etc/objstore/objstore.toml")


def test_the_image_serves_s3(image: str, container: str, tmp_path: Path) -> None:
    port = free_port()
    packaged = (REPO / "etc" / "objstore.toml").read_text()
    config = tmp_path / "objstore.toml"
    config.write_text(re.sub(r"(?m)^drain_timeout_seconds = .*$", "drain_timeout_seconds = 0.2",
                             re.sub(r"(?m)^port = 9000$", f"port = {port}", packaged)))
    settings = image_config(image)
    command = [*settings["Entrypoint"], *settings["Cmd"]]  # type: ignore[misc]
    assert command[-2:] == ["--config", "/etc/objstore/objstore.toml"]
    log = (tmp_path / "daemon.log").open("w")
    assert BUILDAH is not None
    daemon = subprocess.Popen(
        [BUILDAH, "run", "--isolation", "chroot", "--network", "host",
         f"--volume={config}:/etc/objstore/objstore.toml:ro",
         "--env", f"OBJSTORE_ROOT_ACCESS_KEY={ACCESS_KEY}",
         "--env", f"OBJSTORE_ROOT_SECRET_KEY={SECRET_KEY}", container, "--", *command],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}",
                          aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                          region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"},
                                        retries={"max_attempts": 1}))
        deadline = time.monotonic() + 120
        while True:
            try:
                s3.create_bucket(Bucket="from-the-image")
                break
            except Exception:  # noqa: BLE001 -- not listening yet
                assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()
                assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()
                time.sleep(0.2)
        body = os.urandom(3 * 1024 * 1024)
        s3.put_object(Bucket="from-the-image", Key="blob", Body=body)
        assert s3.get_object(Bucket="from-the-image", Key="blob")["Body"].read() == body
        text = (tmp_path / "daemon.log").read_text()
        assert "DeprecationWarning" not in text and "setuptools" not in text
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        log.close()
