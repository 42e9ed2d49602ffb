"""A mixed write load's writes, and the state each leaves: what a fault test sends, and
what it must find afterwards.

Each writer owns its keys (in a bucket without versioning and in an object-lock bucket), so
its `Planner` knows the state of every one of them from its own acknowledged writes alone,
and draws the next write from a generator seeded by the test and from that state. A write
(`Change`) says how to send it and what its target looks like once it took effect; for a
write whose answer never came, the test gives it what was observed (the version id it
made), so that "before" and "after" can both be compared with what a node shows.
"""

from __future__ import annotations

import datetime
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

PLAIN, LOCKED = "kill-plain", "kill-locked"
PLAIN_KEYS, LOCKED_KEYS, MAX_VERSIONS = 5, 3, 4
KIB, MIB = 1024, 1024 * 1024
PART_BYTES = 5 * MIB
WEIGHTS = {
    "put_small": 4, "put_large": 2, "multipart": 1, "copy": 2, "delete": 2, "tag": 2,
    "locked_put": 4, "delete_marker": 1, "delete_version": 2, "retention": 2,
    "legal_hold": 2, "locked_tag": 1,
}
# A planner's first writes are one of every kind (its later choices depend on the seed and
# on its own writes only, so a test can count on each kind being acknowledged).
TOUR = ("put_small", "put_large", "multipart", "copy", "tag", "delete", "locked_put",
        "locked_put", "retention", "legal_hold", "locked_tag", "delete_marker",
        "delete_version")

Tags = tuple[tuple[str, str], ...]
Target = tuple[str, str]  # (bucket, key)


@dataclass(frozen=True)
class Obj:
    """An object's bytes as a client reads them back, and its tags."""

    md5: str
    size: int
    etag: str
    tags: Tags = ()


@dataclass(frozen=True)
class Version:
    version_id: str | None
    obj: Obj | None  # None: a delete marker
    retention: tuple[str, datetime.datetime] | None = None
    legal_hold: bool = False


@dataclass(frozen=True)
class VersionSet:
    """A key's versions as listings show them: which exist, and which is the latest."""

    versions: frozenset[Version]
    latest: str | None


# A PLAIN key: its object or None. A LOCKED key: its versions, newest first.
KeyState = Obj | tuple[Version, ...] | None
Answer = dict[str, Any]


def comparable(state: KeyState | VersionSet) -> Obj | VersionSet | None:
    if isinstance(state, tuple):
        return VersionSet(frozenset(state), state[0].version_id if state else None)
    return state


def obj_of(body: bytes, etag: str | None = None) -> Obj:
    md5 = hashlib.md5(body).hexdigest()
    return Obj(md5, len(body), etag or f'"{md5}"')


def multipart_etag(parts: list[bytes]) -> str:
    digests = b"".join(hashlib.md5(part).digest() for part in parts)
    return f'"{hashlib.md5(digests).hexdigest()}-{len(parts)}"'


def tag_tuple(tag_set: list[dict[str, str]]) -> Tags:
    return tuple(sorted((tag["Key"], tag["Value"]) for tag in tag_set))


def without(versions: tuple[Version, ...], version_id: str | None) -> tuple[Version, ...]:
    return tuple(v for v in versions if v.version_id != version_id)


def changed(versions: tuple[Version, ...], version_id: str | None, **what: Any
            ) -> tuple[Version, ...]:
    return tuple(replace(v, **what) if v.version_id == version_id else v for v in versions)


@dataclass
class Change:
    """One write: its requests, and the state of its target once it took effect.

    `after(state, answer)` is given the acknowledgement, or, for a write whose answer never
    came, what was observed of it (the version id it would have made)."""

    kind: str
    target: Target
    send: Callable[[Any], Answer]
    after: Callable[[Any, Answer], KeyState]
    etag: str | None = None  # what the acknowledgement must name
    prepare: Callable[[Any], None] | None = None  # requests that change nothing visible


