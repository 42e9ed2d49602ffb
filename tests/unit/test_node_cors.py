"""The node-wide CORS setting (`[server] cors_allowed_origins`) on the admin API: a
browser's preflight answered from it, actual answers carrying the headers, another origin
refused; S3 requests are not concerned (buckets have their own rules)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.resource_fixtures import Node

URL = "http://s3.test/admin"
APP = "https://console.example.com"


def test_admin_preflight_and_answers(tmp_path: Path) -> None:
    node = Node(tmp_path, cors_origins=(APP,))
    ok = node.send("OPTIONS", f"{URL}/info", who=None, headers={
        "origin": APP, "access-control-request-method": "GET",
        "access-control-request-headers": "authorization, x-amz-date"})
    assert ok.status == 200
    assert ok.headers["access-control-allow-origin"] == APP
    assert ok.headers["access-control-allow-headers"] == "authorization, x-amz-date"
    refused = node.send("OPTIONS", f"{URL}/info", who=None, headers={
        "origin": "https://evil.test", "access-control-request-method": "GET"})
    assert refused.status == 403 and json.loads(refused.body)["error"] == "AccessDenied"
    info = node.send("GET", f"{URL}/info", headers={"origin": APP})
    assert info.status == 200 and info.headers["access-control-allow-origin"] == APP
    denied = node.send("GET", f"{URL}/info", who=None, headers={"origin": APP})
    assert denied.status == 403 and denied.headers["access-control-allow-origin"] == APP
    other = node.send("GET", f"{URL}/info", headers={"origin": "https://evil.test"})
    assert "access-control-allow-origin" not in other.headers


def test_no_setting_no_cors(tmp_path: Path) -> None:
    node = Node(tmp_path)
    refused = node.send("OPTIONS", f"{URL}/info", who=None, headers={
        "origin": APP, "access-control-request-method": "GET"})
    assert refused.status == 403
    assert "access-control-allow-origin" not in node.send(
        "GET", f"{URL}/info", headers={"origin": APP}).headers
