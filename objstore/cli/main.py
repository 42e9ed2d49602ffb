"""The `objstore` command: offline tools (recover, check) and --version.

Offline tools open the metadata database and the data volume directly; run them while the
daemon is stopped (check is read-only without --repair and is safe on a live node).
"""

from __future__ import annotations

import argparse
import secrets
import sys

from objstore import __version__
from objstore.config import ConfigError, load_config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="objstore", description=__doc__)
    parser.add_argument("--version", action="version", version=f"objstore {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    recover = commands.add_parser(
        "recover", help="rebuild the metadata database from sidecars and the control record"
    )
    recover.add_argument("--config", "-c", help="path to objstore.toml")
    recover.add_argument("--force", action="store_true",
                         help="recover into a database that already holds buckets or objects")

    commands.add_parser("keygen", help="print a new random secret for [cluster] secret")

    check = commands.add_parser("check", help="compare the database with the files on disk")
    check.add_argument("--config", "-c", help="path to objstore.toml")
    check.add_argument("--repair", action="store_true",
                       help="fix what is safe: remove orphans, rewrite missing sidecars")
    check.add_argument("--deep", action="store_true",
                       help="also re-hash every blob and compare it with its ETag")
    check.add_argument("--orphan-grace-seconds", type=float, default=900.0,
                       help="leave orphans younger than this alone (uploads in flight)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "keygen":
        print(secrets.token_urlsafe(48))
        return 0
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        sys.stderr.write(f"objstore: {exc}\n")
        return 2
    if args.command == "recover":
        from objstore.cli.recover import run_recover

        return run_recover(config, force=args.force)
    from objstore.cli.check import run_check

    return run_check(config, repair=args.repair, deep=args.deep,
                     orphan_grace_seconds=args.orphan_grace_seconds)


if __name__ == "__main__":
    sys.exit(main())