class Planner:
    """Draws one writer's next write from its seeded generator and the state of its keys
    (which only it writes)."""

    def __init__(self, seed: int, writer: int) -> None:
        self.rng = random.Random(f"{seed}:{writer}")
        self.plain = [f"w{writer}/p{i}" for i in range(PLAIN_KEYS)]
        self.locked = [f"w{writer}/l{i}" for i in range(LOCKED_KEYS)]
        self.model: dict[Target, KeyState] = {(PLAIN, key): None for key in self.plain}
        self.model.update({(LOCKED, key): () for key in self.locked})
        self.tour = list(TOUR)
        self.acknowledged_kinds: set[str] = set()
        self.makers: dict[str, Callable[[], Change | None]] = {
            kind: getattr(self, kind) for kind in WEIGHTS}

    def next(self) -> Change:
        if self.tour:
            kind = self.tour.pop(0)
        else:
            kind = self.rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
        return self.makers[kind]() or self.put_small()

    def acknowledge(self, change: Change, answer: Answer) -> None:
        self.model[change.target] = change.after(self.model[change.target], answer)
        self.acknowledged_kinds.add(change.kind)

    # -- what is there to write on ---------------------------------------------------------
    def _objects(self) -> list[str]:
        return [key for key in self.plain if self.model[(PLAIN, key)] is not None]

    def _versions(self, keep: Callable[[Version], bool]) -> list[tuple[str, Version]]:
        return [(key, v) for key in self.locked for v in self._stack(key) if keep(v)]

    def _stack(self, key: str) -> tuple[Version, ...]:
        versions = self.model[(LOCKED, key)]
        assert isinstance(versions, tuple)
        return versions

    def _body(self, large: bool) -> bytes:
        return self.rng.randbytes(MIB + self.rng.randint(1, 512 * KIB) if large
                                  else self.rng.randint(1, 64 * KIB))

    def _tags(self) -> Tags:
        return tuple(sorted((f"t{i}", str(self.rng.randrange(1000)))
                            for i in range(self.rng.randint(1, 3))))

    def _until(self) -> datetime.datetime:
        now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        return now + datetime.timedelta(days=self.rng.randint(1, 30))

    # -- the writes on PLAIN (no versioning) ----------------------------------------------
    def put_small(self, large: bool = False) -> Change:
        key, body = self.rng.choice(self.plain), self._body(large)
        obj = obj_of(body)
        return Change("put_large" if large else "put_small", (PLAIN, key),
                      lambda s3: s3.put_object(Bucket=PLAIN, Key=key, Body=body),
                      lambda _state, _answer: obj, obj.etag)

    def put_large(self) -> Change:
        return self.put_small(large=True)

    def multipart(self) -> Change:
        key = self.rng.choice(self.plain)
        parts = [self.rng.randbytes(PART_BYTES), self.rng.randbytes(self.rng.randint(1, 256 * KIB))]
        obj = obj_of(b"".join(parts), multipart_etag(parts))
        upload: dict[str, Any] = {}

        def prepare(s3: Any) -> None:
            upload["id"] = s3.create_multipart_upload(Bucket=PLAIN, Key=key)["UploadId"]
            upload["parts"] = [
                {"PartNumber": n, "ETag": s3.upload_part(Bucket=PLAIN, Key=key, PartNumber=n,
                                                         UploadId=upload["id"],
                                                         Body=part)["ETag"]}
                for n, part in enumerate(parts, start=1)]

        def complete(s3: Any) -> Answer:
            return dict(s3.complete_multipart_upload(
                Bucket=PLAIN, Key=key, UploadId=upload["id"],
                MultipartUpload={"Parts": upload["parts"]}))

        return Change("multipart", (PLAIN, key), complete, lambda _s, _a: obj, obj.etag,
                      prepare)

    def copy(self) -> Change | None:
        sources = self._objects()
        if not sources:
            return None
        source = self.rng.choice(sources)
        key = self.rng.choice([k for k in self.plain if k != source])
        copied = self.model[(PLAIN, source)]
        assert isinstance(copied, Obj)
        obj = replace(copied, etag=f'"{copied.md5}"')  # tags are copied too (COPY)

        def send(s3: Any) -> Answer:
            result = s3.copy_object(Bucket=PLAIN, Key=key,
                                    CopySource={"Bucket": PLAIN, "Key": source})
            return {"ETag": result["CopyObjectResult"]["ETag"]}

        return Change("copy", (PLAIN, key), send, lambda _s, _a: obj, obj.etag)

    def delete(self) -> Change | None:
        if not (keys := self._objects()):
            return None
        key = self.rng.choice(keys)
        return Change("delete", (PLAIN, key),
                      lambda s3: s3.delete_object(Bucket=PLAIN, Key=key),
                      lambda _s, _a: None)

    def tag(self) -> Change | None:
        if not (keys := self._objects()):
            return None
        key, tags = self.rng.choice(keys), self._tags()
        return Change("tag", (PLAIN, key),
                      lambda s3: s3.put_object_tagging(Bucket=PLAIN, Key=key, Tagging={
                          "TagSet": [{"Key": k, "Value": v} for k, v in tags]}),
                      lambda state, _a: replace(state, tags=tags))

    # -- the writes on LOCKED (versioned, object lock) ------------------------------------
    def _roomy_key(self) -> str | None:
        keys = [k for k in self.locked if len(self._stack(k)) < MAX_VERSIONS]
        return self.rng.choice(keys) if keys else None

    def locked_put(self) -> Change | None:
        if (key := self._roomy_key()) is None:
            return None
        body = self._body(large=self.rng.random() < 0.2)
        until = self._until() if self.rng.random() < 0.6 else None
        hold = self.rng.random() < 0.4
        lock: dict[str, Any] = {"ObjectLockLegalHoldStatus": "ON"} if hold else {}
        if until is not None:
            lock.update(ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=until)
        obj = obj_of(body)
        made = Version(None, obj, ("GOVERNANCE", until) if until else None, hold)
        return Change("locked_put", (LOCKED, key),
                      lambda s3: s3.put_object(Bucket=LOCKED, Key=key, Body=body, **lock),
                      lambda state, answer: (replace(made, version_id=answer["VersionId"]),
                                             *state), obj.etag)

    def delete_marker(self) -> Change | None:
        if (key := self._roomy_key()) is None:
            return None
        return Change("delete_marker", (LOCKED, key),
                      lambda s3: s3.delete_object(Bucket=LOCKED, Key=key),
                      lambda state, answer: (Version(answer["VersionId"], None), *state))

    def delete_version(self) -> Change | None:
        if not (found := self._versions(lambda v: not v.legal_hold)):
            return None
        key, version = self.rng.choice(found)
        return Change("delete_version", (LOCKED, key),
                      lambda s3: s3.delete_object(Bucket=LOCKED, Key=key,
                                                  VersionId=version.version_id,
                                                  BypassGovernanceRetention=True),
                      lambda state, _a: without(state, version.version_id))

    def retention(self) -> Change | None:
        if not (found := self._versions(lambda v: v.obj is not None)):
            return None
        (key, version), until = self.rng.choice(found), self._until()
        return Change("retention", (LOCKED, key),
                      lambda s3: s3.put_object_retention(
                          Bucket=LOCKED, Key=key, VersionId=version.version_id,
                          Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until},
                          BypassGovernanceRetention=True),
                      lambda state, _a: changed(state, version.version_id,
                                                retention=("GOVERNANCE", until)))

    def legal_hold(self) -> Change | None:
        if not (found := self._versions(lambda v: v.obj is not None)):
            return None
        key, version = self.rng.choice(found)
        hold = not version.legal_hold
        return Change("legal_hold", (LOCKED, key),
                      lambda s3: s3.put_object_legal_hold(
                          Bucket=LOCKED, Key=key, VersionId=version.version_id,
                          LegalHold={"Status": "ON" if hold else "OFF"}),
                      lambda state, _a: changed(state, version.version_id, legal_hold=hold))

    def locked_tag(self) -> Change | None:
        if not (found := self._versions(lambda v: v.obj is not None)):
            return None
        (key, version), tags = self.rng.choice(found), self._tags()

        def after(state: tuple[Version, ...], _answer: Answer) -> KeyState:
            return tuple(replace(v, obj=replace(v.obj, tags=tags))
                         if v.version_id == version.version_id and v.obj else v
                         for v in state)

        return Change("locked_tag", (LOCKED, key),
                      lambda s3: s3.put_object_tagging(
                          Bucket=LOCKED, Key=key, VersionId=version.version_id,
                          Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in tags]}),
                      after)
