"""The admin subcommands of `objstore`: users, teams, grants, credentials, presign, archive,
export, import, info, stats and audit, each a call (or a few) of the admin API.

The commands are one table, `COMMANDS`: a path of words (`users grants attach`), its
arguments and its handler. `add_commands` builds the argparse tree from it and `run`
dispatches the parsed command. A handler returns a `Result`: the JSON data (printed as is
with --json) and the text people read by default (tables from `tables.py`).

Users, teams and grants may be named by id or by name (an argument shaped like a UUID is
an id). Exit status: 0 done; 1 the server refused (its message is printed), could not be
reached, a local file was unusable, or an import reported errors; 2 a usage error.
Never imports Twisted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from objstore.cli.admin_client import (
    AdminApiError,
    AdminClient,
    ConnectionProblem,
    UsageProblem,
    resolve_settings,
    segment,
)
from objstore.cli.progress import Progress
from objstore.cli.tables import Column, human_bytes, render_record, render_table

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


@dataclass(frozen=True)
class Arg:
    flags: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)


def arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, options)


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    help: str
    run: Handler
    args: tuple[Arg, ...] = ()


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
        return json.loads(read_input(path))
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


# -- objects ---------------------------------------------------------------------------


def presign(s: Session, a: argparse.Namespace) -> Result:
    body = {"bucket": a.bucket, "key": a.key, "method": a.method, "expires": a.expires,
            "endpoint": a.public_endpoint}
    found = s.client.call("POST", "/presign", body={k: v for k, v in body.items()
                                                    if v is not None})
    return Result(found, str(found["url"]))


def archive_keys(a: argparse.Namespace) -> list[str]:
    keys = list(a.keys)
    if a.keys_from:
        text = read_input(a.keys_from).decode("utf-8", "replace")
        keys += [line for line in text.splitlines() if line]
    if not keys:
        raise UsageProblem("name at least one key (arguments or --keys-from)")
    return keys


def archive(s: Session, a: argparse.Namespace) -> Result:
    body = {"bucket": a.bucket, "keys": archive_keys(a)}
    progress = Progress("archive bytes", stream=s.stderr)
    if a.output == "-":
        if sys.stdout.isatty():
            raise UsageProblem("refusing to write a binary archive to a terminal")
        s.client.download("POST", "/archive", body, sys.stdout.buffer, progress.advance)
        progress.finish()
        return Result()
    partial = Path(a.output + ".part")
    try:
        with open(partial, "wb") as sink:
            s.client.download("POST", "/archive", body, sink, progress.advance)
        os.replace(partial, a.output)
    except OSError as exc:
        raise CommandFailed(f"cannot write {a.output}: {exc.strerror}") from None
    finally:
        partial.unlink(missing_ok=True)
    progress.finish()
    summary = {"file": a.output, "bytes": progress.done}
    return Result(summary, f"wrote {a.output} ({human_bytes(progress.done)})")


# -- export and import -----------------------------------------------------------------


def export(s: Session, a: argparse.Namespace) -> Result:
    query = {"sections": a.sections, "include_secrets": "true" if a.include_secrets else None}
    document = s.client.call("GET", "/export", query=query)
    if not a.output or a.output == "-":
        s.stdout.write(json.dumps(document, indent=2) + "\n")
        return Result()
    write_private(a.output, json.dumps(document, indent=2) + "\n")
    counts = {name: len(document.get(name) or ()) for name in document.get("sections", [])}
    text = f"exported to {a.output}: " + ", ".join(f"{n} {name}" for name, n in counts.items())
    return Result({"file": a.output, "counts": counts}, text)


def write_private(path: str, text: str) -> None:
    """An export holds credentials (and perhaps secrets): owner-only from the first byte."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise CommandFailed(f"cannot write {path}: {exc.strerror}") from None


REPORT_COLUMNS: list[Column] = [("SECTION", "section"), ("CREATED", "created"),
                                ("UPDATED", "updated"), ("SKIPPED", "skipped")]


