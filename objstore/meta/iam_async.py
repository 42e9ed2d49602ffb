"""The Deferred-returning IAM queries of `MetaStore` (mixed into it): each `IamQueries`
method of the synchronous store on the DB pools, reads on the reader pool and mutations on
the writer pool, with the same retries as every other query. No SQL here.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from objstore.meta.async_base import AsyncQueryMixin
from objstore.meta.iam_records import (
    Change,
    EffectiveGrant,
    GrantRecord,
    TeamRecord,
    TeamSummary,
    UserSummary,
)
from objstore.meta.records import CredentialRecord, UserRecord


class AsyncIamQueries(AsyncQueryMixin):
    # -- users -----------------------------------------------------------------------
    def list_user_summaries(self) -> Deferred[list[UserSummary]]:
        return self._read(self._store.list_user_summaries)

    def get_user_summary(self, user_id: str) -> Deferred[UserSummary | None]:
        return self._read(self._store.get_user_summary, user_id)

    def update_user(
        self, user_id: str, *, username: str | None, description: str | None, now: float
    ) -> Deferred[Change[UserRecord]]:
        return self._write(self._store.update_user, user_id, username=username,
                           description=description, now=now)

    def delete_user(self, user_id: str) -> Deferred[Change[UserRecord]]:
        return self._write(self._store.delete_user, user_id)

    # -- credentials -----------------------------------------------------------------
    def change_credential(
        self,
        access_key_id: str,
        *,
        active: bool | None,
        description: str | None,
        now: float,
        caller_user_id: str | None,
    ) -> Deferred[Change[CredentialRecord]]:
        return self._write(self._store.change_credential, access_key_id, active=active,
                           description=description, now=now, caller_user_id=caller_user_id)

    def remove_credential(
        self, access_key_id: str, *, caller_user_id: str | None
    ) -> Deferred[Change[CredentialRecord]]:
        return self._write(self._store.remove_credential, access_key_id,
                           caller_user_id=caller_user_id)

    # -- teams -----------------------------------------------------------------------
    def create_team(self, team: TeamRecord) -> Deferred[bool]:
        return self._write(self._store.create_team, team)

    def get_team(self, team_id: str) -> Deferred[TeamRecord | None]:
        return self._read(self._store.get_team, team_id)

    def get_team_summary(self, team_id: str) -> Deferred[TeamSummary | None]:
        return self._read(self._store.get_team_summary, team_id)

    def list_team_summaries(self) -> Deferred[list[TeamSummary]]:
        return self._read(self._store.list_team_summaries)

    def update_team(
        self, team_id: str, *, name: str | None, description: str | None, now: float
    ) -> Deferred[Change[TeamRecord]]:
        return self._write(self._store.update_team, team_id, name=name,
                           description=description, now=now)

    def delete_team(self, team_id: str) -> Deferred[Change[TeamRecord]]:
        return self._write(self._store.delete_team, team_id)

    def add_team_member(self, team_id: str, user_id: str, now: float) -> Deferred[str]:
        return self._write(self._store.add_team_member, team_id, user_id, now)

    def remove_team_member(self, team_id: str, user_id: str) -> Deferred[bool]:
        return self._write(self._store.remove_team_member, team_id, user_id)

    def list_team_members(self, team_id: str) -> Deferred[list[UserRecord] | None]:
        return self._read(self._store.list_team_members, team_id)

    def list_user_teams(self, user_id: str) -> Deferred[list[TeamRecord] | None]:
        return self._read(self._store.list_user_teams, user_id)

    # -- grants ----------------------------------------------------------------------
    def create_grant(self, grant: GrantRecord) -> Deferred[bool]:
        return self._write(self._store.create_grant, grant)

    def get_grant(self, grant_id: str) -> Deferred[GrantRecord | None]:
        return self._read(self._store.get_grant, grant_id)

    def get_grant_by_name(self, name: str) -> Deferred[GrantRecord | None]:
        return self._read(self._store.get_grant_by_name, name)

    def list_grants(self) -> Deferred[list[GrantRecord]]:
        return self._read(self._store.list_grants)

    def update_grant(
        self,
        grant_id: str,
        *,
        name: str | None,
        description: str | None,
        document: dict[str, Any] | None,
        now: float,
    ) -> Deferred[Change[GrantRecord]]:
        return self._write(self._store.update_grant, grant_id, name=name,
                           description=description, document=document, now=now)

    def delete_grant(self, grant_id: str) -> Deferred[Change[GrantRecord]]:
        return self._write(self._store.delete_grant, grant_id)

    def attach_user_grant(self, user_id: str, grant_id: str, now: float) -> Deferred[str]:
        return self._write(self._store.attach_user_grant, user_id, grant_id, now)

    def detach_user_grant(self, user_id: str, grant_id: str) -> Deferred[bool]:
        return self._write(self._store.detach_user_grant, user_id, grant_id)

    def list_user_grants(self, user_id: str) -> Deferred[list[GrantRecord] | None]:
        return self._read(self._store.list_user_grants, user_id)

    def attach_team_grant(self, team_id: str, grant_id: str, now: float) -> Deferred[str]:
        return self._write(self._store.attach_team_grant, team_id, grant_id, now)

    def detach_team_grant(self, team_id: str, grant_id: str) -> Deferred[bool]:
        return self._write(self._store.detach_team_grant, team_id, grant_id)

    def list_team_grants(self, team_id: str) -> Deferred[list[GrantRecord] | None]:
        return self._read(self._store.list_team_grants, team_id)

    def effective_grants(self, user_id: str) -> Deferred[list[EffectiveGrant] | None]:
        return self._read(self._store.effective_grants, user_id)
