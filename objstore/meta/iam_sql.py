"""`SqlIamQueries`: the IAM queries of `iam_queries.py` over SQLAlchemy Core, for SQLite and
PostgreSQL alike (mixed into `SqlMetaStore`).

Each method is one transaction. Guarded changes lock the row they guard first (FOR UPDATE
on PostgreSQL; SQLite writers are serialised by BEGIN IMMEDIATE), so two concurrent
requests cannot both pass a rule that only one of them may pass (e.g. deactivating the two
last credentials of a root user). Credential changes lock the owning user's row before the
credential row, the order `delete_user` uses too. Deletions leave tombstones for the
cluster reconciler; attachments are deleted explicitly (not only by the foreign keys'
cascade) so that the caller learns which control-plane files to remove.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine

from objstore.meta import schema
from objstore.meta.engine import insert_ignore, read_transaction, write_transaction
from objstore.meta.iam_queries import (
    TOMBSTONE_GRANT,
    TOMBSTONE_TEAM,
    TOMBSTONE_TEAM_GRANT,
    TOMBSTONE_TEAM_MEMBER,
    TOMBSTONE_USER,
    TOMBSTONE_USER_GRANT,
    IamQueries,
    pair_key,
)
from objstore.meta.iam_records import (
    SOURCE_DIRECT,
    TEAM_SOURCE_PREFIX,
    Change,
    EffectiveGrant,
    GrantRecord,
    Removal,
    TeamRecord,
    TeamSummary,
    UserSummary,
)
from objstore.meta.records import CredentialRecord, UserRecord

# The tombstone family `SqlMetaStore.delete_credential` uses (store.TOMBSTONE_CREDENTIAL);
# not imported, because store.py imports this module.
TOMBSTONE_CREDENTIAL_FAMILY = "credential"

_users = schema.users
_credentials = schema.credentials
_teams = schema.teams
_members = schema.team_members
_grants = schema.grants
_user_grants = schema.user_grants
_team_grants = schema.team_grants

Row = Mapping[Any, Any]


def team_record(row: Row) -> TeamRecord:
    return TeamRecord(
        team_id=row["team_id"],
        name=row["name"],
        created_at=float(row["created_at"]),
        description=row["description"],
        updated_at=float(row["updated_at"]),
    )


def grant_record(row: Row) -> GrantRecord:
    document = json.loads(row["document"]) if row["document"] else {}
    return GrantRecord(
        grant_id=row["grant_id"],
        name=row["name"],
        document=document,
        created_at=float(row["created_at"]),
        description=row["description"],
        updated_at=float(row["updated_at"]),
    )


def _count_of(table: sa.Table, column: str, parent: sa.ColumnElement[Any]) -> Any:
    return (
        sa.select(sa.func.count())
        .select_from(table)
        .where(table.c[column] == parent)
        .scalar_subquery()
    )


def _user_summaries(where: sa.ColumnElement[bool] | None = None) -> sa.Select[Any]:
    query = sa.select(
        _users,
        _count_of(_credentials, "user_id", _users.c.user_id).label("credential_count"),
        _count_of(_members, "user_id", _users.c.user_id).label("team_count"),
        _count_of(_user_grants, "user_id", _users.c.user_id).label("grant_count"),
    ).order_by(_users.c.username)
    return query if where is None else query.where(where)


def _user_summary(row: Row) -> UserSummary:
    return UserSummary(
        schema.user_record(row),
        credential_count=int(row["credential_count"]),
        team_count=int(row["team_count"]),
        grant_count=int(row["grant_count"]),
    )


def _team_summaries(where: sa.ColumnElement[bool] | None = None) -> sa.Select[Any]:
    query = sa.select(
        _teams,
        _count_of(_members, "team_id", _teams.c.team_id).label("member_count"),
        _count_of(_team_grants, "team_id", _teams.c.team_id).label("grant_count"),
    ).order_by(_teams.c.name)
    return query if where is None else query.where(where)


def _team_summary(row: Row) -> TeamSummary:
    return TeamSummary(
        team_record(row),
        member_count=int(row["member_count"]),
        grant_count=int(row["grant_count"]),
    )


def _exists(conn: Connection, column: sa.Column[Any], value: str) -> bool:
    """Row lookup under FOR KEY SHARE on PostgreSQL (what an FK check takes anyway), so the
    parent cannot vanish before the child row referencing it commits."""
    query = sa.select(column).where(column == value).with_for_update(read=True, key_share=True)
    return conn.execute(query).first() is not None


def _locked_row(conn: Connection, table: sa.Table, column: str, value: str) -> Row | None:
    query = sa.select(table).where(table.c[column] == value).with_for_update()
    row: Row | None = conn.execute(query).mappings().first()
    return row


def _pairs(conn: Connection, table: sa.Table, where: sa.ColumnElement[bool],
           first: str, second: str) -> tuple[tuple[str, str], ...]:
    rows = conn.execute(sa.select(table.c[first], table.c[second]).where(where)).all()
    return tuple((str(a), str(b)) for a, b in rows)


def _present(changes: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in changes.items() if value is not None}


class SqlIamQueries(IamQueries):
    """Mixin for `SqlMetaStore`, which provides the engine, the clock and `_tombstone`."""

    _engine: Engine
    _clock: Callable[[], float]

    if TYPE_CHECKING:

        def _tombstone(
            self, conn: Connection, family: str, key: str, seq: int | None = None
        ) -> None: ...

    def _tombstones(self, conn: Connection, family: str, keys: Iterable[str]) -> None:
        for key in keys:
            self._tombstone(conn, family, key)

    def _update_named(
        self,
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
            with write_transaction(self._engine) as conn:
                row = _locked_row(conn, table, key_column, key)
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

    # -- users -----------------------------------------------------------------------
    def list_user_summaries(self) -> list[UserSummary]:
        with read_transaction(self._engine) as conn:
            rows = conn.execute(_user_summaries()).mappings().all()
        return [_user_summary(row) for row in rows]

    def get_user_summary(self, user_id: str) -> UserSummary | None:
        with read_transaction(self._engine) as conn:
            row = conn.execute(_user_summaries(_users.c.user_id == user_id)).mappings().first()
        return None if row is None else _user_summary(row)

    def update_user(
        self, user_id: str, *, username: str | None, description: str | None, now: float
    ) -> Change[UserRecord]:
        changes = _present({"username": username, "description": description})
        status, row = self._update_named(
            _users, "user_id", user_id, {**changes, "updated_at": now},
            refuse=lambda r: "root" if r["is_root"] else None,
        )
        return Change(status, None if row is None else schema.user_record(row))

    def delete_user(self, user_id: str) -> Change[UserRecord]:
        with write_transaction(self._engine) as conn:
            row = _locked_row(conn, _users, "user_id", user_id)
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
                team_members=_pairs(conn, _members, _members.c.user_id == user_id,
                                    "team_id", "user_id"),
                user_grants=_pairs(conn, _user_grants, _user_grants.c.user_id == user_id,
                                   "user_id", "grant_id"),
            )
            conn.execute(sa.delete(_members).where(_members.c.user_id == user_id))
            conn.execute(sa.delete(_user_grants).where(_user_grants.c.user_id == user_id))
            conn.execute(sa.delete(_users).where(_users.c.user_id == user_id))
            self._tombstone(conn, TOMBSTONE_USER, user_id)
            self._tombstones(conn, TOMBSTONE_TEAM_MEMBER,
                             (pair_key(*p) for p in removal.team_members))
            self._tombstones(conn, TOMBSTONE_USER_GRANT,
                             (pair_key(*p) for p in removal.user_grants))
            return Change("deleted", user, removal)

    # -- credentials -----------------------------------------------------------------
    def _lock_credential(
        self, conn: Connection, access_key_id: str
    ) -> tuple[CredentialRecord, UserRecord] | None:
        """The credential and its owner, the owner's row locked first."""
        owner_id = conn.execute(
            sa.select(_credentials.c.user_id).where(_credentials.c.access_key_id == access_key_id)
        ).scalar()
        if owner_id is None:
            return None
        owner = _locked_row(conn, _users, "user_id", owner_id)
        row = _locked_row(conn, _credentials, "access_key_id", access_key_id)
        if owner is None or row is None or row["user_id"] != owner_id:
            return None
        return schema.credential_record(row), schema.user_record(owner)

    @staticmethod
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
        self,
        access_key_id: str,
        *,
        active: bool | None,
        description: str | None,
        now: float,
        caller_user_id: str | None,
    ) -> Change[CredentialRecord]:
        with write_transaction(self._engine) as conn:
            found = self._lock_credential(conn, access_key_id)
            if found is None:
                return Change("missing")
            current, owner = found
            if active is False and self._locks_out(conn, current, owner, caller_user_id):
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
                .values(active=updated.active, description=updated.description,
                        updated_at=now)
            )
            return Change("updated", updated)

    def remove_credential(
        self, access_key_id: str, *, caller_user_id: str | None
    ) -> Change[CredentialRecord]:
        with write_transaction(self._engine) as conn:
            found = self._lock_credential(conn, access_key_id)
            if found is None:
                return Change("missing")
            current, owner = found
            if self._locks_out(conn, current, owner, caller_user_id):
                return Change("last_active", current)
            conn.execute(
                sa.delete(_credentials).where(_credentials.c.access_key_id == access_key_id)
            )
            self._tombstone(conn, TOMBSTONE_CREDENTIAL_FAMILY, access_key_id)
            return Change("deleted", current)

    # -- teams -----------------------------------------------------------------------
    def create_team(self, team: TeamRecord) -> bool:
        values = {
            "team_id": team.team_id,
            "name": team.name,
            "description": team.description,
            "created_at": team.created_at,
            "updated_at": team.updated_at or team.created_at,
        }
        with write_transaction(self._engine) as conn:
            return insert_ignore(conn, _teams, values)

    def get_team(self, team_id: str) -> TeamRecord | None:
        with read_transaction(self._engine) as conn:
            row = conn.execute(sa.select(_teams).where(_teams.c.team_id == team_id)).mappings()
            found = row.first()
        return None if found is None else team_record(found)

    def get_team_summary(self, team_id: str) -> TeamSummary | None:
        with read_transaction(self._engine) as conn:
            row = conn.execute(_team_summaries(_teams.c.team_id == team_id)).mappings().first()
        return None if row is None else _team_summary(row)

    def list_team_summaries(self) -> list[TeamSummary]:
        with read_transaction(self._engine) as conn:
            rows = conn.execute(_team_summaries()).mappings().all()
        return [_team_summary(row) for row in rows]

    def update_team(
        self, team_id: str, *, name: str | None, description: str | None, now: float
    ) -> Change[TeamRecord]:
        changes = _present({"name": name, "description": description})
        status, row = self._update_named(
            _teams, "team_id", team_id, {**changes, "updated_at": now}
        )
        return Change(status, None if row is None else team_record(row))

    def delete_team(self, team_id: str) -> Change[TeamRecord]:
        with write_transaction(self._engine) as conn:
            row = _locked_row(conn, _teams, "team_id", team_id)
            if row is None:
                return Change("missing")
            removal = Removal(
                team_members=_pairs(conn, _members, _members.c.team_id == team_id,
                                    "team_id", "user_id"),
                team_grants=_pairs(conn, _team_grants, _team_grants.c.team_id == team_id,
                                   "team_id", "grant_id"),
            )
            conn.execute(sa.delete(_members).where(_members.c.team_id == team_id))
            conn.execute(sa.delete(_team_grants).where(_team_grants.c.team_id == team_id))
            conn.execute(sa.delete(_teams).where(_teams.c.team_id == team_id))
            self._tombstone(conn, TOMBSTONE_TEAM, team_id)
            self._tombstones(conn, TOMBSTONE_TEAM_MEMBER,
                             (pair_key(*p) for p in removal.team_members))
            self._tombstones(conn, TOMBSTONE_TEAM_GRANT,
                             (pair_key(*p) for p in removal.team_grants))
            return Change("deleted", team_record(row), removal)

    def add_team_member(self, team_id: str, user_id: str, now: float) -> str:
        with write_transaction(self._engine) as conn:
            if not _exists(conn, _teams.c.team_id, team_id):
                return "no_team"
            if not _exists(conn, _users.c.user_id, user_id):
                return "no_user"
            values = {"team_id": team_id, "user_id": user_id, "updated_at": now}
            return "added" if insert_ignore(conn, _members, values) else "exists"

    def remove_team_member(self, team_id: str, user_id: str) -> bool:
        where = sa.and_(_members.c.team_id == team_id, _members.c.user_id == user_id)
        return self._detach(_members, where, TOMBSTONE_TEAM_MEMBER, pair_key(team_id, user_id))

    def _detach(
        self, table: sa.Table, where: sa.ColumnElement[bool], family: str, key: str
    ) -> bool:
        with write_transaction(self._engine) as conn:
            if conn.execute(sa.delete(table).where(where)).rowcount == 0:
                return False
            self._tombstone(conn, family, key)
            return True

    def list_team_members(self, team_id: str) -> list[UserRecord] | None:
        query = (
            sa.select(_users)
            .join(_members, _members.c.user_id == _users.c.user_id)
            .where(_members.c.team_id == team_id)
            .order_by(_users.c.username)
        )
        with read_transaction(self._engine) as conn:
            if conn.execute(sa.select(_teams.c.team_id).where(_teams.c.team_id == team_id)
                            ).first() is None:
                return None
            rows = conn.execute(query).mappings().all()
        return [schema.user_record(row) for row in rows]

    def list_user_teams(self, user_id: str) -> list[TeamRecord] | None:
        query = (
            sa.select(_teams)
            .join(_members, _members.c.team_id == _teams.c.team_id)
            .where(_members.c.user_id == user_id)
            .order_by(_teams.c.name)
        )
        with read_transaction(self._engine) as conn:
            if not self._user_exists(conn, user_id):
                return None
            rows = conn.execute(query).mappings().all()
        return [team_record(row) for row in rows]

    @staticmethod
    def _user_exists(conn: Connection, user_id: str) -> bool:
        query = sa.select(_users.c.user_id).where(_users.c.user_id == user_id)
        return conn.execute(query).first() is not None

    # -- grants ----------------------------------------------------------------------
    def create_grant(self, grant: GrantRecord) -> bool:
        values = {
            "grant_id": grant.grant_id,
            "name": grant.name,
            "description": grant.description,
            "document": schema.dumps_json(grant.document),
            "created_at": grant.created_at,
            "updated_at": grant.updated_at or grant.created_at,
        }
        with write_transaction(self._engine) as conn:
            return insert_ignore(conn, _grants, values)

    def get_grant(self, grant_id: str) -> GrantRecord | None:
        return self._one_grant(_grants.c.grant_id == grant_id)

    def get_grant_by_name(self, name: str) -> GrantRecord | None:
        return self._one_grant(_grants.c.name == name)

    def _one_grant(self, where: sa.ColumnElement[bool]) -> GrantRecord | None:
        with read_transaction(self._engine) as conn:
            row = conn.execute(sa.select(_grants).where(where)).mappings().first()
        return None if row is None else grant_record(row)

    def list_grants(self) -> list[GrantRecord]:
        with read_transaction(self._engine) as conn:
            rows = conn.execute(sa.select(_grants).order_by(_grants.c.name)).mappings().all()
        return [grant_record(row) for row in rows]

    def update_grant(
        self,
        grant_id: str,
        *,
        name: str | None,
        description: str | None,
        document: dict[str, Any] | None,
        now: float,
    ) -> Change[GrantRecord]:
        text = None if document is None else schema.dumps_json(document)
        changes = _present({"name": name, "description": description, "document": text})
        status, row = self._update_named(
            _grants, "grant_id", grant_id, {**changes, "updated_at": now}
        )
        return Change(status, None if row is None else grant_record(row))

    def delete_grant(self, grant_id: str) -> Change[GrantRecord]:
        with write_transaction(self._engine) as conn:
            row = _locked_row(conn, _grants, "grant_id", grant_id)
            if row is None:
                return Change("missing")
            removal = Removal(
                user_grants=_pairs(conn, _user_grants, _user_grants.c.grant_id == grant_id,
                                   "user_id", "grant_id"),
                team_grants=_pairs(conn, _team_grants, _team_grants.c.grant_id == grant_id,
                                   "team_id", "grant_id"),
            )
            conn.execute(sa.delete(_user_grants).where(_user_grants.c.grant_id == grant_id))
            conn.execute(sa.delete(_team_grants).where(_team_grants.c.grant_id == grant_id))
            conn.execute(sa.delete(_grants).where(_grants.c.grant_id == grant_id))
            self._tombstone(conn, TOMBSTONE_GRANT, grant_id)
            self._tombstones(conn, TOMBSTONE_USER_GRANT,
                             (pair_key(*p) for p in removal.user_grants))
            self._tombstones(conn, TOMBSTONE_TEAM_GRANT,
                             (pair_key(*p) for p in removal.team_grants))
            return Change("deleted", grant_record(row), removal)

    def _attach(
        self, table: sa.Table, owner: sa.Column[Any], owner_id: str, grant_id: str, now: float
    ) -> str:
        missing_owner = "no_user" if table is _user_grants else "no_team"
        with write_transaction(self._engine) as conn:
            if not _exists(conn, owner, owner_id):
                return missing_owner
            if not _exists(conn, _grants.c.grant_id, grant_id):
                return "no_grant"
            values = {owner.name: owner_id, "grant_id": grant_id, "updated_at": now}
            return "attached" if insert_ignore(conn, table, values) else "exists"

    def attach_user_grant(self, user_id: str, grant_id: str, now: float) -> str:
        return self._attach(_user_grants, _users.c.user_id, user_id, grant_id, now)

    def detach_user_grant(self, user_id: str, grant_id: str) -> bool:
        where = sa.and_(_user_grants.c.user_id == user_id, _user_grants.c.grant_id == grant_id)
        return self._detach(_user_grants, where, TOMBSTONE_USER_GRANT,
                            pair_key(user_id, grant_id))

    def attach_team_grant(self, team_id: str, grant_id: str, now: float) -> str:
        return self._attach(_team_grants, _teams.c.team_id, team_id, grant_id, now)

    def detach_team_grant(self, team_id: str, grant_id: str) -> bool:
        where = sa.and_(_team_grants.c.team_id == team_id, _team_grants.c.grant_id == grant_id)
        return self._detach(_team_grants, where, TOMBSTONE_TEAM_GRANT,
                            pair_key(team_id, grant_id))

    def list_user_grants(self, user_id: str) -> list[GrantRecord] | None:
        with read_transaction(self._engine) as conn:
            if not self._user_exists(conn, user_id):
                return None
            return self._direct_grants(conn, user_id)

    @staticmethod
    def _direct_grants(conn: Connection, user_id: str) -> list[GrantRecord]:
        query = (
            sa.select(_grants)
            .join(_user_grants, _user_grants.c.grant_id == _grants.c.grant_id)
            .where(_user_grants.c.user_id == user_id)
            .order_by(_grants.c.name)
        )
        return [grant_record(row) for row in conn.execute(query).mappings().all()]

    def list_team_grants(self, team_id: str) -> list[GrantRecord] | None:
        query = (
            sa.select(_grants)
            .join(_team_grants, _team_grants.c.grant_id == _grants.c.grant_id)
            .where(_team_grants.c.team_id == team_id)
            .order_by(_grants.c.name)
        )
        with read_transaction(self._engine) as conn:
            if conn.execute(sa.select(_teams.c.team_id).where(_teams.c.team_id == team_id)
                            ).first() is None:
                return None
            rows = conn.execute(query).mappings().all()
        return [grant_record(row) for row in rows]

    def effective_grants(self, user_id: str) -> list[EffectiveGrant] | None:
        via_teams = (
            sa.select(_grants, _teams.c.name.label("team_name"))
            .join(_team_grants, _team_grants.c.grant_id == _grants.c.grant_id)
            .join(_members, _members.c.team_id == _team_grants.c.team_id)
            .join(_teams, _teams.c.team_id == _team_grants.c.team_id)
            .where(_members.c.user_id == user_id)
            .order_by(_teams.c.name, _grants.c.name)
        )
        with read_transaction(self._engine) as conn:
            if not self._user_exists(conn, user_id):
                return None
            direct = self._direct_grants(conn, user_id)
            rows = conn.execute(via_teams).mappings().all()
        found = [EffectiveGrant(grant, SOURCE_DIRECT) for grant in direct]
        found += [
            EffectiveGrant(grant_record(row), TEAM_SOURCE_PREFIX + row["team_name"])
            for row in rows
        ]
        return found
