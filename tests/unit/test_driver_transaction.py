"""`meta/driver.py` transactions when the database connection is lost: the error a
client's request sees is the disconnect's (a DBAPIError, answered 503 upstream), never an
error of the clean-up after it."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from objstore.meta.dialect import create_db_engine
from objstore.meta.driver import driver_transaction


def test_a_disconnect_inside_a_transaction_raises_its_own_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen in CI with PostgreSQL restarted under load: the statement's disconnect
    invalidated the pooled connection, and the rollback after it then raised
    AttributeError (no DBAPI connection left), logged as an unhandled error."""
    engine = create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2)
    monkeypatch.setattr(engine.dialect, "is_disconnect", lambda *args: True)
    with (pytest.raises(sa_exc.DBAPIError) as raised,
          driver_transaction(engine) as transaction):
        transaction.execute(sa.text("SELECT * FROM no_such_table"), {})
    assert raised.value.connection_invalidated
    monkeypatch.undo()
    with driver_transaction(engine) as transaction:  # the pool hands out a new connection
        assert transaction.first(sa.text("SELECT 1"), {}) == (1,)
    engine.dispose()