def import_text(report: JsonObject) -> str:
    sections = list(report.get("created", {}))
    rows = [{"section": name, **{outcome: len(report[outcome].get(name, []))
                                 for outcome in ("created", "updated", "skipped")}}
            for name in sections]
    lines = [render_table(rows, REPORT_COLUMNS)]
    for outcome in ("created", "updated"):
        for name in sections:
            items = report[outcome].get(name) or []
            if items:
                lines.append(f"{outcome} {name}: {', '.join(items)}")
    for error in report.get("errors", []):
        lines.append(f"error: {error['section']} {error['item']}: {error['message']}")
    if report.get("dry_run"):
        lines.append("dry run: nothing was changed")
    return "\n".join(lines)


def import_document(s: Session, a: argparse.Namespace) -> Result:
    query = {"mode": a.mode, "sections": a.sections, "dry_run": "true" if a.dry_run else None}
    report = s.client.call("POST", "/import", query=query, raw=read_input(a.file))
    return Result(report, import_text(report), status=1 if report.get("errors") else 0)


# -- server ----------------------------------------------------------------------------

AUDIT_COLUMNS: list[Column] = [
    ("TIME", "time"), ("USER", "username"), ("OPERATION", "operation"), ("BUCKET", "bucket"),
    ("KEY", "key"), ("STATUS", "status"), ("SOURCE_IP", "source_ip"),
    ("REQUEST_ID", "request_id"),
]


