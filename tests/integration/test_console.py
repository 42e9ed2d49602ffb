"""The web console end to end: a real daemon, Debian's Chromium driven by playwright.

One browser for the module, one daemon (SQLite); the second pass of scripts/test (two-worker
daemons) skips it, since the console is static files and the browser's own signing. Each
page's screenshot is saved under the test's tmp (`screenshots/`); with
OBJSTORE_CONSOLE_SCREENSHOTS=<dir> they are copied there too (docs/console is made so).
"""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from objstore.cli.admin_client import AdminClient, ConnectionSettings
from tests.integration.conftest import make_client, running_daemon
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
BIG = 20 * 1024 * 1024
BUCKET = "console-photos"

pytestmark = pytest.mark.skipif(
    os.environ.get("OBJSTORE_TEST_WORKERS", "1") != "1",
    reason="the console needs one run; the two-worker pass adds nothing to it")


@pytest.fixture(scope="module")
def console_daemon(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    node = Daemon(tmp_path_factory.mktemp("console-node"),
                  extra_config="[metrics]\nhistory_interval_seconds = 1\n")
    with running_daemon(request, node):
        yield node


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    assert Path(CHROMIUM).exists(), "Debian's chromium is needed: scripts/install-test-clients"
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("screenshots")
    yield directory
    published = os.environ.get("OBJSTORE_CONSOLE_SCREENSHOTS")
    if published:
        for shot in directory.glob("*.png"):
            shutil.copy(shot, Path(published) / shot.name)


class Receiver:
    """A real HTTP server on a free port that answers 200 to every POST and keeps the JSON
    bodies (the webhook the bucket's notification rule names)."""

    def __init__(self) -> None:
        events: list[dict[str, Any]] = []
        self.events = events

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- the standard library's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    events.append(json.loads(body))
                except ValueError:
                    events.append({})
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


SOURCE = "console-source"
REPLICA = "console-replica"


def replication_rule(endpoint: str) -> str:
    return ("<ReplicationConfiguration><Role></Role><Rule><ID>to-replica</ID>"
            "<Priority>1</Priority><Status>Enabled</Status><Filter><Prefix></Prefix></Filter>"
            "<DeleteMarkerReplication><Status>Enabled</Status></DeleteMarkerReplication>"
            "<ExistingObjectReplication><Status>Enabled</Status></ExistingObjectReplication>"
            f"<Destination><Bucket>arn:aws:s3:::{REPLICA}</Bucket><Endpoint>{endpoint}"
            "</Endpoint><CredentialRef>self</CredentialRef></Destination></Rule>"
            "</ReplicationConfiguration>")


def _poll(check: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_console_end_to_end(console_daemon: Daemon, browser: Any, shots: Path,
                            tmp_path: Path) -> None:
    from playwright.sync_api import expect
    endpoint = console_daemon.endpoint
    s3: Any = make_client(endpoint)
    context = browser.new_context(accept_downloads=True, viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.set_default_timeout(30_000)
    # Uncaught errors and Content-Security-Policy refusals in the page fail the test.
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda message: problems.append(message.text)
            if "Content Security Policy" in message.text else None)
    try:
        # Sign in; a wrong secret is refused with the server's error.
        page.goto(endpoint + "/console")
        assert page.url == endpoint + "/console/"
        page.get_by_label("Access key ID").fill(ROOT_ACCESS_KEY)
        page.get_by_label("Secret access key").fill("not-the-secret")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_contain_text("SignatureDoesNotMatch")
        page.screenshot(path=shots / "sign-in.png")
        page.get_by_label("Secret access key").fill(ROOT_SECRET_KEY)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Buckets")).to_be_visible()

        # Create a bucket; a reserved name gets the server's refusal.
        page.get_by_label("New bucket name").fill("console")
        page.get_by_role("button", name="Create bucket").click()
        expect(page.get_by_role("alert")).to_contain_text("InvalidBucketName")
        page.get_by_label("New bucket name").fill(BUCKET)
        page.get_by_role("button", name="Create bucket").click()
        expect(page.get_by_role("link", name=BUCKET)).to_be_visible()
        assert BUCKET in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        page.screenshot(path=shots / "buckets.png")

        # Upload a 20 MB file (multipart, with progress) and a small one into a folder.
        page.get_by_role("link", name=BUCKET).click()
        expect(page.get_by_role("heading", name=BUCKET)).to_be_visible()
        big = tmp_path / "big.bin"
        big.write_bytes(os.urandom(BIG))
        small = tmp_path / "note.txt"
        small.write_bytes(b"shared through a presigned link\n")
        odd = tmp_path / "näme +%&=?#.txt"  # a key every layer must encode alike
        odd.write_bytes(b"odd")
        page.evaluate("""() => {
            window.__sent = [];
            new MutationObserver((changes) => {
                for (const c of changes) window.__sent.push(Number(c.target.dataset.sent));
            }).observe(document.body,
                       {attributes: true, subtree: true, attributeFilter: ['data-sent']});
        }""")
        page.get_by_label("Upload files to").set_input_files([str(big), str(small), str(odd)])
        expect(page.locator(".uploads li").filter(has_text="big.bin")).to_contain_text(
            "Uploaded", timeout=120_000)
        expect(page.locator(".uploads li").filter(has_text="note.txt")).to_contain_text("Uploaded")
        expect(page.locator(".uploads li").filter(has_text=odd.name)).to_contain_text("Uploaded")
        assert s3.get_object(Bucket=BUCKET, Key=odd.name)["Body"].read() == b"odd"
        # Drag and drop: a file dropped on the upload area is uploaded too.
        page.locator(".drop").evaluate("""area => {
            const files = new DataTransfer();
            files.items.add(new File(["dropped bytes"], "dropped.txt"));
            area.dispatchEvent(new DragEvent("drop", {dataTransfer: files, bubbles: true,
                                                      cancelable: true}));
        }""")
        expect(page.locator(".uploads li").filter(has_text="dropped.txt")).to_contain_text(
            "Uploaded")
        assert s3.get_object(Bucket=BUCKET, Key="dropped.txt")["Body"].read() == b"dropped bytes"
        bar = page.get_by_label("Upload of big.bin")
        assert bar.evaluate("p => [p.value, p.max]") == [BIG, BIG]
        sent = page.evaluate("() => window.__sent")
        assert any(0 < n < BIG for n in sent), sent  # the bar moved before the end
        head = s3.head_object(Bucket=BUCKET, Key="big.bin")
        assert head["ContentLength"] == BIG and head["ETag"].endswith('-3"')  # 3 parts of 8 MB
        page.screenshot(path=shots / "upload.png")

        # Browse: the listing shows both; a folder made by another client is browsable.
        s3.put_object(Bucket=BUCKET, Key="2026/march/a.jpg", Body=b"a")
        s3.put_object(Bucket=BUCKET, Key="2026/march/bell\x07 100%.txt", Body=b"b")
        page.reload()
        expect(page.get_by_role("link", name="2026/")).to_be_visible()
        page.get_by_role("link", name="2026/").click()
        page.get_by_role("link", name="march/").click()
        expect(page.get_by_role("cell", name="a.jpg", exact=True)).to_be_visible()
        bell = page.get_by_role("button", name="Download 2026/march/bell\x07 100%.txt")
        expect(bell).to_be_visible()  # listed although XML 1.0 can not carry its key
        page.screenshot(path=shots / "browse-folder.png")
        page.get_by_role("navigation", name="Path").get_by_role("link", name=BUCKET).click()
        expect(page.get_by_role("cell", name="big.bin", exact=True)).to_be_visible()

        # Download compares byte for byte.
        with page.expect_download() as download:
            page.get_by_role("button", name="Download big.bin").click()
        saved = tmp_path / "downloaded.bin"
        download.value.save_as(saved)
        assert hashlib.sha256(saved.read_bytes()).digest() == hashlib.sha256(
            big.read_bytes()).digest()
        assert download.value.suggested_filename == "big.bin"

        # A folder of more keys than a page: the first page, then the next on demand.
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: s3.put_object(Bucket=BUCKET, Key=f"many/k{n:03d}", Body=b""),
                          range(205)))
        page.reload()
        page.get_by_role("link", name="many/").click()
        rows = page.locator("tbody tr")
        expect(rows).to_have_count(200)
        page.get_by_role("button", name="Load more").click()
        expect(rows).to_have_count(205)
        expect(page.get_by_role("button", name="Load more")).to_have_count(0)
        page.get_by_role("navigation", name="Path").get_by_role("link", name=BUCKET).click()

        # A share link, presigned in the browser, works without credentials.
        page.get_by_role("button", name="Share note.txt").click()
        link = page.get_by_label("Share link for note.txt").input_value()
        assert "X-Amz-Signature=" in link and "X-Amz-Expires=3600" in link
        with urllib.request.urlopen(link, timeout=30) as response:
            assert response.read() == small.read_bytes()
        page.screenshot(path=shots / "browse.png", full_page=True)

        # Versioning, and one object's details: metadata, tags, versions.
        page.get_by_role("button", name="Enable versioning").click()
        expect(page.get_by_role("button", name="Suspend versioning")).to_be_visible()
        assert s3.get_bucket_versioning(Bucket=BUCKET)["Status"] == "Enabled"
        s3.put_object(Bucket=BUCKET, Key="log.txt", Body=b"first")
        s3.put_object(Bucket=BUCKET, Key="log.txt", Body=b"second", Metadata={"owner": "ops"},
                      Tagging="kind=text")
        page.reload()
        page.get_by_role("button", name="Details of log.txt").click()
        details = page.get_by_role("article", name="Details of log.txt")
        expect(details).to_contain_text("x-amz-meta-owner")
        expect(details).to_contain_text("kind = text")
        expect(details.get_by_role("button", name="Download version")).to_have_count(2)
        expect(details).to_contain_text("(latest)")
        page.screenshot(path=shots / "object.png", full_page=True)
        details.get_by_label("Tags, one key=value per line").fill("kind=text\nowner=ops & co")
        details.get_by_role("button", name="Save tags").click()
        expect(details.get_by_role("alert")).to_contain_text("InvalidTag")  # AWS's charset
        details.get_by_label("Tags, one key=value per line").fill("kind=text\nowner=ops team")
        details.get_by_role("button", name="Save tags").click()
        expect(details.get_by_role("status")).to_contain_text("Tags saved")
        tag_set = s3.get_object_tagging(Bucket=BUCKET, Key="log.txt")["TagSet"]
        assert {t["Key"]: t["Value"] for t in tag_set} == {"kind": "text", "owner": "ops team"}
        details.get_by_role("button", name="Close details").click()

        # The bucket's settings: quota, compression and the configuration documents.
        page.get_by_role("link", name=f"Settings of {BUCKET}").click()
        expect(page.get_by_role("heading", name=f"Settings of {BUCKET}")).to_be_visible()
        quota = page.get_by_role("form", name="Quota")
        quota.get_by_label("Max size (MiB, empty: unlimited)").fill("512")
        quota.get_by_role("button", name="Save quota").click()
        expect(page.get_by_text("limits: 512.0 MiB")).to_be_visible()
        page.get_by_role("button", name="Compress new objects").click()
        expect(page.get_by_text("compressed with zstd (level 3)")).to_be_visible()
        page.get_by_text("Lifecycle rules: not set").click()
        lifecycle = page.get_by_role("form", name="Lifecycle rules")
        lifecycle.get_by_role("button", name="Save lifecycle rules").click()
        expect(page.get_by_text("Lifecycle rules saved")).to_be_visible()
        rules = s3.get_bucket_lifecycle_configuration(Bucket=BUCKET)["Rules"]
        assert [r["ID"] for r in rules] == ["expire-tmp"]
        page.get_by_text("Tags: not set").click()
        bucket_tags = page.get_by_label("Tags document (an example to start from)")
        bucket_tags.fill(bucket_tags.input_value().replace("<Value>media", "<Value>x<Value>"))
        page.get_by_role("button", name="Save tags").click()
        expect(page.get_by_role("alert")).to_contain_text("MalformedXML")  # the server's word
        with pytest.raises(s3.exceptions.ClientError, match="NoSuchTagSet"):
            s3.get_bucket_tagging(Bucket=BUCKET)  # nothing changed
        # A public link: anyone may then read keys under public/ without credentials.
        s3.put_object(Bucket=BUCKET, Key="public/hello.txt", Body=b"hello, anyone")
        link = page.get_by_role("form", name="Public link")
        link.get_by_label("Prefix (empty: the whole bucket)").fill("public/")
        link.get_by_role("button", name="Set public link").click()
        expect(page.get_by_text("Anyone may read: public/")).to_be_visible()
        with urllib.request.urlopen(f"{endpoint}/{BUCKET}/public/hello.txt",
                                    timeout=30) as response:
            assert response.read() == b"hello, anyone"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{endpoint}/{BUCKET}/note.txt", timeout=30)
        assert refused.value.code == 403
        # Notification status: the rule as a table, the outcome of the bucket's deliveries
        # (to a real HTTP receiver), and a test event to the rule's target.
        admin = AdminClient(ConnectionSettings(endpoint, ROOT_ACCESS_KEY, ROOT_SECRET_KEY))
        with Receiver() as hook:
            s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={
                "QueueConfigurations": [{"Id": "uploads", "QueueArn": hook.url,
                                         "Events": ["s3:ObjectCreated:*"], "Filter": {"Key": {
                                             "FilterRules": [{"Name": "prefix",
                                                              "Value": "incoming/"}]}}}]})
            s3.put_object(Bucket=BUCKET, Key="incoming/a.txt", Body=b"a")
            _poll(lambda: [e for e in admin.call("GET", "/notifications/events",
                                                 query={"bucket": BUCKET})["events"]
                           if e["status"] == "delivered"], "the delivery")
            page.reload()
            rules = page.get_by_role("table", name="Notification rules")
            expect(rules).to_contain_text("uploads")
            expect(rules).to_contain_text("s3:ObjectCreated:*")
            expect(rules).to_contain_text("prefix incoming/")
            expect(page.get_by_text("Last 1 deliveries: 1 delivered.")).to_be_visible()
            deliveries = page.get_by_role("region", name="Notification deliveries")
            expect(deliveries.get_by_role("cell", name="incoming/a.txt")).to_be_visible()
            page.get_by_role("button", name=f"Send a test event to {hook.url}").click()
            expect(page.get_by_text(f"A test event reached {hook.url}")).to_be_visible()
            assert [event for event in hook.events if event.get("Event") == "s3:TestEvent"]
        page.screenshot(path=shots / "bucket-settings.png", full_page=True)
        page.get_by_role("link", name=f"Back to the objects of {BUCKET}").click()
        expect(page.get_by_role("heading", name=BUCKET)).to_be_visible()

        # An upload cut off mid-way resumes from the parts the server holds.
        resumable = tmp_path / "resume.bin"
        resumable.write_bytes(os.urandom(17 * 1024 * 1024))  # 3 parts of 8 MiB
        cut = {"done": False}

        def cut_second_part(route: Any) -> None:
            if not cut["done"] and "partNumber=2" in route.request.url:
                cut["done"] = True
                route.abort()
            else:
                route.continue_()
        page.route("**/resume.bin?*", cut_second_part)
        page.get_by_label("Upload files to").set_input_files([str(resumable)])
        uploads = page.get_by_role("list", name="Uploads", exact=True)
        expect(uploads.locator("li").filter(has_text="resume.bin")).to_contain_text(
            "choose the same file again to resume", timeout=120_000)
        page.reload()
        expect(page.get_by_role("list", name="Interrupted uploads")).to_contain_text(
            "resume.bin")
        page.get_by_label("Upload files to").set_input_files([str(resumable)])
        expect(uploads.locator("li").filter(has_text="resume.bin")).to_contain_text(
            "Uploaded (resumed)", timeout=120_000)
        expect(page.get_by_role("list", name="Interrupted uploads")).to_have_count(0)
        page.unroute("**/resume.bin?*")
        assert s3.get_object(Bucket=BUCKET, Key="resume.bin")["Body"].read() == \
            resumable.read_bytes()
        assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")

        # IAM: a grant (the server's validation message shown first), a user, a key.
        page.get_by_role("link", name="Access").click()
        expect(page.get_by_role("heading", name="Access")).to_be_visible()
        page.get_by_label("Grant name").fill("photos-read")
        policy = ('{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", '
                  '"Action": ["s3:ListBucket", "s3:GetObject", "s3:Fly"], '
                  f'"Resource": ["arn:aws:s3:::{BUCKET}", "arn:aws:s3:::{BUCKET}/*"]}}]}}')
        page.get_by_label("Policy document").fill(policy)
        page.get_by_role("button", name="Create grant").click()
        expect(page.get_by_role("alert")).to_contain_text("s3:Fly")
        page.get_by_label("Policy document").fill(policy.replace(', "s3:Fly"', ""))
        page.get_by_role("button", name="Create grant").click()
        expect(page.get_by_role("status")).to_contain_text("Grant photos-read created")
        page.get_by_label("Username").fill("alice")
        page.get_by_role("button", name="Create user").click()
        panel = page.get_by_role("article", name="User alice")
        expect(panel).to_be_visible()
        panel.get_by_label("Attach grant").select_option(label="photos-read")
        panel.get_by_role("button", name="Attach").click()
        expect(panel.get_by_role("button", name="Detach photos-read")).to_be_visible()
        panel.get_by_role("button", name="Create access key").click()
        secret = panel.get_by_label("New secret access key").input_value()
        access_key = panel.get_by_label("Access key ID").input_value()
        assert secret and access_key
        page.screenshot(path=shots / "access-key.png", full_page=True)
        alice: Any = make_client(endpoint, access_key, secret)
        keys = [o["Key"] for o in alice.list_objects_v2(Bucket=BUCKET)["Contents"]]
        assert "note.txt" in keys
        assert alice.get_object(Bucket=BUCKET, Key="note.txt")["Body"].read() == small.read_bytes()
        panel.get_by_role("button", name="Done").click()
        panel.get_by_role("button", name=f"Deactivate {access_key}").click()
        reactivate = panel.get_by_role("button", name=f"Activate {access_key}", exact=True)
        expect(reactivate).to_be_visible()
        with pytest.raises(alice.exceptions.ClientError):
            alice.list_objects_v2(Bucket=BUCKET)

        # Teams: alice's effective grants name their source.
        page.get_by_label("Team name").fill("editors")
        page.get_by_role("button", name="Create team").click()
        team = page.get_by_role("article", name="Team editors")
        team.get_by_label("Add member").select_option(label="alice")
        team.get_by_role("button", name="Add", exact=True).click()
        expect(team.get_by_role("button", name="Remove alice")).to_be_visible()
        team.get_by_label("Attach grant to the team").select_option(label="S3ReadOnlyAccess")
        team.get_by_role("button", name="Attach to team").click()
        expect(team.get_by_role("button", name="Detach S3ReadOnlyAccess from the team")
               ).to_be_visible()
        page.get_by_role("button", name="root (root)").click()
        page.get_by_role("button", name="alice", exact=True).click()
        panel = page.get_by_role("article", name="User alice")
        expect(panel.get_by_role("list", name="Effective grants")).to_contain_text(
            "S3ReadOnlyAccess (team:editors)")
        panel.get_by_role("button", name=f"Activate {access_key}", exact=True).click()
        expect(panel.get_by_role("button", name=f"Deactivate {access_key}")).to_be_visible()
        page.screenshot(path=shots / "access.png", full_page=True)

        # Operations: server info, cluster, the audit log filtered by operation.
        page.get_by_role("link", name="Operations").click()
        expect(page.get_by_role("heading", name="Server")).to_be_visible()
        expect(page.locator("dl.fields").first).to_contain_text("metadata_backend")
        page.get_by_label("Operation", exact=True).fill("CreateBucket")

        def audited() -> bool:
            page.get_by_role("button", name="Filter").click()
            return page.get_by_role("cell", name=BUCKET, exact=True).count() > 0
        _poll(audited, "the audit log to show CreateBucket")
        assert page.get_by_role("cell", name="PutObject", exact=True).count() == 0
        expect(page.get_by_role("img", name="Requests per sample over the last")).to_be_visible(
            timeout=60_000)
        # this node's notification and replication outcome, in one line each
        expect(page.get_by_text("Last 1 notification deliveries: 1 delivered.")).to_be_visible()
        expect(page.get_by_text("No replication journal entries yet.")).to_be_visible()
        page.screenshot(path=shots / "operations.png", full_page=True)

        # Maintenance jobs: start one, watch it end, read its log.
        page.get_by_role("link", name="Jobs").click()
        expect(page.get_by_role("heading", name="Maintenance jobs")).to_be_visible()
        page.get_by_label("Parameters (JSON)").fill("{not json")
        page.get_by_role("button", name="Start job").click()
        expect(page.get_by_role("alert")).to_contain_text("must be a JSON object")
        page.get_by_label("Parameters (JSON)").fill('{"n": 40, "delay_ms": 25}')
        page.get_by_role("button", name="Start job").click()
        expect(page.get_by_role("status")).to_contain_text("started")
        expect(page.get_by_role("article", name="Job log")).to_contain_text("created by root")
        expect(page.locator("tbody tr").first).to_contain_text("completed", timeout=60_000)
        expect(page.locator("tbody tr").first).to_contain_text("40 / 40")
        page.screenshot(path=shots / "jobs.png", full_page=True)

        # Replication status: a rule written in the console's document editor, the objects
        # written before it replicated on request, the journal's outcome.
        for name in (SOURCE, REPLICA):
            s3.create_bucket(Bucket=name)
            s3.put_bucket_versioning(Bucket=name,
                                     VersioningConfiguration={"Status": "Enabled"})
        s3.put_object(Bucket=SOURCE, Key="before.txt", Body=b"written before the rule")
        admin.call("POST", "/replication/credentials/self", body={
            "access_key_id": ROOT_ACCESS_KEY, "secret_access_key": ROOT_SECRET_KEY})
        page.goto(f"{endpoint}/console/b/{SOURCE}/settings")
        expect(page.get_by_text("No replication rules: nothing is copied")).to_be_visible()
        # S3's empty notification document is "not set", not a configuration
        expect(page.get_by_text("Notifications: not set")).to_be_visible()
        page.get_by_text("Replication: not set").click()
        page.get_by_label("Replication document (an example to start from)").fill(
            replication_rule(endpoint))
        page.get_by_role("button", name="Save replication").click()
        expect(page.get_by_text("Replication saved")).to_be_visible()
        page.reload()
        rules = page.get_by_role("table", name="Replication rules")
        expect(rules).to_contain_text(f"{REPLICA} at {endpoint}")
        expect(rules).to_contain_text("to-replica (priority 1)")
        page.get_by_role("button", name="Replicate existing objects").click()
        expect(page.get_by_text("1 existing object versions journaled")).to_be_visible()
        _poll(lambda: s3.list_objects_v2(Bucket=REPLICA).get("KeyCount") == 1, "the replica")
        _poll(lambda: [e for e in admin.call("GET", "/replication/journal",
                                             query={"bucket": SOURCE})["entries"]
                       if e["status"] == "COMPLETED"], "the journal entry to complete")
        page.reload()
        expect(page.get_by_text("Last 1 journal entries: 1 completed.")).to_be_visible()
        journal = page.get_by_role("region", name="Replication journal")
        expect(journal.get_by_role("cell", name="COMPLETED")).to_be_visible()
        page.screenshot(path=shots / "bucket-replication.png", full_page=True)

        # Events: the notification deliveries and the replication journal of this node.
        page.get_by_role("link", name="Events").click()
        expect(page.get_by_role("heading", name="Notification deliveries")).to_be_visible()
        expect(page.get_by_role("heading", name="Replication journal")).to_be_visible()
        events = page.get_by_role("region", name="Notification deliveries")
        expect(events.get_by_role("cell", name="incoming/a.txt")).to_be_visible()
        page.get_by_role("region", name="Replication journal").get_by_label("Bucket").fill(SOURCE)
        page.get_by_role("button", name="Filter replication journal").click()
        expect(page.get_by_role("cell", name="before.txt")).to_be_visible()
        assert page.get_by_role("alert").count() == 0
        page.screenshot(path=shots / "events.png", full_page=True)

        # Phone width: the bucket page still fits.
        page.set_viewport_size({"width": 390, "height": 800})
        page.get_by_role("link", name="Buckets").click()
        expect(page.get_by_role("link", name=BUCKET)).to_be_visible()
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        page.screenshot(path=shots / "phone.png", full_page=True)

        # Sign-out clears the tab's secret.
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_label("Access key ID")).to_be_visible()
        assert page.evaluate("() => sessionStorage.length") == 0

        # alice signs in: she sees the buckets her grants allow, not the admin pages.
        page.get_by_label("Access key ID").fill(access_key)
        page.get_by_label("Secret access key").fill(secret)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("link", name=BUCKET)).to_be_visible()
        page.get_by_role("link", name="Operations").click()
        expect(page.get_by_role("alert").first).to_contain_text("AccessDenied")
        page.get_by_role("button", name="Sign out").click()
        assert problems == []
    finally:
        context.close()
    assert ROOT_SECRET_KEY not in console_daemon.log_path.read_text(errors="replace")


