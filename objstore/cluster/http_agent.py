"""The HTTP client the cluster protocol runs on: Twisted's `Agent`, called directly.

`ClusterClient` needs little of an HTTP client: a method, an encoded URL, headers and a body
(bytes, or a producer of a known length) in; the status and a body it reads itself (bounded,
or streamed into a sink) out. treq's `HTTPClient` gave it that through layers it does not
use, each paid on every request, and one it must not have:

* treq keeps every response body in memory until the response is dropped (its
  `_BufferedResponse`, unless the request says `unbuffered`): a peer's blob fetched by
  anti-entropy or blob repair (GET /cluster/v1/blob/<id>) stayed whole in the fetching
  node's memory while it was written to disk, so catching up a multi-GiB object took that
  much RAM per fetch in flight;
* a cookie jar merged and a `CookieAgent`, a `RedirectAgent` and a gzip
  `ContentDecoderAgent` wrapped around the agent, and the URL parsed and re-encoded with
  hyperlink, per request: about a quarter of a node's reactor time in a 3-node quorum PUT
  run went to the cluster client (bench.quorum --profile).

`AgentHttp.request` keeps `HttpClient`'s signature (treq's, which the unit tests' `StubTreq`
also offers) and does only this: headers as given, bytes sent by `BytesProducer` in one
write, a producer as given, no redirects, no cookies, no decoding, the response unbuffered.
URLs must be ASCII (the client builds them from encoded paths and queries).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.web.client import Agent
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer, IResponse
from zope.interface import implementer


@implementer(IBodyProducer)
class BytesProducer:
    """A request body held in memory, written to the connection at once."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.length = len(data)

    def startProducing(self, consumer: Any) -> Deferred[None]:  # noqa: N802 (Twisted's)
        consumer.write(self._data)
        return succeed(None)

    def pauseProducing(self) -> None:  # noqa: N802
        pass

    def resumeProducing(self) -> None:  # noqa: N802
        pass

    def stopProducing(self) -> None:  # noqa: N802
        pass


class AgentHttp:
    """`HttpClient` (cluster/client.py) on a bare `Agent` (see the module docstring)."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def request(self, method: str, url: str, **kwargs: Any) -> Deferred[IResponse]:
        """`headers` (name -> values) and `data` (bytes or a producer of known length), as
        treq takes them; any other option is refused rather than ignored."""
        unknown = set(kwargs) - {"headers", "data"}
        if unknown:
            raise TypeError(f"AgentHttp.request takes no {', '.join(sorted(unknown))}")
        headers: Mapping[str, Sequence[str]] = kwargs.get("headers") or {}
        data: bytes | IBodyProducer | None = kwargs.get("data")
        raw = Headers({name.encode("ascii"): [value.encode("latin-1") for value in values]
                       for name, values in headers.items()})
        producer: Any = None  # an IBodyProducer (zope interfaces are not mypy types)
        if isinstance(data, bytes):
            producer = BytesProducer(data) if data else None
        elif data is not None:
            producer = data
        return self._agent.request(method.encode("ascii"), url.encode("ascii"), raw,
                                   producer)


__all__ = ["AgentHttp", "BytesProducer"]
