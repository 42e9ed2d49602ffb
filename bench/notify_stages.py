"""CPU per event of each stage of a bucket notification, in one process (no wrk, no S3).

Usage (from the repository root):
    .venv/bin/python -m bench.notify_stages [--events 3000] [--rounds 2]

The daemon-level bench (bench.notify) measures the whole path, but on a machine shared
with other work its CPU per request moves with the load; each stage here is timed alone
(`time.process_time`: this process's CPU, its threads included) over `--events` events,
the stages alternating for `--rounds` rounds. A real SQLite database and DbPool, as the
daemon runs them; an nginx receiver (bench/receivers.py) in its own process:

- `post, treq`: the webhook POST as it was first (treq's HTTPClient on an Agent, the
  answer buffered), one at a time; `post, agent`: as it was in session 12 (a bare
  `Agent` with its endpoints kept, the body producer, the answer read to its end);
  `post, webhook`: `WebhookTarget.deliver` (its own HTTP/1.1 client, session 13);
- `consumer + enqueue`: `NotificationConsumer.deliver` over pages of 200 outbox entries
  (event documents, rule matching, one `notification_enqueue` transaction per page);
- `delivery, null target`: `NotificationDelivery` runs over the queued rows with a
  target that accepts at once (the due SELECT, the rows as events, delivered marks);
- `delivery, webhook`: the same with the webhook target (the sum of both).

It never runs in the test suite.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import treq
from treq.client import HTTPClient
from twisted.internet import defer, reactor, task
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.client import (
    URI,
    Agent,
    FileBodyProducer,
    HTTPConnectionPool,
)
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer

from bench.receivers import NginxReceiver
from bench.report import machine_description
from objstore.config import Notifications
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.notification_queries import NewDelivery
from objstore.meta.outbox_queries import OutboxEntry
from objstore.meta.pool import DbPool
from objstore.meta.store import SyncMetaStore
from objstore.notify.consumer import NotificationConsumer
from objstore.notify.delivery import NotificationDelivery
from objstore.notify.records import EventContext, event_document
from objstore.notify.rules import NotificationConfiguration, NotificationRule
from objstore.notify.targets.base import Event
from objstore.notify.targets.webhook import WebhookTarget, adhoc_settings

PAGE = 200


class TreqTarget:
    """The webhook POST as the target made it before (treq, the answer buffered)."""

    name = kind = "treq"

    def __init__(self, url: str) -> None:
        self._url = url
        self._pool = HTTPConnectionPool(reactor, persistent=True)
        self._pool.maxPersistentPerHost = 2
        self._client = HTTPClient(Agent(reactor, pool=self._pool))

    async def deliver(self, event: Event) -> None:
        response = await self._client.post(
            self._url, data=event.body, timeout=10.0,
            headers={b"Content-Type": [b"application/json"],
                     b"User-Agent": [b"objstore-notifications"]})
        await treq.content(response)
        assert 200 <= response.code < 300, response.code

    async def close(self) -> None:
        await self._pool.closeCachedConnections()


class _Drain(Protocol):
    """Reads an answer's body to its end and drops it (as session 12's `read_capped`)."""

    def __init__(self, done: defer.Deferred[None]) -> None:
        self._done = done

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802
        self._done.callback(None)


class AgentTarget:
    """The webhook POST as session 12's target made it: an `Agent` on a persistent pool
    with its endpoint kept, the body in one producer, the answer's body read to its end."""

    name = kind = "agent"

    def __init__(self, url: str) -> None:
        self._url = url.encode("ascii")
        self._pool = HTTPConnectionPool(reactor, persistent=True)
        self._pool.maxPersistentPerHost = 2
        uri = URI.fromBytes(self._url)
        endpoint = HostnameEndpoint(reactor, uri.host.decode("ascii"), uri.port)

        @implementer(IAgentEndpointFactory)
        class Kept:
            def endpointForURI(self, uri: URI) -> Any:  # noqa: N802 (Twisted's)
                return endpoint

        self._agent = Agent.usingEndpointFactory(reactor, Kept(), pool=self._pool)
        self._headers = Headers({b"Content-Type": [b"application/json"],
                                 b"User-Agent": [b"objstore-notifications"]})

    async def deliver(self, event: Event) -> None:
        response = await self._agent.request(b"POST", self._url, self._headers,
                                             FileBodyProducer(io.BytesIO(event.body)))
        done: defer.Deferred[None] = defer.Deferred()
        response.deliverBody(_Drain(done))
        await done
        assert 200 <= response.code < 300, response.code

    async def close(self) -> None:
        await self._pool.closeCachedConnections()


class NullTarget:
    name = kind = "null"

    async def deliver(self, event: Event) -> None:
        pass

    async def close(self) -> None:
        pass


def entries(count: int, first_seq: int) -> list[OutboxEntry]:
    now = time.time()
    return [OutboxEntry(seq=first_seq + i, kind="object_written", operation="PutObject",
                        bucket="hooked", key=f"k/{i:08d}", version_id="null", size=4096,
                        etag="0123456789abcdef0123456789abcdef", is_delete_marker=False,
                        principal="root-user-id", source_address="127.0.0.1",
                        request_id=f"RID{i:016d}", event_time=now) for i in range(count)]


