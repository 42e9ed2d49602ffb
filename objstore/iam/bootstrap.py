"""First-start bootstrap of the root user and its credential, and of the built-in grants.

`OBJSTORE_ROOT_ACCESS_KEY` / `OBJSTORE_ROOT_SECRET_KEY` pin the root credential (tests and
tooling rely on these names). Without them a root credential is generated once, when none
exists, and its secret is returned to the caller exactly once to be shown on the console.
Blocking (runs on a DB thread or in the offline CLI).
"""

from __future__ import annotations

import os
import secrets
import string
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from objstore.blobs.control import ControlRecord
from objstore.iam.policy import BUILTIN_GRANTS
from objstore.meta.iam_records import GrantRecord
from objstore.meta.records import CredentialRecord, UserRecord
from objstore.meta.store import SyncMetaStore

ROOT_USERNAME = "root"
ACCESS_KEY_ENV = "OBJSTORE_ROOT_ACCESS_KEY"
SECRET_KEY_ENV = "OBJSTORE_ROOT_SECRET_KEY"
_ACCESS_ALPHABET = string.ascii_uppercase + string.digits
_SECRET_ALPHABET = string.ascii_letters + string.digits + "+/"


def generate_access_key() -> str:
    return "OS" + "".join(secrets.choice(_ACCESS_ALPHABET) for _ in range(18))


def generate_secret_key() -> str:
    return "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40))


@dataclass(frozen=True)
class BootstrapResult:
    root_user_id: str
    access_key: str
    new_secret: str | None  # set only when a credential was generated now: show it once
    from_environment: bool


class BootstrapError(Exception):
    pass


def ensure_root(
    store: SyncMetaStore, control: ControlRecord, env: Mapping[str, str] = os.environ
) -> BootstrapResult:
    now = time.time()
    root = _find_or_create_root_user(store, control, now)
    access_key = env.get(ACCESS_KEY_ENV, "")
    secret_key = env.get(SECRET_KEY_ENV, "")
    if access_key or secret_key:
        if not (access_key and secret_key):
            raise BootstrapError(f"set both {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, or neither")
        _pin_credential(store, control, root, access_key, secret_key, now)
        return BootstrapResult(root.user_id, access_key, None, True)
    existing = [c for c in store.list_credentials(root.user_id) if c.active]
    if existing:
        return BootstrapResult(root.user_id, existing[0].access_key_id, None, False)
    credential = CredentialRecord(
        access_key_id=generate_access_key(),
        secret_access_key=generate_secret_key(),
        user_id=root.user_id,
        created_at=now,
        description="root credential generated at first start",
        updated_at=now,
    )
    store.create_credential(credential)
    control.write("credentials", credential.access_key_id, asdict(credential))
    return BootstrapResult(
        root.user_id, credential.access_key_id, credential.secret_access_key, False
    )


def _find_or_create_root_user(
    store: SyncMetaStore, control: ControlRecord, now: float
) -> UserRecord:
    for user in store.list_users():
        if user.is_root:
            return user
    user = UserRecord(
        user_id=ROOT_USER_ID,
        username=ROOT_USERNAME,
        created_at=now,
        description="built-in administrator",
        is_root=True,
        updated_at=now,
    )
    if not store.create_user(user):
        raise BootstrapError(f"a non-root user named {ROOT_USERNAME!r} already exists")
    control.write("users", user.user_id, asdict(user))
    return user


def _pin_credential(
    store: SyncMetaStore,
    control: ControlRecord,
    root: UserRecord, access_key: str, secret_key: str, now: float
) -> None:
    current = store.get_credential(access_key)
    if current is None:
        credential = CredentialRecord(
            access_key_id=access_key,
            secret_access_key=secret_key,
            user_id=root.user_id,
            created_at=now,
            description=f"root credential from {ACCESS_KEY_ENV}",
            updated_at=now,
        )
        store.create_credential(credential)
        control.write("credentials", access_key, asdict(credential))
        return
    if current.user_id != root.user_id:
        raise BootstrapError(f"{ACCESS_KEY_ENV} names a credential of another user")
    if current.secret_access_key != secret_key or not current.active:
        updated = replace(current, secret_access_key=secret_key, active=True, updated_at=now)
        store.update_credential(updated)
        control.write("credentials", access_key, asdict(updated))


# Built-in grants have the same id on every node and after every recovery: a name-based
# UUID in a namespace of our own.
BUILTIN_GRANT_NAMESPACE = uuid.UUID("0b1e5c7a-6f62-4a73-8e2d-6f626a73746f")
# The root user made at first start has the same id on every node (as built-in grants
# do), so the nodes of a cluster share one root: a bucket created by root through one
# node is root's on the others, and the control-plane merge sees one entity, not two
# users named "root". A root made earlier keeps its (random) id.
ROOT_USER_ID = str(uuid.uuid5(BUILTIN_GRANT_NAMESPACE, "root-user"))


def builtin_grant_id(name: str) -> str:
    return str(uuid.uuid5(BUILTIN_GRANT_NAMESPACE, name))


BUILTIN_GRANT_IDS = frozenset(builtin_grant_id(name) for name in BUILTIN_GRANTS)


# The created_at / updated_at of a built-in grant seeded here: a fixed stamp (the Unix
# epoch), the same on every node and after every rebuild. The control-plane merge is
# last-writer-wins on updated_at (convergence/control_merge.py), so a node whose database
# was lost and seeded again never beats the copies its peers hold (stamped when they were
# seeded, or identical to this one): it takes theirs. Built-in grants can not be changed
# or deleted, so no later write needs to beat them.
BUILTIN_STAMP = 0.0


def builtin_grant(name: str) -> GrantRecord:
    """The built-in grant `name` as seeded: its name-based id, its document, BUILTIN_STAMP."""
    description, document = BUILTIN_GRANTS[name]
    return GrantRecord(builtin_grant_id(name), name, document, BUILTIN_STAMP, description,
                       BUILTIN_STAMP)


def ensure_builtin_grants(store: SyncMetaStore, control: ControlRecord) -> list[str]:
    """Create the built-in grants that do not exist yet (idempotent, stamped
    BUILTIN_STAMP); their names."""
    created = []
    for name in BUILTIN_GRANTS:
        grant = builtin_grant(name)
        if store.create_grant(grant):
            control.write("grants", grant.grant_id, asdict(grant))
            created.append(name)
    return created
