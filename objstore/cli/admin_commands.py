"""The admin subcommands of `objstore`: users, teams, grants, credentials, presign, archive,
export, import, info, stats, audit and jobs, each a call (or a few) of the admin API.

The commands are one table, `COMMANDS`: a path of words (`users grants attach`), its
arguments and its handler. `add_commands` builds the argparse tree from it and `run`
dispatches the parsed command. The IAM handlers and the `Result`/`Session` vocabulary every
handler uses live in `admin_iam.py`; the object, configuration and server handlers here.

Exit status: 0 done; 1 the server refused (its message is printed), could not be
reached, a local file was unusable, or an import reported errors; 2 a usage error.
Never imports Twisted.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from objstore.cli import admin_ops
from objstore.cli import admin_replication as replication
from objstore.cli.admin_client import (
    AdminApiError,
    AdminClient,
    ConnectionProblem,
    UsageProblem,
    resolve_settings,
    segment,
)
from objstore.cli.admin_iam import (
    CommandFailed,
    JsonObject,
    Result,
    Session,
    credentials_create,
    credentials_delete,
    credentials_list,
    credentials_update,
    grants_create,
    grants_delete,
    grants_list,
    grants_show,
    grants_update,
    read_input,
    teams_create,
    teams_delete,
    teams_grants_attach,
    teams_grants_detach,
    teams_grants_list,
    teams_list,
    teams_members_add,
    teams_members_list,
    teams_members_remove,
    teams_show,
    teams_update,
    users_create,
    users_delete,
    users_grants_attach,
    users_grants_detach,
    users_grants_list,
    users_list,
    users_show,
    users_update,
)
from objstore.cli.admin_jobs import (
    jobs_cancel,
    jobs_list,
    jobs_pause,
    jobs_resume,
    jobs_show,
    jobs_start,
    jobs_watch,
)
from objstore.cli.admin_spec import Arg, Command, arg
from objstore.cli.progress import Progress
from objstore.cli.tables import Column, human_bytes, render_record, render_table
from objstore.json_input import parse_json

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
    progress = Progress("archive received", stream=s.stderr, unit="bytes")
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
    progress = Progress("export received", stream=s.stderr, unit="bytes")
    received = io.BytesIO()
    s.client.download("GET", "/export", None, received, progress.advance, query=query,
                      size=progress.expect)
    progress.finish()
    try:
        document = parse_json(received.getvalue())
    except ValueError as exc:
        raise CommandFailed(f"the server's export is not JSON: {exc}") from None
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
    document = read_input(a.file)
    progress = Progress("import sent", total=len(document), stream=s.stderr, unit="bytes")
    report = s.client.call("POST", "/import", query=query, raw=document, sent=progress.advance)
    progress.finish()
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


NOTIFICATION_COLUMNS: list[Column] = [("ID", "id"), ("TIME", "time"), ("STATUS", "status"),
                        ("ATTEMPTS", "attempts"), ("TARGET", "target"), ("EVENT", "event_name"),
                        ("BUCKET", "bucket"), ("KEY", "key"), ("LAST ERROR", "last_error")]


def notification_events(s: Session, a: argparse.Namespace) -> Result:
    query = {name: getattr(a, name) for name in
             ("bucket", "status", "target", "limit", "cursor", "node")}
    page = s.client.call("GET", "/notifications/events", query=query)
    rows = [{**event, "last_error": (event.get("errors") or [{}])[-1].get("error") or ""}
            for event in page.get("events", [])]
    columns = ([("NODE", "node_id")] if a.node == "all" else []) + NOTIFICATION_COLUMNS
    text = render_table(rows, columns)
    if page.get("next_cursor"):
        text += f"\n(more: --cursor {page['next_cursor']})"
    return Result(page, text)


def _compression_path(a: argparse.Namespace) -> str:
    return f"/buckets/{a.bucket}/compression"


def compression_get(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("GET", _compression_path(a))
    return Result(found, render_record(found))


def compression_set(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("PUT", _compression_path(a),
                          body={"algorithm": a.algorithm, "level": a.level})
    return Result(found, render_record(found))


def compression_delete(s: Session, a: argparse.Namespace) -> Result:
    s.client.call("DELETE", _compression_path(a))
    return Result({"bucket": a.bucket, "algorithm": None, "level": None},
                  f"compression of {a.bucket} turned off")


def _bucket_and_prefix(target: str) -> tuple[str, str]:
    bucket, _, prefix = target.partition("/")
    if not bucket:
        raise UsageProblem("name a bucket: BUCKET or BUCKET/PREFIX")
    return bucket, prefix


def anonymous_text(view: JsonObject) -> str:
    rules = view.get("rules") or []
    lines = [f"{view['bucket']}/{rule['prefix']}  {rule['access']}" for rule in rules]
    public = view.get("public_prefixes") or []
    if public:
        lines.append("readable by anyone: " + ", ".join(
            f"{view['bucket']}/{prefix}*" for prefix in public))
    return "\n".join(lines) or f"{view['bucket']}: no public links"


def anonymous_set(s: Session, a: argparse.Namespace) -> Result:
    bucket, prefix = _bucket_and_prefix(a.target)
    found = s.client.call("PUT", f"/buckets/{segment(bucket)}/anonymous",
                          body={"prefix": prefix, "access": a.access})
    return Result(found, anonymous_text(found))


def anonymous_list(s: Session, a: argparse.Namespace) -> Result:
    bucket, _ = _bucket_and_prefix(a.target)
    found = s.client.call("GET", f"/buckets/{segment(bucket)}/anonymous")
    return Result(found, anonymous_text(found))


# -- the table ---------------------------------------------------------------------------

USER, TEAM, GRANT = (arg("user", help="user id or username"), arg("team", help="team id or name"),
                     arg("grant", help="grant id or name"))
DESCRIPTION = arg("--description", help="free text")
JOB = arg("job_id", help="the job's id")
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
    Command(("notification-events",), "bucket notification deliveries (newest first)",
            notification_events,
            (arg("--bucket"), arg("--status", choices=("pending", "delivered", "failed")),
             arg("--target", help="a target name or an ad-hoc webhook URL"),
             arg("--limit", type=int, help="events per page (default 100, at most 1000)"),
             arg("--cursor", help="next page: the cursor a previous page printed"),
             arg("--node", help="a node id, or all"))),
    Command(("jobs", "start"), "start a maintenance job", jobs_start,
            (arg("type", help="noop, encrypt, decrypt, compress, decompress, rotate-key, "
                              "migrate-db"),
             arg("--mode", choices=("live", "maintenance"), default="live",
                 help="maintenance: the node leaves the load balancer while the job runs"),
             arg("--param", "-p", action="append", metavar="NAME=VALUE",
                 help="a job parameter (repeatable; the value is read as JSON if it is)"),
             arg("--params", help="the job parameters as a JSON object"),
             arg("--watch", "-w", action="store_true",
                 help="then show its progress until it ends"))),
    Command(("jobs", "list"), "list maintenance jobs (newest first)", jobs_list,
            (arg("--limit", type=int, help="jobs to list (default 50, at most 500)"),)),
    Command(("jobs", "show"), "show a job and its log", jobs_show, (JOB,)),
    Command(("jobs", "watch"), "show a job's progress (rate, ETA) until it ends", jobs_watch,
            (JOB,)),
    Command(("jobs", "pause"), "pause a pending or running job", jobs_pause, (JOB,)),
    Command(("jobs", "resume"), "resume a paused job", jobs_resume, (JOB,)),
    Command(("jobs", "cancel"), "cancel a job that has not ended", jobs_cancel, (JOB,)),
    Command(("buckets", "compression", "get"), "a bucket's compression setting",
            compression_get, (arg("bucket"),)),
    Command(("buckets", "compression", "set"), "compress new objects of a bucket",
            compression_set,
            (arg("bucket"), arg("--algorithm", default="zstd", choices=("zstd",)),
             arg("--level", type=int, default=3, help="1 to 19 (default 3)"))),
    Command(("buckets", "compression", "delete"), "store new objects of a bucket "
            "uncompressed", compression_delete, (arg("bucket"),)),
    Command(("anonymous", "set"), "make a bucket or prefix public (a bucket policy) or "
            "private again", anonymous_set,
            (arg("access", choices=("download", "upload", "public", "none"),
                 help="download: anyone reads and lists; upload: anyone writes; public: "
                      "both; none: removes the link"),
             arg("target", metavar="BUCKET[/PREFIX]"))),
    Command(("anonymous", "list"), "the public links of a bucket and what anyone may read",
            anonymous_list, (arg("target", metavar="BUCKET"),)),
    Command(("replication", "journal"), "this node's replication journal (newest first)",
            replication.journal,
            (arg("--bucket"), arg("--key"),
             arg("--status", help="PENDING, COMPLETED, FAILED or SKIPPED"),
             arg("--limit", type=int, help="entries per page (default 100, at most 1000)"),
             arg("--cursor", help="next page: the cursor a previous page printed"),
             arg("--node", help="a node id, or all"))),
    Command(("replication", "credential", "set"), "store a destination's access key (the "
            "secret is read from standard input)", replication.credential_set,
            (arg("name", help="the name rules give as <CredentialRef>"),
             arg("--access-key-id", required=True))),
    Command(("replication", "credential", "delete"), "remove a stored credential",
            replication.credential_delete, (arg("name"),)),
    Command(("replication", "credential", "list"), "names and access key ids (never "
            "secrets)", replication.credential_list),
    Command(("replication", "retry"), "make a journal entry due again now",
            replication.retry, (arg("entry_id", help="the journal entry's id"),)),
    Command(("replication", "existing"), "journal the objects a bucket held before its "
            "rules (ExistingObjectReplication)", replication.existing, (arg("bucket"),)),
) + admin_ops.COMMANDS


# -- argparse and dispatch -----------------------------------------------------------------

GROUPS: dict[tuple[str, ...], str] = {
    ("users",): "manage users and their grants",
    ("users", "grants"): "grants attached to a user",
    ("teams",): "manage teams, their members and grants",
    ("teams", "members"): "members of a team",
    ("teams", "grants"): "grants attached to a team",
    ("grants",): "manage grants (policy documents)",
    ("credentials",): "manage access keys",
    ("jobs",): "maintenance jobs: start, watch, pause, resume, cancel",
    ("buckets",): "per-bucket settings",
    ("buckets", "compression"): "compression of new objects (zstd)",
    **admin_ops.GROUPS,
    ("anonymous",): "public links: what anyone may read or write in a bucket",
    ("replication",): "bucket replication: journal, credentials, retry, existing objects",
    ("replication", "credential"): "credentials of replication destinations",
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
