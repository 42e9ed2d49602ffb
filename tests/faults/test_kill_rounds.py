"""SIGKILL rounds under a mixed write load, against a real two-worker node.

Writers (threads, each with its own boto3 client and its own keys, so that each knows the
state of its keys) run a mix drawn from `random.Random` with a fixed seed: PUTs small and
over 1 MiB, multipart uploads, copies, deletes, tag changes, and in an object-lock bucket
PUTs with retention and legal hold, delete markers, deletes by version id, retention and
legal-hold changes. Each round the node is SIGKILLed under that load: the whole process
tree in some rounds, the supervisor alone in the others (its workers stop listening at
once and finish what is in flight, one of them holding a half-received upload open, while
the node is started again at once). After each restart:

* every acknowledged write is there and exact (bytes by MD5 and ETag, tags, retention,
  legal hold), and what was deleted stays deleted; for the one write per writer whose
  answer never came, the state before it or the state after it, whole;
* everything listed reads back whole (each listed version's GET gives its listed size and
  ETag), and nothing is listed that no writer wrote (a half-received body never becomes an
  object);
* `objstore check --deep` finds nothing but orphans (reclaimable with --repair).
"""

from __future__ import annotations

import datetime
import hashlib
import random
import socket
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from objstore.meta.records import NULL_VERSION
from tests.faults.test_recover import CrashingDaemon
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import (
    ORPHANS,
    Daemon,
    check_findings,
    process_gone,
    wait_processes_gone,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SEED = 22
ROUNDS = ("tree", "supervisor", "tree", "supervisor")
WRITERS = 3
LOAD_SECONDS = 2.0
LOAD_DEADLINE_SECONDS = 30.0
MIN_ACKS_PER_ROUND = 3  # per writer, before its round may end
PLAIN, LOCKED = "kill-plain", "kill-locked"
PLAIN_KEYS, LOCKED_KEYS, MAX_VERSIONS = 5, 3, 4
KIB, MIB = 1024, 1024 * 1024
PART_BYTES = 5 * MIB
ROWS_WITHOUT_SIDECAR = "rows without a sidecar (or upload record)"
SIDECAR_GAP = (
    "a SIGKILL between a delete's sidecar withdrawal and its row commit leaves the version "
    "(whose delete did not happen) without a sidecar: nothing writes it back at the next "
    "start, so `objstore check` reports it until --repair, and `recover` after losing the "
    "database would drop that version")
WEIGHTS = {
    "put_small": 4, "put_large": 2, "multipart": 1, "copy": 2, "delete": 2, "tag": 2,
    "locked_put": 4, "delete_marker": 1, "delete_version": 2, "retention": 2,
    "legal_hold": 2, "locked_tag": 1,
}
# Each writer's first round starts with every kind of write, so each is acknowledged at
# least once (the writers' choices depend on the seed and their own writes only).
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
    removes: str | None = None  # the version a delete removes, as `objstore check` names it


class Planner:
    """Draws one writer's next write from its seeded generator and the state of its keys
    (which only it writes)."""

    def __init__(self, writer: int) -> None:
        self.rng = random.Random(f"{SEED}:{writer}")
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
                      lambda _s, _a: None, removes=f"{PLAIN}/{key}@{NULL_VERSION}")

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
                      lambda state, _a: without(state, version.version_id),
                      removes=f"{LOCKED}/{key}@{version.version_id}")

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


class Halted(Exception):
    """A request not sent (nor retried by botocore): the node is being killed, and a
    request must not reach the node started after it."""


