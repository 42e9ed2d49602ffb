"""CPU per authorization decision of a non-root user (`Authorizer.authorize`), in process.

The hot path of a user's 4 KiB GET asks the one decision once: identity policies from the
per-user cache, the bucket's access settings from the per-bucket cache. This measures that
call alone (the coroutine driven without a reactor: every cache is warm, nothing awaits),
for a bucket without documents (the common case: no policy, ACLs disabled), a bucket with a
bucket policy, and a bucket with ACLs enabled, so a change to the decision can be judged
in microseconds rather than in the noise of a whole request on a shared machine. The
`request` rows ask through the S3 API's entry (`s3.access.permits_needs`: condition values,
the existing-tags check, the object ACL retry), as a request's admission does. CPU time
(`time.process_time`), so a busy machine moves the figures less.

    .venv/bin/python -m bench.decision             # median of 5 rounds of 200,000 calls
    .venv/bin/python -m bench.decision --calls 50000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Coroutine
from types import SimpleNamespace
from typing import Any, TypeVar, cast

from twisted.internet import defer

from objstore.iam.authorizer import Authorizer
from objstore.iam.bucket_access import BucketAccessLoader
from objstore.iam.decision import Need
from objstore.iam.identity import Principal
from objstore.meta.iam_records import EffectiveGrant, GrantRecord
from objstore.meta.records import BucketRecord
from objstore.s3.access import permits_needs

T = TypeVar("T")

USER = Principal("u-bench", "bench", False, "AKBENCH")
FULL_ACCESS = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": ["s3:*"], "Resource": ["*"]}]}
POLICY = ('{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*",'
          '"Action":"s3:GetObject","Resource":"arn:aws:s3:::with-policy/public/*"}]}')
DOCUMENTS: dict[str, dict[str, str]] = {
    "plain": {},
    "with-policy": {"policy": POLICY},
    "with-acls": {"ownership": "ObjectWriter"},
}


class Grants:
    def effective_grants(self, user_id: str) -> defer.Deferred[list[EffectiveGrant] | None]:
        return defer.succeed([EffectiveGrant(GrantRecord("g", "full", FULL_ACCESS, 0.0),
                                             "direct")])


class Buckets:
    def get_bucket(self, name: str) -> defer.Deferred[BucketRecord | None]:
        return defer.succeed(BucketRecord(name, "u-owner", "us-east-1", 0.0))

    def cached_bucket_config(self, bucket: str, key: str) -> defer.Deferred[str | None]:
        return defer.succeed(DOCUMENTS[bucket].get(key))


def finished(coroutine: Coroutine[Any, Any, T]) -> T:
    """The value of a coroutine that never suspends (every cache is warm)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise RuntimeError("the decision awaited: a cache was cold")


def warm(coroutine: Coroutine[Any, Any, T]) -> T:
    return cast(T, defer.Deferred.fromCoroutine(coroutine).result)


def micros_per_call(authorizer: Authorizer, bucket: str, calls: int) -> float:
    needs = (Need("s3:GetObject", f"arn:aws:s3:::{bucket}/k", bucket, key="k"),)
    warm(authorizer.authorize(USER, needs))
    started = time.process_time()
    for _ in range(calls):
        decision = finished(authorizer.authorize(USER, needs))
    elapsed = time.process_time() - started
    assert decision.allowed
    return elapsed / calls * 1e6


def micros_per_request(authorizer: Authorizer, bucket: str, calls: int) -> float:
    services: Any = SimpleNamespace(authorizer=authorizer)
    needs = (Need("s3:GetObject", f"arn:aws:s3:::{bucket}/k", bucket, key="k"),)
    request: Any = None  # read only by condition keys: none here
    warm(permits_needs(services, request, USER, needs))
    started = time.process_time()
    for _ in range(calls):
        allowed = finished(permits_needs(services, request, USER, needs))
    elapsed = time.process_time() - started
    assert allowed
    return elapsed / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    clock = time.monotonic
    loader = BucketAccessLoader(Buckets(), clock=clock, ttl_seconds=3600.0, max_entries=16)
    authorizer = Authorizer(Grants(), clock=clock, ttl_seconds=3600.0, max_entries=16,
                            buckets=loader)
    for name, measure in (("decision", micros_per_call), ("request", micros_per_request)):
        for bucket in DOCUMENTS:
            rounds = [measure(authorizer, bucket, args.calls) for _ in range(args.rounds)]
            print(f"{name:8} {bucket:12} {statistics.median(rounds):6.2f} us CPU "
                  f"(median of {args.rounds} x {args.calls:,}; min {min(rounds):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