class Stages:
    def __init__(self, meta: MetaStore, url: str, events: int) -> None:
        self.meta = meta
        self.url = url
        self.events = events
        self.seq = 1
        context = EventContext("us-east-1", "node-bench", "rule-1", "owner")
        self.document = event_document(entries(1, 1)[0], "s3:ObjectCreated:Put", context)

    def event(self) -> Event:
        return Event(self.document, "s3:ObjectCreated:Put", "hooked", "k", "", False)

    async def post(self, make: Callable[[], Any]) -> None:
        target = make()
        event = self.event()
        for _ in range(self.events):
            await target.deliver(event)
        await target.close()

    async def consumer(self) -> None:
        rule = NotificationRule(id="rule-1", kind="Queue", arn=self.url,
                                events=("s3:ObjectCreated:*",))
        config = NotificationConfiguration((rule,))

        class Configs:
            async def load(self, bucket: str) -> NotificationConfiguration:
                return config

        consumer = NotificationConsumer(self.meta, Configs(),  # type: ignore[arg-type]
                                        region="us-east-1", node_id="node-bench",
                                        clock=time.time)
        page = entries(self.events, self.seq)
        self.seq += self.events
        for start in range(0, len(page), PAGE):
            await consumer.deliver(page[start:start + PAGE])
        await self.drain(NullTarget)  # not timed by this stage's caller alone: see run

    async def queue(self) -> None:
        """Rows as the consumer queues them, not timed (see `delivery`)."""
        body = self.document.decode()
        rows = [NewDelivery(self.seq + i, self.url, "hooked", f"k/{i:08d}",
                            "s3:ObjectCreated:Put", body) for i in range(self.events)]
        for start in range(0, len(rows), PAGE):
            await self.meta.notification_enqueue("bench-stages", self.seq + start + PAGE,
                                                 rows[start:start + PAGE], time.time())
        self.seq += self.events + PAGE

    async def drain(self, make: Callable[[], Any]) -> None:
        work = NotificationDelivery(self.meta, {}, settings=Notifications(), clock=time.time,
                                    adhoc=lambda url: make())
        while await self.meta.notification_pending_targets():
            await work.tick()
            while work._running:  # noqa: SLF001 (a bench: wait for the run it started)
                await task.deferLater(reactor, 0.001, lambda: None)
        await work.close()


async def timed(work: Callable[[], Awaitable[None]]) -> float:
    started = time.process_time()
    await work()
    return time.process_time() - started


async def main(args: argparse.Namespace, workdir: Path) -> None:
    receiver = NginxReceiver(workdir)
    receiver.start()
    engine = create_db_engine("sqlite", str(workdir / "meta" / "bench.db"), None, 8)
    store = SyncMetaStore(engine)
    store.migrate()
    pool = DbPool.for_backend(reactor, "sqlite", 8)
    pool.start()
    stages = Stages(MetaStore(store, pool), receiver.url, args.events)
    url = receiver.url
    print("\n".join(machine_description(Path(__file__).resolve().parents[1])))
    print(f"{args.events} events per stage, load at start {json.dumps(list(_load()))}")
    try:
        await stages.post(lambda: TreqTarget(url))  # warm the clients up
        await stages.post(lambda: AgentTarget(url))
        await stages.post(lambda: WebhookTarget(adhoc_settings(url, 10.0)))
        for round_ in range(args.rounds):
            figures: dict[str, float] = {}
            figures["post, treq (before)"] = await timed(
                lambda: stages.post(lambda: TreqTarget(url)))
            figures["post, agent (session 12)"] = await timed(
                lambda: stages.post(lambda: AgentTarget(url)))
            figures["post, webhook"] = await timed(
                lambda: stages.post(lambda: WebhookTarget(adhoc_settings(url, 10.0))))
            figures["consumer + enqueue + null delivery"] = await timed(stages.consumer)
            await stages.queue()
            figures["delivery, null target"] = await timed(lambda: stages.drain(NullTarget))
            await stages.queue()
            figures["delivery, webhook"] = await timed(lambda: stages.drain(
                lambda: WebhookTarget(adhoc_settings(url, 10.0))))
            figures["consumer + enqueue"] = (figures["consumer + enqueue + null delivery"]
                                             - figures["delivery, null target"])
            for name, seconds in figures.items():
                print(f"round {round_ + 1} {name:36s} {seconds / args.events * 1e6:7.1f} us "
                      "CPU/event")
        print(f"load at end {json.dumps(list(_load()))}")
    finally:
        await pool.stop()
        receiver.stop()


def _load() -> tuple[float, ...]:
    import os

    return tuple(round(x, 2) for x in os.getloadavg())


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-notify-stages-") as tmp:
        done = defer.Deferred.fromCoroutine(main(args, Path(tmp)))
        done.addErrback(lambda failure: failure.printTraceback())
        done.addBoth(lambda _: reactor.stop())  # type: ignore[attr-defined]
        reactor.run()  # type: ignore[attr-defined]


if __name__ == "__main__":
    run()
