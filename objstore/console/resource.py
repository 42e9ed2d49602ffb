"""The /console mount: the console's static bundle, loaded into memory at startup and
served from a table of its files, so a request path is a key looked up in that table and
never a path on disk (no traversal, no file system call on the reactor thread).

`resolve` is the pure rule: /console redirects to /console/; /console/ and any route of
the single-page app (a path whose last segment has no dot, outside assets/) answer
index.html; a bundle file answers itself; anything else, and any `.`/`..` segment or
one holding a slash or a backslash however it was encoded, is a 404. Hashed assets are
cached for a year; index.html and the rest are revalidated (ETag, If-None-Match).
The browser signs its own S3 and admin calls; nothing here knows about credentials.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twisted.web.resource import Resource

STATIC_DIR = Path(__file__).parent / "static"
INDEX = "index.html"
ASSETS = "assets"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
    ".woff2": "font/woff2",
}
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
# The app loads only its own files and talks only to its own origin.
CSP = ("default-src 'self'; connect-src 'self'; img-src 'self' data: blob:; "
       "style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; "
       "frame-ancestors 'none'; form-action 'self'")


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str
    cache_control: str
    etag: str


@dataclass(frozen=True)
class Redirect:
    location: str


def load_bundle(directory: Path = STATIC_DIR) -> dict[str, StaticFile]:
    """Every file of the bundle by its path relative to `directory` ('/'-separated)."""
    files: dict[str, StaticFile] = {}
    if not directory.is_dir():
        return files
    for path in sorted(directory.rglob("*")):
        if not path.is_file():
            continue
        name = path.relative_to(directory).as_posix()
        body = path.read_bytes()
        files[name] = StaticFile(
            body=body,
            content_type=CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream"),
            cache_control=IMMUTABLE if name.startswith(ASSETS + "/") else REVALIDATE,
            etag='"' + hashlib.sha256(body).hexdigest()[:32] + '"',
        )
    return files


def resolve(files: dict[str, StaticFile], segments: list[bytes]) -> StaticFile | Redirect | None:
    """What a request for /console/<segments> answers (segments as twisted.web decodes
    them: each one unquoted); None is a 404."""
    if not segments:
        return Redirect("/console/")
    try:
        names = [s.decode("utf-8") for s in segments]
    except UnicodeDecodeError:
        return None
    if any(n in (".", "..") or "/" in n or "\\" in n or "\x00" in n for n in names):
        return None
    if names == [""]:
        return files.get(INDEX)
    found = files.get("/".join(names))
    if found is not None:
        return found
    if names[0] == ASSETS or "." in names[-1]:
        return None  # a missing file, not a route of the app
    return files.get(INDEX)


class ConsoleResource(Resource):
    """The leaf mounted at /console by `http/root.py`."""

    isLeaf = True

    def __init__(self, files: dict[str, StaticFile] | None = None) -> None:
        super().__init__()
        self._files = load_bundle() if files is None else files

    def render(self, request: Any) -> bytes:
        if request.method in (b"GET", b"HEAD"):  # twisted.web drops the body of a HEAD
            return self._get(request)
        request.setResponseCode(405)
        request.setHeader(b"Allow", b"GET, HEAD")
        request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
        return b"Method not allowed.\n"

    def _get(self, request: Any) -> bytes:
        found = resolve(self._files, list(request.postpath))
        request.setHeader(b"X-Content-Type-Options", b"nosniff")
        if isinstance(found, Redirect):
            query = request.uri.partition(b"?")[2]
            request.setResponseCode(301)
            location = found.location.encode() + (b"?" + query if query else b"")
            request.setHeader(b"Location", location)
            return b""
        if found is None:
            request.setResponseCode(404)
            request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
            request.setHeader(b"Cache-Control", b"no-store")
            return b"Not found.\n"
        request.setHeader(b"Content-Type", found.content_type.encode())
        request.setHeader(b"Cache-Control", found.cache_control.encode())
        request.setHeader(b"ETag", found.etag.encode())
        request.setHeader(b"Referrer-Policy", b"no-referrer")
        if found.content_type.startswith("text/html"):
            request.setHeader(b"Content-Security-Policy", CSP.encode())
        if found.etag.encode() in (request.getHeader(b"if-none-match") or b"").split(b", "):
            request.setResponseCode(304)
            return b""
        return found.body
