"""The cluster's HTTP client (cluster/http_agent.py) against a real twisted.web server on
loopback: requests go out as given (method, headers, a body in memory or from a producer),
and an answer is streamed to its reader, never kept whole in memory (treq's client kept
every answer body: a blob fetched for anti-entropy or repair stayed in RAM whole)."""

from __future__ import annotations

import io
import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
import treq
from twisted.internet import reactor
from twisted.internet.interfaces import IPullProducer
from twisted.web.client import Agent, FileBodyProducer, HTTPConnectionPool
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site
from zope.interface import implementer

from objstore.cluster.http_agent import AgentHttp

MIB = 1024 * 1024
BIG_MIB = 64


class Echo(Resource):
    isLeaf = True

    def render(self, request: Any) -> bytes:
        body = request.content.read()
        return json.dumps({
            "method": request.method.decode(), "path": request.uri.decode(),
            "x-test": (request.getHeader(b"x-test") or b"").decode(),
            "content-length": (request.getHeader(b"content-length") or b"").decode(),
            "length": len(body), "body-start": body[:16].decode("latin-1"),
        }).encode()


@implementer(IPullProducer)
class _Chunks:
    """BIG_MIB MiB, one MiB each time the transport asks for more (backpressure: the
    server holds about one chunk at a time)."""

    def __init__(self, request: Any) -> None:
        self._request = request
        self._left = BIG_MIB

    def resumeProducing(self) -> None:  # noqa: N802
        if self._left == 0:
            self._request.unregisterProducer()
            self._request.finish()
            return
        self._left -= 1
        self._request.write(b"x" * MIB)

    def stopProducing(self) -> None:  # noqa: N802
        self._left = 0


class Big(Resource):
    isLeaf = True

    def render_GET(self, request: Any) -> Any:  # noqa: N802
        request.setHeader(b"content-length", str(BIG_MIB * MIB).encode())
        request.registerProducer(_Chunks(request), False)
        return NOT_DONE_YET


@pytest.fixture
def server() -> Iterator[str]:
    root = Resource()
    root.putChild(b"echo", Echo())
    root.putChild(b"big", Big())
    port = reactor.listenTCP(0, Site(root), interface="127.0.0.1")  # type: ignore[attr-defined]
    yield f"http://127.0.0.1:{port.getHost().port}"
    port.stopListening()


@pytest.fixture
def http() -> Iterator[AgentHttp]:
    pool = HTTPConnectionPool(reactor, persistent=True)
    yield AgentHttp(Agent(reactor, pool=pool))
    pool.closeCachedConnections()


@pytest_twisted.ensureDeferred
async def test_a_request_goes_out_as_given(server: str, http: AgentHttp) -> None:
    answer = await http.request("POST", server + "/echo?a=1%2F2",
                                headers={"x-test": ["v 1"]}, data=b"0123456789" * 100)
    assert answer.code == 200
    echoed = json.loads(await treq.content(answer))
    assert echoed == {"method": "POST", "path": "/echo?a=1%2F2", "x-test": "v 1",
                      "content-length": "1000", "length": 1000,
                      "body-start": "0123456789012345"}
    producer = FileBodyProducer(io.BytesIO(b"y" * 3 * MIB))
    answer = await http.request("PUT", server + "/echo", data=producer)
    echoed = json.loads(await treq.content(answer))
    assert (echoed["method"], echoed["length"]) == ("PUT", 3 * MIB)
    answer = await http.request("GET", server + "/echo")
    echoed = json.loads(await treq.content(answer))
    assert (echoed["method"], echoed["length"], echoed["content-length"]) == ("GET", 0, "")


@pytest_twisted.ensureDeferred
async def test_an_answer_streams_through_and_is_not_kept(server: str,
                                                         http: AgentHttp) -> None:
    """64 MiB read into a sink that keeps nothing: the client's own memory stays far below
    the answer's size (treq's buffered response held all 64 MiB)."""
    received = [0]

    def sink(data: bytes) -> None:
        received[0] += len(data)

    tracemalloc.start()
    try:
        answer = await http.request("GET", server + "/big")
        await treq.collect(answer, sink)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert received[0] == BIG_MIB * MIB
    assert peak < 16 * MIB, f"{peak / MIB:.0f} MiB held while streaming {BIG_MIB} MiB"


def test_options_it_does_not_have_are_refused(http: AgentHttp) -> None:
    with pytest.raises(TypeError, match="unbuffered"):
        http.request("GET", "http://127.0.0.1:1/", unbuffered=True)
