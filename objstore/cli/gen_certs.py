"""`objstore gen-certs`: the cluster CA and per-node certificates for [cluster.tls].

    objstore gen-certs ca [--dir DIR] [--days N] [--force]
    objstore gen-certs node NAME [--dir DIR] [--dns NAME]... [--ip ADDRESS]... [--days N]
                                 [--force]

`ca` writes DIR/cluster-ca.crt and DIR/cluster-ca.key; it refuses to replace an existing
CA unless --force (which invalidates every node certificate it signed). `node` signs
DIR/NAME.crt and DIR/NAME.key with that CA, for the DNS names and IP addresses given,
usable as server and as client; it refuses to replace them unless --force. Keys are
written 0600, certificates 0644, each through a temporary file, fsynced and renamed, so a
crash leaves the old file or the new one. The certificates themselves are made by
`objstore.cluster.certs`.

Exit status: 0 written; 1 refused (a file exists, no CA, unreadable CA, bad name or
address); 2 usage error (argparse).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime

CA_CERT = "cluster-ca.crt"
CA_KEY = "cluster-ca.key"
KEY_MODE = 0o600
CERT_MODE = 0o644


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "gen-certs", help="create the cluster CA and node certificates for [cluster.tls]")
    kinds = parser.add_subparsers(dest="cert_kind", metavar="{ca,node}", required=True)
    ca = kinds.add_parser("ca", help="create the cluster CA (once)")
    node = kinds.add_parser("node", help="create a node's certificate, signed by the CA")
    node.add_argument("name", help="the node's name: the files are NAME.crt and NAME.key")
    node.add_argument("--dns", action="append", default=[], metavar="NAME",
                      help="a DNS name peers use to reach the node (repeatable)")
    node.add_argument("--ip", action="append", default=[], metavar="ADDRESS",
                      help="an IP address peers use to reach the node (repeatable)")
    for sub, days in ((ca, 3650), (node, 825)):
        sub.add_argument("--dir", default=".", help="where the files go (default: .)")
        sub.add_argument("--days", type=int, default=days,
                         help=f"validity in days (default: {days})")
        sub.add_argument("--force", action="store_true", help="replace existing files")


class Refused(Exception):
    """What the command will not do (replace a file, sign without a CA); one line."""


def run(args: argparse.Namespace) -> int:
    from objstore.cluster.certs import CertificateError

    try:
        written = _make_ca(args) if args.cert_kind == "ca" else _make_node(args)
    except (Refused, CertificateError) as exc:
        sys.stderr.write(f"objstore: {exc}\n")
        return 1
    except OSError as exc:
        sys.stderr.write(f"objstore: {exc.filename or args.dir}: {exc.strerror}\n")
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


def _make_ca(args: argparse.Namespace) -> list[str]:
    from objstore.cluster.certs import make_ca

    cert_path, key_path = _paths(args.dir, CA_CERT, CA_KEY, force=args.force)
    ca = make_ca(now=datetime.now(UTC), days=args.days)
    write_file(key_path, ca.key_pem(), KEY_MODE)
    write_file(cert_path, ca.certificate_pem(), CERT_MODE)
    if args.force:
        sys.stderr.write("objstore: a new cluster CA: node certificates signed by the old one "
                         "no longer verify; create them again\n")
    return [cert_path, key_path]


def _make_node(args: argparse.Namespace) -> list[str]:
    from objstore.cluster.certs import load_ca, make_node, valid_node_name

    if not valid_node_name(args.name):  # before it becomes part of a path
        raise Refused(f"not a node name ([A-Za-z0-9._-], not starting with a dot): "
                      f"{args.name!r}")
    ca = load_ca(_read(args.dir, CA_CERT), _read(args.dir, CA_KEY))
    cert_path, key_path = _paths(args.dir, f"{args.name}.crt", f"{args.name}.key",
                                 force=args.force)
    node = make_node(ca, args.name, dns_names=args.dns, ip_addresses=args.ip,
                     now=datetime.now(UTC), days=args.days)
    write_file(key_path, node.key_pem(), KEY_MODE)
    write_file(cert_path, node.certificate_pem(), CERT_MODE)
    return [cert_path, key_path]


def _paths(directory: str, cert_name: str, key_name: str, *, force: bool) -> tuple[str, str]:
    os.makedirs(directory, mode=0o700, exist_ok=True)
    paths = os.path.join(directory, cert_name), os.path.join(directory, key_name)
    existing = [p for p in paths if os.path.lexists(p)]
    if existing and not force:
        raise Refused(f"{existing[0]} exists; give --force to replace it")
    return paths


def _read(directory: str, name: str) -> bytes:
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        raise Refused(f"{path}: no cluster CA here; create it first with "
                              f"`objstore gen-certs ca --dir {directory}`")
    with open(path, "rb") as fh:
        return fh.read()


def write_file(path: str, data: bytes, mode: int) -> None:
    """Write `data` to `path` with exactly `mode` (whatever the umask), durably: a
    temporary file in the same directory, fsynced, renamed over, the directory fsynced."""
    directory = os.path.dirname(path) or "."
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