class Writer(threading.Thread):
    """Sends its planner's writes one at a time until halted or until one fails; keeps
    the one whose answer never came (`in_doubt`)."""

    def __init__(self, planner: Planner, endpoint: str, halted: threading.Event) -> None:
        super().__init__(daemon=True)
        self.planner, self.halted = planner, halted
        self.client: Any = make_client(endpoint, connect_timeout=5, read_timeout=30)
        self.client.meta.events.register("before-send.s3", self._refuse_when_halted)
        self.acknowledged: Counter[str] = Counter()
        self.in_doubt: Change | None = None
        self.unexpected: list[str] = []

    def _refuse_when_halted(self, **_: Any) -> None:
        if self.halted.is_set():
            raise Halted

    def run(self) -> None:
        while not self.halted.is_set():
            change = self.planner.next()
            try:
                if change.prepare is not None:
                    change.prepare(self.client)
            except Exception as exc:  # noqa: BLE001 - nothing visible was asked for yet
                self._failed(change, exc)
                return
            try:
                answer = change.send(self.client)
            except Exception as exc:  # noqa: BLE001 - did it take effect? verify says
                self.in_doubt = change
                self._failed(change, exc)
                return
            if change.etag is not None and answer.get("ETag") != change.etag:
                self.unexpected.append(f"{change.kind} {change.target}: acknowledged as "
                                       f"{answer.get('ETag')}, expected {change.etag}")
            self.planner.acknowledge(change, answer)
            self.acknowledged[change.kind] += 1

    def _failed(self, change: Change, exc: Exception) -> None:
        if not self.halted.is_set():  # before the kill, every write must succeed
            self.unexpected.append(f"{change.kind} {change.target}: {exc!r}")


class Load:
    def __init__(self, planners: list[Planner], endpoint: str) -> None:
        self.halted = threading.Event()
        self.writers = [Writer(planner, endpoint, self.halted) for planner in planners]
        for writer in self.writers:
            writer.start()

    def run(self) -> None:
        """Until LOAD_SECONDS have passed and each writer has had every kind of write
        acknowledged (its tour) and a few of this round, or until one has failed."""
        started = time.monotonic()
        while not (time.monotonic() - started >= LOAD_SECONDS and all(
                w.planner.acknowledged_kinds >= set(TOUR)
                and w.acknowledged.total() >= MIN_ACKS_PER_ROUND for w in self.writers)):
            assert time.monotonic() - started < LOAD_DEADLINE_SECONDS, "the load is stuck"
            if not all(w.is_alive() for w in self.writers):
                break  # a write failed before the kill: reported after the round
            time.sleep(0.05)

    def join(self) -> None:
        for writer in self.writers:
            writer.join(60)
            assert not writer.is_alive(), "a writer did not stop"
        assert [u for w in self.writers for u in w.unexpected] == []


# -- what the node shows after a restart ---------------------------------------------------
def read_back(s3: Any, bucket: str, item: dict[str, Any], **version: str) -> tuple[Obj, Any]:
    """A listed object (or version) read whole: a torn one fails here."""
    params = {"Bucket": bucket, "Key": item["Key"], **version}
    got = s3.get_object(**params)
    body = got["Body"].read()
    assert (len(body), got["ETag"]) == (item["Size"], item["ETag"]), (
        f"{bucket}/{item['Key']} {version}: {len(body)} bytes, ETag {got['ETag']} read; "
        f"listed as {item['Size']} bytes, ETag {item['ETag']}")
    tags = tag_tuple(s3.get_object_tagging(**params)["TagSet"])
    return replace(obj_of(body, got["ETag"]), tags=tags), got


def locked_version(s3: Any, item: dict[str, Any]) -> Version:
    obj, got = read_back(s3, LOCKED, item, VersionId=item["VersionId"])
    mode = got.get("ObjectLockMode")
    retention = (mode, got["ObjectLockRetainUntilDate"]) if mode else None
    return Version(item["VersionId"], obj, retention,
                   got.get("ObjectLockLegalHoldStatus") == "ON")


def observe(s3: Any) -> dict[Target, Obj | VersionSet]:
    seen: dict[Target, Obj | VersionSet] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=PLAIN):
        for item in page.get("Contents", []):
            seen[(PLAIN, item["Key"])] = read_back(s3, PLAIN, item)[0]
    stacks: dict[str, list[tuple[Version, bool]]] = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=LOCKED):
        for item in page.get("Versions", []):
            stacks.setdefault(item["Key"], []).append((locked_version(s3, item),
                                                       item["IsLatest"]))
        for item in page.get("DeleteMarkers", []):
            stacks.setdefault(item["Key"], []).append((Version(item["VersionId"], None),
                                                       item["IsLatest"]))
    for key, stack in stacks.items():
        latest = [v.version_id for v, is_latest in stack if is_latest]
        assert len(latest) == 1, f"{LOCKED}/{key}: latest versions {latest}"
        seen[(LOCKED, key)] = VersionSet(frozenset(v for v, _ in stack), latest[0])
    return seen


