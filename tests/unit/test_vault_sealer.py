"""The Vault provider's client (crypto/vault.py) against answers a real Vault never gives:
each is one MasterKeyError naming the call, never the token, never a traceback; and the
token file's checks. (tests/integration/test_vault.py runs it against a real OpenBao.)"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from objstore.crypto.master_key import MasterKeyError
from objstore.crypto.vault import VaultSealer, read_token

TOKEN = "s.secret-token-value"
ANSWERS: dict[str, tuple[int, bytes]] = {}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body = ANSWERS[self.path.rsplit("/", 2)[-2]]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize(("operation", "status", "body", "message"), [
    ("encrypt", 403, b'{"errors": ["permission denied"]}', "HTTP 403 permission denied"),
    ("encrypt", 200, b"not json", "not a transit answer"),
    ("encrypt", 200, b'{"data": []}', "not a transit answer"),
    ("encrypt", 200, b'{"data": {"ciphertext": "plain"}}', "no transit ciphertext"),
    ("encrypt", 200, b'{"data": {"ciphertext": "vault:v1:a b"}}', "no transit ciphertext"),
    ("decrypt", 200, b'{"data": {"plaintext": "!!"}}', "not a 32-byte key"),
    ("decrypt", 200, json.dumps({"data": {"plaintext": base64.b64encode(b"short").decode()}})
     .encode(), "not a 32-byte key"),
    ("decrypt", 500, b"<html>", "HTTP 500"),
])
def test_hostile_answers_are_one_clear_error(url: str, operation: str, status: int,
                                              body: bytes, message: str) -> None:
    ANSWERS.clear()
    ANSWERS[operation] = (status, body)
    sealer = VaultSealer(url, TOKEN, "objstore", timeout=5)
    with pytest.raises(MasterKeyError, match=message) as raised:
        if operation == "encrypt":
            sealer.seal(b"k" * 32)
        else:
            sealer.open("vault:v1:abc")
    assert TOKEN not in str(raised.value) and "\n" not in str(raised.value)


def test_an_unreachable_vault_is_one_clear_error() -> None:
    with pytest.raises(MasterKeyError, match="Vault decrypt at http://127.0.0.1:9"):
        VaultSealer("http://127.0.0.1:9", TOKEN, "k", timeout=2).open("vault:v1:abc")


def test_a_line_that_is_no_ciphertext_is_malformed() -> None:
    with pytest.raises(ValueError):
        VaultSealer("http://127.0.0.1:9", TOKEN, "k").open("0123")


@pytest.mark.parametrize("content", ["", "  \n", "two words", "a\x01b"])
def test_token_file_without_a_token(tmp_path: Path, content: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(MasterKeyError, match="holds no token"):
        read_token(str(path))
    assert read_token(str(_write(tmp_path, " tok-123 \n"))) == "tok-123"
    with pytest.raises(MasterKeyError, match="can not be read"):
        read_token(str(tmp_path / "missing"))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "good"
    path.write_text(text)
    return path
