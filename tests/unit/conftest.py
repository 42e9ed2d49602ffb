"""What the unit tests share: driving a coroutine that never really waits, and the local
stores an engine test builds its services on.

- `run(work)` drives a coroutine (or a Deferred) whose every wait has already fired
  (inline DB and IO pools, fake peers) and returns its result or raises its error; it
  fails the test when the work is still waiting. `fails(work)` returns the S3Error it
  raised.
- `local_stores(directory, ...)` builds what the engine services stand on in a directory:
  a migrated SQLite `SyncMetaStore` (pool of 2, an injected clock), the async `MetaStore`
  over it with the inline DB pool, a `BlobStore` and the `ControlRecord` (both fsync off)
  under `data/`, and an `InlinePool` for IO. The `stores` fixture gives one in `tmp_path`
  and closes its database afterwards.

Test modules import the helpers (`from tests.unit.conftest import run`); pytest imports this
file under the same name, so there is one copy of each.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from twisted.internet.defer import Deferred

from objstore.blobs.control import ControlRecord
from objstore.blobs.store import BlobStore
from objstore.errors import S3Error
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool

T = TypeVar("T")


def run(work: Coroutine[Any, Any, T] | Deferred[T]) -> T:
    """The result of `work` whose every wait has already fired (inline pools)."""
    results: list[Any] = []
    deferred = work if isinstance(work, Deferred) else Deferred.fromCoroutine(work)
    deferred.addBoth(results.append)
    assert results, "the coroutine waited on something that never fired"
    outcome = results[0]
    if hasattr(outcome, "raiseException"):
        outcome.raiseException()
    return outcome  # type: ignore[no-any-return]


def fails(work: Coroutine[Any, Any, Any] | Deferred[Any]) -> S3Error:
    """The S3Error `work` raised (the test fails when it raised none)."""
    with pytest.raises(S3Error) as caught:
        run(work)
    return caught.value


class ManualRunner:
    """A pool (`objstore.threads.Runner`) whose jobs run when the test says, in order
    (`step`), their results delivered on the test's thread."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[..., Any], tuple[Any, ...], Deferred[Any]]] = []

    def run(self, fn: Callable[..., Any], *args: Any) -> Deferred[Any]:
        done: Deferred[Any] = Deferred()
        self.jobs.append((fn, args, done))
        return done

    def step(self) -> None:
        fn, args, done = self.jobs.pop(0)
        done.callback(fn(*args))


@dataclass
class LocalStores:
    sql: SyncMetaStore
    meta: MetaStore
    blobs: BlobStore
    control: ControlRecord
    io: InlinePool

    def close(self) -> None:
        self.sql.close()


def local_stores(directory: Path, *, clock: Callable[[], float] = lambda: 1000.0,
                 buckets: Iterable[str] = ()) -> LocalStores:
    """The stores of one local node in `directory` (made if missing); each of `buckets` is
    created (owner u-root, us-east-1) directly in the database."""
    directory.mkdir(parents=True, exist_ok=True)
    sql = SyncMetaStore(create_db_engine("sqlite", str(directory / "meta.db"), None, 2),
                        clock=clock)
    sql.migrate()
    for name in buckets:
        sql.create_bucket(BucketRecord(name, "u-root", "us-east-1", 1.0))
    blobs = BlobStore(str(directory / "data"), fsync=False)
    blobs.prepare()
    control = ControlRecord(str(directory / "data"), fsync=False)
    control.prepare()
    return LocalStores(sql, MetaStore(sql, SyncDbPool()), blobs, control, InlinePool())


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[LocalStores]:
    """The local stores of one node in tmp_path (no bucket yet)."""
    built = local_stores(tmp_path)
    yield built
    built.close()