def observed_answer(state: KeyState, observed: Obj | VersionSet | None) -> Answer:
    """What a write whose answer never came would have answered: its new version id is
    the one observed version its writer does not know."""
    if not isinstance(observed, VersionSet) or not isinstance(state, tuple):
        return {}
    new = {v.version_id for v in observed.versions} - {v.version_id for v in state}
    return {"VersionId": new.pop() if len(new) == 1 else None}


def verify(s3: Any, writers: list[Writer]) -> Counter[str]:
    """Every key as its writer knows it, or for the write in doubt, as it left it; then
    what was found becomes what the writer knows. Counts the writes in doubt by outcome."""
    outcomes: Counter[str] = Counter()
    seen = observe(s3)
    known = {target for w in writers for target in w.planner.model}
    assert sorted(set(seen) - known) == [], "listed, but no writer wrote it"
    for writer in writers:
        model, doubt = writer.planner.model, writer.in_doubt
        for target, state in model.items():
            observed = seen.get(target, VersionSet(frozenset(), None)
                                if target[0] == LOCKED else None)
            candidates = [state]
            if doubt is not None and doubt.target == target:
                candidates.append(doubt.after(state, observed_answer(state, observed)))
            matching = [c for c in candidates if comparable(c) == observed]
            assert matching, (f"{target}: found {observed}; acknowledged {state}"
                              + (f"; in doubt {doubt.kind}" if len(candidates) > 1 else ""))
            model[target] = matching[-1]
            if len(candidates) > 1:
                outcomes["took effect" if matching[-1] is not state else "did not"] += 1
    return outcomes


def check_after_restart(node: Daemon, gaps_allowed: set[str]) -> list[str]:
    """`objstore check --deep` finds nothing but orphans, and rows without a sidecar only
    among `gaps_allowed` (versions whose delete was in doubt; see SIDECAR_GAP). Returns
    those rows."""
    report, findings = check_findings(node, "--deep", "--orphan-grace-seconds", "0")
    gaps = findings.pop(ROWS_WITHOUT_SIDECAR, [])
    assert set(findings) <= {ORPHANS}, report.stdout + report.stderr
    assert set(gaps) <= gaps_allowed, report.stdout
    assert report.returncode == (1 if findings or gaps else 0), report.stdout + report.stderr
    return gaps


# -- the kills -----------------------------------------------------------------------------
def hold_upload_open(node: Daemon) -> socket.socket:
    """A presigned PUT whose body stops halfway: in flight until its client goes (or the
    worker's last 5 s); its key must never appear."""
    s3: Any = make_client(node.endpoint)
    url = urlsplit(s3.generate_presigned_url("put_object", Params={
        "Bucket": PLAIN, "Key": "held-open"}, ExpiresIn=600))
    held = socket.create_connection(("127.0.0.1", node.port), timeout=10)
    held.sendall(f"PUT {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n"
                 f"Content-Length: {4 * MIB}\r\n\r\n".encode() + bytes(2 * MIB))
    spool = node.data_dir / "tmp"
    deadline = time.monotonic() + 10
    while not any(spool.iterdir()):  # past the 1 MiB kept in memory: in flight
        assert time.monotonic() < deadline, "the held upload never reached its spool"
        time.sleep(0.05)
    return held


def kill_and_restart(node: Daemon, load: Load, how: str) -> list[int]:
    """SIGKILL under load and start again at once; returns the orphaned workers of a
    killed supervisor (still finishing their requests in flight)."""
    orphans = node.pids()[1:] if how == "supervisor" else []
    load.halted.set()
    if how == "tree":
        node.kill_tree()
    else:
        node.kill()  # the supervisor alone
    node.start()
    return orphans


