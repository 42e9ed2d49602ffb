"""An in-memory node for the resource tests: the real root resource, S3 and admin APIs, site
and authenticator (real SigV4) behind treq's StubTreq, with a `Clock` and small fakes for
the credential store, the authorizer and the engine services. No socket, no thread, no
database: every Deferred fires before `send` returns."""

from __future__ import annotations

import datetime
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from objstore.admin.api import AdminApi
from objstore.audit.log import AuditLog
from objstore.audit.requests import RequestRecorder
from objstore.blobs.space import SpaceGuard
from objstore.config import ServerLimits
from objstore.engine.changes import Caller
from objstore.engine.replicator import NO_GATE, WriteGate
from objstore.errors import S3Error
from objstore.http import cors, sigv4
from objstore.http.authn import Authenticator
from objstore.http.health import HealthState
from objstore.http.ratelimit import RequestRateLimits
from objstore.http.root import RootResource
from objstore.http.site import ObjstoreSite
from objstore.iam.decision import Decision
from objstore.iam.identity import Principal, ResolvedCredential
from objstore.meta.audit_queries import AuditRecord
from objstore.metrics.registry import NodeMetrics
from objstore.s3.api import S3Api, S3Services

REGION = "us-east-1"
NOW = 1_700_000_000.0
ROOT = Principal("u-root", "root", True, "AKIAROOT")
ALICE = Principal("u-alice", "alice", False, "AKIAALICE")
SECRETS = {"AKIAROOT": "root-secret", "AKIAALICE": "alice-secret"}


class FakeIdentities:
    """The credential store: access key -> (principal, secret)."""

    def __init__(self) -> None:
        self.known = {p.access_key: ResolvedCredential(p, SECRETS[p.access_key])
                      for p in (ROOT, ALICE)}

    async def resolve(self, access_key: str) -> ResolvedCredential | None:
        return self.known.get(access_key)


@dataclass
class FakeAuthorizer:
    """Root passes; anyone else needs an (action, resource) in `grants` ("*": any)."""

    grants: set[tuple[str, str]] = field(default_factory=set)
    denied: set[str] = field(default_factory=set)  # actions refused whatever the grants
    checked: list[tuple[str, str, str]] = field(default_factory=list)
    anonymous: set[str] = field(default_factory=set)  # actions anyone may do, unsigned

    async def allowed(self, principal: Principal, action: str, resource: str) -> bool:
        self.checked.append((principal.username, action, resource))
        if action in self.denied:
            return False
        return principal.is_root or bool(
            {(action, resource), (action, "*"), ("*", "*")} & self.grants)

    async def effective_actions(self, principal: Principal) -> list[str]:
        return ["*"] if principal.is_root else sorted(a for a, _ in self.grants)

    async def authorize(self, principal: Principal | None, needs: Any, values: Any = None,
                        object_acls: Any = None) -> Decision:
        """The decision seam: every need through `allowed` (anonymous: never)."""
        for need in needs:
            if principal is None:
                if need.action not in self.anonymous:
                    return Decision(False, "fake", need)
            elif not await self.allowed(principal, need.action, need.resource):
                return Decision(False, "fake", need)
        return Decision(True, "fake")

    async def bucket_access(self, bucket: str) -> Any:
        return None

    def cached_bucket_access(self, bucket: str) -> tuple[bool, Any]:
        return True, None

    async def object_acl_wanted(self, decision: Decision) -> None:
        return None  # no bucket here enables ACLs

    async def check(self, principal: Principal, action: str, resource: str,
                    query: Any = None) -> None:
        if not await self.allowed(principal, action, resource):
            raise S3Error("AccessDenied")


class FakeBuckets:
    def __init__(self) -> None:
        self.records: dict[str, Any] = {}
        self.callers: list[Caller] = []  # who asked for each change, in order

    async def list(self) -> list[Any]:
        return [self.records[name] for name in sorted(self.records)]

    async def get(self, name: str) -> Any:
        if name not in self.records:
            raise S3Error("NoSuchBucket", BucketName=name)
        return self.records[name]

    async def create(self, caller: Caller, name: str, *, location: str | None,
                     object_lock: bool) -> None:
        self.callers.append(caller)
        if name in self.records:
            raise S3Error("BucketAlreadyOwnedByYou", BucketName=name)
        self.records[name] = SimpleNamespace(name=name, created_at=NOW, region=REGION)

    async def delete(self, caller: Caller, name: str) -> None:
        self.callers.append(caller)
        await self.get(name)
        del self.records[name]


