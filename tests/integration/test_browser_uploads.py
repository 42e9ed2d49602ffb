"""Browser uploads end to end with Debian's Chromium (headless, playwright): a page served
from another origin (a small static server) uploads with fetch() PUT to a presigned URL,
with a FormData POST and with a plain HTML form (POST Object, success_action_redirect),
and reads the object back; a page from an origin the bucket's CORS rules do not allow is
refused by the browser itself.

SQLite only: the browser's view of CORS does not depend on the metadata backend.
"""

from __future__ import annotations

import http.server
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon import Daemon

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]

pytestmark = pytest.mark.skipif(
    os.environ.get("OBJSTORE_TEST_WORKERS", "1") != "1",
    reason="the browser's view needs one run; the two-worker pass adds nothing to it")

PAGE = b"<!doctype html><html><head><title>app</title></head><body>app</body></html>"


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def origins() -> Iterator[tuple[str, str]]:
    """Two static servers: an allowed origin and one the CORS rules do not name."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield tuple(f"http://127.0.0.1:{s.server_address[1]}" for s in servers)  # type: ignore[misc]
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    assert Path(CHROMIUM).exists(), "Debian's chromium is needed: scripts/install-test-clients"
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


FETCH_PUT = """async ([url, text]) => {
  const r = await fetch(url, {method: "PUT", body: text, headers: {"Content-Type": "text/plain"}});
  return {status: r.status, etag: r.headers.get("ETag")};
}"""
FETCH_FORM = """async ([url, fields, text]) => {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) form.append(k, v);
  form.append("file", new Blob([text], {type: "text/plain"}), "from-form.txt");
  const r = await fetch(url, {method: "POST", body: form});
  return {status: r.status, body: await r.text()};
}"""
FETCH_GET = """async (url) => { const r = await fetch(url); return await r.text(); }"""
REFUSED = """async (url) => {
  try { await fetch(url, {method: "PUT", body: "x"}); return "allowed"; }
  catch (e) { return "refused: " + e.name; }
}"""
HTML_FORM = """([url, fields]) => {
  const form = document.createElement("form");
  form.method = "POST"; form.action = url; form.enctype = "multipart/form-data";
  for (const [k, v] of Object.entries(fields)) {
    const input = document.createElement("input");
    input.type = "hidden"; input.name = k; input.value = v; form.appendChild(input);
  }
  const file = document.createElement("input");
  file.type = "file"; file.name = "file"; file.id = "file"; form.appendChild(file);
  document.body.appendChild(form);
}"""


def test_cross_origin_uploads(daemon: Daemon, s3: Any, browser: Any,
                              origins: tuple[str, str], tmp_path: Path) -> None:
    if daemon.backend != "sqlite":
        pytest.skip("the browser's view does not depend on the metadata backend")
    allowed, other = origins
    bucket = f"browser-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [{
        "AllowedOrigins": [allowed], "AllowedMethods": ["GET", "PUT", "POST"],
        "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag"]}]})
    page = browser.new_page()
    try:
        page.goto(allowed + "/app")
        put_url = s3.generate_presigned_url("put_object", Params={
            "Bucket": bucket, "Key": "from-fetch.txt", "ContentType": "text/plain"})
        put = page.evaluate(FETCH_PUT, [put_url, "hello from fetch"])
        assert put["status"] == 200 and put["etag"], put  # ETag exposed to the page
        post = s3.generate_presigned_post(bucket, "forms/${filename}",
                                          Conditions=[["starts-with", "$key", "forms/"]])
        form = page.evaluate(FETCH_FORM, [post["url"], post["fields"], "hello from a form"])
        assert form["status"] == 204, form
        for key, text in (("from-fetch.txt", "hello from fetch"),
                          ("forms/from-form.txt", "hello from a form")):
            get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket,
                                                                       "Key": key})
            assert page.evaluate(FETCH_GET, get_url) == text
        # a plain HTML form: no CORS involved, the answer redirects back to the app
        done = allowed + "/done"
        redirect = s3.generate_presigned_post(
            bucket, "html/${filename}", Fields={"success_action_redirect": done},
            Conditions=[["starts-with", "$key", "html/"], {"success_action_redirect": done}])
        page.evaluate(HTML_FORM, [redirect["url"], redirect["fields"]])
        upload = tmp_path / "picked.txt"
        upload.write_text("picked in a form")
        page.set_input_files("#file", str(upload))
        with page.expect_navigation():
            page.evaluate("() => document.querySelector('form').submit()")
        assert page.url.startswith(done + "?bucket=" + bucket)
        assert "key=html%2Fpicked.txt" in page.url
        got = s3.get_object(Bucket=bucket, Key="html/picked.txt")["Body"].read()
        assert got == b"picked in a form"
        # another origin: the browser refuses to let the page see the answer
        page.goto(other + "/app")
        verdict = page.evaluate(REFUSED, s3.generate_presigned_url(
            "put_object", Params={"Bucket": bucket, "Key": "evil.txt"}))
        assert verdict.startswith("refused"), verdict
    finally:
        page.close()
