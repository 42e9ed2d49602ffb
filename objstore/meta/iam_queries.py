"""Users and credentials: create, read and list them, resolve an access key to its
credential and user in one query, update users (never root ones), and the guarded
credential changes that must not lock a root user, or the caller, out.

Each function is one transaction on a `Database`, so each rule that guards a change (a
root user, the last active credential, a duplicate name) is checked atomically with the
change. Guarded changes lock the row they guard first (FOR UPDATE on PostgreSQL; SQLite
writers are serialised by BEGIN IMMEDIATE); credential changes lock the owning user's row
before the credential row, the order `delete_user` uses too. Deletions leave tombstones;
attachments are deleted explicitly (not only by the foreign keys' cascade) so that the
caller learns which control-plane files to remove. Teams and grants: `grant_queries.py`.
No Twisted here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import insert_ignore, read_transaction, write_transaction
from objstore.meta.errors import RecordNotFound
from objstore.meta.iam_records import Change, Removal, UserSummary
from objstore.meta.records import CredentialRecord, UserRecord
from objstore.meta.tombstones import (
    TOMBSTONE_CREDENTIAL,
    TOMBSTONE_GRANT,
    TOMBSTONE_TEAM,
    TOMBSTONE_TEAM_GRANT,
    TOMBSTONE_TEAM_MEMBER,
    TOMBSTONE_USER,
    TOMBSTONE_USER_GRANT,
    leave_tombstone,
    pair_key,
)

__all__ = [  # the tombstone names are imported from here too
    "TOMBSTONE_CREDENTIAL", "TOMBSTONE_GRANT", "TOMBSTONE_TEAM", "TOMBSTONE_TEAM_GRANT",
    "TOMBSTONE_TEAM_MEMBER", "TOMBSTONE_USER", "TOMBSTONE_USER_GRANT", "pair_key",
]

Row = Mapping[Any, Any]

_users = schema.users
_credentials = schema.credentials
_members = schema.team_members
_user_grants = schema.user_grants


# -- helpers the IAM families share ------------------------------------------------------


def exists_locked(conn: Connection, column: sa.Column[Any], value: str) -> bool:
    """Row lookup under FOR KEY SHARE on PostgreSQL (what an FK check takes anyway), so the
    parent cannot vanish before the child row referencing it commits."""
    query = sa.select(column).where(column == value).with_for_update(read=True, key_share=True)
    return conn.execute(query).first() is not None


def locked_row(conn: Connection, table: sa.Table, column: str, value: str) -> Row | None:
    query = sa.select(table).where(table.c[column] == value).with_for_update()
    row: Row | None = conn.execute(query).mappings().first()
    return row


def pairs(conn: Connection, table: sa.Table, where: sa.ColumnElement[bool],
          first: str, second: str) -> tuple[tuple[str, str], ...]:
    rows = conn.execute(sa.select(table.c[first], table.c[second]).where(where)).all()
    return tuple((str(a), str(b)) for a, b in rows)


def present(changes: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in changes.items() if value is not None}


def leave_tombstones(db: Database, conn: Connection, family: str,
                     keys: Iterable[tuple[str, str]]) -> None:
    for first, second in keys:
        leave_tombstone(db, conn, family, pair_key(first, second))


def count_of(table: sa.Table, column: str, parent: sa.ColumnElement[Any]) -> Any:
    return (
        sa.select(sa.func.count())
        .select_from(table)
        .where(table.c[column] == parent)
        .scalar_subquery()
    )


def update_named(
    db: Database,
    table: sa.Table,
    key_column: str,
    key: str,
    changes: Mapping[str, Any],
    refuse: Callable[[Row], str | None] = lambda _row: None,
) -> tuple[str, Row | None]:
    """Update one row whose `name`-like column is unique: ("updated", row after),
    ("missing", None), (refusal, row) or ("duplicate", row or None)."""
    name_column = "username" if table is _users else "name"
    try:
        with write_transaction(db.engine) as conn:
            row = locked_row(conn, table, key_column, key)
            if row is None:
                return "missing", None
            refusal = refuse(row)
            if refusal is not None:
                return refusal, row
            new_name = changes.get(name_column)
            if new_name is not None and new_name != row[name_column]:
                taken = conn.execute(
                    sa.select(table.c[key_column]).where(table.c[name_column] == new_name)
                ).first()
                if taken is not None:
                    return "duplicate", row
            where = table.c[key_column] == key
            conn.execute(sa.update(table).where(where).values(**changes))
            after: Row = conn.execute(sa.select(table).where(where)).mappings().one()
            return "updated", after
    except sa_exc.IntegrityError:  # a concurrent rename took the name first
        return "duplicate", None


def detach(db: Database, table: sa.Table, where: sa.ColumnElement[bool], family: str,
           key: str) -> bool:
    """Delete one attachment row, leaving a tombstone; False when there was none."""
    with write_transaction(db.engine) as conn:
        if conn.execute(sa.delete(table).where(where)).rowcount == 0:
            return False
        leave_tombstone(db, conn, family, key)
        return True


def user_exists(conn: Connection, user_id: str) -> bool:
    query = sa.select(_users.c.user_id).where(_users.c.user_id == user_id)
    return conn.execute(query).first() is not None


# -- users -------------------------------------------------------------------------------


def create_user(db: Database, user: UserRecord) -> bool:
    """False when the username (or the user_id) is taken."""
    values = {
        "user_id": user.user_id,
        "username": user.username,
        "description": user.description,
        "is_root": user.is_root,
        "created_at": user.created_at,
        "updated_at": user.updated_at or user.created_at,
    }
    with write_transaction(db.engine) as conn:
        return insert_ignore(conn, _users, values)


def _one_user(db: Database, where: sa.ColumnElement[bool]) -> UserRecord | None:
    with read_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_users).where(where)).mappings().first()
    return None if row is None else schema.user_record(row)


def get_user(db: Database, user_id: str) -> UserRecord | None:
    return _one_user(db, _users.c.user_id == user_id)


def get_user_by_name(db: Database, username: str) -> UserRecord | None:
    return _one_user(db, _users.c.username == username)


def list_users(db: Database) -> list[UserRecord]:
    """All users ordered by username."""
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.select(_users).order_by(_users.c.username)).mappings().all()
    return [schema.user_record(r) for r in rows]


def _user_summaries(where: sa.ColumnElement[bool] | None = None) -> sa.Select[Any]:
    query = sa.select(
        _users,
        count_of(_credentials, "user_id", _users.c.user_id).label("credential_count"),
        count_of(_members, "user_id", _users.c.user_id).label("team_count"),
        count_of(_user_grants, "user_id", _users.c.user_id).label("grant_count"),
    ).order_by(_users.c.username)
    return query if where is None else query.where(where)


def _user_summary(row: Row) -> UserSummary:
    return UserSummary(
        schema.user_record(row),
        credential_count=int(row["credential_count"]),
        team_count=int(row["team_count"]),
        grant_count=int(row["grant_count"]),
    )


def list_user_summaries(db: Database) -> list[UserSummary]:
    """Every user with its counts, ordered by username."""
    with read_transaction(db.engine) as conn:
        rows = conn.execute(_user_summaries()).mappings().all()
    return [_user_summary(row) for row in rows]


def get_user_summary(db: Database, user_id: str) -> UserSummary | None:
    with read_transaction(db.engine) as conn:
        row = conn.execute(_user_summaries(_users.c.user_id == user_id)).mappings().first()
    return None if row is None else _user_summary(row)


def update_user(
    db: Database, user_id: str, *, username: str | None, description: str | None, now: float
) -> Change[UserRecord]:
    """Rename and/or redescribe. Status "updated", "missing", "root" (root users are never
    changed) or "duplicate" (the username is taken)."""
    changes = present({"username": username, "description": description})
    status, row = update_named(
        db, _users, "user_id", user_id, {**changes, "updated_at": now},
        refuse=lambda r: "root" if r["is_root"] else None,
    )
    return Change(status, None if row is None else schema.user_record(row))


def delete_user(db: Database, user_id: str) -> Change[UserRecord]:
    """Remove a user with its team memberships and grant attachments. Status "deleted",
    "missing", "root" or "has_credentials" (nothing changes then)."""
    with write_transaction(db.engine) as conn:
        row = locked_row(conn, _users, "user_id", user_id)
        if row is None:
            return Change("missing")
        user = schema.user_record(row)
        if user.is_root:
            return Change("root", user)
        owned = conn.execute(
            sa.select(sa.func.count()).where(_credentials.c.user_id == user_id)
        ).scalar_one()
        if owned:
            return Change("has_credentials", user)
        removal = Removal(
            team_members=pairs(conn, _members, _members.c.user_id == user_id,
                               "team_id", "user_id"),
            user_grants=pairs(conn, _user_grants, _user_grants.c.user_id == user_id,
                              "user_id", "grant_id"),
        )
        conn.execute(sa.delete(_members).where(_members.c.user_id == user_id))
        conn.execute(sa.delete(_user_grants).where(_user_grants.c.user_id == user_id))
        conn.execute(sa.delete(_users).where(_users.c.user_id == user_id))
        leave_tombstone(db, conn, TOMBSTONE_USER, user_id)
        leave_tombstones(db, conn, TOMBSTONE_TEAM_MEMBER, removal.team_members)
        leave_tombstones(db, conn, TOMBSTONE_USER_GRANT, removal.user_grants)
        return Change("deleted", user, removal)


# -- credentials -------------------------------------------------------------------------


def create_credential(db: Database, credential: CredentialRecord) -> bool:
    """False when the access key exists. Raises RecordNotFound when the user does not."""
    values = {
        "access_key_id": credential.access_key_id,
        "secret_access_key": credential.secret_access_key,
        "user_id": credential.user_id,
        "description": credential.description,
        "active": credential.active,
        "created_at": credential.created_at,
        "updated_at": credential.updated_at or credential.created_at,
    }
    with write_transaction(db.engine) as conn:
        if not exists_locked(conn, _users.c.user_id, credential.user_id):
            raise RecordNotFound(f"user {credential.user_id!r}")
        return insert_ignore(conn, _credentials, values)


def get_credential(db: Database, access_key_id: str) -> CredentialRecord | None:
    c = _credentials
    with read_transaction(db.engine) as conn:
        row = conn.execute(sa.select(c).where(c.c.access_key_id == access_key_id)
                           ).mappings().first()
    return None if row is None else schema.credential_record(row)


def lookup_identity(db: Database, access_key_id: str
                    ) -> tuple[CredentialRecord, UserRecord] | None:
    """The credential and its user in one query; None when either is missing. An inactive
    credential is returned as it is: the caller decides."""
    c = _credentials
    user_columns = [col.label(f"u_{col.name}") for col in _users.c]
    query = (
        sa.select(c, *user_columns)
        .join(_users, _users.c.user_id == c.c.user_id)
        .where(c.c.access_key_id == access_key_id)
    )
    with read_transaction(db.engine) as conn:
        row = conn.execute(query).mappings().first()
    if row is None:
        return None
    return schema.credential_record(row), schema.user_record(row, prefix="u_")


def list_credentials(db: Database, user_id: str | None = None) -> list[CredentialRecord]:
    """Credentials (of one user, or all) ordered by access key id."""
    c = _credentials
    query = sa.select(c).order_by(c.c.access_key_id)
    if user_id is not None:
        query = query.where(c.c.user_id == user_id)
    with read_transaction(db.engine) as conn:
        rows = conn.execute(query).mappings().all()
    return [schema.credential_record(r) for r in rows]


def update_credential(db: Database, credential: CredentialRecord) -> None:
    """Rewrite secret, description, active and updated_at of an existing credential (its
    user and creation time stay). Raises RecordNotFound when it does not exist."""
    c = _credentials
    with write_transaction(db.engine) as conn:
        result = conn.execute(
            sa.update(c)
            .where(c.c.access_key_id == credential.access_key_id)
            .values(
                secret_access_key=credential.secret_access_key,
                description=credential.description,
                active=credential.active,
                updated_at=credential.updated_at or db.clock(),
            )
        )
        if result.rowcount != 1:
            raise RecordNotFound(f"credential {credential.access_key_id!r}")


def delete_credential(db: Database, access_key_id: str) -> bool:
    """Remove a credential, leaving a tombstone; False when it did not exist."""
    c = _credentials
    return detach(db, c, c.c.access_key_id == access_key_id, TOMBSTONE_CREDENTIAL,
                  access_key_id)


def _lock_credential(conn: Connection, access_key_id: str
                     ) -> tuple[CredentialRecord, UserRecord] | None:
    """The credential and its owner, the owner's row locked first."""
    owner_id = conn.execute(
        sa.select(_credentials.c.user_id).where(_credentials.c.access_key_id == access_key_id)
    ).scalar()
    if owner_id is None:
        return None
    owner = locked_row(conn, _users, "user_id", owner_id)
    row = locked_row(conn, _credentials, "access_key_id", access_key_id)
    if owner is None or row is None or row["user_id"] != owner_id:
        return None
    return schema.credential_record(row), schema.user_record(owner)