class FakeNoStore:
    def insert_audit_records(self, records: Any) -> Any:
        raise AssertionError("nothing is written in these tests")

    def purge_audit(self, before_ts: float, batch_size: int = 0) -> Any:
        raise AssertionError("nothing is purged in these tests")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class Node:
    """One node in memory. `send` signs as `who` (None: unsigned) and returns the answer."""

    def __init__(self, tmp_path: Path, *, limits: ServerLimits | None = None,
                 space: SpaceGuard | None = None, gate: WriteGate = NO_GATE,
                 signature_v2: bool = True, cors_origins: tuple[str, ...] = ()) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        limits = limits or ServerLimits()
        self.authorizer = FakeAuthorizer()
        self.buckets = FakeBuckets()
        services: Any = S3Services(
            buckets=self.buckets,  # type: ignore[arg-type]
            objects=None, multipart=None,  # type: ignore[arg-type]
            authorizer=self.authorizer,  # type: ignore[arg-type]
            bucket_config=None, versions=None, lifecycle=None,  # type: ignore[arg-type]
        )
        identities: Any = FakeIdentities()
        authenticator = Authenticator(identities, regions={REGION}, now=self.now,
                                      signature_v2=signature_v2)
        rate_limits = RequestRateLimits.from_limits(limits, clock=self.clock.seconds)
        self.health = HealthState()
        self.admin = AdminApi(health=self.health, authenticator=authenticator,
                              info=lambda: {"version": "test"}, rate_limits=rate_limits,
                              authorizer=self.authorizer,  # type: ignore[arg-type]
                              space=space)
        root = RootResource(s3=S3Api(services, authenticator, rate_limits, space,
                                      gate).resource(),
                            admin=self.admin.resource(), limits=limits, domains=("s3.test",),
                            cors_rules=cors.node_rules(cors_origins))
        self.site = ObjstoreSite(root, tmp_dir=str(tmp_path), limits=limits,
                                 server_header="objstore")
        self.site.timeOut = None  # no idle timer on the global reactor
        self.site.space = space
        self.audit = AuditLog(FakeNoStore(), node_id="node-a", clock=self.clock)
        self.metrics = NodeMetrics(node_id="node-a", version="0.test")
        self.site.observer = RequestRecorder(audit=self.audit, metrics=self.metrics.requests,
                                             clock=self.clock.seconds)
        self.treq = StubTreq(root)
        # StubTreq serves its resource from a plain Site; the APIs need the node's own
        # (its request class carries the request id, the body spool and the audit notes).
        self.treq._agent._serverFactory = self.site

    def now(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.clock.seconds(), datetime.UTC)

    def send(self, method: str, url: str, *, who: Principal | None = ROOT, body: bytes = b"",
             headers: dict[str, str] | None = None,
             unsigned: dict[str, str] | None = None) -> Answer:
        headers = dict(headers or {})
        if who is not None:
            headers.update(sigv4.sign_headers(
                method, url, headers, hashlib.sha256(body).hexdigest(), who.access_key,
                SECRETS[who.access_key], REGION, self.now()))
        headers.update(unsigned or {})
        headers.setdefault("host", urlsplit(url).netloc)
        sent = self.treq.request(method, url, headers={k: [v] for k, v in headers.items()},
                                 data=body or None)
        response = _result(sent)
        content = _result(response.content())
        return Answer(response.code,
                      {k.decode().lower(): v[-1].decode()
                       for k, v in response.headers.getAllRawHeaders()},
                      content)

    def records(self) -> list[AuditRecord]:
        return self.audit.queue.take(1000)


def _result(deferred: Deferred[Any]) -> Any:
    """The result of a Deferred that has fired (everything here is synchronous)."""
    found: list[Any] = []
    deferred.addBoth(found.append)
    assert found, "the request did not complete in memory"
    if hasattr(found[0], "raiseException"):
        found[0].raiseException()
    return found[0]
