"""Start-up failures, drain on SIGTERM, TLS, limits and virtual hosts: each with its own
daemon, since they need their own configuration."""

from __future__ import annotations

import datetime
import http.client
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import urllib3
from botocore.exceptions import ClientError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from objstore.http import sigv4
from tests.integration.conftest import make_client
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, TWISTD, Daemon


def start_failure(tmp_path: Path, config: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "objstore.toml"
    path.write_text(config)
    return subprocess.run(
        [TWISTD, "-n", "--pidfile=", "objstore", "--config", str(path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )


def assert_one_clear_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("objstore:")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_unknown_key_fails_with_one_line(tmp_path: Path) -> None:
    result = start_failure(tmp_path, "[server]\nprot = 9000\n")
    assert_one_clear_line(result, "[server] prot", "port")


def test_bad_value_fails_with_one_line(tmp_path: Path) -> None:
    result = start_failure(tmp_path, '[server]\nport = "abc"\n')
    assert_one_clear_line(result, "[server] port")


def test_cluster_with_the_sample_secret_is_refused(tmp_path: Path) -> None:
    """A cluster node needs a real secret: the sample's placeholder stops the start with
    one line that says how to make one."""
    result = start_failure(
        tmp_path, '[server]\nworkers = 2\n'
        '[cluster]\nenabled = true\nsecret = "change-me-to-a-long-random-secret"\n',
    )
    assert_one_clear_line(result, "[cluster] secret", "placeholder", "objstore keygen")


def test_missing_tls_file_is_refused(tmp_path: Path) -> None:
    result = start_failure(
        tmp_path, '[server.tls]\ncert_file = "/nonexistent/cert.pem"\nkey_file = "k.pem"\n'
    )
    assert_one_clear_line(result, "[server.tls] cert_file", "/nonexistent/cert.pem")


@pytest.mark.parametrize("workers", [1, 2])
def test_port_in_use_is_refused(tmp_path: Path, workers: int) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = start_failure(
            tmp_path,
            f'[server]\nhost = "127.0.0.1"\nport = {port}\nworkers = {workers}\n'
            f'[storage]\ndata_dir = "{tmp_path / "data"}"\n',
        )
    assert_one_clear_line(result, f"127.0.0.1:{port}", "in use")
    # A start that cannot serve changes nothing and shows no credential.
    assert not (tmp_path / "data").exists()
    assert "AWS_SECRET_ACCESS_KEY" not in result.stdout + result.stderr
    assert "endpoint" not in result.stdout


def test_sigint_drains_even_when_started_with_sigint_ignored(tmp_path: Path) -> None:
    """A shell starting a job in the background hands it SIGINT ignored; `kill -INT` must
    still stop the node as the man page says."""
    node = Daemon(tmp_path)
    node.write_config()
    with open(node.log_path, "ab") as log:
        node.process = subprocess.Popen(
            [TWISTD, "-n", "--pidfile=", "objstore", "--config", str(node.config_path)],
            cwd=tmp_path, env=node.env(), stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    try:
        node.wait_ready(30)
        node.process.send_signal(signal.SIGINT)
        assert node.process.wait(30) in (0, 1, -signal.SIGINT)
        node.process = None
        assert "draining" in node.log_path.read_text()
    finally:
        node.cleanup()


def test_restart_right_after_the_supervisor_is_killed(tmp_path: Path) -> None:
    """SIGKILL of the supervisor alone: its workers stop listening at once (a restart a
    second later binds the port, although they would drain for 30 s), and the next start
    removes the runtime directory the killed supervisor left behind."""
    node = Daemon(tmp_path, workers=2, drain_timeout_seconds=30)
    node.start()
    try:
        runtime_dirs = list(node.temp_dir.glob("objstore-run-*"))
        assert len(runtime_dirs) == 1
        old_workers = node.pids()[1:]
        assert node.process is not None
        node.process.kill()
        node.process.wait(10)
        node.process = None
        time.sleep(1.0)  # what an operator's restart would wait, at most
        node.start()
        assert len(list(node.temp_dir.glob("objstore-run-*"))) == 1
        assert not runtime_dirs[0].exists()
        http = urllib3.PoolManager(retries=False)
        assert http.request("GET", node.endpoint + "/admin/health").status == 200
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() for pid in old_workers):
            assert time.monotonic() < deadline, "the orphaned workers did not exit"
            time.sleep(0.1)
    finally:
        node.cleanup()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_drains_then_stops(tmp_path: Path, workers: int) -> None:
    node = Daemon(tmp_path, extra_config="", workers=workers)
    node.write_config()
    text = node.config_path.read_text().replace("drain_timeout_seconds = 0.2",
                                                "drain_timeout_seconds = 3")
    node.start()
    node.config_path.write_text(text)
    node.stop()  # restart with the longer drain
    node.start()
    try:
        http = urllib3.PoolManager(retries=False)
        assert http.request("GET", node.endpoint + "/admin/health").status == 200
        assert node.process is not None
        node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        seen = None
        while time.monotonic() < deadline:
            response = http.request("GET", node.endpoint + "/admin/health")
            if response.status == 503:
                seen = response
                break
            time.sleep(0.05)
        assert seen is not None, "health never answered 503 while draining"
        assert seen.json() == {"status": "draining"}
        assert seen.headers["Retry-After"] == "5"
        verbose = http.request("GET", node.endpoint + "/admin/health?verbose=1")
        assert verbose.status == 200
        # twistd re-raises the stopping signal after a clean shutdown (Twisted >= 20.3)
        assert node.process.wait(30) in (0, -signal.SIGTERM)
    finally:
        node.cleanup()


@pytest.mark.parametrize("workers", [1, 2])
def test_in_flight_upload_finishes_during_drain(tmp_path: Path, workers: int) -> None:
    """An upload whose body is still arriving when SIGTERM comes is completed and stored."""
    node = Daemon(tmp_path, workers=workers)
    node.start()
    try:
        s3 = make_client(node.endpoint)
        s3.create_bucket(Bucket="drain")  # type: ignore[attr-defined]
        url = f"{node.endpoint}/drain/slow"
        headers = sigv4.sign_headers(
            "PUT", url, {}, sigv4.UNSIGNED_PAYLOAD, ROOT_ACCESS_KEY, ROOT_SECRET_KEY,
            "us-east-1", datetime.datetime.now(datetime.UTC))
        half = b"h" * 500_000
        conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
        conn.putrequest("PUT", "/drain/slow", skip_host=True)
        for name, value in {**headers, "Content-Length": str(2 * len(half))}.items():
            conn.putheader(name, value)
        conn.endheaders()
        conn.send(half)
        time.sleep(0.2)
        assert node.process is not None
        node.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # longer than the drain: the listener is closed by now
        conn.send(half)
        response = conn.getresponse()
        assert response.status == 200, response.read()
        assert node.process.wait(30) in (0, -signal.SIGTERM)
        node.start()
        stored = make_client(node.endpoint).get_object(  # type: ignore[attr-defined]
            Bucket="drain", Key="slow")["Body"].read()
        assert stored == half + half
    finally:
        node.cleanup()


def make_certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.mark.parametrize("workers", [1, 2])
def test_tls_listener(tmp_path: Path, workers: int) -> None:
    cert, key = make_certificate(tmp_path)
    node = Daemon(tmp_path, workers=workers, extra_config=(
        f'[server.tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n'))
    node.endpoint_scheme = "https"  # type: ignore[attr-defined]
    node.write_config()
    with open(node.log_path, "ab") as log:
        node.process = subprocess.Popen(
            [TWISTD, "-n", "--pidfile=", "objstore", "--config", str(node.config_path)],
            cwd=tmp_path, env=node.env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        endpoint = f"https://localhost:{node.port}"
        http = urllib3.PoolManager(ca_certs=str(cert), retries=False)
        deadline = time.monotonic() + 30
        while True:
            try:
                if http.request("GET", endpoint + "/admin/health").status == 200:
                    break
            except urllib3.exceptions.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        s3 = make_client(endpoint)
        s3._endpoint.http_session._verify = str(cert)  # type: ignore[attr-defined]
        s3.create_bucket(Bucket="tls-bucket")  # type: ignore[attr-defined]
        s3.put_object(Bucket="tls-bucket", Key="k", Body=b"secure")  # type: ignore[attr-defined]
        body = s3.get_object(Bucket="tls-bucket", Key="k")["Body"].read()  # type: ignore[attr-defined]
        assert body == b"secure"
        with pytest.raises(urllib3.exceptions.HTTPError):
            urllib3.PoolManager(retries=False).request(
                "GET", f"http://localhost:{node.port}/admin/health")
    finally:
        node.cleanup()


def test_body_limit_and_request_limits(tmp_path: Path) -> None:
    node = Daemon(tmp_path, extra_config=(
        "[server.limits]\nmax_body_size = 1048576\nmax_header_count = 40\n"))
    node.start()
    try:
        s3 = make_client(node.endpoint)
        s3.create_bucket(Bucket="limits")  # type: ignore[attr-defined]
        s3.put_object(Bucket="limits", Key="ok", Body=b"x" * 1048576)  # type: ignore[attr-defined]
        with pytest.raises(ClientError) as caught:
            s3.put_object(Bucket="limits", Key="big",  # type: ignore[attr-defined]
                          Body=b"x" * (1048576 + 1))
        assert caught.value.response["Error"]["Code"] == "EntityTooLarge"
        with pytest.raises(ClientError):
            s3.head_object(Bucket="limits", Key="big")  # type: ignore[attr-defined]
        http = urllib3.PoolManager(retries=False)
        many = {f"x-filler-{i}": "1" for i in range(50)}
        response = http.request("GET", node.endpoint + "/limits", headers=many)
        assert response.status == 400 and b"RequestHeaderSectionTooLarge" in response.data
        response = http.request("GET", node.endpoint + "/limits/a%00b")
        assert response.status == 400 and b"InvalidArgument" in response.data
    finally:
        node.cleanup()


def test_virtual_hosted_style(tmp_path: Path) -> None:
    node = Daemon(tmp_path)
    node.start()
    node.stop()
    node.config_path.write_text(node.config_path.read_text().replace(
        "[storage]", '[storage]'))
    node.extra_config = ""
    text = node.config_path.read_text().replace(
        "[server]\n", '[server]\ndomains = ["s3.localtest"]\n')
    try:
        node.write_config()
        node.config_path.write_text(text)
        with open(node.log_path, "ab") as log:
            node.process = subprocess.Popen(
                [TWISTD, "-n", "--pidfile=", "objstore", "--config", str(node.config_path)],
                cwd=tmp_path, env=node.env(), stdout=log, stderr=subprocess.STDOUT)
        node.wait_ready(30)
        s3 = make_client(node.endpoint)
        bucket = f"vh-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
        s3.put_object(Bucket=bucket, Key="dir/file.txt", Body=b"hello")  # type: ignore[attr-defined]
        url = f"http://{bucket}.s3.localtest:{node.port}/dir/file.txt"
        headers = sigv4.sign_headers(
            "GET", url, {}, sigv4.UNSIGNED_PAYLOAD, ROOT_ACCESS_KEY, ROOT_SECRET_KEY,
            "us-east-1", datetime.datetime.now(datetime.UTC))
        pool = urllib3.HTTPConnectionPool("127.0.0.1", node.port, retries=False)
        response = pool.request("GET", "/dir/file.txt", headers=headers)
        assert response.status == 200, response.data
        assert response.data == b"hello"
    finally:
        node.cleanup()


@pytest.mark.parametrize("snippet", [
    '[logging]\nformat = "json"\n',
])
def test_settings_not_available_yet_are_refused(tmp_path: Path, snippet: str) -> None:
    assert_one_clear_line(start_failure(tmp_path, snippet), "not available")


@pytest.mark.parametrize("snippet, named", [
    ('[notifications.targets.hooks]\nkind = "webhook"\n', "[notifications.targets.hooks] url"),
    ('[notifications.targets.hooks]\nkind = "kafka"\n', "[notifications.targets.hooks] kind"),
    ('[notifications.targets.hooks]\nkind = "webhook"\nurl = "http://h/"\nsecret = 1\n',
     "secret"),
])
def test_a_notification_target_that_cannot_be_used_is_one_line(
        tmp_path: Path, snippet: str, named: str) -> None:
    assert_one_clear_line(start_failure(tmp_path, snippet), named)


def test_unreachable_postgres_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    result = start_failure(
        tmp_path,
        f'[server]\nworkers = 1\n[storage]\ndata_dir = "{tmp_path / "data"}"\n'
        f'metadata_backend = "postgres"\n'
        f'postgres_url = "postgresql://postgres@127.0.0.1:{port}/nothing"\n',
    )
    assert_one_clear_line(result, "metadata database (postgres)", str(port))
    assert [line for line in result.stderr.splitlines() if line.strip()] == \
        [line for line in result.stderr.splitlines() if line.startswith("objstore:")]
    assert "sqlalche.me" not in result.stderr


def test_missing_config_file_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [TWISTD, "-n", "--pidfile=", "objstore", "--config", str(tmp_path / "nope.toml")],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert_one_clear_line(result, "nope.toml")
    assert result.returncode == 2
