"""The control-plane record on the data volume.

Buckets (with their configuration), users, credentials, teams, grants, their attachments
and settings are written here as one small JSON file per entity next to the blobs, so that
`objstore recover` can rebuild them when the database is lost (DESIGN invariant 2). Files
are replaced atomically and durably; the database stays the source of truth while it
exists. Directories are 0700 and files 0600 whatever the umask (credentials hold their
secrets). Blocking: IO thread pool only.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

from objstore.blobs.files import fsync_dir, unlink_quietly
from objstore.private_files import OWNER_ONLY_DIR, OWNER_ONLY_FILE, make_private_dir

FAMILIES = (
    "buckets", "users", "credentials", "settings", "teams", "grants",
    # bucket configuration documents, keyed "<bucket>:<config key>"
    "bucket_config",
    # attachments, keyed "<team_id>:<user_id>", "<user_id>:<grant_id>", "<team_id>:<grant_id>"
    "team_members", "user_grants", "team_grants",
)


def _file_name(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=") + ".json"


class ControlRecord:
    def __init__(self, data_dir: str, *, fsync: bool = True) -> None:
        self.root = os.path.join(os.path.abspath(data_dir), "control")
        self._tmp = os.path.join(os.path.abspath(data_dir), "tmp")
        self._fsync = fsync

    def prepare(self) -> None:
        """Create the layout. The record holds credential secrets: owner-only access."""
        make_private_dir(self.root)
        os.chmod(self.root, OWNER_ONLY_DIR)  # also one made by a version before 0700
        for family in FAMILIES:
            make_private_dir(os.path.join(self.root, family))
        make_private_dir(self._tmp)

    def secret_files(self) -> list[str]:
        """The files that hold secrets: one per credential, with its secret key."""
        directory = os.path.join(self.root, "credentials")
        try:
            return sorted(os.path.join(directory, name) for name in os.listdir(directory))
        except FileNotFoundError:
            return []

    def _path(self, family: str, key: str) -> str:
        if family not in FAMILIES:
            raise ValueError(f"unknown control-plane family {family!r}")
        return os.path.join(self.root, family, _file_name(key))

    def write(self, family: str, key: str, data: dict[str, Any]) -> None:
        path = self._path(family, key)
        make_private_dir(os.path.dirname(path))
        tmp = os.path.join(self._tmp, f"{uuid.uuid4()}.ctl")
        body = json.dumps({"key": key, "data": data}, sort_keys=True).encode()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        try:
            with open(os.open(tmp, flags, OWNER_ONLY_FILE), "wb") as handle:
                handle.write(body)
                handle.flush()
                if self._fsync:
                    os.fsync(handle.fileno())
            os.rename(tmp, path)
        except BaseException:  # a full disk (ENOSPC) must not leave the temporary file
            unlink_quietly(tmp)
            raise
        self._fsync_dir(os.path.dirname(path))

    def remove(self, family: str, key: str) -> None:
        path = self._path(family, key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        self._fsync_dir(os.path.dirname(path))

    def items(self, family: str) -> Iterator[tuple[str, dict[str, Any]]]:
        directory = os.path.join(self.root, family)
        if not os.path.isdir(directory):
            return
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".json"):
                continue
            with open(os.path.join(directory, name), "rb") as handle:
                doc = json.load(handle)
            yield doc["key"], doc["data"]

    def _fsync_dir(self, path: str) -> None:
        if self._fsync:
            fsync_dir(path)