def test_static_files_and_no_traversal(console_daemon: Daemon) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", console_daemon.port, timeout=30)

    def get(path: str) -> tuple[int, dict[str, str], bytes]:
        connection.request("GET", path)  # sent as written: no client-side normalisation
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()

    status, headers, index = get("/console/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert headers["cache-control"] == "no-cache"
    assert get("/console/iam")[2] == index  # an app route falls back to index.html
    script = index.split(b'src="', 1)[1].split(b'"', 1)[0].decode()
    status, headers, _ = get(script)
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert "immutable" in headers["cache-control"]
    for path in ("/console/../setup.cfg", "/console/%2e%2e/%2e%2e/setup.cfg",
                 "/console/assets/..%2F..%2Fresource.py", "/console/%2E%2E%2Fresource.py",
                 "/console/assets/%2e%2e/__init__.py", "/console/..%5c__init__.py"):
        status, _, body = get(path)
        assert status in (400, 404), path
        assert b"import" not in body and b"[metadata]" not in body, path
    connection.close()
    s3: Any = make_client(console_daemon.endpoint)
    for reserved in ("console", "admin"):
        with pytest.raises(s3.exceptions.ClientError) as refused:
            s3.create_bucket(Bucket=reserved)
        assert refused.value.response["Error"]["Code"] == "InvalidBucketName"
