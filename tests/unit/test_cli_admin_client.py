"""The admin API client of the CLI without sockets: connection settings (flags, environment,
profile file), SigV4 signatures the server's verifier accepts, error mapping and streaming
downloads over a fake http.client connection."""

from __future__ import annotations

import datetime
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from objstore.cli import admin_client
from objstore.cli.admin_client import (
    AdminApiError,
    AdminClient,
    ConnectionProblem,
    ConnectionSettings,
    UsageProblem,
    base_url,
    resolve_settings,
)
from objstore.http import sigv4

SECRET = "secret-key-0123456789"
SETTINGS = ConnectionSettings("http://127.0.0.1:9000", "AKTEST", SECRET)


# -- settings ------------------------------------------------------------------------------


def write_profile(home: Path, text: str, mode: int = 0o600) -> Path:
    path = home / ".config" / "objstore" / "profile.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


PROFILE = """
[profile.default]
endpoint = "http://profile:9000"
access_key = "AKPROFILE"
secret_key = "profile-secret"
[profile.eu]
endpoint = "https://eu.example:9443/"
access_key = "AKEU"
secret_key = "eu-secret"
region = "eu-west-1"
"""


def test_flags_beat_environment_beat_profile(tmp_path: Path) -> None:
    write_profile(tmp_path, PROFILE)
    environ = {"HOME": str(tmp_path), "OBJSTORE_ACCESS_KEY": "AKENV"}
    settings = resolve_settings({"secret_key": "flag-secret"}, environ)
    assert (settings.endpoint, settings.access_key, settings.secret_key, settings.region) == (
        "http://profile:9000", "AKENV", "flag-secret", "us-east-1")


def test_aws_variables_and_named_profiles(tmp_path: Path) -> None:
    write_profile(tmp_path, PROFILE)
    environ = {"HOME": str(tmp_path), "AWS_ACCESS_KEY_ID": "AKAWS",
               "AWS_SECRET_ACCESS_KEY": "aws-secret", "OBJSTORE_PROFILE": "eu"}
    settings = resolve_settings({}, environ)
    assert (settings.endpoint, settings.access_key, settings.region) == (
        "https://eu.example:9443", "AKAWS", "eu-west-1")
    assert resolve_settings({}, environ, profile="default").endpoint == "http://profile:9000"


def test_xdg_config_home_is_honoured(tmp_path: Path) -> None:
    write_profile(tmp_path / "elsewhere", PROFILE)
    environ = {"HOME": "/nonexistent", "XDG_CONFIG_HOME": str(tmp_path / "elsewhere/.config")}
    assert resolve_settings({}, environ).access_key == "AKPROFILE"


def test_missing_values_name_every_way_to_give_them(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem) as caught:
        resolve_settings({"endpoint": "http://x:1"}, {"HOME": str(tmp_path)})
    message = str(caught.value)
    assert "access_key, secret_key" in message and "OBJSTORE_ACCESS_KEY" in message
    assert "profile.toml" in message


def test_named_profiles_must_exist(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path)}
    with pytest.raises(UsageProblem, match="does not exist"):
        resolve_settings({}, environ, profile="eu")
    write_profile(tmp_path, PROFILE)
    with pytest.raises(UsageProblem, match=r"no \[profile.us\]"):
        resolve_settings({}, environ, profile="us")


def test_a_readable_profile_warns_and_a_broken_one_is_a_usage_error(tmp_path: Path) -> None:
    write_profile(tmp_path, PROFILE, mode=0o644)
    warnings: list[str] = []
    resolve_settings({}, {"HOME": str(tmp_path)}, warn=warnings.append)
    assert warnings and "chmod 600" in warnings[0]
    write_profile(tmp_path, "[profile.default\n")
    with pytest.raises(UsageProblem):
        resolve_settings({}, {"HOME": str(tmp_path)})


@pytest.mark.parametrize("endpoint", ["ftp://x", "127.0.0.1:9000", "http://x/admin",
                                      "http://x?a=1", "http://"])
def test_bad_endpoints(endpoint: str) -> None:
    with pytest.raises(UsageProblem):
        base_url(endpoint)


def test_the_secret_never_shows_in_a_repr() -> None:
    assert SECRET not in repr(SETTINGS) and "AKTEST" in repr(SETTINGS)


# -- requests over a fake connection ---------------------------------------------------------


class FakeResponse:
    def __init__(self, status: int, body: bytes, content_type: str = "application/json"
                 ) -> None:
        self.status = status
        self.reason = "Reason"
        self._body = io.BytesIO(body)
        self._headers = [("Content-Type", content_type)]

    def read(self, size: int | None = None) -> bytes:
        return self._body.read() if size is None else self._body.read(size)

    def getheaders(self) -> list[tuple[str, str]]:
        return self._headers


