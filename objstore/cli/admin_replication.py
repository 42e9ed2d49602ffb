"""The replication admin commands: `objstore replication journal|credential set|
credential delete|credential list|retry|existing`, each a call of /admin/replication/*.
A credential's secret is read from standard input (never from the command line, where
process listings and shell histories would keep it). Never imports Twisted.
"""

from __future__ import annotations

import argparse
import sys

from objstore.cli.admin_client import UsageProblem, segment
from objstore.cli.admin_iam import Result, Session
from objstore.cli.tables import Column, render_record, render_table

JOURNAL_COLUMNS: list[Column] = [
    ("ID", "id"), ("TIME", "time"), ("KIND", "kind"), ("BUCKET", "bucket"), ("KEY", "key"),
    ("STATUS", "status"), ("ATTEMPTS", "attempts"), ("ERROR", "last_error"),
]


def journal(s: Session, a: argparse.Namespace) -> Result:
    query = {name: getattr(a, name) for name in
             ("bucket", "key", "status", "limit", "cursor", "node")}
    page = s.client.call("GET", "/replication/journal", query=query)
    columns = ([("NODE", "node_id")] if a.node == "all" else []) + JOURNAL_COLUMNS
    text = render_table(page.get("entries", []), columns)
    if page.get("next_cursor"):
        text += f"\n(more: --cursor {page['next_cursor']})"
    return Result(page, text)


def credential_set(s: Session, a: argparse.Namespace) -> Result:
    secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        raise UsageProblem("give the secret access key on standard input")
    found = s.client.call("POST", f"/replication/credentials/{segment(a.name)}",
                          body={"access_key_id": a.access_key_id,
                                "secret_access_key": secret})
    return Result(found, render_record(found))


def credential_delete(s: Session, a: argparse.Namespace) -> Result:
    s.client.call("DELETE", f"/replication/credentials/{segment(a.name)}")
    return Result({"name": a.name, "deleted": True}, f"credential {a.name} deleted")


def credential_list(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("GET", "/replication/credentials")
    return Result(found, render_table(found.get("credentials", []),
                                      [("NAME", "name"), ("ACCESS_KEY_ID", "access_key_id")]))


def retry(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("POST", f"/replication/retry/{segment(a.entry_id)}")
    return Result(found, render_record({k: v for k, v in found.items()
                                        if k != "destination"}))


def existing(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("POST", f"/replication/existing/{segment(a.bucket)}")
    return Result(found, render_record(found))


__all__ = ["credential_delete", "credential_list", "credential_set", "existing", "journal",
           "retry"]
