"""Fixtures that run the real daemon; every test here talks to it over HTTP with real
clients. The `daemon` fixture gives each test module a daemon per metadata backend
(SQLite and the local PostgreSQL): its own, or for the modules in SHARED_DAEMON one daemon
per backend shared by all of them for the whole session (started on first use). A module
shares when its tests leave nothing another module could see: unique bucket, user and key
names, no settings or region changes, no restart or kill of `daemon`, no whole-daemon
figures asserted (peak memory, every bucket or user listed). At the end of each sharing
module the log of the shared daemon since the module began must hold no traceback, as a
module's own daemon's whole log must.

The `workers` marker picks the tests that scripts/test runs a second time against
two-worker nodes (OBJSTORE_TEST_WORKERS=2, SQLite, `-m workers`). The rule: a module whose
behaviour involves state each worker process holds or shares with the others, served by
the default `daemon`/`node` (so it has one worker in the first pass): caches of IAM and
settings that a change through one worker must reach in the other, the leader's duties
(lifecycle, tombstone purge) and figures merged from every worker (audit, usage). Modules
that start their two-worker nodes themselves (test_workers, which pins requests to each
worker for the IAM, bucket-state and settings caches, test_read_races, test_metrics,
test_rate_limit, test_private_files, test_lifecycle_of_the_process) already run them in the
first pass; the rest (S3 semantics answered by one process or another alike) run once.
WORKER_PASS lists the modules; a module may also say `pytestmark = pytest.mark.workers`.

Parallel runs: scripts/test runs both passes with pytest-xdist, `--dist loadfile` (the rule
for every directory is in tests/conftest.py). A module's tests all run in one xdist process,
so a module-scoped `daemon` is never shared across processes; the session-scoped shared
daemons are one per backend per xdist process, each with its own port (`free_port`: a range
per process) and PostgreSQL database. So SHARED_DAEMON's rule stays the one above: a sharing
module leaves nothing another module could see, whichever modules land in its process.
Tests beside other processes run on a loaded machine: poll with a deadline (`wait_for`,
`wait_ready`), never sleep and assume the work is done or the machine idle.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import boto3
import pytest
from botocore.config import Config as BotoConfig

from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

BACKENDS = os.environ.get("OBJSTORE_TEST_BACKENDS", "sqlite,postgres").split(",")
WORKER_PASS = frozenset({
    "test_admin_escalation.py",  # IAM changes and the caches of every worker
    "test_audit.py",  # each worker writes its records; a query merges them
    "test_bucket_access.py",  # each worker caches bucket policies and access settings
    "test_lifecycle.py",  # the leader worker runs lifecycle; settings reach it
    "test_maintenance_jobs.py",  # the leader runs jobs; moves and health through any worker
    "test_quota.py",  # usage counted by every worker, concurrent writers
    "test_rbac.py",  # revocation and grants on the very next request, any worker
    "test_settings.py",  # settings cached per worker
    "test_tombstone_purge.py",  # the leader purges; its figures reach every scrape
    "test_transfer.py",  # an import replaces IAM and settings under running workers
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in WORKER_PASS and item.path.parent.name == "integration":
            item.add_marker(pytest.mark.workers)


SHARED_DAEMON = frozenset({
    "test_admin_cli.py", "test_admin_escalation.py", "test_admin_iam.py", "test_auth.py",
    "test_aws_cli.py", "test_browser_uploads.py", "test_bucket_access.py", "test_clients.py",
    "test_conformance.py", "test_cors.py",
    "test_hostile_input.py", "test_multipart.py", "test_object_acls.py", "test_object_lock.py",
    "test_object_operations.py", "test_post_object.py", "test_quota.py",
    "test_s3_basics.py", "test_sigv2.py", "test_tagging.py", "test_versioning.py",
})


class SharedDaemons:
    """One running daemon per backend, started on first use, stopped by `stack`."""

    def __init__(self, request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory, stack: ExitStack) -> None:
        self._request, self._factory, self._stack = request, tmp_path_factory, stack
        self._running: dict[str, Daemon] = {}

    def get(self, backend: str) -> Daemon:
        if backend not in self._running:
            node = Daemon(self._factory.mktemp(f"shared-{backend}"), backend=backend)
            self._running[backend] = self._stack.enter_context(
                running_daemon(self._request, node))
        return self._running[backend]


@pytest.fixture(scope="session")
def shared_daemons(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[SharedDaemons]:
    with ExitStack() as stack:
        yield SharedDaemons(request, tmp_path_factory, stack)


@pytest.fixture(scope="module", params=BACKENDS)
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    if request.path.name in SHARED_DAEMON:
        shared: Daemon = request.getfixturevalue("shared_daemons").get(request.param)
        logged = shared.log_size()
        yield shared
        try:
            shared.assert_no_tracebacks(since=logged)
        finally:  # reported once, by this module: the session's end checks what follows
            shared.log_checked = shared.log_size()
        return
    with running_daemon(request, Daemon(tmp_path_factory.mktemp(f"node-{request.param}"),
                                        backend=request.param)) as node:
        yield node


@contextmanager
def running_daemon(request: pytest.FixtureRequest, node: Daemon, *, wait: bool = True
                   ) -> Iterator[Daemon]:
    """Start `node`, stop it at the end, and remove its files unless a test using it failed
    (then they stay, with the daemon's log, under pytest's base temp directory). With
    `wait=False` the process is only launched: the caller waits (`node.wait_ready`)."""
    failed_before = request.session.testsfailed
    if wait:
        node.start()
    else:
        node.launch()
    try:
        yield node
    finally:
        node.cleanup()
        if request.session.testsfailed == failed_before:
            node.remove_files()


ENCRYPTION_CONFIG = "[encryption]\nenabled = true\n"


@contextmanager
def encrypted_daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                     name: str, backend: str = "sqlite") -> Iterator[Daemon]:
    """A module's own daemon with [encryption] enabled (the local master key), started
    and stopped as `running_daemon` does."""
    node = Daemon(tmp_path_factory.mktemp(name), backend=backend,
                  extra_config=ENCRYPTION_CONFIG)
    with running_daemon(request, node) as running:
        yield running


def make_client(endpoint: str, access_key: str = ROOT_ACCESS_KEY,
                secret_key: str = ROOT_SECRET_KEY, **config: object) -> object:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
        config=BotoConfig(signature_version="s3v4", retries={"max_attempts": 1},
                          **config),  # type: ignore[arg-type]
    )


@pytest.fixture(params=BACKENDS)
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemon]:
    """A fresh daemon for one test (tests that stop, kill or recover it)."""
    fresh = Daemon(tmp_path, backend=request.param)
    fresh.start()
    yield fresh
    fresh.cleanup()


@pytest.fixture
def s3(daemon: Daemon) -> object:
    return make_client(daemon.endpoint)


@pytest.fixture
def aws_env(daemon: Daemon, tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        AWS_ACCESS_KEY_ID=ROOT_ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=ROOT_SECRET_KEY,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials"),
    )
    return env
