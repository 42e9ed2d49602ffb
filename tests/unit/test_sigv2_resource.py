"""SigV2 through the real site and authenticator (fake services): header and presigned
requests, virtual-host style, the `[server] signature_v2 = false` refusal, and the admin
API, which never accepts SigV2 (it signs no body)."""

from __future__ import annotations

from email.utils import formatdate
from pathlib import Path
from urllib.parse import quote
from xml.etree import ElementTree

from objstore.http import sigv2
from tests.unit.resource_fixtures import NOW, ROOT, SECRETS, Answer, Node

URL = "http://s3.test"


def code(answer: Answer) -> str:
    return ElementTree.fromstring(answer.body).findtext("Code") or ""


def v2_headers(method: str, resource: str, seconds: float = NOW) -> dict[str, str]:
    date = formatdate(seconds, usegmt=True)
    signature = sigv2.sign_v2(f"{method}\n\n\n{date}\n{resource}".encode(),
                              SECRETS[ROOT.access_key])
    return {"date": date, "authorization": f"AWS {ROOT.access_key}:{signature}"}


def test_header_signed_requests(tmp_path: Path) -> None:
    node = Node(tmp_path)
    assert node.send("PUT", f"{URL}/photos", who=None, headers=v2_headers("PUT", "/photos")
                     ).status == 200
    listed = node.send("GET", f"{URL}/", who=None, headers=v2_headers("GET", "/"))
    assert listed.status == 200 and b"<Name>photos</Name>" in listed.body
    (record,) = [r for r in node.records() if r.operation == "ListBuckets"]
    assert record.access_key == ROOT.access_key and record.user_id == ROOT.user_id
    # virtual-host style: the bucket from the Host is part of the resource
    vhost = node.send("HEAD", "http://photos.s3.test/", who=None,
                      headers=v2_headers("HEAD", "/photos/"))
    assert vhost.status == 200
    wrong = node.send("GET", f"{URL}/", who=None, headers=v2_headers("GET", "/other"))
    assert (wrong.status, code(wrong)) == (403, "SignatureDoesNotMatch")
    old = node.send("GET", f"{URL}/", who=None, headers=v2_headers("GET", "/", NOW - 3600))
    assert (old.status, code(old)) == (403, "RequestTimeTooSkewed")


def test_presigned_url_and_expiry(tmp_path: Path) -> None:
    node = Node(tmp_path)
    expires = int(NOW) + 60
    signature = sigv2.sign_v2(f"GET\n\n\n{expires}\n/".encode(), SECRETS[ROOT.access_key])
    url = (f"{URL}/?AWSAccessKeyId={ROOT.access_key}&Expires={expires}"
           f"&Signature={quote(signature, safe='')}")
    assert node.send("GET", url, who=None).status == 200
    node.clock.advance(61)
    expired = node.send("GET", url, who=None)
    assert (expired.status, code(expired)) == (403, "AccessDenied")
    assert b"expired" in expired.body


def test_disabled_by_setting_and_never_on_the_admin_api(tmp_path: Path) -> None:
    node = Node(tmp_path, signature_v2=False)
    refused = node.send("GET", f"{URL}/", who=None, headers=v2_headers("GET", "/"))
    assert (refused.status, code(refused)) == (400, "InvalidRequest")
    admin = Node(tmp_path / "a").send("GET", f"{URL}/admin/info", who=None,
                                      headers=v2_headers("GET", "/admin/info"))
    assert admin.status in (400, 403)
