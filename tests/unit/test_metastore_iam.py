"""The IAM part of the MetaStore suite (users, credentials, teams, grants, attachments,
effective grants), run on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from objstore.meta.iam_queries import (
    TOMBSTONE_GRANT,
    TOMBSTONE_TEAM,
    TOMBSTONE_TEAM_GRANT,
    TOMBSTONE_TEAM_MEMBER,
    TOMBSTONE_USER,
    TOMBSTONE_USER_GRANT,
    pair_key,
)
from objstore.meta.iam_records import EffectiveGrant, GrantRecord, TeamRecord
from objstore.meta.records import CredentialRecord, UserRecord
from objstore.meta.store import TOMBSTONE_CREDENTIAL, SyncMetaStore
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

NOW = 1_700_000_000.0
DOC: dict[str, Any] = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["*"]}],
}


def new_id() -> str:
    return str(uuid.uuid4())


def add_user(store: SyncMetaStore, name: str, *, root: bool = False) -> UserRecord:
    user = UserRecord(new_id(), name, NOW, description=f"{name} user", is_root=root,
                      updated_at=NOW)
    assert store.create_user(user)
    return user


def add_credential(store: SyncMetaStore, user: UserRecord, key: str,
                   active: bool = True) -> CredentialRecord:
    credential = CredentialRecord(key, "secret-" + key, user.user_id, NOW, active=active)
    assert store.create_credential(credential)
    return credential


def add_team(store: SyncMetaStore, name: str) -> TeamRecord:
    team = TeamRecord(new_id(), name, NOW, description=f"{name} team", updated_at=NOW)
    assert store.create_team(team)
    return team


def add_grant(store: SyncMetaStore, name: str, document: dict[str, Any] | None = None
              ) -> GrantRecord:
    grant = GrantRecord(new_id(), name, document or DOC, NOW, description=f"{name} grant",
                        updated_at=NOW)
    assert store.create_grant(grant)
    return grant


@pytest.fixture
def store(meta_store: SyncMetaStore) -> SyncMetaStore:  # noqa: F811
    return meta_store


# -- users -------------------------------------------------------------------------------


def test_user_summaries_count_credentials_teams_and_grants(store: SyncMetaStore) -> None:
    alice = add_user(store, "alice")
    bob = add_user(store, "bob")
    add_credential(store, alice, "AK1")
    add_credential(store, alice, "AK2", active=False)
    team = add_team(store, "devs")
    grant = add_grant(store, "read")
    assert store.add_team_member(team.team_id, alice.user_id, NOW) == "added"
    assert store.attach_user_grant(alice.user_id, grant.grant_id, NOW) == "attached"
    summaries = {s.user.username: s for s in store.list_user_summaries()}
    assert list(summaries) == ["alice", "bob"]
    assert (summaries["alice"].credential_count, summaries["alice"].team_count,
            summaries["alice"].grant_count) == (2, 1, 1)
    assert (summaries["bob"].credential_count, summaries["bob"].team_count,
            summaries["bob"].grant_count) == (0, 0, 0)
    one = store.get_user_summary(alice.user_id)
    assert one is not None and one.user == alice and one.credential_count == 2
    assert store.get_user_summary(new_id()) is None
    assert store.get_user_summary(bob.user_id) == summaries["bob"]


def test_update_user(store: SyncMetaStore) -> None:
    alice = add_user(store, "alice")
    add_user(store, "bob")
    root = add_user(store, "root", root=True)
    renamed = store.update_user(alice.user_id, username="alicia", description=None,
                                     now=NOW + 5)
    assert renamed.status == "updated" and renamed.record is not None
    assert renamed.record.username == "alicia"
    assert renamed.record.description == "alice user" and renamed.record.updated_at == NOW + 5
    assert store.get_user(alice.user_id) == renamed.record
    described = store.update_user(alice.user_id, username=None, description="new",
                                       now=NOW + 6)
    assert described.record is not None and described.record.username == "alicia"
    assert described.record.description == "new"
    same_name = store.update_user(alice.user_id, username="alicia", description=None,
                                       now=NOW + 7)
    assert same_name.status == "updated"
    taken = store.update_user(alice.user_id, username="bob", description=None, now=NOW)
    assert taken.status == "duplicate"
    assert store.update_user(root.user_id, username="x", description=None,
                                  now=NOW).status == "root"
    assert store.update_user(new_id(), username="x", description=None,
                                  now=NOW).status == "missing"
    user = store.get_user(alice.user_id)
    assert user is not None and user.username == "alicia"


def test_delete_user_rules_and_cleanup(store: SyncMetaStore) -> None:
    root = add_user(store, "root", root=True)
    alice = add_user(store, "alice")
    team = add_team(store, "devs")
    grant = add_grant(store, "read")
    store.add_team_member(team.team_id, alice.user_id, NOW)
    store.attach_user_grant(alice.user_id, grant.grant_id, NOW)
    add_credential(store, alice, "AKALICE")
    assert store.delete_user(root.user_id).status == "root"
    assert store.delete_user(alice.user_id).status == "has_credentials"
    assert store.get_user(alice.user_id) is not None
    assert store.remove_credential("AKALICE", caller_user_id=None).status == "deleted"
    removed = store.delete_user(alice.user_id)
    assert removed.status == "deleted" and removed.record == alice
    assert removed.removal.team_members == ((team.team_id, alice.user_id),)
    assert removed.removal.user_grants == ((alice.user_id, grant.grant_id),)
    assert store.get_user(alice.user_id) is None
    assert store.list_team_members(team.team_id) == []
    assert store.get_tombstone(TOMBSTONE_USER, alice.user_id) is not None
    assert store.get_tombstone(
        TOMBSTONE_TEAM_MEMBER, pair_key(team.team_id, alice.user_id)) is not None
    assert store.get_tombstone(
        TOMBSTONE_USER_GRANT, pair_key(alice.user_id, grant.grant_id)) is not None
    assert store.delete_user(alice.user_id).status == "missing"
    summary = store.get_team_summary(team.team_id)
    assert summary is not None and summary.member_count == 0


def test_deleted_user_credentials_resolve_to_nothing(store: SyncMetaStore) -> None:
    """Even a credential row left behind (the foreign key cascades) never resolves."""
    alice = add_user(store, "alice")
    add_credential(store, alice, "AKGONE")
    assert store.lookup_identity("AKGONE") is not None
    store.remove_credential("AKGONE", caller_user_id=None)
    store.delete_user(alice.user_id)
    assert store.lookup_identity("AKGONE") is None


# -- credentials ---------------------------------------------------------------------------


def test_change_credential_fields(store: SyncMetaStore) -> None:
    alice = add_user(store, "alice")
    add_credential(store, alice, "AK1")
    add_credential(store, alice, "AK2")
    changed = store.change_credential("AK1", active=False, description="old",
                                           now=NOW + 9, caller_user_id=None)
    assert changed.status == "updated" and changed.record is not None
    assert (changed.record.active, changed.record.description) == (False, "old")
    stored = store.get_credential("AK1")
    assert stored == changed.record and stored.updated_at == NOW + 9
    assert stored.secret_access_key == "secret-AK1"
    again = store.change_credential("AK1", active=None, description="kept",
                                         now=NOW + 10, caller_user_id=None)
    assert again.record is not None and again.record.active is False
    assert store.change_credential("NOPE", active=True, description=None, now=NOW,
                                        caller_user_id=None).status == "missing"


@pytest.mark.parametrize("operation", ["deactivate", "delete"])
def test_last_active_credential_of_root_or_caller_is_kept(
    store: SyncMetaStore, operation: str
) -> None:
    root = add_user(store, "root", root=True)
    alice = add_user(store, "alice")
    add_credential(store, root, "ROOT1")
    add_credential(store, root, "ROOT2", active=False)
    add_credential(store, alice, "ALICE1")

    def apply(key: str, caller: str | None) -> str:
        if operation == "deactivate":
            return store.change_credential(key, active=False, description=None, now=NOW,
                                                caller_user_id=caller).status
        return store.remove_credential(key, caller_user_id=caller).status

    assert apply("ROOT1", None) == "last_active"  # a root user, whoever asks
    assert apply("ALICE1", alice.user_id) == "last_active"  # the caller's own last one
    assert apply("ALICE1", root.user_id) in ("updated", "deleted")  # another user's: revoke
    assert apply("ROOT2", root.user_id) in ("updated", "deleted")  # inactive: no lockout
    add_credential(store, root, "ROOT3")
    assert apply("ROOT1", root.user_id) in ("updated", "deleted")
    assert apply("ROOT3", root.user_id) == "last_active"
    active = [c for c in store.list_credentials(root.user_id) if c.active]
    assert [c.access_key_id for c in active] == ["ROOT3"]


def test_concurrent_deactivations_never_lock_root_out(store: SyncMetaStore) -> None:
    root = add_user(store, "root", root=True)
    keys = [f"ROOTKEY{i}" for i in range(6)]
    for key in keys:
        add_credential(store, root, key)
    with ThreadPoolExecutor(len(keys)) as pool:
        statuses = list(pool.map(
            lambda key: store.change_credential(
                key, active=False, description=None, now=NOW, caller_user_id=None).status,
            keys,
        ))
    assert statuses.count("last_active") == 1
    assert sum(c.active for c in store.list_credentials(root.user_id)) == 1


def test_remove_credential_leaves_a_tombstone(store: SyncMetaStore) -> None:
    alice = add_user(store, "alice")
    add_credential(store, alice, "AK1")
    removed = store.remove_credential("AK1", caller_user_id=None)
    assert removed.status == "deleted" and removed.record is not None
    assert removed.record.access_key_id == "AK1"
    assert store.get_credential("AK1") is None
    assert store.get_tombstone(TOMBSTONE_CREDENTIAL, "AK1") is not None
    assert store.remove_credential("AK1", caller_user_id=None).status == "missing"


# -- teams ---------------------------------------------------------------------------------


def test_team_crud_and_counts(store: SyncMetaStore) -> None:
    devs = add_team(store, "devs")
    ops = add_team(store, "ops")
    assert not store.create_team(TeamRecord(new_id(), "devs", NOW))
    assert store.get_team(devs.team_id) == TeamRecord(
        devs.team_id, "devs", NOW, "devs team", NOW)
    assert store.get_team(new_id()) is None
    alice = add_user(store, "alice")
    grant = add_grant(store, "read")
    store.add_team_member(devs.team_id, alice.user_id, NOW)
    store.attach_team_grant(devs.team_id, grant.grant_id, NOW)
    summaries = store.list_team_summaries()
    assert [(s.team.name, s.member_count, s.grant_count) for s in summaries] == [
        ("devs", 1, 1), ("ops", 0, 0)]
    assert store.get_team_summary(ops.team_id) == summaries[1]
    assert store.get_team_summary(new_id()) is None


def test_update_team(store: SyncMetaStore) -> None:
    devs = add_team(store, "devs")
    add_team(store, "ops")
    renamed = store.update_team(devs.team_id, name="developers", description=None,
                                     now=NOW + 3)
    assert renamed.status == "updated" and renamed.record is not None
    assert (renamed.record.name, renamed.record.description) == ("developers", "devs team")
    assert store.update_team(devs.team_id, name="ops", description="x",
                                  now=NOW).status == "duplicate"
    assert store.update_team(new_id(), name=None, description="x",
                                  now=NOW).status == "missing"
    team = store.get_team(devs.team_id)
    assert team is not None and team.name == "developers" and team.description == "devs team"


def test_delete_team_removes_members_and_attachments(store: SyncMetaStore) -> None:
    devs = add_team(store, "devs")
    alice = add_user(store, "alice")
    grant = add_grant(store, "read")
    store.add_team_member(devs.team_id, alice.user_id, NOW)
    store.attach_team_grant(devs.team_id, grant.grant_id, NOW)
    removed = store.delete_team(devs.team_id)
    assert removed.status == "deleted" and removed.record is not None
    assert removed.removal.team_members == ((devs.team_id, alice.user_id),)
    assert removed.removal.team_grants == ((devs.team_id, grant.grant_id),)
    assert store.get_team(devs.team_id) is None
    assert store.list_user_teams(alice.user_id) == []
    assert store.get_grant(grant.grant_id) is not None
    assert store.get_tombstone(TOMBSTONE_TEAM, devs.team_id) is not None
    assert store.get_tombstone(
        TOMBSTONE_TEAM_GRANT, pair_key(devs.team_id, grant.grant_id)) is not None
    assert store.delete_team(devs.team_id).status == "missing"


def test_team_members(store: SyncMetaStore) -> None:
    devs = add_team(store, "devs")
    ops = add_team(store, "ops")
    bob = add_user(store, "bob")
    alice = add_user(store, "alice")
    assert store.add_team_member(devs.team_id, bob.user_id, NOW) == "added"
    assert store.add_team_member(devs.team_id, alice.user_id, NOW) == "added"
    assert store.add_team_member(devs.team_id, alice.user_id, NOW) == "exists"
    assert store.add_team_member(ops.team_id, alice.user_id, NOW) == "added"
    assert store.add_team_member(new_id(), alice.user_id, NOW) == "no_team"
    assert store.add_team_member(devs.team_id, new_id(), NOW) == "no_user"
    assert store.list_team_members(devs.team_id) == [alice, bob]
    assert store.list_team_members(new_id()) is None
    assert [t.name for t in store.list_user_teams(alice.user_id) or []] == ["devs", "ops"]
    assert store.list_user_teams(new_id()) is None
    assert store.remove_team_member(devs.team_id, alice.user_id)
    assert not store.remove_team_member(devs.team_id, alice.user_id)
    assert store.get_tombstone(
        TOMBSTONE_TEAM_MEMBER, pair_key(devs.team_id, alice.user_id)) is not None
    assert store.list_team_members(devs.team_id) == [bob]


# -- grants --------------------------------------------------------------------------------


def test_grant_crud(store: SyncMetaStore) -> None:
    read = add_grant(store, "read")
    add_grant(store, "admin")
    assert not store.create_grant(GrantRecord(new_id(), "read", DOC, NOW))
    stored = store.get_grant(read.grant_id)
    assert stored == GrantRecord(read.grant_id, "read", DOC, NOW, "read grant", NOW)
    assert store.get_grant_by_name("read") == stored
    assert store.get_grant_by_name("nope") is None
    assert [g.name for g in store.list_grants()] == ["admin", "read"]
    new_doc = {"Version": "2012-10-17",
               "Statement": [{"Effect": "Deny", "Action": ["*"], "Resource": ["*"]}]}
    updated = store.update_grant(read.grant_id, name=None, description="d",
                                      document=new_doc, now=NOW + 4)
    assert updated.status == "updated" and updated.record is not None
    assert updated.record.document == new_doc and updated.record.updated_at == NOW + 4
    assert updated.record.created_at == NOW and updated.record.name == "read"
    assert store.get_grant(read.grant_id) == updated.record
    assert store.update_grant(read.grant_id, name="admin", description=None,
                                   document=None, now=NOW).status == "duplicate"
    assert store.update_grant(new_id(), name="x", description=None, document=None,
                                   now=NOW).status == "missing"


def test_delete_grant_removes_every_attachment(store: SyncMetaStore) -> None:
    grant = add_grant(store, "read")
    alice = add_user(store, "alice")
    devs = add_team(store, "devs")
    store.attach_user_grant(alice.user_id, grant.grant_id, NOW)
    store.attach_team_grant(devs.team_id, grant.grant_id, NOW)
    removed = store.delete_grant(grant.grant_id)
    assert removed.status == "deleted"
    assert removed.removal.user_grants == ((alice.user_id, grant.grant_id),)
    assert removed.removal.team_grants == ((devs.team_id, grant.grant_id),)
    assert store.list_user_grants(alice.user_id) == []
    assert store.list_team_grants(devs.team_id) == []
    assert store.get_tombstone(TOMBSTONE_GRANT, grant.grant_id) is not None
    assert store.delete_grant(grant.grant_id).status == "missing"


def test_grant_attachments(store: SyncMetaStore) -> None:
    read = add_grant(store, "read")
    write = add_grant(store, "write")
    alice = add_user(store, "alice")
    devs = add_team(store, "devs")
    assert store.attach_user_grant(alice.user_id, write.grant_id, NOW) == "attached"
    assert store.attach_user_grant(alice.user_id, read.grant_id, NOW) == "attached"
    assert store.attach_user_grant(alice.user_id, read.grant_id, NOW) == "exists"
    assert store.attach_user_grant(new_id(), read.grant_id, NOW) == "no_user"
    assert store.attach_user_grant(alice.user_id, new_id(), NOW) == "no_grant"
    assert store.list_user_grants(alice.user_id) == [read, write]
    assert store.list_user_grants(new_id()) is None
    assert store.attach_team_grant(devs.team_id, read.grant_id, NOW) == "attached"
    assert store.attach_team_grant(devs.team_id, read.grant_id, NOW) == "exists"
    assert store.attach_team_grant(new_id(), read.grant_id, NOW) == "no_team"
    assert store.attach_team_grant(devs.team_id, new_id(), NOW) == "no_grant"
    assert store.list_team_grants(devs.team_id) == [read]
    assert store.list_team_grants(new_id()) is None
    assert store.detach_user_grant(alice.user_id, read.grant_id)
    assert not store.detach_user_grant(alice.user_id, read.grant_id)
    assert store.detach_team_grant(devs.team_id, read.grant_id)
    assert not store.detach_team_grant(devs.team_id, read.grant_id)
    assert store.get_tombstone(
        TOMBSTONE_USER_GRANT, pair_key(alice.user_id, read.grant_id)) is not None
    assert store.get_tombstone(
        TOMBSTONE_TEAM_GRANT, pair_key(devs.team_id, read.grant_id)) is not None
    assert store.list_user_grants(alice.user_id) == [write]


def test_effective_grants_direct_and_via_every_team(store: SyncMetaStore) -> None:
    alice = add_user(store, "alice")
    bob = add_user(store, "bob")
    read, write, admin = (add_grant(store, n) for n in ("read", "write", "admin"))
    devs, ops = add_team(store, "devs"), add_team(store, "ops")
    store.attach_user_grant(alice.user_id, write.grant_id, NOW)
    store.attach_team_grant(devs.team_id, read.grant_id, NOW)
    store.attach_team_grant(devs.team_id, write.grant_id, NOW)
    store.attach_team_grant(ops.team_id, admin.grant_id, NOW)
    store.add_team_member(devs.team_id, alice.user_id, NOW)
    store.add_team_member(ops.team_id, bob.user_id, NOW)
    assert store.effective_grants(alice.user_id) == [
        EffectiveGrant(write, "direct"),
        EffectiveGrant(read, "team:devs"),
        EffectiveGrant(write, "team:devs"),
    ]
    assert store.effective_grants(bob.user_id) == [EffectiveGrant(admin, "team:ops")]
    store.remove_team_member(devs.team_id, alice.user_id)
    assert store.effective_grants(alice.user_id) == [EffectiveGrant(write, "direct")]
    assert store.effective_grants(new_id()) is None


def test_grant_holders_direct_and_through_teams(store: SyncMetaStore) -> None:
    alice, bob, carol = (add_user(store, n) for n in ("alice", "bob", "carol"))
    grant, other = add_grant(store, "g"), add_grant(store, "other")
    devs = add_team(store, "devs")
    assert store.grant_holders(grant.grant_id) == []
    store.attach_user_grant(alice.user_id, grant.grant_id, NOW)
    store.attach_team_grant(devs.team_id, grant.grant_id, NOW)
    store.add_team_member(devs.team_id, alice.user_id, NOW)  # direct and via the team: once
    store.add_team_member(devs.team_id, bob.user_id, NOW)
    store.attach_user_grant(carol.user_id, other.grant_id, NOW)
    assert store.grant_holders(grant.grant_id) == sorted([alice.user_id, bob.user_id])
    assert store.grant_holders(other.grant_id) == [carol.user_id]
    assert store.grant_holders(new_id()) == []
