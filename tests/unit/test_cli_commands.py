"""The admin command table and its dispatch without a server: every command parses,
connection options work before and after the command, names resolve to ids, results print
as tables or JSON, and failures map to exit statuses 1 and 2."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from objstore.cli import admin_commands
from objstore.cli.admin_client import AdminApiError, AdminClient
from objstore.cli.admin_commands import COMMANDS, Command, import_text, run
from objstore.cli.admin_iam import CommandFailed, read_json_file
from objstore.cli.main import build_parser, main

CONNECTION = ["--endpoint", "http://127.0.0.1:9000", "--access-key", "AK", "--secret-key",
              "secret-key-000"]
ALICE = {"user_id": "4a1d8d57-5c9a-4c62-9d38-2b7ad1a0c2b1", "username": "alice",
         "description": "", "is_root": False, "credential_count": 1, "team_count": 0,
         "grant_count": 2}


def argv_for(command: Command) -> list[str]:
    """The command's words, a value for each positional, and its required options."""
    argv = list(command.path)
    for option in command.args:
        if option.flags[0].startswith("-"):
            if option.options.get("required"):
                argv += [option.flags[0], "x"]
        elif option.options.get("nargs") != "*":
            argv.append(option.options.get("choices", ["x"])[0])
    return argv


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c.path))
def test_every_command_parses_to_itself(command: Command) -> None:
    args = build_parser().parse_args(argv_for(command))
    assert args.admin_command is command


def test_offline_commands_keep_working() -> None:
    args = build_parser().parse_args(["check", "--repair"])
    assert args.command == "check" and getattr(args, "admin_command", None) is None


def test_connection_options_before_and_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["--json", "--endpoint", "http://a:1", "users", "list"])
    after = parser.parse_args(["users", "list", "--json", "--endpoint", "http://b:1"])
    both = parser.parse_args(["--endpoint", "http://a:1", "users", "list",
                              "--endpoint", "http://b:1"])
    assert (before.json, before.endpoint) == (True, "http://a:1")
    assert (after.json, after.endpoint) == (True, "http://b:1")
    assert both.endpoint == "http://b:1"


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["users"], ["users", "nope"], ["grants", "create", "g"], ["presign", "b"]):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
    assert main([]) == 2


# -- dispatch with a scripted server ---------------------------------------------------------


class Script:
    """Answers by (method, path); records every call."""

    def __init__(self, answers: dict[tuple[str, str], Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str, Any, Any]] = []

    def call(self, client: AdminClient, method: str, path: str, *, query: Any = None,
             body: Any = None, raw: Any = None, sent: Any = None) -> Any:
        self.calls.append((method, path, query, body if raw is None else raw))
        if sent is not None and raw:
            sent(len(raw))  # the body on the wire, for the progress
        answer = self.answers.get((method, path))
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Iterator[Script]:
    scripted = Script({})
    monkeypatch.setattr(AdminClient, "call",
                        lambda client, *args, **options: scripted.call(client, *args, **options))
    yield scripted


