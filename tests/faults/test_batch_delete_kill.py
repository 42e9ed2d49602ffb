"""SIGKILL during a large DeleteObjects (one withdrawal manifest naming every version, one
transaction, the files removed after the answer): after the restart each key is either
deleted or whole, nothing is left in `deleting/`, and `objstore check --deep` finds nothing
but orphans. Three kills: right after the withdrawal (before the commit: every key stays),
at the first file removal after the commit (every key is gone), and from outside at a
moment the test does not choose (each key one or the other)."""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.faults.test_recover import CRASH_HOOK, CrashingDaemon
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import ORPHANS, check_findings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KEYS = [f"batch/{i:04d}" for i in range(400)]

WITHDRAWALS_CRASH_HOOK = textwrap.dedent('''
    """Test-only: SIGKILL this process right after a delete withdrew its versions (before
    its commit) while the switch exists: a batch's manifest (`withdraw_versions`), or the
    sidecars of concurrent single deletes (`withdraw_sidecars`)."""
    import os
    import signal

    from objstore.blobs import store

    _switch = os.environ["OBJSTORE_TEST_CRASH_SWITCH"]


    def _crashing(withdraw):
        def crashing_withdraw(self, *args):
            done = withdraw(self, *args)
            if os.path.exists(_switch):
                os.kill(os.getpid(), signal.SIGKILL)
            return done
        return crashing_withdraw


    store.BlobStore.withdraw_versions = _crashing(store.BlobStore.withdraw_versions)
    store.BlobStore.withdraw_sidecars = _crashing(store.BlobStore.withdraw_sidecars)
''')

HOOKS = {"withdrawn": WITHDRAWALS_CRASH_HOOK, "removing": CRASH_HOOK, "outside": None}


@pytest.fixture(params=BACKENDS)
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CrashingDaemon]:
    hook = HOOKS[request.node.callspec.params["moment"]]
    hook_dir = None
    if hook is not None:
        hook_dir = tmp_path / "hook"
        hook_dir.mkdir()
        (hook_dir / "sitecustomize.py").write_text(hook)
    with running_daemon(request, CrashingDaemon(tmp_path / "node", backend=request.param,
                                                workers=1, hook_dir=hook_dir)) as daemon:
        yield daemon


def body_of(key: str) -> bytes:
    return f"bytes of {key}".encode()


def seed(s3: Any) -> None:
    s3.create_bucket(Bucket="bkt")
    for key in KEYS:
        s3.put_object(Bucket="bkt", Key=key, Body=body_of(key))


def delete_all(s3: Any) -> None:
    s3.delete_objects(Bucket="bkt", Delete={"Objects": [{"Key": k} for k in KEYS],
                                            "Quiet": True})


def kill_from_outside(node: CrashingDaemon) -> None:
    """Send the batch and SIGKILL the node once its withdrawals have begun."""
    s3: Any = make_client(node.endpoint)
    sender = threading.Thread(target=lambda: _quietly(lambda: delete_all(s3)), daemon=True)
    deleting = node.data_dir / "deleting"
    sender.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (deleting.is_dir() and any(deleting.iterdir())):
        time.sleep(0.001)
    node.kill_tree()
    sender.join(60)


def _quietly(action: Any) -> None:
    try:
        action()
    except Exception:  # noqa: BLE001 - the node died under the request
        pass


def state_of(s3: Any, key: str) -> str:
    try:
        body = s3.get_object(Bucket="bkt", Key=key)["Body"].read()
    except ClientError as error:
        assert error.response["Error"]["Code"] == "NoSuchKey", error.response
        return "deleted"
    assert body == body_of(key), f"{key} is not whole"
    return "whole"


@pytest.mark.parametrize("moment", list(HOOKS))
def test_a_batch_delete_killed_leaves_each_key_deleted_or_whole(
        node: CrashingDaemon, moment: str) -> None:
    s3: Any = make_client(node.endpoint)
    seed(s3)
    if moment == "outside":
        kill_from_outside(node)
    else:
        node.crash_during(lambda: delete_all(s3))
    node.start()
    s3 = make_client(node.endpoint)
    states = {key: state_of(s3, key) for key in KEYS}
    if moment == "withdrawn":
        assert set(states.values()) == {"whole"}, "the batch did not commit"
    elif moment == "removing":
        assert set(states.values()) == {"deleted"}, "the batch committed"
    assert_settled(node, s3, states)


def assert_settled(node: CrashingDaemon, s3: Any, states: dict[str, str]) -> None:
    """After the restart: the listing holds exactly the whole keys, no delete is left in
    doubt in `deleting/`, and `objstore check --deep` finds nothing but orphans."""
    listed = {o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="bkt")
              for o in page.get("Contents", [])}
    assert listed == {key for key, state in states.items() if state == "whole"}
    deleting = node.data_dir / "deleting"
    assert not deleting.is_dir() or not any(deleting.iterdir()), "a delete left in doubt"
    report, findings = check_findings(node, "--deep", "--orphan-grace-seconds", "0")
    assert set(findings) <= {ORPHANS}, report.stdout + report.stderr
