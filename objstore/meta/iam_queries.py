"""The IAM query surface of the metadata store: users (updates, deletion, counts), guarded
credential changes, teams and their members, grants and their attachments, and the
effective grants of a user.

`IamQueries` only declares the methods; `SyncMetaStore` inherits it and `SqlIamQueries`
(`iam_sql.py`) implements it for both backends. Every method is one transaction, so each
rule that guards a change (a root user, the last active credential, a duplicate name) is
checked atomically with the change itself.
"""

from __future__ import annotations

from typing import Any

from objstore.meta.iam_records import (
    Change,
    EffectiveGrant,
    GrantRecord,
    TeamRecord,
    TeamSummary,
    UserSummary,
)
from objstore.meta.records import CredentialRecord, UserRecord

# Tombstone families of the IAM entities (keys: ids, or "a:b" for attachments).
TOMBSTONE_USER = "user"
TOMBSTONE_TEAM = "team"
TOMBSTONE_GRANT = "grant"
TOMBSTONE_TEAM_MEMBER = "team_member"  # team_id:user_id
TOMBSTONE_USER_GRANT = "user_grant"  # user_id:grant_id
TOMBSTONE_TEAM_GRANT = "team_grant"  # team_id:grant_id


def pair_key(first: str, second: str) -> str:
    """The key of an attachment (tombstones and control-plane files): ids hold no colon."""
    return f"{first}:{second}"


class IamQueries:
    # -- users -----------------------------------------------------------------------
    def list_user_summaries(self) -> list[UserSummary]:
        """Every user with its counts, ordered by username."""
        raise NotImplementedError

    def get_user_summary(self, user_id: str) -> UserSummary | None:
        raise NotImplementedError

    def update_user(
        self, user_id: str, *, username: str | None, description: str | None, now: float
    ) -> Change[UserRecord]:
        """Rename and/or redescribe. Status "updated", "missing", "root" (root users are
        never changed) or "duplicate" (the username is taken)."""
        raise NotImplementedError

    def delete_user(self, user_id: str) -> Change[UserRecord]:
        """Remove a user with its team memberships and grant attachments. Status "deleted",
        "missing", "root" or "has_credentials" (nothing changes then)."""
        raise NotImplementedError

    # -- credentials -----------------------------------------------------------------
    def change_credential(
        self,
        access_key_id: str,
        *,
        active: bool | None,
        description: str | None,
        now: float,
        caller_user_id: str | None,
    ) -> Change[CredentialRecord]:
        """Set active and/or description. Status "updated", "missing" or "last_active": the
        change would leave a root user, or the caller, without an active credential."""
        raise NotImplementedError

    def remove_credential(
        self, access_key_id: str, *, caller_user_id: str | None
    ) -> Change[CredentialRecord]:
        """Delete with a tombstone. Status "deleted", "missing" or "last_active" (the same
        lockout rule as `change_credential`)."""
        raise NotImplementedError

    # -- teams -----------------------------------------------------------------------
    def create_team(self, team: TeamRecord) -> bool:
        """False when the name (or the id) is taken."""
        raise NotImplementedError

    def get_team(self, team_id: str) -> TeamRecord | None:
        raise NotImplementedError

    def get_team_summary(self, team_id: str) -> TeamSummary | None:
        raise NotImplementedError

    def list_team_summaries(self) -> list[TeamSummary]:
        """Every team with its counts, ordered by name."""
        raise NotImplementedError

    def update_team(
        self, team_id: str, *, name: str | None, description: str | None, now: float
    ) -> Change[TeamRecord]:
        """Status "updated", "missing" or "duplicate"."""
        raise NotImplementedError

    def delete_team(self, team_id: str) -> Change[TeamRecord]:
        """Remove a team, its members and its grant attachments. "deleted" or "missing"."""
        raise NotImplementedError

    def add_team_member(self, team_id: str, user_id: str, now: float) -> str:
        """"added", "exists", "no_team" or "no_user"."""
        raise NotImplementedError

    def remove_team_member(self, team_id: str, user_id: str) -> bool:
        """False when the user was not a member."""
        raise NotImplementedError

    def list_team_members(self, team_id: str) -> list[UserRecord] | None:
        """Members ordered by username; None when the team does not exist."""
        raise NotImplementedError

    def list_user_teams(self, user_id: str) -> list[TeamRecord] | None:
        """Teams ordered by name; None when the user does not exist."""
        raise NotImplementedError

    # -- grants ----------------------------------------------------------------------
    def create_grant(self, grant: GrantRecord) -> bool:
        """False when the name (or the id) is taken."""
        raise NotImplementedError

    def get_grant(self, grant_id: str) -> GrantRecord | None:
        raise NotImplementedError

    def get_grant_by_name(self, name: str) -> GrantRecord | None:
        raise NotImplementedError

    def list_grants(self) -> list[GrantRecord]:
        """Every grant ordered by name."""
        raise NotImplementedError

    def update_grant(
        self,
        grant_id: str,
        *,
        name: str | None,
        description: str | None,
        document: dict[str, Any] | None,
        now: float,
    ) -> Change[GrantRecord]:
        """Status "updated", "missing" or "duplicate"."""
        raise NotImplementedError

    def delete_grant(self, grant_id: str) -> Change[GrantRecord]:
        """Remove a grant and every user and team attachment. "deleted" or "missing"."""
        raise NotImplementedError

    def attach_user_grant(self, user_id: str, grant_id: str, now: float) -> str:
        """"attached", "exists", "no_user" or "no_grant"."""
        raise NotImplementedError

    def detach_user_grant(self, user_id: str, grant_id: str) -> bool:
        raise NotImplementedError

    def list_user_grants(self, user_id: str) -> list[GrantRecord] | None:
        """Direct grants ordered by name; None when the user does not exist."""
        raise NotImplementedError

    def attach_team_grant(self, team_id: str, grant_id: str, now: float) -> str:
        """"attached", "exists", "no_team" or "no_grant"."""
        raise NotImplementedError

    def detach_team_grant(self, team_id: str, grant_id: str) -> bool:
        raise NotImplementedError

    def list_team_grants(self, team_id: str) -> list[GrantRecord] | None:
        """Grants ordered by name; None when the team does not exist."""
        raise NotImplementedError

    def effective_grants(self, user_id: str) -> list[EffectiveGrant] | None:
        """Direct grants (source "direct") then grants of every team of the user (source
        "team:<name>"), each (grant, source) pair once; None when the user does not exist."""
        raise NotImplementedError
