"""The admin commands of the real `objstore` binary against a real daemon: every command
family, tables and --json, connection settings from flags, environment and a profile file,
and the exit statuses (0 done, 1 refused by the server, 2 usage)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import urllib3

from objstore.cli.tables import human_bytes
from tests.integration.conftest import make_client
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

OBJSTORE = str(Path(sys.executable).with_name("objstore"))
POLICY = {"Version": "2012-10-17",
          "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["*"]}]}


@dataclass
class Cli:
    daemon: Daemon
    home: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("OBJSTORE_", "AWS_"))}
        env.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / ".config"),
                   OBJSTORE_ENDPOINT=self.daemon.endpoint, OBJSTORE_ACCESS_KEY=ROOT_ACCESS_KEY,
                   OBJSTORE_SECRET_KEY=ROOT_SECRET_KEY)
        env.update(extra)
        return env

    def run(self, *args: str, env: dict[str, str] | None = None, status: int = 0,
            stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([OBJSTORE, *args], capture_output=True, env=env or self.env(),
                                input=None if stdin is None else stdin.decode(), text=True,
                                timeout=120)
        assert result.returncode == status, (args, result.returncode, result.stdout,
                                             result.stderr)
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)


@pytest.fixture
def cli(daemon: Daemon, tmp_path: Path) -> Cli:
    return Cli(daemon, tmp_path / "home")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_users_family(cli: Cli) -> None:
    name = unique("alice")
    created = cli.json("users", "create", name, "--description", "first")
    assert created["username"] == name and created["description"] == "first"
    listing = cli.run("users", "list").stdout
    assert listing.splitlines()[0].split()[:3] == ["USERNAME", "USER_ID", "ROOT"]
    assert name in listing and created["user_id"] in listing
    cli.run("users", "update", name, "--description", "second", "--username", name + "-x")
    shown = cli.json("users", "show", created["user_id"])
    assert shown["username"] == name + "-x" and shown["description"] == "second"
    assert "teams:" in cli.run("users", "show", name + "-x").stdout
    cli.run("users", "grants", "attach", name + "-x", "S3ReadOnlyAccess")
    assert [g["name"] for g in cli.json("users", "grants", "list", name + "-x")] == [
        "S3ReadOnlyAccess"]
    effective = cli.json("users", "grants", "list", name + "-x", "--effective")
    assert effective[0]["source"] == "direct"
    cli.run("users", "grants", "detach", name + "-x", "S3ReadOnlyAccess")
    cli.run("users", "delete", name + "-x")
    gone = cli.run("users", "show", created["user_id"], status=1)
    assert "No such user" in gone.stderr and "NotFound" in gone.stderr


def test_teams_family(cli: Cli) -> None:
    team, user = unique("team"), unique("member")
    cli.run("users", "create", user)
    cli.json("teams", "create", team, "--description", "t")
    cli.run("teams", "members", "add", team, user)
    cli.run("teams", "grants", "attach", team, "S3FullAccess")
    assert [m["username"] for m in cli.json("teams", "members", "list", team)] == [user]
    assert "S3FullAccess" in cli.run("teams", "grants", "list", team).stdout
    shown = cli.json("teams", "show", team)
    assert shown["member_count"] == 1 and shown["grant_count"] == 1
    assert team in cli.run("teams", "list").stdout
    cli.run("teams", "update", team, "--name", team + "-2")
    cli.run("teams", "grants", "detach", team + "-2", "S3FullAccess")
    cli.run("teams", "members", "remove", team + "-2", user)
    assert "(none)" in cli.run("teams", "members", "list", team + "-2").stdout
    cli.run("teams", "delete", team + "-2")
    duplicate = cli.json("teams", "create", team)
    again = cli.run("teams", "create", team, status=1)
    assert "already taken" in again.stderr and "Conflict" in again.stderr
    cli.run("teams", "delete", duplicate["team_id"])


def test_grants_family(cli: Cli, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    name = unique("grant")
    created = cli.json("grants", "create", name, "--file", str(policy), "--description", "d")
    assert created["document"] == POLICY
    assert '"s3:GetObject"' in cli.run("grants", "show", name).stdout
    changed = dict(POLICY, Statement=[dict(POLICY["Statement"][0], Effect="Deny")])
    cli.run("grants", "update", name, "--file", "-", stdin=json.dumps(changed).encode())
    assert cli.json("grants", "show", created["grant_id"])["document"] == changed
    assert name in cli.run("grants", "list").stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:Fly"], "Resource": ["*"]}]}))
    refused = cli.run("grants", "create", unique("bad"), "--file", str(bad), status=1)
    assert "s3:Fly" in refused.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "not valid JSON" in cli.run("grants", "create", "x", "--file", str(broken),
                                       status=1).stderr
    cli.run("grants", "delete", name)


def test_credentials_family(cli: Cli) -> None:
    user = unique("keys")
    cli.run("users", "create", user)
    made = cli.run("credentials", "create", "--user", user, "--description", "ci")
    assert "secret_access_key:" in made.stdout and "shown only now" in made.stderr
    key = next(line.split()[1] for line in made.stdout.splitlines()
               if line.startswith("access_key_id:"))
    listed = cli.json("credentials", "list", "--user", user)
    assert [c["access_key_id"] for c in listed] == [key]
    assert "secret_access_key" not in listed[0]
    everything = cli.run("credentials", "list", "--all").stdout
    assert key in everything and ROOT_ACCESS_KEY in everything
    own = cli.json("credentials", "list")
    assert ROOT_ACCESS_KEY in [c["access_key_id"] for c in own]
    cli.run("credentials", "update", key, "--deactivate", "--description", "off")
    assert cli.json("credentials", "list", "--user", user)[0]["active"] is False
    assert cli.run("credentials", "update", key, status=2).stderr.startswith("objstore:")
    chosen = cli.json("credentials", "create", "--user", user, "--access-key-id",
                      unique("AKCHOSEN"), "--secret-access-key", "chosen-secret-123")
    assert chosen["secret_access_key"] == "chosen-secret-123"
    cli.run("credentials", "delete", key)
    cli.run("credentials", "delete", chosen["access_key_id"])


def test_presign_and_archive(cli: Cli, tmp_path: Path) -> None:
    s3: Any = make_client(cli.daemon.endpoint)
    bucket = unique("cli")
    s3.create_bucket(Bucket=bucket)
    objects = {"one.txt": b"one", "two/2.bin": os.urandom(300_000)}
    for key, data in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    url = cli.run("presign", bucket, "one.txt", "--expires", "60").stdout.strip()
    assert urllib3.request("GET", url).data == b"one"
    put = cli.json("presign", bucket, "new.txt", "--method", "put")
    assert put["url"].startswith(cli.daemon.endpoint) and "expires_at" in put
    assert urllib3.request("PUT", put["url"], body=b"via presign").status == 200

    target = tmp_path / "out.tar.gz"
    done = cli.run("archive", bucket, *objects, "-o", str(target))
    assert "archive received" in done.stderr and str(target) in done.stdout
    with tarfile.open(target, "r:gz") as tar:
        unpacked = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    assert unpacked == objects
    keys = tmp_path / "keys.txt"
    keys.write_text("one.txt\n")
    piped = subprocess.run([OBJSTORE, "archive", bucket, "--keys-from", str(keys), "-o", "-"],
                           capture_output=True, env=cli.env(), timeout=60)
    with tarfile.open(fileobj=io.BytesIO(piped.stdout), mode="r:gz") as tar:
        assert tar.getnames() == ["one.txt"]
    missing = cli.run("archive", bucket, "one.txt", "nope", "-o", str(tmp_path / "x.tgz"),
                      status=1)
    assert "nope" in missing.stderr and not (tmp_path / "x.tgz").exists()
    assert not list(tmp_path.glob("*.part"))


def test_export_and_import(cli: Cli, tmp_path: Path) -> None:
    user = unique("exported")
    cli.run("users", "create", user)
    target = tmp_path / "config.json"
    summary = cli.run("export", "-o", str(target), "--sections", "users,grants")
    assert "exported to" in summary.stdout and oct(target.stat().st_mode & 0o777) == "0o600"
    # not a terminal: one plain progress line at the end, on standard error, with the
    # total (the answer's Content-Length), the rate and the ETA
    size = human_bytes(len(json.dumps(json.loads(target.read_text())).encode()))
    assert f"export received [{'#' * 30}] {size}/{size} (100%, " in summary.stderr
    assert summary.stderr.count("\n") == 1 and summary.stderr.endswith("/s, done)\n")
    document = json.loads(target.read_text())
    assert document["sections"] == ["users", "grants"]
    assert user in [u["username"] for u in document["users"]]
    users_only = str(tmp_path / "users.json")
    assert cli.json("export", "-o", users_only, "--sections", "users")["counts"]["users"] >= 2
    stdout_copy = json.loads(cli.run("export", "--sections", "credentials").stdout)
    assert {c["secret_access_key"] for c in stdout_copy["credentials"]} == {"****"}
    secret = json.loads(cli.run("export", "--sections", "credentials",
                                "--include-secrets").stdout)
    assert ROOT_SECRET_KEY in {c["secret_access_key"] for c in secret["credentials"]}

    preview = cli.run("import", str(target), "--mode", "dry_run")
    assert "SECTION" in preview.stdout and "dry run: nothing was changed" in preview.stdout
    imported = cli.run("import", str(target), "--mode", "overwrite", "--json")
    report = json.loads(imported.stdout)  # --json: standard output is the report alone
    assert user in report["skipped"]["users"] and report["errors"] == []
    total = human_bytes(target.stat().st_size)
    assert f"import sent [{'#' * 30}] {total}/{total} (100%, " in imported.stderr
    document["users"].append({"username": unique("new"), "user_id": "not-a-uuid"})
    target.write_text(json.dumps(document))
    failed = cli.run("import", "-", status=1, stdin=target.read_bytes())
    assert "error: users" in failed.stdout and "UUID" in failed.stdout


def test_info_stats_and_audit(cli: Cli) -> None:
    info = cli.json("info")
    assert info["version"] and info["metadata_backend"] == cli.daemon.backend
    assert "version:" in cli.run("info").stdout
    stats = cli.run("stats").stdout
    assert "bucket_count:" in stats and "B)" in stats
    cli.run("users", "list")
    page = cli.json("audit", "--limit", "5")
    assert set(page) >= {"node", "entries", "next_cursor"} and len(page["entries"]) <= 5
    table = cli.run("audit", "--limit", "3").stdout
    assert table.splitlines()[0].split()[:3] == ["TIME", "USER", "OPERATION"]
    if page["next_cursor"]:
        assert "--cursor" in cli.run("audit", "--limit", "1").stdout
        cli.json("audit", "--limit", "1", "--cursor", page["next_cursor"])
    cli.run("audit", "--since", "not-a-time", status=1)


def test_connection_settings_and_usage_errors(cli: Cli) -> None:
    bare = cli.env()
    for name in ("OBJSTORE_ENDPOINT", "OBJSTORE_ACCESS_KEY", "OBJSTORE_SECRET_KEY"):
        bare.pop(name)
    missing = cli.run("info", env=bare, status=2)
    assert "no access_key, secret_key" in missing.stderr
    flags = ["--endpoint", cli.daemon.endpoint, "--access-key", ROOT_ACCESS_KEY,
             "--secret-key", ROOT_SECRET_KEY]
    cli.run("info", *flags, env=bare)
    cli.run("--json", *flags, "stats", env=bare)  # options before the command work too
    aws = dict(bare, OBJSTORE_ENDPOINT=cli.daemon.endpoint, AWS_ACCESS_KEY_ID=ROOT_ACCESS_KEY,
               AWS_SECRET_ACCESS_KEY=ROOT_SECRET_KEY)
    cli.run("info", env=aws)

    profile = cli.home / ".config" / "objstore" / "profile.toml"
    profile.parent.mkdir(parents=True)
    profile.write_text(
        f'[profile.default]\nendpoint = "{cli.daemon.endpoint}"\n'
        f'access_key = "{ROOT_ACCESS_KEY}"\nsecret_key = "{ROOT_SECRET_KEY}"\n'
        f'[profile.wrong]\nendpoint = "{cli.daemon.endpoint}"\n'
        f'access_key = "{ROOT_ACCESS_KEY}"\nsecret_key = "not-the-secret"\n')
    profile.chmod(0o600)
    cli.run("info", env=bare)
    denied = cli.run("info", "--profile", "wrong", env=bare, status=1)
    assert "SignatureDoesNotMatch" in denied.stderr and "not-the-secret" not in denied.stderr
    assert "no [profile.nope]" in cli.run("info", "--profile", "nope", env=bare,
                                          status=2).stderr
    profile.chmod(0o644)
    assert "readable by others" in cli.run("info", env=bare).stderr

    cli.run("users", env=bare, status=2)  # a group without its subcommand
    cli.run("users", "frobnicate", status=2)
    unreachable = cli.run("info", "--endpoint", "http://127.0.0.1:9", status=1)
    assert "cannot reach" in unreachable.stderr


def test_quota_settings_metrics_and_cluster_commands(cli: Cli) -> None:
    bucket = unique("quota")
    make_client(cli.daemon.endpoint).create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    shown = cli.run("buckets", "quota", "get", bucket).stdout
    assert "max_bytes" in shown and "unlimited" in shown
    cli.run("buckets", "quota", "set", bucket, status=1)  # neither limit given
    quota = cli.json("buckets", "quota", "set", bucket, "--max-bytes", "10M",
                     "--max-objects", "5")
    assert quota["max_bytes"] == 10 * 1024**2 and quota["max_objects"] == 5
    assert "10.0 MiB" in cli.run("buckets", "quota", "get", bucket).stdout
    cli.run("buckets", "quota", "set", bucket, "--max-bytes", "ten", status=2)
    cli.run("buckets", "quota", "delete", bucket)
    assert cli.json("buckets", "quota", "get", bucket)["max_bytes"] is None
    cli.run("buckets", "quota", "get", unique("missing"), status=1)

    settings = cli.json("settings", "list")
    assert "region" in {s["key"] for s in settings}
    region = next(s for s in settings if s["key"] == "region")
    if region["value"] is None:  # not set on this daemon: 404, exit status 1
        cli.run("settings", "get", "region", status=1)
    else:
        assert cli.json("settings", "get", "region")["value"] == region["value"]
    assert cli.run("settings", "list").stdout.splitlines()[0].split()[:2] == ["KEY", "VALUE"]
    cli.run("settings", "set", "no_such_setting", "1", status=1)  # refused, nothing changed

    history = cli.json("metrics", "history", "--limit", "5")
    assert isinstance(history["samples"], list)
    chart = cli.run("metrics", "history", "--figure", "requests", "--width", "10").stdout
    assert "samples" in chart  # "(no samples yet)" or "N samples, <first> .. <last>"

    status = cli.json("cluster", "status")
    assert status["enabled"] is False and status["nodes"]
    assert "NODE" in cli.run("cluster", "status").stdout


def test_completion_scripts_complete_commands(cli: Cli) -> None:
    bash = cli.run("completion", "bash").stdout
    assert "complete -o default -F _objstore objstore" in bash
    assert cli.run("completion", "zsh").stdout.startswith("#compdef objstore")
    assert cli.run("__complete", "2", "buckets", "q").stdout.split() == ["quota"]
    script = (f'eval "$({OBJSTORE} completion bash)"; COMP_WORDS=(objstore jobs st); '
              'COMP_CWORD=2; _objstore; echo "${COMPREPLY[@]}"')
    env = cli.env(PATH=f"{Path(OBJSTORE).parent}:{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.stdout.split() == ["start"], done.stderr