def invoke(*argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args([*argv, *CONNECTION])
    out, err = io.StringIO(), io.StringIO()
    status = run(args, stdout=out, stderr=err, environ={"HOME": "/nonexistent"})
    return status, out.getvalue(), err.getvalue()


def test_lists_print_tables_or_json(script: Script) -> None:
    script.answers[("GET", "/users")] = [ALICE]
    status, out, _ = invoke("users", "list")
    assert status == 0 and out.splitlines()[0].startswith("USERNAME  USER_ID")
    assert "alice" in out.splitlines()[1]
    status, out, _ = invoke("users", "list", "--json")
    assert json.loads(out) == [ALICE]


def test_names_resolve_to_ids(script: Script) -> None:
    script.answers[("GET", "/users")] = [ALICE]
    script.answers[("GET", "/grants")] = [{"grant_id": "g-1", "name": "reader"}]
    status, out, _ = invoke("users", "grants", "attach", "alice", "reader")
    assert status == 0 and out == "attached grant reader to user alice\n"
    assert script.calls[-1][:2] == ("PUT", f"/users/{ALICE['user_id']}/grants/g-1")
    status, _, err = invoke("users", "delete", "bob")
    assert status == 1 and "no user named 'bob'" in err


def test_ids_are_used_as_given_and_quoted(script: Script) -> None:
    status, _, _ = invoke("users", "delete", ALICE["user_id"])
    assert status == 0 and script.calls == [("DELETE", f"/users/{ALICE['user_id']}", None,
                                             None)]
    invoke("credentials", "delete", "AK/odd key")
    assert script.calls[-1][1] == "/credentials/AK%2Fodd%20key"


def test_server_errors_exit_1_with_the_message(script: Script) -> None:
    script.answers[("POST", "/teams")] = AdminApiError(409, "Conflict",
                                                       "team name 'x' is already taken.")
    status, out, err = invoke("teams", "create", "x")
    assert (status, out) == (1, "")
    assert err == "objstore: team name 'x' is already taken. (Conflict, HTTP 409)\n"


def test_updates_need_something_to_change(script: Script) -> None:
    status, _, err = invoke("credentials", "update", "AK1")
    assert status == 2 and "nothing to change" in err and script.calls == []
    status, _, _ = invoke("credentials", "update", "AK1", "--deactivate")
    assert status == 0 and script.calls[-1][3] == {"active": False}


def test_credentials_with_chosen_keys_need_a_user(script: Script) -> None:
    status, _, err = invoke("credentials", "create", "--access-key-id", "AKX")
    assert status == 2 and "--user" in err


def test_presign_prints_the_url(script: Script) -> None:
    script.answers[("POST", "/presign")] = {"url": "http://h/b/k?X-Amz-Signature=1",
                                            "expires_at": "2030-01-01T00:00:00+00:00"}
    status, out, _ = invoke("presign", "b", "k", "--method", "put", "--expires", "60")
    assert (status, out) == (0, "http://h/b/k?X-Amz-Signature=1\n")
    assert script.calls[-1][3] == {"bucket": "b", "key": "k", "method": "PUT", "expires": 60}


def test_audit_passes_filters_and_shows_the_cursor(script: Script) -> None:
    script.answers[("GET", "/audit")] = {"node": "n1", "next_cursor": "abc", "entries": [
        {"time": "t", "username": "root", "operation": "PutObject", "bucket": "b", "key": "k",
         "status": 200, "source_ip": "127.0.0.1", "request_id": "R1", "node_id": "n1"}]}
    status, out, _ = invoke("audit", "--bucket", "b", "--limit", "1", "--node", "all")
    assert status == 0 and out.splitlines()[0].split()[:2] == ["NODE", "TIME"]
    assert "(more: --cursor abc)" in out
    query = script.calls[-1][2]
    assert (query["bucket"], query["limit"], query["node"], query["user"]) == (
        "b", 1, "all", None)


def test_notification_events_show_the_last_error(script: Script) -> None:
    script.answers[("GET", "/notifications/events")] = {"node": "n1", "next_cursor": "7",
                                                        "events": [
        {"id": 8, "time": "t", "status": "failed", "attempts": 3, "target": "hooks",
         "event_name": "s3:ObjectCreated:Put", "bucket": "b", "key": "k",
         "errors": [{"error": "HTTP 500: no"}, {"error": "HTTP 503: later"}]}]}
    status, out, _ = invoke("notification-events", "--status", "failed", "--bucket", "b")
    assert status == 0 and "HTTP 503: later" in out and "(more: --cursor 7)" in out
    query = script.calls[-1][2]
    assert (query["status"], query["bucket"], query["target"]) == ("failed", "b", None)


def test_an_import_with_errors_exits_1(script: Script, tmp_path: Any) -> None:
    document = tmp_path / "doc.json"
    document.write_text("{}")
    report = {"mode": "skip", "dry_run": False,
              "created": {"users": ["a"], "grants": []}, "updated": {"users": [], "grants": []},
              "skipped": {"users": ["root"], "grants": []},
              "errors": [{"section": "grants", "item": "g", "message": "bad"}]}
    script.answers[("POST", "/import")] = report
    status, out, _ = invoke("import", str(document), "--mode", "overwrite", "--sections",
                            "users,grants")
    assert status == 1 and "error: grants g: bad" in out
    assert script.calls[-1][2] == {"mode": "overwrite", "sections": "users,grants",
                                   "dry_run": None}
    assert script.calls[-1][3] == b"{}"


def test_import_report_text() -> None:
    report = {"dry_run": True, "created": {"users": ["a", "b"], "teams": []},
              "updated": {"users": [], "teams": ["t"]}, "skipped": {"users": ["root"],
                                                                   "teams": []},
              "errors": []}
    assert import_text(report).splitlines() == [
        "SECTION  CREATED  UPDATED  SKIPPED",
        "users    2        0        1",
        "teams    0        1        0",
        "created users: a, b",
        "updated teams: t",
        "dry run: nothing was changed",
    ]


def test_local_files_that_cannot_be_read_exit_1(script: Script) -> None:
    status, _, err = invoke("grants", "create", "g", "--file", "/nonexistent/policy.json")
    assert status == 1 and "cannot read /nonexistent/policy.json" in err


def test_group_help_names_every_family() -> None:
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    names = set(actions[0].choices)
    assert {"users", "teams", "grants", "credentials", "presign", "archive", "export",
            "import", "info", "stats", "audit", "recover", "check", "keygen"} <= names
    assert admin_commands.GROUPS[("users",)]


@pytest.mark.parametrize("content", [b"[" * 100_000, b'{"n": ' + b"9" * 30 + b"}", b"{"],
                         ids=["nested", "int-past-64-bit", "malformed"])
def test_a_json_file_the_cli_cannot_read_is_a_clear_failure(tmp_path: Path,
                                                            content: bytes) -> None:
    """Not a RecursionError traceback: the CLI says the file is not valid JSON."""
    path = tmp_path / "policy.json"
    path.write_bytes(content)
    with pytest.raises(CommandFailed, match="is not valid JSON"):
        read_json_file(str(path))
