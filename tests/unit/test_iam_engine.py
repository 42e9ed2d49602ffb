"""IamService refuses every change that would give a non-root caller, directly or through
another user, more than it holds (403 AccessDenied, nothing changed), and lets through what
stays within the caller's own permissions. In memory: SQLite in a temp dir, inline pools."""

from __future__ import annotations

from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from objstore.blobs.control import ControlRecord
from objstore.engine.changes import Caller
from objstore.engine.iam import IamService, NewCredential
from objstore.errors import AdminError
from objstore.iam.bootstrap import builtin_grant_id, ensure_builtin_grants, ensure_root
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.iam_records import GrantRecord
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import UserRecord
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import run

ADMIN = builtin_grant_id("AdministratorAccess")
FULL = builtin_grant_id("S3FullAccess")
READ = builtin_grant_id("S3ReadOnlyAccess")


def doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(actions: list[str], resources: list[str] | None = None,
          effect: str = "Allow") -> dict[str, Any]:
    return {"Effect": effect, "Action": actions, "Resource": resources or ["*"]}


@dataclass
class Node:
    store: SyncMetaStore
    iam: IamService
    root: Caller
    changes: list[int]

    def user(self, name: str, *grant_ids: str) -> UserRecord:
        user = run(self.iam.create_user(self.root, name, ""))
        for grant_id in grant_ids:
            run(self.iam.attach_user_grant(self.root, user.user_id, grant_id))
        return user

    def grant(self, name: str, *statements: dict[str, Any]) -> GrantRecord:
        return run(self.iam.create_grant(self.root, name, "", doc(*statements)))

    def caller(self, name: str, *statements: dict[str, Any]) -> Caller:
        """A non-root user holding one grant of `statements` (none: no grant at all)."""
        grants = [self.grant(f"{name}-grant", *statements).grant_id] if statements else []
        user = self.user(name, *grants)
        return Caller(Principal(user.user_id, name, False, f"AK{name}"))

    def refused(self, coroutine: Coroutine[Any, Any, Any]) -> AdminError:
        before = len(self.changes)
        with pytest.raises(AdminError) as caught:
            run(coroutine)
        assert caught.value.code == "AccessDenied" and caught.value.status == 403
        assert len(self.changes) == before, "a refused change was committed"
        return caught.value

    def grant_ids(self, user: UserRecord) -> set[str]:
        return {g.grant_id for g in run(self.iam.user_grants(user.user_id))}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    store = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2),
                          clock=lambda: 1000.0)
    store.migrate()
    control = ControlRecord(str(tmp_path / "data"), fsync=False)
    control.prepare()
    ensure_root(store, control)
    ensure_builtin_grants(store, control)
    changes: list[int] = []
    iam = IamService(MetaStore(store, SyncDbPool()), control, InlinePool(), clock=lambda: 2000.0,
                     on_change=lambda: changes.append(1))
    root_user = next(u for u in store.list_users() if u.is_root)
    root = Caller(Principal(root_user.user_id, root_user.username, True, "ROOTKEY"))
    yield Node(store, iam, root, changes)
    store.close()


CREDENTIALS = allow(["svc:ManageCredentials"])
USERS = allow(["svc:ManageUsers"])


def test_manage_credentials_cannot_mint_a_key_for_an_administrator(node: Node) -> None:
    helpdesk = node.caller("helpdesk", CREDENTIALS)
    admin = node.user("admin", ADMIN)
    error = node.refused(node.iam.create_credential(helpdesk, admin.user_id, NewCredential()))
    assert "admin" in error.message and "* on *" in error.message
    assert node.store.list_credentials(admin.user_id) == []
    reader = node.user("reader", READ)  # more than svc:ManageCredentials, too
    node.refused(node.iam.create_credential(helpdesk, reader.user_id, NewCredential()))
    plain = node.user("plain")
    made = run(node.iam.create_credential(helpdesk, plain.user_id, NewCredential()))
    assert made.user_id == plain.user_id


