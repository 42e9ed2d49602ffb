"""IAM use cases: users, credentials, teams, grants and their attachments, with every rule of
the admin API (empty names, policy validation, duplicates, lockout rules, root users).

Every change goes through here, so none can skip the three things that follow it: the
caches of identities and policies are invalidated (the very next request sees the change),
and the control-plane record on the data volume is written or removed (so that
`objstore recover` rebuilds it). Rules that need atomicity are enforced by the store inside
one transaction; this module maps their outcomes to admin errors. No HTTP here.

Choices where the contract is silent: names are at most 256 characters, descriptions 1024;
supplied access keys are 3-128 characters of letters, digits, `_`, `.` and `-`, supplied
secrets 8-128 printable ASCII characters; built-in grants cannot be changed or deleted
(409).

No change may give its caller, directly or through another user, more than the caller
holds (`_refuse_escalation`, the one place this is decided; root callers pass): a non-root
caller may act on a user (the user itself, its credentials, its grants, its teams) only
when that user's effective grants are covered by the caller's (`iam.containment`) before
the change and after it, may attach only a grant it holds itself, and may never act on a
root user. A change that reaches users through a team or a grant (membership, team grants,
a grant's document, deleting a team or grant) is checked for every user it reaches. Refusals
are 403 AccessDenied. Creating a user, team or grant gives nothing and is not checked.
The check reads the current grants, then the change commits: not one transaction, so two
administrators changing the same users at the same moment are not serialized.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from objstore.blobs.control import ControlRecord
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind
from objstore.errors import AdminError
from objstore.iam.authorizer import compile_grants
from objstore.iam.bootstrap import BUILTIN_GRANT_IDS, generate_access_key, generate_secret_key
from objstore.iam.containment import excess
from objstore.iam.policy import PolicyError, validate
from objstore.json_input import parse_json
from objstore.meta.iam_queries import pair_key
from objstore.meta.iam_records import (
    SOURCE_DIRECT,
    TEAM_SOURCE_PREFIX,
    EffectiveGrant,
    GrantRecord,
    Removal,
    TeamRecord,
    TeamSummary,
    UserSummary,
)
from objstore.meta.iam_records import (
    Change as StoreChange,
)
from objstore.meta.records import CredentialRecord, UserRecord
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

MAX_NAME_LENGTH = 256
MAX_DESCRIPTION_LENGTH = 1024
_ACCESS_KEY = re.compile(r"^[A-Za-z0-9_.-]{3,128}$")
_SECRET_KEY = re.compile(r"^[\x21-\x7e]{8,128}$")

# Admin error per store outcome; the message names the entity.
_CONFLICTS: dict[str, str] = {
    "duplicate": "{kind} name {name!r} is already taken.",
    "root": "Root users cannot be changed or deleted.",
    "has_credentials": "The user still has credentials; delete them first.",
    "last_active": "This is the last active credential of a root user or of the caller.",
}


def not_found(kind: str, ident: str) -> AdminError:
    return AdminError("NotFound", f"No such {kind}: {ident}.")


def bad_request(message: str) -> AdminError:
    return AdminError("BadRequest", message)


def conflict(status: str, kind: str = "", name: str = "") -> AdminError:
    return AdminError("Conflict", _CONFLICTS[status].format(kind=kind, name=name))


def check_name(field: str, value: str) -> str:
    if not value.strip():
        raise bad_request(f"{field} must not be empty.")
    if len(value) > MAX_NAME_LENGTH:
        raise bad_request(f"{field} is longer than {MAX_NAME_LENGTH} characters.")
    return value


def check_description(value: str | None) -> str | None:
    if value is not None and len(value) > MAX_DESCRIPTION_LENGTH:
        raise bad_request(f"description is longer than {MAX_DESCRIPTION_LENGTH} characters.")
    return value


def check_document(document: Any) -> dict[str, Any]:
    """A policy document given as an object or as JSON text, validated."""
    if isinstance(document, str):
        try:
            document = parse_json(document)
        except ValueError as exc:
            raise bad_request(f"document is not valid JSON: {exc}") from None
    try:
        validate(document)
    except PolicyError as exc:
        raise bad_request(f"Invalid policy document: {exc}") from None
    assert isinstance(document, dict)
    return document


@dataclass(frozen=True)
class NewCredential:
    """What the caller may ask for; empty or None values are generated."""

    description: str = ""
    access_key_id: str | None = None
    secret_access_key: str | None = None


Grants = list[EffectiveGrant]
# What a change does to one user's effective grants (applied to the grants before it).
Revision = Callable[[Grants], Grants]


def unchanged(grants: Grants) -> Grants:
    return grants


def adding(grants: Sequence[GrantRecord], source: str) -> Revision:
    return lambda before: before + [EffectiveGrant(grant, source) for grant in grants]


def removing(source: str, grant_id: str | None = None) -> Revision:
    """Without the entries of `source` (of one grant, or all of them)."""
    return lambda before: [
        entry for entry in before
        if entry.source != source or (grant_id is not None and entry.grant.grant_id != grant_id)
    ]


def without_grant(grant_id: str) -> Revision:
    return lambda before: [entry for entry in before if entry.grant.grant_id != grant_id]


def replacing(grant: GrantRecord) -> Revision:
    return lambda before: [
        EffectiveGrant(grant, entry.source) if entry.grant.grant_id == grant.grant_id else entry
        for entry in before
    ]


def access_denied(message: str) -> AdminError:
    return AdminError("AccessDenied", message)


def _pick_keys(request: NewCredential) -> tuple[str, str]:
    access_key = request.access_key_id or generate_access_key()
    secret_key = request.secret_access_key or generate_secret_key()
    if not _ACCESS_KEY.match(access_key):
        raise bad_request("access_key_id must be 3-128 letters, digits, '_', '.' or '-'.")
    if not _SECRET_KEY.match(secret_key):
        raise bad_request("secret_access_key must be 8-128 printable ASCII characters "
                          "without spaces.")
    return access_key, secret_key


class IamService:
    def __init__(
        self,
        meta: MetaStore,
        control: ControlRecord,
        io: Runner,
        *,
        clock: Callable[[], float],
        on_change: Callable[[], None],
        new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
        changes: ChangeHook | None = None,
    ) -> None:
        self._meta = meta
        self._changes = changes or ChangeHook()
        self._control = control
        self._io = io
        self._clock = clock
        self._on_change = on_change
        self._new_id = new_id

    async def _changed(self, caller: Caller, subject: str) -> None:
        """The one place this service reports a committed change: the identity and policy
        caches are invalidated first, so the very next request sees it."""
        self._on_change()
        await self._changes.committed(Change(ChangeKind.IAM_CHANGED, caller, subject=subject))

    # -- no change gives the caller more than it holds --------------------------------
    async def _refuse_escalation(
        self, caller: Caller, user_ids: Iterable[str], revision: Revision = unchanged, *,
        granting: GrantRecord | None = None,
    ) -> None:
        """The one place the rule of the module docstring is enforced: 403 unless the
        caller is root or covers `granting` and each user in `user_ids`, before the change
        and after `revision`. Unknown users are left to the store (404)."""
        principal = caller.principal
        if principal.is_root:
            return
        held = compile_grants(await self._meta.effective_grants(principal.user_id) or [])
        if granting is not None:
            beyond = excess(held, compile_grants([EffectiveGrant(granting, SOURCE_DIRECT)]))
            if beyond is not None:
                raise access_denied(f"Grant {granting.name} allows {beyond}, which you may "
                                    "not: you may give only permissions you hold.")
        for user_id in user_ids:
            user = await self._meta.get_user(user_id)
            before: Grants | None = await self._meta.effective_grants(user_id)
            if user is None or before is None:
                continue
            if user.is_root:
                raise access_denied(f"Only a root user may act on the root user {user.username}.")
            beyond = excess(held, compile_grants(before))
            if beyond is not None:
                raise access_denied(f"User {user.username} may do {beyond}, beyond your own "
                                    "permissions: you may act only on users you cover.")
            beyond = excess(held, compile_grants(revision(before)))
            if beyond is not None:
                raise access_denied(f"This change would let user {user.username} do {beyond}, "
                                    "beyond your own permissions.")

    async def covers_user(self, caller: Caller, user_id: str) -> bool:
        """Whether `caller` may act on `user_id` (e.g. see its secrets in an export)."""
        try:
            await self._refuse_escalation(caller, [user_id])
        except AdminError:
            return False
        return True

    async def _members(self, team_id: str) -> list[str]:
        members: list[UserRecord] | None = await self._meta.list_team_members(team_id)
        return [member.user_id for member in members or []]

    async def _team_source(self, team_id: str) -> str:
        team: TeamRecord | None = await self._meta.get_team(team_id)
        return TEAM_SOURCE_PREFIX + (team.name if team is not None else "")

    # -- the control-plane record --------------------------------------------------------
    async def _save(self, family: str, key: str, record: Any) -> None:
        data = record if isinstance(record, dict) else dataclasses.asdict(record)
        await self._io.run(self._control.write, family, key, data)

    async def _drop(self, family: str, key: str) -> None:
        await self._io.run(self._control.remove, family, key)

    async def _drop_removal(self, removal: Removal) -> None:
        for family, pairs in (("team_members", removal.team_members),
                              ("user_grants", removal.user_grants),
                              ("team_grants", removal.team_grants)):
            for first, second in pairs:
                await self._drop(family, pair_key(first, second))

    async def _save_pair(self, family: str, names: tuple[str, str], first: str,
                         second: str, now: float) -> None:
        data = {names[0]: first, names[1]: second, "updated_at": now}
        await self._save(family, pair_key(first, second), data)

    # -- users -------------------------------------------------------------------------
    async def list_users(self) -> list[UserSummary]:
        users: list[UserSummary] = await self._meta.list_user_summaries()
        return users

    async def get_user(self, user_id: str) -> UserSummary:
        summary: UserSummary | None = await self._meta.get_user_summary(user_id)
        if summary is None:
            raise not_found("user", user_id)
        return summary

    async def _user(self, user_id: str) -> UserRecord:
        user: UserRecord | None = await self._meta.get_user(user_id)
        if user is None:
            raise not_found("user", user_id)
        return user

    async def create_user(
        self, caller: Caller, username: str, description: str, *, user_id: str | None = None
    ) -> UserRecord:
        """A new non-root user; `user_id` keeps a known id (import), else one is made."""
        now = self._clock()
        user = UserRecord(
            user_id=user_id or self._new_id(),
            username=check_name("username", username),
            created_at=now,
            description=check_description(description) or "",
            is_root=False,  # never through the API
            updated_at=now,
        )
        if not await self._meta.create_user(user):
            raise conflict("duplicate", "user", username)
        await self._changed(caller, f"user/{user.user_id}")
        await self._save("users", user.user_id, user)
        return user

    async def update_user(
        self, caller: Caller, user_id: str, username: str | None, description: str | None
    ) -> None:
        if username is not None:
            check_name("username", username)
        await self._refuse_escalation(caller, [user_id])
        change: StoreChange[UserRecord] = await self._meta.update_user(
            user_id, username=username, description=check_description(description),
            now=self._clock(),
        )
        self._raise_for(change, "user", user_id, username or "")
        await self._changed(caller, f"user/{user_id}")
        await self._save("users", user_id, change.record)

    async def delete_user(self, caller: Caller, user_id: str) -> None:
        await self._refuse_escalation(caller, [user_id])
        change: StoreChange[UserRecord] = await self._meta.delete_user(user_id)
        self._raise_for(change, "user", user_id)
        await self._changed(caller, f"user/{user_id}")
        await self._drop_removal(change.removal)
        await self._drop("users", user_id)

    @staticmethod
    def _raise_for(change: StoreChange[Any], kind: str, ident: str, name: str = "") -> None:
        if change.ok:
            return
        if change.status == "missing":
            raise not_found(kind, ident)
        raise conflict(change.status, kind, name)

    # -- credentials -------------------------------------------------------------------
    async def list_credentials(self, user_id: str) -> list[CredentialRecord]:
        await self._user(user_id)
        found: list[CredentialRecord] = await self._meta.list_credentials(user_id)
        return found

    async def create_credential(
        self, caller: Caller, user_id: str, request: NewCredential
    ) -> CredentialRecord:
        """A new credential of `user_id`, with its secret (shown to the caller once)."""
        await self._user(user_id)
        await self._refuse_escalation(caller, [user_id])
        access_key, secret_key = _pick_keys(request)
        now = self._clock()
        credential = CredentialRecord(
            access_key_id=access_key,
            secret_access_key=secret_key,
            user_id=user_id,
            created_at=now,
            description=check_description(request.description) or "",
            updated_at=now,
        )
        if not await self._meta.create_credential(credential):
            raise AdminError("Conflict", f"Access key {access_key} already exists.")
        await self._changed(caller, f"credential/{access_key}")
        await self._save("credentials", access_key, credential)
        return credential

    async def _owned_credential(self, caller: Caller, access_key: str) -> CredentialRecord:
        credential: CredentialRecord | None = await self._meta.get_credential(access_key)
        owner = None if credential is None else await self._meta.get_user(credential.user_id)
        if credential is None or owner is None:
            raise not_found("credential", access_key)
        # A credential acts as its user: managing it is acting on that user.
        await self._refuse_escalation(caller, [owner.user_id])
        return credential

    async def update_credential(
        self, caller: Caller, access_key: str, active: bool | None, description: str | None
    ) -> None:
        await self._owned_credential(caller, access_key)
        change: StoreChange[CredentialRecord] = await self._meta.change_credential(
            access_key, active=active, description=check_description(description),
            now=self._clock(), caller_user_id=caller.principal.user_id,
        )
        self._raise_for(change, "credential", access_key)
        await self._changed(caller, f"credential/{access_key}")
        await self._save("credentials", access_key, change.record)

    async def delete_credential(self, caller: Caller, access_key: str) -> None:
        await self._owned_credential(caller, access_key)
        change: StoreChange[CredentialRecord] = await self._meta.remove_credential(
            access_key, caller_user_id=caller.principal.user_id
        )
        self._raise_for(change, "credential", access_key)
        await self._changed(caller, f"credential/{access_key}")
        await self._drop("credentials", access_key)

    # -- teams -------------------------------------------------------------------------
    async def list_teams(self) -> list[TeamSummary]:
        teams: list[TeamSummary] = await self._meta.list_team_summaries()
        return teams

    async def get_team(self, team_id: str) -> TeamSummary:
        summary: TeamSummary | None = await self._meta.get_team_summary(team_id)
        if summary is None:
            raise not_found("team", team_id)
        return summary

    async def create_team(
        self, caller: Caller, name: str, description: str, *, team_id: str | None = None
    ) -> TeamRecord:
        now = self._clock()
        team = TeamRecord(
            team_id=team_id or self._new_id(),
            name=check_name("name", name),
            created_at=now,
            description=check_description(description) or "",
            updated_at=now,
        )
        if not await self._meta.create_team(team):
            raise conflict("duplicate", "team", name)
        await self._changed(caller, f"team/{team.team_id}")
        await self._save("teams", team.team_id, team)
        return team

    async def update_team(self, caller: Caller, team_id: str, name: str | None,
                          description: str | None) -> None:
        if name is not None:
            check_name("name", name)
        change: StoreChange[TeamRecord] = await self._meta.update_team(
            team_id, name=name, description=check_description(description), now=self._clock()
        )
        self._raise_for(change, "team", team_id, name or "")
        await self._changed(caller, f"team/{team_id}")
        await self._save("teams", team_id, change.record)

    async def delete_team(self, caller: Caller, team_id: str) -> None:
        await self._refuse_escalation(caller, await self._members(team_id),
                                      removing(await self._team_source(team_id)))
        change: StoreChange[TeamRecord] = await self._meta.delete_team(team_id)
        self._raise_for(change, "team", team_id)
        await self._changed(caller, f"team/{team_id}")
        await self._drop_removal(change.removal)
        await self._drop("teams", team_id)

    async def list_members(self, team_id: str) -> list[UserRecord]:
        members: list[UserRecord] | None = await self._meta.list_team_members(team_id)
        if members is None:
            raise not_found("team", team_id)
        return members

    async def add_member(self, caller: Caller, team_id: str, user_id: str) -> None:
        team_grants: list[GrantRecord] = await self._meta.list_team_grants(team_id) or []
        await self._refuse_escalation(caller, [user_id], adding(
            team_grants, await self._team_source(team_id)))
        now = self._clock()
        outcome: str = await self._meta.add_team_member(team_id, user_id, now)
        self._raise_missing(outcome, team=team_id, user=user_id)
        if outcome == "added":
            await self._changed(caller, f"team/{team_id}/member/{user_id}")
            await self._save_pair("team_members", ("team_id", "user_id"), team_id, user_id,
                                  now)

    async def remove_member(self, caller: Caller, team_id: str, user_id: str) -> None:
        await self._refuse_escalation(caller, [user_id],
                                      removing(await self._team_source(team_id)))
        if not await self._meta.remove_team_member(team_id, user_id):
            raise AdminError("NotFound", f"User {user_id} is not a member of team {team_id}.")
        await self._changed(caller, f"team/{team_id}/member/{user_id}")
        await self._drop("team_members", pair_key(team_id, user_id))

    async def list_user_teams(self, user_id: str) -> list[TeamRecord]:
        teams: list[TeamRecord] | None = await self._meta.list_user_teams(user_id)
        if teams is None:
            raise not_found("user", user_id)
        return teams

    @staticmethod
    def _raise_missing(outcome: str, **idents: str) -> None:
        """Attach outcomes "no_team", "no_user", "no_grant" -> 404 naming the entity."""
        if outcome.startswith("no_"):
            kind = outcome[3:]
            raise not_found(kind, idents[kind])

    # -- grants ------------------------------------------------------------------------
    async def list_grants(self) -> list[GrantRecord]:
        grants: list[GrantRecord] = await self._meta.list_grants()
        return grants

    async def get_grant(self, grant_id: str) -> GrantRecord:
        grant: GrantRecord | None = await self._meta.get_grant(grant_id)
        if grant is None:
            raise not_found("grant", grant_id)
        return grant

    async def create_grant(
        self, caller: Caller, name: str, description: str, document: Any, *,
        grant_id: str | None = None,
    ) -> GrantRecord:
        now = self._clock()
        grant = GrantRecord(
            grant_id=grant_id or self._new_id(),
            name=check_name("name", name),
            document=check_document(document),
            created_at=now,
            description=check_description(description) or "",
            updated_at=now,
        )
        if not await self._meta.create_grant(grant):
            raise conflict("duplicate", "grant", name)
        await self._changed(caller, f"grant/{grant.grant_id}")
        await self._save("grants", grant.grant_id, grant)
        return grant

    async def update_grant(
        self, caller: Caller, grant_id: str, name: str | None, description: str | None,
        document: Any,
    ) -> None:
        if name is not None:
            check_name("name", name)
        checked = None if document is None else check_document(document)
        self._refuse_builtin(grant_id)
        if checked is not None:
            await self._refuse_grant_change(caller, grant_id, checked)
        change: StoreChange[GrantRecord] = await self._meta.update_grant(
            grant_id, name=name, description=check_description(description),
            document=checked, now=self._clock(),
        )
        self._raise_for(change, "grant", grant_id, name or "")
        await self._changed(caller, f"grant/{grant_id}")
        await self._save("grants", grant_id, change.record)

    async def delete_grant(self, caller: Caller, grant_id: str) -> None:
        self._refuse_builtin(grant_id)
        await self._refuse_escalation(caller, await self._meta.grant_holders(grant_id),
                                      without_grant(grant_id))
        change: StoreChange[GrantRecord] = await self._meta.delete_grant(grant_id)
        self._raise_for(change, "grant", grant_id)
        await self._changed(caller, f"grant/{grant_id}")
        await self._drop_removal(change.removal)
        await self._drop("grants", grant_id)

    async def _refuse_grant_change(self, caller: Caller, grant_id: str,
                                   document: dict[str, Any]) -> None:
        """A new document reaches every holder of the grant at once."""
        current: GrantRecord | None = await self._meta.get_grant(grant_id)
        if current is None:
            return  # the store answers 404
        changed = dataclasses.replace(current, document=document)
        holders: list[str] = await self._meta.grant_holders(grant_id)
        await self._refuse_escalation(caller, holders, replacing(changed),
                                      granting=changed if holders else None)

    @staticmethod
    def _refuse_builtin(grant_id: str) -> None:
        if grant_id in BUILTIN_GRANT_IDS:
            raise AdminError("Conflict", "Built-in grants cannot be changed or deleted.")

    async def user_grants(self, user_id: str) -> list[GrantRecord]:
        grants: list[GrantRecord] | None = await self._meta.list_user_grants(user_id)
        if grants is None:
            raise not_found("user", user_id)
        return grants

    async def team_grants(self, team_id: str) -> list[GrantRecord]:
        grants: list[GrantRecord] | None = await self._meta.list_team_grants(team_id)
        if grants is None:
            raise not_found("team", team_id)
        return grants

    async def attach_user_grant(self, caller: Caller, user_id: str, grant_id: str) -> None:
        grant: GrantRecord | None = await self._meta.get_grant(grant_id)
        if grant is not None and await self._meta.get_user(user_id) is not None:
            await self._refuse_escalation(caller, [user_id], adding([grant], SOURCE_DIRECT),
                                          granting=grant)
        now = self._clock()
        outcome: str = await self._meta.attach_user_grant(user_id, grant_id, now)
        self._raise_missing(outcome, user=user_id, grant=grant_id)
        if outcome == "attached":
            await self._changed(caller, f"user/{user_id}/grant/{grant_id}")
            await self._save_pair("user_grants", ("user_id", "grant_id"), user_id, grant_id,
                                  now)

    async def detach_user_grant(self, caller: Caller, user_id: str, grant_id: str) -> None:
        await self._refuse_escalation(caller, [user_id], removing(SOURCE_DIRECT, grant_id))
        if not await self._meta.detach_user_grant(user_id, grant_id):
            raise AdminError("NotFound", f"Grant {grant_id} is not attached to user {user_id}.")
        await self._changed(caller, f"user/{user_id}/grant/{grant_id}")
        await self._drop("user_grants", pair_key(user_id, grant_id))

    async def attach_team_grant(self, caller: Caller, team_id: str, grant_id: str) -> None:
        grant: GrantRecord | None = await self._meta.get_grant(grant_id)
        team: TeamRecord | None = await self._meta.get_team(team_id)
        if grant is not None and team is not None:
            await self._refuse_escalation(
                caller, await self._members(team_id),
                adding([grant], TEAM_SOURCE_PREFIX + team.name), granting=grant)
        now = self._clock()
        outcome: str = await self._meta.attach_team_grant(team_id, grant_id, now)
        self._raise_missing(outcome, team=team_id, grant=grant_id)
        if outcome == "attached":
            await self._changed(caller, f"team/{team_id}/grant/{grant_id}")
            await self._save_pair("team_grants", ("team_id", "grant_id"), team_id, grant_id,
                                  now)

    async def detach_team_grant(self, caller: Caller, team_id: str, grant_id: str) -> None:
        await self._refuse_escalation(caller, await self._members(team_id),
                                      removing(await self._team_source(team_id), grant_id))
        if not await self._meta.detach_team_grant(team_id, grant_id):
            raise AdminError("NotFound", f"Grant {grant_id} is not attached to team {team_id}.")
        await self._changed(caller, f"team/{team_id}/grant/{grant_id}")
        await self._drop("team_grants", pair_key(team_id, grant_id))

    async def effective_grants(self, user_id: str) -> list[EffectiveGrant]:
        found: list[EffectiveGrant] | None = await self._meta.effective_grants(user_id)
        if found is None:
            raise not_found("user", user_id)
        return found
