"""The IAM admin commands (users, teams, grants, credentials) and what every admin command
shares: the `Result` a handler returns, the `Session` it works in, name-to-id resolution
and the reading of local input files.

A handler takes the session and the parsed arguments and returns a `Result`: the JSON data
(printed as is with --json) and the text people read by default. Users, teams and grants
may be named by id or by name (an argument shaped like a UUID is an id). Never imports
Twisted.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from objstore.cli.admin_client import AdminClient, UsageProblem, segment
from objstore.cli.tables import Column, render_record, render_table
from objstore.json_input import parse_json

JsonObject = dict[str, Any]


class CommandFailed(Exception):
    """A local problem (unreadable file, unknown name): message printed, exit status 1."""


@dataclass
class Result:
    data: Any = None  # printed with --json (nothing when None)
    text: str | None = None  # printed otherwise
    status: int = 0


@dataclass
class Session:
    client: AdminClient
    stdout: TextIO
    stderr: TextIO


Handler = Callable[[Session, argparse.Namespace], Result]


# -- names and files --------------------------------------------------------------------


def is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text.lower()
    except ValueError:
        return False


# kind -> (collection path, id field, name field)
KINDS: dict[str, tuple[str, str, str]] = {
    "user": ("/users", "user_id", "username"),
    "team": ("/teams", "team_id", "name"),
    "grant": ("/grants", "grant_id", "name"),
}


def resolve(session: Session, kind: str, ref: str) -> str:
    """The id of a user, team or grant given by id or by name."""
    if is_uuid(ref):
        return ref
    path, id_field, name_field = KINDS[kind]
    for item in session.client.call("GET", path):
        if item.get(name_field) == ref:
            return str(item[id_field])
    raise CommandFailed(f"no {kind} named {ref!r}")


def entity_path(session: Session, kind: str, ref: str) -> str:
    return f"{KINDS[kind][0]}/{segment(resolve(session, kind, ref))}"


def read_input(path: str) -> bytes:
    """The bytes of a file, or of standard input for `-`."""
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        return Path(path).read_bytes()
    except OSError as exc:
        raise CommandFailed(f"cannot read {path}: {exc.strerror}") from None


def read_json_file(path: str) -> Any:
    try:
        return parse_json(read_input(path))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CommandFailed(f"{path} is not valid JSON: {exc}") from None


def changes(args: argparse.Namespace, names: Mapping[str, str]) -> JsonObject:
    """The body of an update from the options given (attribute -> body field)."""
    body = {field_: getattr(args, attribute) for attribute, field_ in names.items()
            if getattr(args, attribute, None) is not None}
    if not body:
        raise UsageProblem("nothing to change: give at least one option")
    return body


def done(text: str) -> Result:
    return Result(None, text)


# -- users -----------------------------------------------------------------------------

USER_COLUMNS: list[Column] = [
    ("USERNAME", "username"), ("USER_ID", "user_id"), ("ROOT", "is_root"),
    ("CREDENTIALS", "credential_count"), ("TEAMS", "team_count"), ("GRANTS", "grant_count"),
    ("DESCRIPTION", "description"),
]
REF_COLUMNS: list[Column] = [("NAME", "name"), ("ID", "grant_id"), ("DESCRIPTION", "description")]


def users_list(s: Session, a: argparse.Namespace) -> Result:
    users = s.client.call("GET", "/users")
    return Result(users, render_table(users, USER_COLUMNS))


def users_create(s: Session, a: argparse.Namespace) -> Result:
    user = s.client.call("POST", "/users", body={"username": a.username,
                                                 "description": a.description or ""})
    return Result(user, render_record(user))


def users_show(s: Session, a: argparse.Namespace) -> Result:
    path = entity_path(s, "user", a.user)
    user = s.client.call("GET", path)
    user["teams"] = s.client.call("GET", path + "/teams")
    user["grants"] = s.client.call("GET", path + "/grants")
    text = render_record({**user, "teams": [t["name"] for t in user["teams"]],
                          "grants": [g["name"] for g in user["grants"]]})
    return Result(user, text)


def users_update(s: Session, a: argparse.Namespace) -> Result:
    body = changes(a, {"new_username": "username", "description": "description"})
    s.client.call("PUT", entity_path(s, "user", a.user), body=body)
    return done(f"updated user {a.user}")


def users_delete(s: Session, a: argparse.Namespace) -> Result:
    s.client.call("DELETE", entity_path(s, "user", a.user))
    return done(f"deleted user {a.user}")


def users_grants_list(s: Session, a: argparse.Namespace) -> Result:
    path = entity_path(s, "user", a.user)
    if a.effective:
        found = s.client.call("GET", path + "/effective-grants")
        return Result(found, render_table(found, REF_COLUMNS + [("SOURCE", "source")]))
    found = s.client.call("GET", path + "/grants")
    return Result(found, render_table(found, REF_COLUMNS))


def users_grants_attach(s: Session, a: argparse.Namespace) -> Result:
    grant = resolve(s, "grant", a.grant)
    s.client.call("PUT", f"{entity_path(s, 'user', a.user)}/grants/{segment(grant)}")
    return done(f"attached grant {a.grant} to user {a.user}")


def users_grants_detach(s: Session, a: argparse.Namespace) -> Result:
    grant = resolve(s, "grant", a.grant)
    s.client.call("DELETE", f"{entity_path(s, 'user', a.user)}/grants/{segment(grant)}")
    return done(f"detached grant {a.grant} from user {a.user}")


# -- teams -----------------------------------------------------------------------------

TEAM_COLUMNS: list[Column] = [
    ("NAME", "name"), ("TEAM_ID", "team_id"), ("MEMBERS", "member_count"),
    ("GRANTS", "grant_count"), ("DESCRIPTION", "description"),
]
MEMBER_COLUMNS: list[Column] = [("USERNAME", "username"), ("USER_ID", "user_id"),
                                ("ROOT", "is_root"), ("DESCRIPTION", "description")]


def teams_list(s: Session, a: argparse.Namespace) -> Result:
    teams = s.client.call("GET", "/teams")
    return Result(teams, render_table(teams, TEAM_COLUMNS))


def teams_create(s: Session, a: argparse.Namespace) -> Result:
    team = s.client.call("POST", "/teams", body={"name": a.name,
                                                 "description": a.description or ""})
    return Result(team, render_record(team))


def teams_show(s: Session, a: argparse.Namespace) -> Result:
    path = entity_path(s, "team", a.team)
    team = s.client.call("GET", path)
    team["members"] = s.client.call("GET", path + "/members")
    team["grants"] = s.client.call("GET", path + "/grants")
    text = render_record({**team, "members": [m["username"] for m in team["members"]],
                          "grants": [g["name"] for g in team["grants"]]})
    return Result(team, text)


def teams_update(s: Session, a: argparse.Namespace) -> Result:
    body = changes(a, {"new_name": "name", "description": "description"})
    s.client.call("PUT", entity_path(s, "team", a.team), body=body)
    return done(f"updated team {a.team}")


def teams_delete(s: Session, a: argparse.Namespace) -> Result:
    s.client.call("DELETE", entity_path(s, "team", a.team))
    return done(f"deleted team {a.team}")


def teams_members_list(s: Session, a: argparse.Namespace) -> Result:
    members = s.client.call("GET", entity_path(s, "team", a.team) + "/members")
    return Result(members, render_table(members, MEMBER_COLUMNS))


def teams_members_add(s: Session, a: argparse.Namespace) -> Result:
    user = resolve(s, "user", a.user)
    s.client.call("PUT", f"{entity_path(s, 'team', a.team)}/members/{segment(user)}")
    return done(f"added {a.user} to team {a.team}")


def teams_members_remove(s: Session, a: argparse.Namespace) -> Result:
    user = resolve(s, "user", a.user)
    s.client.call("DELETE", f"{entity_path(s, 'team', a.team)}/members/{segment(user)}")
    return done(f"removed {a.user} from team {a.team}")


def teams_grants_list(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("GET", entity_path(s, "team", a.team) + "/grants")
    return Result(found, render_table(found, REF_COLUMNS))


def teams_grants_attach(s: Session, a: argparse.Namespace) -> Result:
    grant = resolve(s, "grant", a.grant)
    s.client.call("PUT", f"{entity_path(s, 'team', a.team)}/grants/{segment(grant)}")
    return done(f"attached grant {a.grant} to team {a.team}")


def teams_grants_detach(s: Session, a: argparse.Namespace) -> Result:
    grant = resolve(s, "grant", a.grant)
    s.client.call("DELETE", f"{entity_path(s, 'team', a.team)}/grants/{segment(grant)}")
    return done(f"detached grant {a.grant} from team {a.team}")


# -- grants ----------------------------------------------------------------------------

GRANT_COLUMNS: list[Column] = [("NAME", "name"), ("GRANT_ID", "grant_id"),
                               ("CREATED", "created_at"), ("DESCRIPTION", "description")]


def grant_text(grant: JsonObject) -> str:
    head = render_record(grant, ["name", "grant_id", "description", "created_at", "updated_at"])
    return head + "\ndocument:\n" + json.dumps(grant.get("document"), indent=2)


def grants_list(s: Session, a: argparse.Namespace) -> Result:
    grants = s.client.call("GET", "/grants")
    return Result(grants, render_table(grants, GRANT_COLUMNS))


def grants_create(s: Session, a: argparse.Namespace) -> Result:
    body = {"name": a.name, "description": a.description or "",
            "document": read_json_file(a.file)}
    grant = s.client.call("POST", "/grants", body=body)
    return Result(grant, grant_text(grant))


def grants_show(s: Session, a: argparse.Namespace) -> Result:
    grant = s.client.call("GET", entity_path(s, "grant", a.grant))
    return Result(grant, grant_text(grant))


def grants_update(s: Session, a: argparse.Namespace) -> Result:
    if a.file is not None:
        a.document = read_json_file(a.file)
    body = changes(a, {"new_name": "name", "description": "description",
                       "document": "document"})
    s.client.call("PUT", entity_path(s, "grant", a.grant), body=body)
    return done(f"updated grant {a.grant}")


def grants_delete(s: Session, a: argparse.Namespace) -> Result:
    s.client.call("DELETE", entity_path(s, "grant", a.grant))
    return done(f"deleted grant {a.grant}")


# -- credentials -----------------------------------------------------------------------

CREDENTIAL_COLUMNS: list[Column] = [
    ("ACCESS_KEY_ID", "access_key_id"), ("USER", "username"), ("ACTIVE", "active"),
    ("CREATED", "created_at"), ("DESCRIPTION", "description"),
]


def credentials_list(s: Session, a: argparse.Namespace) -> Result:
    if a.all:
        found = []
        for user in s.client.call("GET", "/users"):
            for credential in s.client.call("GET", f"/users/{segment(user['user_id'])}"
                                                   "/credentials"):
                found.append({**credential, "user_id": user["user_id"],
                              "username": user["username"]})
    elif a.user:
        found = s.client.call("GET", entity_path(s, "user", a.user) + "/credentials")
    else:
        found = s.client.call("GET", "/credentials")
    return Result(found, render_table(found, CREDENTIAL_COLUMNS))


def credentials_create(s: Session, a: argparse.Namespace) -> Result:
    body: JsonObject = {"description": a.description or ""}
    if a.user:
        body.update(access_key_id=a.access_key_id, secret_access_key=a.secret_access_key)
        path = entity_path(s, "user", a.user) + "/credentials"
    elif a.access_key_id or a.secret_access_key:
        raise UsageProblem("--access-key-id and --secret-access-key need --user")
    else:
        path = "/credentials"
    credential = s.client.call("POST", path, body={k: v for k, v in body.items() if v})
    s.stderr.write("The secret access key is shown only now; store it safely.\n")
    return Result(credential, render_record(credential))


def credentials_update(s: Session, a: argparse.Namespace) -> Result:
    body = changes(a, {"active": "active", "description": "description"})
    s.client.call("PUT", f"/credentials/{segment(a.access_key_id)}", body=body)
    return done(f"updated credential {a.access_key_id}")


def credentials_delete(s: Session, a: argparse.Namespace) -> Result:
    s.client.call("DELETE", f"/credentials/{segment(a.access_key_id)}")
    return done(f"deleted credential {a.access_key_id}")