def run_rounds(node: Daemon) -> tuple[Counter[str], set[str]]:
    """The rounds; counts the acknowledged writes by kind, the writes in doubt by outcome,
    and the restarts that came up while an orphaned worker was still running. Returns the
    counts and the rows `check` found without a sidecar (SIDECAR_GAP)."""
    planners = [Planner(writer) for writer in range(WRITERS)]
    counts: Counter[str] = Counter()
    deletes_in_doubt: set[str] = set()
    gaps: set[str] = set()
    for how in ROUNDS:
        held = hold_upload_open(node) if how == "supervisor" else None
        load = Load(planners, node.endpoint)
        load.run()
        orphans = kill_and_restart(node, load, how)
        counts["restarts beside an orphan"] += any(not process_gone(p) for p in orphans)
        assert len(list(node.temp_dir.glob("objstore-run-*"))) == 1
        if held is not None:
            held.close()
        load.join()
        wait_processes_gone(orphans)
        counts += verify(make_client(node.endpoint), load.writers)
        deletes_in_doubt.update(w.in_doubt.removes for w in load.writers
                                if w.in_doubt is not None and w.in_doubt.removes)
        gaps.update(check_after_restart(node, deletes_in_doubt))
        for writer in load.writers:
            counts += writer.acknowledged
    return counts, gaps


@pytest.fixture(params=BACKENDS)
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemon]:
    # A drain as long as the rounds' restarts take: orphaned workers that drained while
    # still listening (instead of letting go of the port at once) would fail the restart.
    with running_daemon(request, Daemon(tmp_path / "node", backend=request.param,
                                        workers=2, drain_timeout_seconds=3.0)) as daemon:
        yield daemon


def test_sigkill_rounds_under_mixed_writes_lose_and_tear_nothing(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket=PLAIN)
    s3.create_bucket(Bucket=LOCKED, ObjectLockEnabledForBucket=True)
    counts, gaps = run_rounds(node)
    print(f"seed {SEED}: {dict(sorted(counts.items()))}")
    assert set(WEIGHTS) <= set(counts)  # every kind of write was acknowledged
    if gaps:  # only when a kill hit that window: test_a_delete_killed_before_its_commit...
        pytest.xfail(f"{SIDECAR_GAP} (here: {sorted(gaps)})")


# -- the window a round may hit, made certain ------------------------------------------------
WITHDRAWAL_CRASH_HOOK = textwrap.dedent('''
    """Test-only: SIGKILL this process right after a delete withdrew a version's sidecar
    (before its row commit) while the switch exists."""
    import os
    import signal

    from objstore.blobs import store

    _switch = os.environ["OBJSTORE_TEST_CRASH_SWITCH"]
    _withdraw = store.BlobStore.withdraw_sidecar


    def _crashing_withdraw(self, blob_id):
        _withdraw(self, blob_id)
        if os.path.exists(_switch):
            os.kill(os.getpid(), signal.SIGKILL)


    store.BlobStore.withdraw_sidecar = _crashing_withdraw
''')


@pytest.fixture(params=BACKENDS)
def withdrawal_crash_node(request: pytest.FixtureRequest, tmp_path: Path
                          ) -> Iterator[CrashingDaemon]:
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(WITHDRAWAL_CRASH_HOOK)
    with running_daemon(request, CrashingDaemon(tmp_path / "node", backend=request.param,
                                                workers=1, hook_dir=hook_dir)) as daemon:
        yield daemon


def must(condition: bool, why: str) -> None:
    """A precondition: its failure is pytest.fail, which the xfail below
    (raises=AssertionError) does not take for the known gap."""
    if not condition:
        pytest.fail(why)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=SIDECAR_GAP)
def test_a_delete_killed_before_its_commit_leaves_check_clean(
        withdrawal_crash_node: CrashingDaemon) -> None:
    node = withdrawal_crash_node
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="kept", Body=b"kept bytes")
    try:
        node.crash_during(lambda: s3.delete_object(Bucket="bkt", Key="kept"))
    except AssertionError as exc:  # the hook did not fire: not the gap this test is about
        pytest.fail(str(exc))
    node.start()
    body = make_client(node.endpoint).get_object(  # type: ignore[attr-defined]
        Bucket="bkt", Key="kept")["Body"].read()
    must(body == b"kept bytes", "the delete did not commit: the object must read whole")
    report, findings = check_findings(node, "--orphan-grace-seconds", "0")
    assert set(findings) <= {ORPHANS}, report.stdout