def _locks_out(
    conn: Connection, credential: CredentialRecord, owner: UserRecord, caller: str | None
) -> bool:
    """True when taking `credential` out of service leaves a root user, or the caller,
    without any active credential."""
    if not credential.active or not (owner.is_root or owner.user_id == caller):
        return False
    others = conn.execute(
        sa.select(sa.func.count()).where(
            _credentials.c.user_id == owner.user_id,
            _credentials.c.active == sa.true(),
            _credentials.c.access_key_id != credential.access_key_id,
        )
    ).scalar_one()
    return int(others) == 0


def change_credential(
    db: Database,
    access_key_id: str,
    *,
    active: bool | None,
    description: str | None,
    now: float,
    caller_user_id: str | None,
) -> Change[CredentialRecord]:
    """Set active and/or description. Status "updated", "missing" or "last_active": the
    change would leave a root user, or the caller, without an active credential."""
    with write_transaction(db.engine) as conn:
        found = _lock_credential(conn, access_key_id)
        if found is None:
            return Change("missing")
        current, owner = found
        if active is False and _locks_out(conn, current, owner, caller_user_id):
            return Change("last_active", current)
        updated = replace(
            current,
            active=current.active if active is None else active,
            description=current.description if description is None else description,
            updated_at=now,
        )
        conn.execute(
            sa.update(_credentials)
            .where(_credentials.c.access_key_id == access_key_id)
            .values(active=updated.active, description=updated.description, updated_at=now)
        )
        return Change("updated", updated)


def remove_credential(
    db: Database, access_key_id: str, *, caller_user_id: str | None
) -> Change[CredentialRecord]:
    """Delete with a tombstone. Status "deleted", "missing" or "last_active" (the same
    lockout rule as `change_credential`)."""
    with write_transaction(db.engine) as conn:
        found = _lock_credential(conn, access_key_id)
        if found is None:
            return Change("missing")
        current, owner = found
        if _locks_out(conn, current, owner, caller_user_id):
            return Change("last_active", current)
        conn.execute(sa.delete(_credentials).where(_credentials.c.access_key_id == access_key_id))
        leave_tombstone(db, conn, TOMBSTONE_CREDENTIAL, access_key_id)
        return Change("deleted", current)
