"""Teams and grants: teams and their members, grants (policy documents) and their
attachments to users and teams, and the effective grants of a user (direct, then through
each team). The rules and locking are those of `iam_queries.py`, whose helpers these
functions share. Each function is one transaction on a `Database`. No Twisted here.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from objstore.meta import schema
from objstore.meta.database import Database
from objstore.meta.dialect import insert_ignore, read_transaction, write_transaction
from objstore.meta.iam_queries import (
    Row,
    count_of,
    detach,
    exists_locked,
    leave_tombstones,
    locked_row,
    pairs,
    present,
    update_named,
    user_exists,
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
)
from objstore.meta.records import UserRecord
from objstore.meta.tombstones import (
    TOMBSTONE_GRANT,
    TOMBSTONE_TEAM,
    TOMBSTONE_TEAM_GRANT,
    TOMBSTONE_TEAM_MEMBER,
    TOMBSTONE_USER_GRANT,
    leave_tombstone,
    pair_key,
)

_users = schema.users
_teams = schema.teams
_members = schema.team_members
_grants = schema.grants
_user_grants = schema.user_grants
_team_grants = schema.team_grants


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


def _team_exists(conn: Connection, team_id: str) -> bool:
    query = sa.select(_teams.c.team_id).where(_teams.c.team_id == team_id)
    return conn.execute(query).first() is not None


# -- teams -------------------------------------------------------------------------------


def create_team(db: Database, team: TeamRecord) -> bool:
    """False when the name (or the id) is taken."""
    values = {
        "team_id": team.team_id,
        "name": team.name,
        "description": team.description,
        "created_at": team.created_at,
        "updated_at": team.updated_at or team.created_at,
    }
    with write_transaction(db.engine) as conn:
        return insert_ignore(conn, _teams, values)


def get_team(db: Database, team_id: str) -> TeamRecord | None:
    with read_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_teams).where(_teams.c.team_id == team_id)
                           ).mappings().first()
    return None if row is None else team_record(row)


def _team_summaries(where: sa.ColumnElement[bool] | None = None) -> sa.Select[Any]:
    query = sa.select(
        _teams,
        count_of(_members, "team_id", _teams.c.team_id).label("member_count"),
        count_of(_team_grants, "team_id", _teams.c.team_id).label("grant_count"),
    ).order_by(_teams.c.name)
    return query if where is None else query.where(where)


def _team_summary(row: Row) -> TeamSummary:
    return TeamSummary(
        team_record(row),
        member_count=int(row["member_count"]),
        grant_count=int(row["grant_count"]),
    )


def get_team_summary(db: Database, team_id: str) -> TeamSummary | None:
    with read_transaction(db.engine) as conn:
        row = conn.execute(_team_summaries(_teams.c.team_id == team_id)).mappings().first()
    return None if row is None else _team_summary(row)


def list_team_summaries(db: Database) -> list[TeamSummary]:
    """Every team with its counts, ordered by name."""
    with read_transaction(db.engine) as conn:
        rows = conn.execute(_team_summaries()).mappings().all()
    return [_team_summary(row) for row in rows]


def update_team(
    db: Database, team_id: str, *, name: str | None, description: str | None, now: float
) -> Change[TeamRecord]:
    """Status "updated", "missing" or "duplicate"."""
    changes = present({"name": name, "description": description})
    status, row = update_named(db, _teams, "team_id", team_id, {**changes, "updated_at": now})
    return Change(status, None if row is None else team_record(row))


def delete_team(db: Database, team_id: str) -> Change[TeamRecord]:
    """Remove a team, its members and its grant attachments. "deleted" or "missing"."""
    with write_transaction(db.engine) as conn:
        row = locked_row(conn, _teams, "team_id", team_id)
        if row is None:
            return Change("missing")
        removal = Removal(
            team_members=pairs(conn, _members, _members.c.team_id == team_id,
                               "team_id", "user_id"),
            team_grants=pairs(conn, _team_grants, _team_grants.c.team_id == team_id,
                              "team_id", "grant_id"),
        )
        conn.execute(sa.delete(_members).where(_members.c.team_id == team_id))
        conn.execute(sa.delete(_team_grants).where(_team_grants.c.team_id == team_id))
        conn.execute(sa.delete(_teams).where(_teams.c.team_id == team_id))
        leave_tombstone(db, conn, TOMBSTONE_TEAM, team_id)
        leave_tombstones(db, conn, TOMBSTONE_TEAM_MEMBER, removal.team_members)
        leave_tombstones(db, conn, TOMBSTONE_TEAM_GRANT, removal.team_grants)
        return Change("deleted", team_record(row), removal)


def add_team_member(db: Database, team_id: str, user_id: str, now: float) -> str:
    """"added", "exists", "no_team" or "no_user"."""
    with write_transaction(db.engine) as conn:
        if not exists_locked(conn, _teams.c.team_id, team_id):
            return "no_team"
        if not exists_locked(conn, _users.c.user_id, user_id):
            return "no_user"
        values = {"team_id": team_id, "user_id": user_id, "updated_at": now}
        return "added" if insert_ignore(conn, _members, values) else "exists"


def remove_team_member(db: Database, team_id: str, user_id: str) -> bool:
    """False when the user was not a member."""
    where = sa.and_(_members.c.team_id == team_id, _members.c.user_id == user_id)
    return detach(db, _members, where, TOMBSTONE_TEAM_MEMBER, pair_key(team_id, user_id))


def list_team_members(db: Database, team_id: str) -> list[UserRecord] | None:
    """Members ordered by username; None when the team does not exist."""
    query = (
        sa.select(_users)
        .join(_members, _members.c.user_id == _users.c.user_id)
        .where(_members.c.team_id == team_id)
        .order_by(_users.c.username)
    )
    with read_transaction(db.engine) as conn:
        if not _team_exists(conn, team_id):
            return None
        rows = conn.execute(query).mappings().all()
    return [schema.user_record(row) for row in rows]


def list_user_teams(db: Database, user_id: str) -> list[TeamRecord] | None:
    """Teams ordered by name; None when the user does not exist."""
    query = (
        sa.select(_teams)
        .join(_members, _members.c.team_id == _teams.c.team_id)
        .where(_members.c.user_id == user_id)
        .order_by(_teams.c.name)
    )
    with read_transaction(db.engine) as conn:
        if not user_exists(conn, user_id):
            return None
        rows = conn.execute(query).mappings().all()
    return [team_record(row) for row in rows]


# -- grants ------------------------------------------------------------------------------


def create_grant(db: Database, grant: GrantRecord) -> bool:
    """False when the name (or the id) is taken."""
    values = {
        "grant_id": grant.grant_id,
        "name": grant.name,
        "description": grant.description,
        "document": schema.dumps_json(grant.document),
        "created_at": grant.created_at,
        "updated_at": grant.updated_at or grant.created_at,
    }
    with write_transaction(db.engine) as conn:
        return insert_ignore(conn, _grants, values)


def _one_grant(db: Database, where: sa.ColumnElement[bool]) -> GrantRecord | None:
    with read_transaction(db.engine) as conn:
        row = conn.execute(sa.select(_grants).where(where)).mappings().first()
    return None if row is None else grant_record(row)


def get_grant(db: Database, grant_id: str) -> GrantRecord | None:
    return _one_grant(db, _grants.c.grant_id == grant_id)


def get_grant_by_name(db: Database, name: str) -> GrantRecord | None:
    return _one_grant(db, _grants.c.name == name)


def list_grants(db: Database) -> list[GrantRecord]:
    """Every grant ordered by name."""
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.select(_grants).order_by(_grants.c.name)).mappings().all()
    return [grant_record(row) for row in rows]


def update_grant(
    db: Database,
    grant_id: str,
    *,
    name: str | None,
    description: str | None,
    document: dict[str, Any] | None,
    now: float,
) -> Change[GrantRecord]:
    """Status "updated", "missing" or "duplicate"."""
    text = None if document is None else schema.dumps_json(document)
    changes = present({"name": name, "description": description, "document": text})
    status, row = update_named(db, _grants, "grant_id", grant_id,
                               {**changes, "updated_at": now})
    return Change(status, None if row is None else grant_record(row))


def delete_grant(db: Database, grant_id: str) -> Change[GrantRecord]:
    """Remove a grant and every user and team attachment. "deleted" or "missing"."""
    with write_transaction(db.engine) as conn:
        row = locked_row(conn, _grants, "grant_id", grant_id)
        if row is None:
            return Change("missing")
        removal = Removal(
            user_grants=pairs(conn, _user_grants, _user_grants.c.grant_id == grant_id,
                              "user_id", "grant_id"),
            team_grants=pairs(conn, _team_grants, _team_grants.c.grant_id == grant_id,
                              "team_id", "grant_id"),
        )
        conn.execute(sa.delete(_user_grants).where(_user_grants.c.grant_id == grant_id))
        conn.execute(sa.delete(_team_grants).where(_team_grants.c.grant_id == grant_id))
        conn.execute(sa.delete(_grants).where(_grants.c.grant_id == grant_id))
        leave_tombstone(db, conn, TOMBSTONE_GRANT, grant_id)
        leave_tombstones(db, conn, TOMBSTONE_USER_GRANT, removal.user_grants)
        leave_tombstones(db, conn, TOMBSTONE_TEAM_GRANT, removal.team_grants)
        return Change("deleted", grant_record(row), removal)


def _attach(db: Database, table: sa.Table, owner: sa.Column[Any], owner_id: str,
            grant_id: str, now: float) -> str:
    missing_owner = "no_user" if table is _user_grants else "no_team"
    with write_transaction(db.engine) as conn:
        if not exists_locked(conn, owner, owner_id):
            return missing_owner
        if not exists_locked(conn, _grants.c.grant_id, grant_id):
            return "no_grant"
        values = {owner.name: owner_id, "grant_id": grant_id, "updated_at": now}
        return "attached" if insert_ignore(conn, table, values) else "exists"


def attach_user_grant(db: Database, user_id: str, grant_id: str, now: float) -> str:
    """"attached", "exists", "no_user" or "no_grant"."""
    return _attach(db, _user_grants, _users.c.user_id, user_id, grant_id, now)


def detach_user_grant(db: Database, user_id: str, grant_id: str) -> bool:
    where = sa.and_(_user_grants.c.user_id == user_id, _user_grants.c.grant_id == grant_id)
    return detach(db, _user_grants, where, TOMBSTONE_USER_GRANT, pair_key(user_id, grant_id))


def attach_team_grant(db: Database, team_id: str, grant_id: str, now: float) -> str:
    """"attached", "exists", "no_team" or "no_grant"."""
    return _attach(db, _team_grants, _teams.c.team_id, team_id, grant_id, now)


def detach_team_grant(db: Database, team_id: str, grant_id: str) -> bool:
    where = sa.and_(_team_grants.c.team_id == team_id, _team_grants.c.grant_id == grant_id)
    return detach(db, _team_grants, where, TOMBSTONE_TEAM_GRANT, pair_key(team_id, grant_id))


def _direct_grants(conn: Connection, user_id: str) -> list[GrantRecord]:
    query = (
        sa.select(_grants)
        .join(_user_grants, _user_grants.c.grant_id == _grants.c.grant_id)
        .where(_user_grants.c.user_id == user_id)
        .order_by(_grants.c.name)
    )
    return [grant_record(row) for row in conn.execute(query).mappings().all()]


def list_user_grants(db: Database, user_id: str) -> list[GrantRecord] | None:
    """Direct grants ordered by name; None when the user does not exist."""
    with read_transaction(db.engine) as conn:
        if not user_exists(conn, user_id):
            return None
        return _direct_grants(conn, user_id)


def list_team_grants(db: Database, team_id: str) -> list[GrantRecord] | None:
    """Grants ordered by name; None when the team does not exist."""
    query = (
        sa.select(_grants)
        .join(_team_grants, _team_grants.c.grant_id == _grants.c.grant_id)
        .where(_team_grants.c.team_id == team_id)
        .order_by(_grants.c.name)
    )
    with read_transaction(db.engine) as conn:
        if not _team_exists(conn, team_id):
            return None
        rows = conn.execute(query).mappings().all()
    return [grant_record(row) for row in rows]


def grant_holders(db: Database, grant_id: str) -> list[str]:
    """Ids of the users a grant applies to, directly or through a team, each once."""
    direct = sa.select(_user_grants.c.user_id).where(_user_grants.c.grant_id == grant_id)
    via_teams = (
        sa.select(_members.c.user_id)
        .join(_team_grants, _team_grants.c.team_id == _members.c.team_id)
        .where(_team_grants.c.grant_id == grant_id)
    )
    with read_transaction(db.engine) as conn:
        rows = conn.execute(sa.union(direct, via_teams)).all()
    return sorted(str(row[0]) for row in rows)


def effective_grants(db: Database, user_id: str) -> list[EffectiveGrant] | None:
    """Direct grants (source "direct") then grants of every team of the user (source
    "team:<name>"), each (grant, source) pair once; None when the user does not exist."""
    via_teams = (
        sa.select(_grants, _teams.c.name.label("team_name"))
        .join(_team_grants, _team_grants.c.grant_id == _grants.c.grant_id)
        .join(_members, _members.c.team_id == _team_grants.c.team_id)
        .join(_teams, _teams.c.team_id == _team_grants.c.team_id)
        .where(_members.c.user_id == user_id)
        .order_by(_teams.c.name, _grants.c.name)
    )
    with read_transaction(db.engine) as conn:
        if not user_exists(conn, user_id):
            return None
        direct = _direct_grants(conn, user_id)
        rows = conn.execute(via_teams).mappings().all()
    found = [EffectiveGrant(grant, SOURCE_DIRECT) for grant in direct]
    found += [
        EffectiveGrant(grant_record(row), TEAM_SOURCE_PREFIX + row["team_name"])
        for row in rows
    ]
    return found
