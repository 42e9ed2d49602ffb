"""Plain records of the IAM part of the control plane: teams, grants, their attachments and
the summaries the admin API lists.

Like `records.py`, they carry no behaviour and no database types. Users and credentials
themselves are `UserRecord` / `CredentialRecord` of `records.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from objstore.meta.records import UserRecord

T = TypeVar("T")

# Sources of an effective grant.
SOURCE_DIRECT = "direct"
TEAM_SOURCE_PREFIX = "team:"


@dataclass(frozen=True)
class TeamRecord:
    team_id: str
    name: str
    created_at: float
    description: str = ""
    updated_at: float = 0.0


@dataclass(frozen=True)
class GrantRecord:
    grant_id: str
    name: str
    document: dict[str, Any]
    created_at: float
    description: str = ""
    updated_at: float = 0.0


@dataclass(frozen=True)
class UserSummary:
    """A user with the counts the admin API shows in list and get responses."""

    user: UserRecord
    credential_count: int = 0
    team_count: int = 0
    grant_count: int = 0


@dataclass(frozen=True)
class TeamSummary:
    team: TeamRecord
    member_count: int = 0
    grant_count: int = 0


@dataclass(frozen=True)
class EffectiveGrant:
    """One grant that applies to a user, and why: `direct` or `team:<team name>`."""

    grant: GrantRecord
    source: str


@dataclass(frozen=True)
class Change(Generic[T]):
    """Outcome of a guarded mutation: `status` names what happened ("updated", "deleted",
    or the reason nothing changed, e.g. "missing", "duplicate", "root", "last_active");
    `record` is the row as it is after the change (or as it was before a deletion)."""

    status: str
    record: T | None = None
    removal: Removal = field(default_factory=lambda: Removal())

    @property
    def ok(self) -> bool:
        return self.status in ("updated", "deleted")


@dataclass(frozen=True)
class Removal:
    """What a deletion took with it: the attachment keys whose control-plane files must go.
    `team_members` holds (team_id, user_id), `user_grants` (user_id, grant_id) and
    `team_grants` (team_id, grant_id)."""

    team_members: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    user_grants: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    team_grants: tuple[tuple[str, str], ...] = field(default_factory=tuple)
