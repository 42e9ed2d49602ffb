"""The root's mount table: which API owns a path, and virtual-host requests stay S3's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from treq.testing import StubTreq
from twisted.web.resource import Resource

from objstore.config import ServerLimits
from objstore.engine.names import RESERVED_BUCKET_NAMES
from objstore.http.root import MOUNTS, S3, RootResource, mount_of
from objstore.http.site import ObjstoreSite
from tests.unit.test_cluster_api import result


@pytest.mark.parametrize(("method", "path", "mount"), [
    (b"PUT", b"/console", S3),  # CreateBucket: refused by the bucket name rules
    (b"PUT", b"/admin/", S3),
    (b"PUT", b"/%61dmin", S3),
    (b"DELETE", b"/console", "console"),
    (b"HEAD", b"/console/", "console"),
    (b"PUT", b"/admin/users/u", "admin"),
    (b"PUT", b"/admin/settings/region", "admin"),
])
def test_mount_of_by_method(method: bytes, path: bytes, mount: str) -> None:
    assert mount_of(method, path) == mount


@pytest.mark.parametrize(("path", "mount"), [
    (b"/admin/info", "admin"),
    (b"/admin", "admin"),
    (b"/%61dmin/info", "admin"),  # decoded as twisted.web's traversal decodes it
    (b"/cluster/v1/ping", "cluster"),
    (b"/cluster/v2/ping", S3),  # a bucket named cluster, key v2/ping
    (b"/cluster", S3),
    (b"/console", "console"),
    (b"/console/", "console"),
    (b"/console/assets/app.js", "console"),
    (b"/consoles/x", S3),
    (b"/", S3),
    (b"/bucket/admin/key", S3),
    (b"/bucket/console", S3),
])
def test_mount_of(path: bytes, mount: str) -> None:
    assert mount_of(b"GET", path) == mount


def test_every_single_segment_mount_is_a_reserved_bucket_name() -> None:
    single = {prefix[0].decode() for _, prefix in MOUNTS if len(prefix) == 1}
    assert single == set(RESERVED_BUCKET_NAMES)


class _Echo(Resource):
    """A leaf answering its own name and the path it was given."""

    isLeaf = True

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    def render(self, request: Any) -> bytes:
        rest = b"/".join(request.postpath)
        bucket = getattr(request, "vhost_bucket", None) or ""
        return f"{self._name} {bucket} ".encode() + rest


@pytest.fixture
def client(tmp_path: Path) -> StubTreq:
    return _served(RootResource(
        s3=_Echo("s3"), admin=_Echo("admin"), limits=ServerLimits(), domains=("s3.test",),
        cluster=_Echo("cluster"), console=_Echo("console")), tmp_path)


def _served(root: RootResource, tmp_path: Path) -> StubTreq:
    site = ObjstoreSite(root, tmp_dir=str(tmp_path), limits=ServerLimits(),
                        server_header="objstore")
    site.timeOut = None
    stub = StubTreq(root)
    stub._agent._serverFactory = site
    return stub


def _get(client: StubTreq, url: str) -> str:
    response = result(client.get(url))
    return str(result(response.content()).decode())


@pytest.mark.parametrize(("url", "answer"), [
    ("http://localhost/admin/info", "admin  info"),
    ("http://localhost/cluster/v1/ping", "cluster  v1/ping"),
    ("http://localhost/console/assets/a.js", "console  assets/a.js"),
    ("http://localhost/console", "console  "),
    ("http://localhost/b/console/k", "s3  b/console/k"),  # S3 sees the whole path
    ("http://localhost/cluster/x", "s3  cluster/x"),
    # A virtual-hosted bucket's keys are its own, whatever their first segment.
    ("http://b.s3.test/console/index.html", "s3 b console/index.html"),
    ("http://b.s3.test/admin/info", "s3 b admin/info"),
])
def test_root_dispatches_by_the_table(client: StubTreq, url: str, answer: str) -> None:
    assert _get(client, url) == answer


def test_unmounted_console_and_cluster_are_json_404s(tmp_path: Path) -> None:
    root = RootResource(s3=_Echo("s3"), admin=_Echo("admin"), limits=ServerLimits(), domains=())
    stub = _served(root, tmp_path)
    for url in ("http://localhost/console/", "http://localhost/cluster/v1/ping"):
        response = result(stub.get(url))
        assert response.code == 404
        assert b'"NotFound"' in result(response.content())