class FakeConnection:
    def __init__(self, response: FakeResponse | Exception) -> None:
        self.response = response
        self.sent: dict[str, Any] = {}
        self.closed = False

    def request(self, method: str, target: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> None:
        if isinstance(self.response, Exception):
            raise self.response
        self.sent = {"method": method, "target": target, "body": body or b"",
                     "headers": headers or {}}

    def getresponse(self) -> FakeResponse:
        assert isinstance(self.response, FakeResponse)
        return self.response

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def connection(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeConnection]:
    fake = FakeConnection(FakeResponse(200, b'{"ok": true}'))
    monkeypatch.setattr(AdminClient, "_connection", lambda self: fake)
    yield fake


def verify_signature(sent: dict[str, Any], secret: str = SECRET) -> None:
    path, _, query = sent["target"].partition("?")
    headers = {name.lower(): value for name, value in sent["headers"].items()}
    view = sigv4.RequestView(sent["method"], path, query, headers)
    auth = sigv4.parse_auth(view)
    assert auth is not None
    sigv4.verify(auth, view, secret, datetime.datetime.now(datetime.UTC), {"us-east-1"})


def test_requests_are_signed_as_the_server_verifies_them(connection: FakeConnection) -> None:
    client = AdminClient(SETTINGS)
    assert client.call("POST", "/users/a%2Fb", query={"q": "spaced value/é", "none": None},
                       body={"username": "x"}) == {"ok": True}
    sent = connection.sent
    assert sent["target"] == "/admin/users/a%2Fb?q=spaced%20value%2F%C3%A9"
    assert sent["headers"]["host"] == "127.0.0.1:9000"
    assert json.loads(sent["body"]) == {"username": "x"}
    verify_signature(sent)
    with pytest.raises(sigv4.SigV4Error):
        verify_signature(sent, "another-secret")
    assert connection.closed


def test_empty_bodies_are_signed_too(connection: FakeConnection) -> None:
    AdminClient(SETTINGS).call("GET", "/info")
    assert connection.sent["body"] == b"" and "content-type" not in connection.sent["headers"]
    verify_signature(connection.sent)


def test_admin_errors_carry_code_and_message(connection: FakeConnection) -> None:
    connection.response = FakeResponse(404, b'{"error": "NotFound", "message": "No such user."}')
    with pytest.raises(AdminApiError) as caught:
        AdminClient(SETTINGS).call("GET", "/users/x")
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        404, "NotFound", "No such user.")


def test_other_error_bodies_are_summarised(connection: FakeConnection) -> None:
    connection.response = FakeResponse(502, b"<html><body>\nBad gateway\n</body></html>",
                                       "text/html")
    with pytest.raises(AdminApiError) as caught:
        AdminClient(SETTINGS).call("GET", "/info")
    assert caught.value.code == "HTTP502" and "Bad gateway" in caught.value.message


def test_unreachable_servers(connection: FakeConnection) -> None:
    connection.response = ConnectionRefusedError(111, "Connection refused")
    with pytest.raises(ConnectionProblem, match="Connection refused"):
        AdminClient(SETTINGS).call("GET", "/info")


def test_downloads_stream_in_chunks(connection: FakeConnection,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_client, "STREAM_CHUNK_BYTES", 1000)
    data = bytes(range(256)) * 20
    connection.response = FakeResponse(200, data, "application/gzip")
    sink, seen = io.BytesIO(), []
    headers = AdminClient(SETTINGS).download("POST", "/archive", {"bucket": "b"}, sink,
                                             seen.append)
    assert sink.getvalue() == data and seen == [1000] * 5 + [120]
    assert headers["Content-Type"] == "application/gzip"
    verify_signature(connection.sent)


def test_a_refused_download_writes_nothing(connection: FakeConnection) -> None:
    connection.response = FakeResponse(404, b'{"error": "NotFound", "message": "No key."}')
    sink = io.BytesIO()
    with pytest.raises(AdminApiError):
        AdminClient(SETTINGS).download("POST", "/archive", {}, sink, lambda n: None)
    assert sink.getvalue() == b""


def test_the_endpoint_defaults_to_the_local_daemon(tmp_path: Path) -> None:
    settings = resolve_settings({"access_key": "AK", "secret_key": "SK"},
                                {"HOME": str(tmp_path)})
    assert settings.endpoint == "http://127.0.0.1:9000"
