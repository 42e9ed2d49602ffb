"""PostgreSQL stopped and started again under load (root and the local cluster only; the
server is shared with other test runs, so it is down for a few seconds at most and always
started again, ready, before the test ends).

While the database is down, every request that needs it answers 503 ServiceUnavailable
with Retry-After: 5 (S3 XML, admin JSON), never a 500, a dropped connection or a traceback;
once it is back, the same daemon serves again without a restart.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import Daemon

# serial: PostgreSQL goes down for every test running beside this one (tests/conftest.py).
pytestmark = [pytest.mark.postgres, pytest.mark.serial, pytest.mark.timeout(120)]

DOWN_AT_MOST_SECONDS = 5.0
READY_DEADLINE_SECONDS = 30.0


def postgres_cluster() -> tuple[str, str]:
    """(version, name) of the local cluster pg_ctlcluster manages."""
    if "postgres" not in BACKENDS:
        pytest.skip("PostgreSQL is not among OBJSTORE_TEST_BACKENDS")
    if os.geteuid() != 0 or shutil.which("pg_ctlcluster") is None:
        pytest.skip("stopping the local PostgreSQL needs root and pg_ctlcluster")
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") \
        else []
    if len(versions) != 1:
        pytest.skip(f"expected one PostgreSQL version in /etc/postgresql, found {versions}")
    return versions[0], "main"


def postgres_ready() -> bool:
    return subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"], check=False).returncode == 0


def pg_ctl(cluster: tuple[str, str], action: str) -> None:
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, action],
                   check=True, capture_output=True, timeout=60)


@contextmanager
def postgres_stopped(cluster: tuple[str, str]) -> Iterator[None]:
    """PostgreSQL down for the duration; started again, and ready, whatever happens."""
    pg_ctl(cluster, "stop")
    try:
        yield
    finally:
        pg_ctl(cluster, "start")
        deadline = time.monotonic() + READY_DEADLINE_SECONDS
        while not postgres_ready():
            assert time.monotonic() < deadline, "PostgreSQL did not come back"
            time.sleep(0.1)


class Load:
    """A client thread writing, reading and listing, and an admin read, in a loop; each
    answer is kept as an outcome: "ok", "503", or what else it was."""

    def __init__(self, endpoint: str) -> None:
        self.s3 = make_client(endpoint)
        self.admin = AdminClient(endpoint)
        self.outcomes: list[str] = []
        self.unexpected: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def count(self, outcome: str) -> int:
        return self.outcomes.count(outcome)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            self._round(f"k{n % 20}")

    def _round(self, key: str) -> None:
        # The read follows a write that succeeded: after a refused write (503) the key may
        # never have been written (the first lap of keys), and NoSuchKey would be right.
        if self._s3(lambda: self.s3.put_object(Bucket="load", Key=key, Body=b"x" * 4096)):
            self._s3(lambda: self.s3.get_object(Bucket="load", Key=key)["Body"].read())
        self._s3(lambda: self.s3.list_objects_v2(Bucket="load", MaxKeys=5))
        self._admin()

    def _s3(self, call: Any) -> bool:
        """Make the call and keep its outcome; True when it succeeded."""
        try:
            call()
        except ClientError as exc:
            response = exc.response
            headers = response["ResponseMetadata"]["HTTPHeaders"]
            if (response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"],
                    headers.get("retry-after")) == (503, "ServiceUnavailable", "5"):
                self.outcomes.append("503")
                return False
            self.unexpected.append(response)
        except BotoCoreError as exc:  # a dropped connection, a timeout
            self.unexpected.append(repr(exc))
        except Exception as exc:  # noqa: BLE001 - anything else is recorded too
            self.unexpected.append(repr(exc))
        else:
            self.outcomes.append("ok")
            return True
        return False

    def _admin(self) -> None:
        try:
            reply = self.admin.get("/users")
        except Exception as exc:  # noqa: BLE001
            self.unexpected.append(repr(exc))
            return
        if reply.status == 200:
            self.outcomes.append("ok")
        elif (reply.status, reply.error, reply.headers.get("Retry-After")) == (
                503, "ServiceUnavailable", "5"):
            self.outcomes.append("503")
        else:
            self.unexpected.append((reply.status, reply.body))


def writes(s3: Any) -> bool:
    try:
        s3.put_object(Bucket="load", Key="probe", Body=b"p")
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ServiceUnavailable", exc.response
        return False
    return True


def wait_for(check: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.05)


def test_requests_fail_cleanly_while_postgres_is_down(request: pytest.FixtureRequest,
                                                       tmp_path: Path) -> None:
    cluster = postgres_cluster()
    assert postgres_ready()
    node = Daemon(tmp_path / "node", backend="postgres")
    with running_daemon(request, node):
        make_client(node.endpoint).create_bucket(Bucket="load")
        with Load(node.endpoint) as load:
            wait_for(lambda: load.count("ok") >= 20, 20, "the load running")
            with postgres_stopped(cluster):
                started = time.monotonic()
                wait_for(lambda: load.count("503") >= 4 or
                         time.monotonic() - started > DOWN_AT_MOST_SECONDS,
                         DOWN_AT_MOST_SECONDS + 1, "503 answers while PostgreSQL is down")
            s3 = make_client(node.endpoint)
            wait_for(lambda: writes(s3), 30, "a write once PostgreSQL is back")
            back = load.count("ok")
            wait_for(lambda: load.count("ok") >= back + 20, 30,
                     "the load served again once PostgreSQL is back")
        assert load.unexpected == [], load.unexpected[:5]
        assert load.count("503") > 0, Counter(load.outcomes)
        node.assert_no_tracebacks()
    assert postgres_ready()
