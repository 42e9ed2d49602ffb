"""SIGKILL during many concurrent single DeleteObjects (what `aws s3 rm --recursive` sends;
their reads, sidecar withdrawals and row deletes run as shared batches, their files are
removed after the answer): after the restart every key whose delete was answered 204 is
deleted, every other key is either deleted or whole, nothing is left in `deleting/`, and
`objstore check --deep` finds nothing but orphans. Three kills: right after the first
withdrawal (before any commit: every key stays), at the first file removal (after the
first commit; its answers may not have left yet), and from outside at a moment the test
does not choose."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.faults.test_batch_delete_kill import (
    HOOKS,
    KEYS,
    assert_settled,
    body_of,
    node,
    state_of,
)
from tests.faults.test_recover import CrashingDaemon
from tests.integration.conftest import make_client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

__all__ = ["node"]  # the fixture, parametrised by `moment` as the batch delete's is

SENDERS = 16


def delete_each(endpoint: str, answered: list[str]) -> None:
    """DeleteObject of every key from SENDERS threads at once; the keys answered 204 are
    appended to `answered`. Stops at the first failure of each sender (the node died)."""
    local = threading.local()
    stopped = threading.Event()

    def delete(key: str) -> None:
        if stopped.is_set():
            return
        if not hasattr(local, "s3"):
            local.s3 = make_client(endpoint)
        try:
            reply = local.s3.delete_object(Bucket="bkt", Key=key)
        except Exception:  # noqa: BLE001 - the node died under the request
            stopped.set()
            return
        assert reply["ResponseMetadata"]["HTTPStatusCode"] == 204
        answered.append(key)

    with ThreadPoolExecutor(SENDERS) as pool:
        list(pool.map(delete, KEYS))


def kill_from_outside(node: CrashingDaemon, answered: list[str]) -> None:
    sender = threading.Thread(target=delete_each, args=(node.endpoint, answered),
                              daemon=True)
    sender.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(answered) < len(KEYS) // 4:
        time.sleep(0.001)
    node.kill_tree()
    sender.join(60)


@pytest.mark.parametrize("moment", list(HOOKS))
def test_concurrent_single_deletes_killed_keep_every_answered_delete(
        node: CrashingDaemon, moment: str) -> None:
    s3: Any = make_client(node.endpoint)
    s3.create_bucket(Bucket="bkt")
    for key in KEYS:
        s3.put_object(Bucket="bkt", Key=key, Body=body_of(key))
    answered: list[str] = []
    if moment == "outside":
        kill_from_outside(node, answered)
    else:
        node.crash_during(lambda: delete_each(node.endpoint, answered))
    node.start()
    s3 = make_client(node.endpoint)
    states = {key: state_of(s3, key) for key in KEYS}
    assert all(states[key] == "deleted" for key in answered), "an answered delete came back"
    if moment == "withdrawn":
        assert answered == [] and set(states.values()) == {"whole"}, "nothing committed"
    elif moment == "removing":
        # Files are removed only after a commit, but the kill may come before that
        # commit's answers leave: deleted for good, answered or not.
        assert "deleted" in states.values(), "no delete was committed before the kill"
    else:
        assert answered, "the node died before answering any delete"
    assert_settled(node, s3, states)