def info(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("GET", "/info")
    return Result(found, render_record(found))


def stats(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("GET", "/stats")
    shown = {k: f"{v} ({human_bytes(v)})" if k.endswith("_bytes") else v
             for k, v in found.items()}
    return Result(found, render_record(shown))


def audit(s: Session, a: argparse.Namespace) -> Result:
    query = {name: getattr(a, name) for name in
             ("bucket", "operation", "user", "since", "until", "limit", "cursor", "node")}
    page = s.client.call("GET", "/audit", query=query)
    entries = page.get("entries", [])
    columns = ([("NODE", "node_id")] if a.node == "all" else []) + AUDIT_COLUMNS
    text = render_table(entries, columns)
    if page.get("next_cursor"):
        text += f"\n(more: --cursor {page['next_cursor']})"
    return Result(page, text)


# -- the table ---------------------------------------------------------------------------

USER, TEAM, GRANT = (arg("user", help="user id or username"), arg("team", help="team id or name"),
                     arg("grant", help="grant id or name"))
DESCRIPTION = arg("--description", help="free text")
SECTIONS = arg("--sections", help="comma-separated: users,teams,grants,credentials,"
                                  "buckets,settings (default all)")

COMMANDS: tuple[Command, ...] = (
    Command(("users", "list"), "list users", users_list),
    Command(("users", "create"), "create a user", users_create,
            (arg("username"), DESCRIPTION)),
    Command(("users", "show"), "show a user with teams and grants", users_show, (USER,)),
    Command(("users", "update"), "rename or describe a user", users_update,
            (USER, arg("--username", dest="new_username", help="new username"), DESCRIPTION)),
    Command(("users", "delete"), "delete a user (without credentials)", users_delete, (USER,)),
    Command(("users", "grants", "list"), "grants attached to a user", users_grants_list,
            (USER, arg("--effective", action="store_true",
                       help="every grant that applies, with its source"))),
    Command(("users", "grants", "attach"), "attach a grant to a user", users_grants_attach,
            (USER, GRANT)),
    Command(("users", "grants", "detach"), "detach a grant from a user", users_grants_detach,
            (USER, GRANT)),
    Command(("teams", "list"), "list teams", teams_list),
    Command(("teams", "create"), "create a team", teams_create, (arg("name"), DESCRIPTION)),
    Command(("teams", "show"), "show a team with members and grants", teams_show, (TEAM,)),
    Command(("teams", "update"), "rename or describe a team", teams_update,
            (TEAM, arg("--name", dest="new_name", help="new name"), DESCRIPTION)),
    Command(("teams", "delete"), "delete a team", teams_delete, (TEAM,)),
    Command(("teams", "members", "list"), "members of a team", teams_members_list, (TEAM,)),
    Command(("teams", "members", "add"), "add a user to a team", teams_members_add,
            (TEAM, USER)),
    Command(("teams", "members", "remove"), "remove a user from a team", teams_members_remove,
            (TEAM, USER)),
    Command(("teams", "grants", "list"), "grants attached to a team", teams_grants_list,
            (TEAM,)),
    Command(("teams", "grants", "attach"), "attach a grant to a team", teams_grants_attach,
            (TEAM, GRANT)),
    Command(("teams", "grants", "detach"), "detach a grant from a team", teams_grants_detach,
            (TEAM, GRANT)),
    Command(("grants", "list"), "list grants", grants_list),
    Command(("grants", "create"), "create a grant from a policy document", grants_create,
            (arg("name"), arg("--file", "-f", required=True,
                              help="policy document (JSON; - for standard input)"),
             DESCRIPTION)),
    Command(("grants", "show"), "show a grant and its document", grants_show, (GRANT,)),
    Command(("grants", "update"), "change a grant", grants_update,
            (GRANT, arg("--name", dest="new_name", help="new name"), DESCRIPTION,
             arg("--file", "-f", help="new policy document (JSON; - for standard input)"))),
    Command(("grants", "delete"), "delete a grant", grants_delete, (GRANT,)),
    Command(("credentials", "list"), "list credentials (your own by default)",
            credentials_list,
            (arg("--user", help="the credentials of this user"),
             arg("--all", action="store_true", help="the credentials of every user"))),
    Command(("credentials", "create"), "create a credential (the secret is shown once)",
            credentials_create,
            (arg("--user", help="for this user (default: yourself)"), DESCRIPTION,
             arg("--access-key-id", help="choose the access key (with --user)"),
             arg("--secret-access-key", help="choose the secret (with --user)"))),
    Command(("credentials", "update"), "activate, deactivate or describe a credential",
            credentials_update,
            (arg("access_key_id"),
             arg("--activate", dest="active", action="store_const", const=True),
             arg("--deactivate", dest="active", action="store_const", const=False),
             DESCRIPTION)),
    Command(("credentials", "delete"), "delete a credential", credentials_delete,
            (arg("access_key_id"),)),
    Command(("presign",), "print a presigned URL of an object", presign,
            (arg("bucket"), arg("key"),
             arg("--method", default="GET", type=str.upper,
                 choices=("GET", "PUT", "HEAD", "DELETE")),
             arg("--expires", type=int, default=3600, help="seconds (at most 604800)"),
             arg("--public-endpoint", help="scheme://host[:port] the URL should name"))),
    Command(("archive",), "download objects of a bucket as a tar.gz", archive,
            (arg("bucket"), arg("keys", nargs="*", metavar="KEY"),
             arg("--output", "-o", required=True, help="the archive file (- for stdout)"),
             arg("--keys-from", help="a file of keys, one per line (- for stdin)"))),
    Command(("export",), "export the configuration as JSON", export,
            (arg("--output", "-o", help="write to this file (mode 0600) instead of stdout"),
             SECTIONS,
             arg("--include-secrets", action="store_true",
                 help="include secret access keys (masked otherwise)"))),
    Command(("import",), "import an exported configuration", import_document,
            (arg("file", help="an export document (- for standard input)"),
             arg("--mode", choices=("skip", "overwrite", "dry_run"), default="skip"),
             arg("--dry-run", action="store_true",
                 help="report what --mode would change, change nothing"),
             SECTIONS)),
    Command(("info",), "server version and features", info),
    Command(("stats",), "bucket, object and disk figures", stats),
    Command(("audit",), "query the audit log (newest first)", audit,
            (arg("--bucket"), arg("--operation", help="e.g. PutObject"),
             arg("--user", help="username or user id"),
             arg("--since", help="ISO 8601 time (inclusive)"),
             arg("--until", help="ISO 8601 time (exclusive)"),
             arg("--limit", type=int, help="entries per page (default 100, at most 1000)"),
             arg("--cursor", help="next page: the cursor a previous page printed"),
             arg("--node", help="a node id, or all"))),
)


# -- argparse and dispatch -----------------------------------------------------------------

GROUPS: dict[tuple[str, ...], str] = {
    ("users",): "manage users and their grants",
    ("users", "grants"): "grants attached to a user",
    ("teams",): "manage teams, their members and grants",
    ("teams", "members"): "members of a team",
    ("teams", "grants"): "grants attached to a team",
    ("grants",): "manage grants (policy documents)",
    ("credentials",): "manage access keys",
}

CONNECTION_OPTIONS: tuple[Arg, ...] = (
    arg("--endpoint", help="admin API base URL, e.g. http://127.0.0.1:9000"),
    arg("--access-key", help="access key id"),
    arg("--secret-key", help="secret access key"),
    arg("--region", help="SigV4 region (default us-east-1)"),
    arg("--profile", help="profile of ~/.config/objstore/profile.toml (default: default)"),
    arg("--json", action="store_true", help="print the API's JSON instead of tables"),
)


def add_connection_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """On the top-level parser (real defaults) and on every admin command (SUPPRESS, so an
    option given before the command is not reset by the command's parser)."""
    group = parser.add_argument_group("admin API connection")
    for option in CONNECTION_OPTIONS:
        extra = {"default": argparse.SUPPRESS} if suppress else {}
        group.add_argument(*option.flags, **{**option.options, **extra})


def add_commands(commands: Any) -> None:
    """Add every admin command under `commands` (the top-level subparsers action)."""
    groups: dict[tuple[str, ...], Any] = {(): commands}
    for command in COMMANDS:
        for depth in range(1, len(command.path)):
            prefix = command.path[:depth]
            if prefix not in groups:
                parent = groups[prefix[:-1]].add_parser(prefix[-1], help=GROUPS[prefix])
                groups[prefix] = parent.add_subparsers(
                    dest="_".join(prefix) + "_command", metavar="COMMAND", required=True)
        leaf = groups[command.path[:-1]].add_parser(command.path[-1], help=command.help,
                                                   description=command.help)
        for option in command.args:
            leaf.add_argument(*option.flags, **option.options)
        add_connection_options(leaf, suppress=True)
        leaf.set_defaults(admin_command=command)


def run(args: argparse.Namespace, *, stdout: TextIO | None = None,
        stderr: TextIO | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the parsed admin command; the exit status."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    command: Command = args.admin_command
    try:
        flags = {name: getattr(args, name, None)
                 for name in ("endpoint", "access_key", "secret_key", "region")}
        def warn(text: str) -> None:
            err.write(f"objstore: warning: {text}\n")

        settings = resolve_settings(flags, os.environ if environ is None else environ,
                                    profile=getattr(args, "profile", None), warn=warn)
        result = command.run(Session(AdminClient(settings), out, err), args)
    except UsageProblem as exc:
        err.write(f"objstore: {exc}\n")
        return 2
    except AdminApiError as exc:
        err.write(f"objstore: {exc.message} ({exc.code}, HTTP {exc.status})\n")
        return 1
    except (ConnectionProblem, CommandFailed) as exc:
        err.write(f"objstore: {exc}\n")
        return 1
    emit(result, out, as_json=bool(getattr(args, "json", False)))
    return result.status


def emit(result: Result, out: TextIO, *, as_json: bool) -> None:
    if as_json:
        if result.data is not None:
            out.write(json.dumps(result.data, indent=2) + "\n")
    elif result.text is not None:
        out.write(result.text + "\n")
    out.flush()


__all__ = ["COMMANDS", "Command", "Result", "add_commands", "add_connection_options", "run"]
