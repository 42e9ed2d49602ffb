"""The `objstore` command: offline tools (recover, check, keygen, key, gen-certs), the admin API
commands (users, teams, grants, credentials, presign, archive, export, import, info, stats,
audit) and --version.

Commands are dispatched by table (`COMMANDS` here, `admin_commands.COMMANDS` for the admin
API).

Offline tools open the metadata database and the data volume directly; run them while the
daemon is stopped (check is read-only without --repair and is safe on a live node). Admin
commands talk to a running daemon over HTTP and never import Twisted.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Callable

from objstore import __version__
from objstore.cli import admin_commands, completion, gen_certs
from objstore.config import Config, ConfigError, load_config

EPILOG = """\
The admin commands connect to --endpoint, else $OBJSTORE_ENDPOINT, else the profile's
endpoint, else http://127.0.0.1:9000. Keys: --access-key/--secret-key, else
$OBJSTORE_ACCESS_KEY/$OBJSTORE_SECRET_KEY (or $AWS_ACCESS_KEY_ID/$AWS_SECRET_ACCESS_KEY),
else the profile. Also: $OBJSTORE_REGION, $OBJSTORE_CA_BUNDLE (a CA file to verify TLS),
$OBJSTORE_PROFILE (a profile name). Profiles: [profile.NAME] tables of
$XDG_CONFIG_HOME/objstore/profile.toml (~/.config/objstore/profile.toml) with endpoint,
access_key, secret_key, region, ca_bundle. Shell completion: eval "$(objstore completion
bash)". Every admin command prints JSON with --json. See objstore(8)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="objstore", description=__doc__.split("\n\n")[0],
                                     epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"objstore {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    recover = commands.add_parser(
        "recover", help="rebuild the metadata database from sidecars and the control record"
    )
    recover.add_argument("--config", "-c", help="path to objstore.toml")
    recover.add_argument("--force", action="store_true",
                         help="recover into a database that already holds buckets or objects")

    commands.add_parser("keygen", help="print a new random secret for [cluster] secret")
    key = commands.add_parser("key", help="the master keys of server-side encryption")
    key_commands = key.add_subparsers(dest="key_command", metavar="KEY_COMMAND")
    for name, text in (("rotate", "add a new master key version (active at the next start)"),
                       ("list", "show the master key versions' ids (never a key)")):
        sub = key_commands.add_parser(name, help=text)
        sub.add_argument("--config", "-c", help="path to objstore.toml")
    gen_certs.add_command(commands)
    completion.add_command(commands)

    check = commands.add_parser("check", help="compare the database with the files on disk")
    check.add_argument("--config", "-c", help="path to objstore.toml")
    check.add_argument("--repair", action="store_true",
                       help="fix what is safe: remove orphans, rewrite missing sidecars")
    check.add_argument("--deep", action="store_true",
                       help="also re-hash every blob and compare it with its ETag")
    check.add_argument("--orphan-grace-seconds", type=float, default=900.0,
                       help="leave orphans younger than this alone (uploads in flight)")
    admin_commands.add_commands(commands)
    admin_commands.add_connection_options(parser, suppress=False)
    return parser


def run_keygen(args: argparse.Namespace) -> int:
    print(secrets.token_urlsafe(48))
    return 0


def run_key(config: Config, args: argparse.Namespace) -> int:
    """`objstore key rotate|list`: the keyring in [encryption] master_key_file."""
    from objstore.crypto.keyring import master_key_path, node_keyring, rotate
    from objstore.crypto.master_key import MasterKeyError

    if not config.encryption.enabled:
        sys.stderr.write("objstore: [encryption] enabled is false: no master key\n")
        return 2
    try:
        if args.key_command == "rotate":
            added = rotate(config)
            print(f"added master key version {added.key_id} to {master_key_path(config)}; "
                  "restart the node (every node of a cluster, each with this file) and run "
                  "a rotate-key job to re-wrap existing objects")
            return 0
        keyring = node_keyring(config, create=False)
    except MasterKeyError as exc:
        sys.stderr.write(f"objstore: {exc}\n")
        return 2
    if keyring is None:
        sys.stderr.write(f"objstore: {master_key_path(config)} does not exist yet\n")
        return 2
    for key_id in keyring.key_ids:
        print(key_id + ("  (active)" if key_id == keyring.key_id else ""))
    return 0


def run_recover(config: Config, args: argparse.Namespace) -> int:
    from objstore.cli.recover import run_recover as recover

    return recover(config, force=args.force)


def run_check(config: Config, args: argparse.Namespace) -> int:
    from objstore.cli.check import run_check as check

    return check(config, repair=args.repair, deep=args.deep,
                 orphan_grace_seconds=args.orphan_grace_seconds)


def with_config(tool: Callable[[Config, argparse.Namespace], int]
                ) -> Callable[[argparse.Namespace], int]:
    """An offline tool run on the configuration named by --config (exit 2 when invalid)."""

    def run(args: argparse.Namespace) -> int:
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            sys.stderr.write(f"objstore: {exc}\n")
            return 2
        return tool(config, args)

    return run


# Command name -> runner; every admin command dispatches through admin_commands.run.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "keygen": run_keygen,
    "gen-certs": gen_certs.run,
    "completion": completion.run,
    "recover": with_config(run_recover),
    "check": with_config(run_check),
    "key": with_config(run_key),
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == [completion.COMPLETE]:  # the completion scripts ask for candidates
        sys.stdout.write(completion.complete(parser, words[1:]))
        return 0
    args = parser.parse_args(argv)
    if getattr(args, "admin_command", None) is not None:
        return admin_commands.run(args)
    runner = COMMANDS.get(args.command or "")
    if args.command == "key" and getattr(args, "key_command", None) is None:
        runner = None
    if runner is None:
        parser.print_help()
        return 2
    return runner(args)


if __name__ == "__main__":
    sys.exit(main())
