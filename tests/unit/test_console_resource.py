"""The /console mount: bundle files by table, SPA fallback, caching, no traversal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from treq.testing import StubTreq
from twisted.web.resource import Resource

from objstore.config import ServerLimits
from objstore.console.resource import (
    IMMUTABLE,
    REVALIDATE,
    STATIC_DIR,
    ConsoleResource,
    Redirect,
    StaticFile,
    load_bundle,
    resolve,
)
from objstore.http.root import RootResource
from objstore.http.site import ObjstoreSite
from tests.unit.test_cluster_api import result


@pytest.fixture
def bundle(tmp_path: Path) -> dict[str, StaticFile]:
    static = tmp_path / "static"
    (static / "assets").mkdir(parents=True)
    (static / "index.html").write_bytes(b"<!doctype html><title>console</title>")
    (static / "assets" / "app-1234.js").write_bytes(b"console.log(1)")
    (static / "assets" / "app-1234.css").write_bytes(b"body{}")
    (tmp_path / "secret.txt").write_bytes(b"outside the bundle")
    return load_bundle(static)


def test_load_bundle_types_and_cache(bundle: dict[str, StaticFile]) -> None:
    assert set(bundle) == {"index.html", "assets/app-1234.js", "assets/app-1234.css"}
    assert bundle["index.html"].content_type == "text/html; charset=utf-8"
    assert bundle["index.html"].cache_control == REVALIDATE
    assert bundle["assets/app-1234.js"].content_type == "text/javascript; charset=utf-8"
    assert bundle["assets/app-1234.js"].cache_control == IMMUTABLE
    assert bundle["assets/app-1234.css"].content_type == "text/css; charset=utf-8"


@pytest.mark.parametrize(("segments", "answer"), [
    ([], Redirect("/console/")),
    ([b""], "index.html"),
    ([b"index.html"], "index.html"),
    ([b"assets", b"app-1234.js"], "assets/app-1234.js"),
    ([b"b", b"photos"], "index.html"),  # a route of the app
    ([b"iam"], "index.html"),
    ([b"assets", b"gone.js"], None),
    ([b"assets", b"nothing"], None),
    ([b"favicon.ico"], None),
    ([b"..", b"secret.txt"], None),
    ([b"assets", b"..", b"index.html"], None),
    ([b"assets", b".", b"app-1234.js"], None),
    ([b"..%2fsecret.txt"], None),  # '%2f' left encoded: not a file, has a dot
    ([b"../secret"], None),  # %2F decoded into one segment
    ([b"..\\secret"], None),
    ([b"\xff"], None),
])
def test_resolve(bundle: dict[str, StaticFile], segments: list[bytes], answer: Any) -> None:
    found = resolve(bundle, segments)
    if isinstance(answer, str):
        assert found is bundle[answer]
    else:
        assert found == answer


def _client(bundle: dict[str, StaticFile], tmp_path: Path) -> StubTreq:
    root = RootResource(s3=Resource(), admin=Resource(), limits=ServerLimits(), domains=(),
                        console=ConsoleResource(bundle))
    site = ObjstoreSite(root, tmp_dir=str(tmp_path), limits=ServerLimits(),
                        server_header="objstore")
    site.timeOut = None
    stub = StubTreq(root)
    stub._agent._serverFactory = site
    return stub


def test_served_through_the_root(bundle: dict[str, StaticFile], tmp_path: Path) -> None:
    client = _client(bundle, tmp_path)
    redirect = result(client.get("http://localhost/console?x=1", allow_redirects=False))
    assert redirect.code == 301
    assert redirect.headers.getRawHeaders("location") == ["/console/?x=1"]

    page = result(client.get("http://localhost/console/b/photos?prefix=a%2F"))
    assert page.code == 200
    assert result(page.content()) == bundle["index.html"].body
    assert page.headers.getRawHeaders("content-security-policy")[0].startswith("default-src")
    assert page.headers.getRawHeaders("cache-control") == [REVALIDATE]

    script = result(client.get("http://localhost/console/assets/app-1234.js"))
    assert script.headers.getRawHeaders("cache-control") == [IMMUTABLE]
    assert script.headers.getRawHeaders("x-content-type-options") == ["nosniff"]
    etag = script.headers.getRawHeaders("etag")[0]
    again = result(client.get("http://localhost/console/assets/app-1234.js",
                              headers={"If-None-Match": etag}))
    assert again.code == 304 and result(again.content()) == b""

    for path in ("/console/..%2Fsecret.txt", "/console/%2e%2e/secret.txt",
                 "/console/assets/%2E%2E/%2E%2E/secret.txt", "/console/assets/missing.js"):
        missing = result(client.get("http://localhost" + path))
        assert missing.code == 404, path
        assert b"outside" not in result(missing.content())

    refused = result(client.delete("http://localhost/console/index.html"))
    assert refused.code == 405 and refused.headers.getRawHeaders("allow") == ["GET, HEAD"]



def test_the_package_ships_a_built_bundle() -> None:
    files = load_bundle(STATIC_DIR)
    assert "index.html" in files
    assert any(name.startswith("assets/") and name.endswith(".js") for name in files)
    assert b"/console/assets/" in files["index.html"].body  # built with base /console/