def test_credentials_of_a_wider_user_cannot_be_changed_or_deleted(node: Node) -> None:
    helpdesk = node.caller("helpdesk", CREDENTIALS)
    admin = node.user("admin", ADMIN)
    key = run(node.iam.create_credential(node.root, admin.user_id, NewCredential()))
    node.refused(node.iam.update_credential(helpdesk, key.access_key_id, False, None))
    node.refused(node.iam.delete_credential(helpdesk, key.access_key_id))
    assert node.store.get_credential(key.access_key_id) is not None
    # Its own credentials stay the caller's to manage.
    own = run(node.iam.create_credential(helpdesk, helpdesk.principal.user_id, NewCredential()))
    run(node.iam.update_credential(helpdesk, own.access_key_id, None, "mine"))


def test_root_users_are_out_of_reach(node: Node) -> None:
    everything = node.caller("everything", allow(["*"]))
    root_id = node.root.principal.user_id
    error = node.refused(node.iam.create_credential(everything, root_id, NewCredential()))
    assert "root" in error.message
    node.refused(node.iam.update_user(everything, root_id, None, "x"))


def test_manage_users_cannot_attach_a_grant_it_does_not_hold(node: Node) -> None:
    manager = node.caller("manager", USERS)
    me = node.store.get_user(manager.principal.user_id)
    assert me is not None
    error = node.refused(node.iam.attach_user_grant(manager, me.user_id, ADMIN))
    assert "AdministratorAccess" in error.message
    other = node.user("other")
    node.refused(node.iam.attach_user_grant(manager, other.user_id, ADMIN))
    node.refused(node.iam.attach_user_grant(manager, other.user_id, READ))
    assert node.grant_ids(me) == {g.grant_id for g in run(node.iam.user_grants(me.user_id))}
    assert ADMIN not in node.grant_ids(me) and node.grant_ids(other) == set()
    # A grant within its own permissions may be given.
    within = node.grant("within", USERS)
    run(node.iam.attach_user_grant(manager, other.user_id, within.grant_id))
    assert node.grant_ids(other) == {within.grant_id}


def test_a_wider_caller_may_give_what_it_holds(node: Node) -> None:
    manager = node.caller("manager", allow(["svc:ManageUsers", "s3:*"]))
    other = node.user("other")
    run(node.iam.attach_user_grant(manager, other.user_id, READ))
    run(node.iam.attach_user_grant(manager, other.user_id, FULL))
    node.refused(node.iam.attach_user_grant(manager, other.user_id, ADMIN))
    assert node.grant_ids(other) == {READ, FULL}


def test_a_deny_cannot_be_removed_to_widen_anyone(node: Node) -> None:
    manager = node.caller("manager", allow(["svc:*", "s3:*"]))
    fenced = node.grant("fence", allow(["s3:GetObject"], ["arn:aws:s3:::secret/*"], "Deny"))
    me = node.store.get_user(manager.principal.user_id)
    assert me is not None
    run(node.iam.attach_user_grant(node.root, me.user_id, fenced.grant_id))
    # Detaching or deleting its own Deny would widen the caller.
    node.refused(node.iam.detach_user_grant(manager, me.user_id, fenced.grant_id))
    node.refused(node.iam.delete_grant(manager, fenced.grant_id))
    node.refused(node.iam.update_grant(
        manager, fenced.grant_id, None, None,
        doc(allow(["s3:GetObject"], ["arn:aws:s3:::nothing/*"], "Deny"))))
    assert fenced.grant_id in node.grant_ids(me)
    # A user without the Deny is beyond the caller: S3 reads of secret/.
    other = node.user("other", FULL)
    node.refused(node.iam.delete_user(manager, other.user_id))
    narrow = node.user("narrow")
    run(node.iam.attach_user_grant(manager, narrow.user_id, fenced.grant_id))
    run(node.iam.detach_user_grant(manager, narrow.user_id, fenced.grant_id))


