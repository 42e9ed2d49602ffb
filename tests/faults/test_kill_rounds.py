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

A kill between a delete's sidecar withdrawal and its row commit (the sidecar waits in
`deleting/` until the next start settles it) is the window a round may hit by chance;
`test_a_delete_killed_before_its_commit_leaves_check_clean` injects that kill. The writes
themselves live in write_mix.py.
"""

from __future__ import annotations

import socket
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.faults.test_recover import CrashingDaemon
from tests.faults.write_mix import (
    LOCKED,
    MIB,
    PLAIN,
    TOUR,
    WEIGHTS,
    Answer,
    Change,
    KeyState,
    Obj,
    Planner,
    Target,
    Version,
    VersionSet,
    comparable,
    obj_of,
    tag_tuple,
)
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
ROWS_WITHOUT_SIDECAR = "rows without a sidecar (or upload record)"
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
                outcomes["in doubt, took effect" if matching[-1] is not state
                         else "in doubt, did not"] += 1
    return outcomes


def check_after_restart(node: Daemon) -> None:
    """`objstore check --deep` finds nothing but orphans (no row without its sidecar: a
    delete a kill left in doubt was settled by the start)."""
    report, findings = check_findings(node, "--deep", "--orphan-grace-seconds", "0")
    assert ROWS_WITHOUT_SIDECAR not in findings, report.stdout
    assert set(findings) <= {ORPHANS}, report.stdout + report.stderr
    assert report.returncode == (1 if findings else 0), report.stdout + report.stderr


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


def run_rounds(node: Daemon) -> Counter[str]:
    """The rounds; counts the acknowledged writes by kind, the writes in doubt by outcome,
    and the restarts that came up while an orphaned worker was still running."""
    planners = [Planner(SEED, writer) for writer in range(WRITERS)]
    counts: Counter[str] = Counter()
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
        check_after_restart(node)
        for writer in load.writers:
            counts += writer.acknowledged
    return counts


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
    counts = run_rounds(node)
    print(f"seed {SEED}: {dict(sorted(counts.items()))}")
    assert set(WEIGHTS) <= set(counts)  # every kind of write was acknowledged


# -- the window a round may hit, made certain ------------------------------------------------
WITHDRAWAL_CRASH_HOOK = textwrap.dedent('''
    """Test-only: SIGKILL this process right after a delete withdrew a version's sidecar
    (before its row commit) while the switch exists. A DeleteObject withdraws through
    `withdraw_sidecars` (its batch of concurrent deletes: engine/coalesce.py)."""
    import os
    import signal

    from objstore.blobs import store

    _switch = os.environ["OBJSTORE_TEST_CRASH_SWITCH"]
    _withdraw = store.BlobStore.withdraw_sidecar
    _withdraw_many = store.BlobStore.withdraw_sidecars


    def _crash_if_armed():
        if os.path.exists(_switch):
            os.kill(os.getpid(), signal.SIGKILL)


    def _crashing_withdraw(self, blob_id):
        _withdraw(self, blob_id)
        _crash_if_armed()


    def _crashing_withdraw_many(self, blob_ids):
        _withdraw_many(self, blob_ids)
        _crash_if_armed()


    store.BlobStore.withdraw_sidecar = _crashing_withdraw
    store.BlobStore.withdraw_sidecars = _crashing_withdraw_many
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
    """A precondition of the test below: a failure names what did not hold."""
    if not condition:
        pytest.fail(why)


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