def test_changing_an_attached_grant_is_checked_against_every_holder(node: Node) -> None:
    manager = node.caller("manager", allow(["svc:ManageGrants", "s3:Get*"]))
    grant = node.grant("reads", allow(["s3:GetObject"]))
    loose = node.grant("loose", allow(["s3:GetObject"]))
    team = run(node.iam.create_team(node.root, "devs", ""))
    member = node.user("member")
    run(node.iam.add_member(node.root, team.team_id, member.user_id))
    run(node.iam.attach_team_grant(node.root, team.team_id, grant.grant_id))
    wider = doc(allow(["s3:*"]))
    node.refused(node.iam.update_grant(manager, grant.grant_id, None, None, wider))
    assert node.store.get_grant(grant.grant_id).document == doc(allow(["s3:GetObject"]))
    # Within the caller: fine; a grant attached to nobody may say anything (it gives
    # nothing until attached, and attaching is checked).
    run(node.iam.update_grant(manager, grant.grant_id, None, None,
                              doc(allow(["s3:GetObjectTagging"]))))
    run(node.iam.update_grant(manager, loose.grant_id, None, None, wider))
    run(node.iam.update_grant(manager, grant.grant_id, "renamed", None, None))
    # Creating a grant gives nothing.
    run(node.iam.create_grant(manager, "anything", "", doc(allow(["*"]))))


def test_teams_pass_on_no_more_than_the_caller_holds(node: Node) -> None:
    manager = node.caller("manager", allow(["svc:ManageTeams", "s3:Get*", "s3:List*"]))
    team = run(node.iam.create_team(manager, "readers", ""))
    node.refused(node.iam.attach_team_grant(manager, team.team_id, FULL))
    run(node.iam.attach_team_grant(manager, team.team_id, READ))
    member = node.user("member")
    run(node.iam.add_member(manager, team.team_id, member.user_id))
    admin = node.user("admin", ADMIN)
    node.refused(node.iam.add_member(manager, team.team_id, admin.user_id))  # acts on admin
    # A team whose grants exceed the caller's: no member may be added.
    wide = run(node.iam.create_team(node.root, "wide", ""))
    run(node.iam.attach_team_grant(node.root, wide.team_id, FULL))
    node.refused(node.iam.add_member(manager, wide.team_id, member.user_id))
    # A team holding a Deny: removing a member or the team would widen its members.
    fence = node.grant("fence", allow(["s3:GetObject"], ["arn:aws:s3:::b/*"], "Deny"))
    fenced = run(node.iam.create_team(node.root, "fenced", ""))
    run(node.iam.attach_team_grant(node.root, fenced.team_id, fence.grant_id))
    run(node.iam.attach_user_grant(node.root, member.user_id, FULL))  # now beyond, but fenced
    run(node.iam.add_member(node.root, fenced.team_id, member.user_id))
    node.refused(node.iam.remove_member(manager, fenced.team_id, member.user_id))
    node.refused(node.iam.detach_team_grant(manager, fenced.team_id, fence.grant_id))
    node.refused(node.iam.delete_team(manager, fenced.team_id))
    assert [m.user_id for m in run(node.iam.list_members(fenced.team_id))] == [member.user_id]


def test_root_may_do_everything(node: Node) -> None:
    admin = node.user("admin", ADMIN)
    run(node.iam.create_credential(node.root, admin.user_id, NewCredential()))
    run(node.iam.attach_user_grant(node.root, admin.user_id, FULL))
    run(node.iam.detach_user_grant(node.root, admin.user_id, ADMIN))
    run(node.iam.delete_user(node.root, node.user("gone", ADMIN).user_id))


def test_unknown_targets_are_still_not_found(node: Node) -> None:
    manager = node.caller("manager", allow(["svc:*"]))
    for coroutine in (node.iam.create_credential(manager, "nobody", NewCredential()),
                      node.iam.attach_user_grant(manager, "nobody", READ),
                      node.iam.attach_user_grant(manager, manager.principal.user_id, "none"),
                      node.iam.add_member(manager, "no-team", manager.principal.user_id),
                      node.iam.delete_grant(manager, "none")):
        with pytest.raises(AdminError) as caught:
            run(coroutine)
        assert caught.value.code == "NotFound"
