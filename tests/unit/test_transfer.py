"""Export and import in memory: two nodes' worth of SQLite stores with inline DB and IO
pools, the real IAM, bucket and bucket-configuration use cases, and a settings table that
knows `region` (exportable) and `node_id` (node-local)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from objstore.blobs.control import ControlRecord
from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.buckets import BucketService
from objstore.engine.changes import Caller
from objstore.engine.iam import IamService, NewCredential
from objstore.engine.lifecycle import LifecycleService
from objstore.engine.lifecycle_rules import (
    Expiration,
    LifecycleConfiguration,
    LifecycleRule,
    to_json,
)
from objstore.engine.transfer import SECTIONS, BucketDocuments, TransferService, parse_sections
from objstore.engine.transfer_import import MASK, ImportTargets
from objstore.errors import AdminError
from objstore.iam.bootstrap import ensure_builtin_grants, ensure_root
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import run
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

ENCRYPTION = '{"algorithm": "AES256", "bucket_key_enabled": false}'
DOC = {"Version": "2012-10-17",
       "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["*"]}]}
LIFECYCLE = to_json(LifecycleConfiguration((
    LifecycleRule("tmp", "Enabled", expiration=Expiration(days=7)),)))
OTHER_DOC = {"Version": "2012-10-17",
             "Statement": [{"Effect": "Deny", "Action": ["s3:*"], "Resource": ["*"]}]}


class Settings:
    """The settings table double: region travels, node_id never; values are validated."""

    def __init__(self, meta: MetaStore) -> None:
        self._meta = meta

    def exportable(self, key: str) -> bool:
        return key == "region"

    def parse(self, key: str, value: str) -> str:
        if not value.islower():
            raise AdminError("BadRequest", "region must be lower-case")
        return value

    async def put_text(self, caller: Caller, key: str, text: str) -> None:
        await self._meta.put_setting(key, text)


@dataclass
class Node:
    store: SyncMetaStore
    meta: MetaStore
    iam: IamService
    buckets: BucketService
    bucket_state: BucketConfigService
    transfer: TransferService
    root: Caller

    def export(self, sections: tuple[str, ...] = SECTIONS, secrets: bool = False
               ) -> dict[str, Any]:
        return run(self.transfer.export(self.root, sections, include_secrets=secrets))

    def import_(self, document: Any, mode: str = "skip", **options: Any) -> dict[str, Any]:
        return run(self.transfer.import_document(self.root, document, mode=mode, **options))


def make_node(path: Path, name: str) -> Node:
    engine = create_db_engine("sqlite", str(path / f"{name}.db"), None, 2)
    store = SyncMetaStore(engine, clock=lambda: 1000.0)
    store.migrate()
    control = ControlRecord(str(path / name), fsync=False)
    control.prepare()
    ensure_root(store, control)
    ensure_builtin_grants(store, control)
    store.put_setting("node_id", f"node-{name}")
    meta = MetaStore(store, SyncDbPool())
    io = InlinePool()
    iam = IamService(meta, control, io, clock=lambda: 2000.0, on_change=lambda: None)
    buckets = BucketService(meta, control, io, region="us-east-1", clock=lambda: 3000.0)
    state = BucketConfigService(meta, control, io, clock=lambda: 3000.0)
    lifecycle = LifecycleService(meta, state, clock=lambda: 3000.0, day_seconds=86400.0,
                                 cache_ttl_seconds=60.0, cache_size=10)
    targets = ImportTargets(meta=meta, iam=iam, buckets=buckets,
                            bucket_state=BucketDocuments(state, lifecycle),
                            settings=Settings(meta))
    root_user = next(u for u in store.list_users() if u.is_root)
    root = Caller(Principal(root_user.user_id, root_user.username, True, "ROOTKEY"))
    return Node(store, meta, iam, buckets, state,
                TransferService(targets, clock=lambda: 4000.0, server_version="test"), root)


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    a, b = make_node(tmp_path, "a"), make_node(tmp_path, "b")
    yield a, b
    a.store.close()
    b.store.close()


def populate(node: Node) -> dict[str, Any]:
    iam = node.iam
    alice = run(iam.create_user(node.root, "alice", "Alice"))
    bob = run(iam.create_user(node.root, "bob", ""))
    team = run(iam.create_team(node.root, "devs", "developers"))
    grant = run(iam.create_grant(node.root, "read-all", "reads", DOC))
    run(iam.add_member(node.root, team.team_id, alice.user_id))
    run(iam.attach_team_grant(node.root, team.team_id, grant.grant_id))
    builtin = next(g for g in run(iam.list_grants()) if g.name == "S3ReadOnlyAccess")
    run(iam.attach_user_grant(node.root, bob.user_id, builtin.grant_id))
    run(iam.create_credential(node.root, alice.user_id,
                              NewCredential("laptop", "AKALICE001", "alice-secret-0001")))
    idle = run(iam.create_credential(node.root, bob.user_id,
                                     NewCredential("", "AKBOB00001", "bob-secret-00001")))
    run(iam.update_credential(node.root, idle.access_key_id, False, None))
    owner = Caller(Principal(alice.user_id, "alice", False, "AKALICE001"))
    run(node.buckets.create(owner, "photos", location=None, object_lock=False))
    run(node.buckets.create(node.root, "vault", location=None, object_lock=True))
    run(node.meta.put_bucket_config("photos", "tagging", '[["team", "devs"]]'))
    run(node.meta.put_bucket_config("photos", "lifecycle", LIFECYCLE))
    run(node.meta.put_bucket_config("photos", "encryption", ENCRYPTION))
    run(node.bucket_state.set_versioning(node.root, "photos", "Suspended"))
    node.store.put_setting("region", "eu-west-1")
    return {"alice": alice, "bob": bob, "team": team, "grant": grant}


def comparable(document: dict[str, Any]) -> dict[str, Any]:
    """An export without what may differ between nodes: timestamps and the root's id."""
    document = copy.deepcopy(document)
    document.pop("exported_at")
    root_ids = {u["user_id"] for u in document.get("users", []) if u["is_root"]}
    document["credentials"] = [c for c in document.get("credentials", [])
                               if c["username"] != "root"]  # every node has its own
    for section in ("users", "teams", "grants", "credentials", "buckets"):
        for entry in document.get(section, []):
            entry.pop("created_at", None)
            entry.pop("updated_at", None)
            for ref in [entry.get("owner"), *entry.get("members", [])]:
                if ref and ref.get("user_id") in root_ids:
                    ref["user_id"] = "<root>"
            if entry.get("user_id") in root_ids:
                entry["user_id"] = "<root>"
    return document


# -- export ------------------------------------------------------------------------------


def test_export_shape_masks_secrets_and_leaves_out_builtins_and_node_id(
        nodes: tuple[Node, Node]) -> None:
    a, _ = nodes
    made = populate(a)
    document = a.export()
    assert document["format"] == "objstore-export" and document["version"] == 1
    assert document["sections"] == list(SECTIONS) and document["secrets_included"] is False
    assert [g["name"] for g in document["grants"]] == ["read-all"]
    assert {c["secret_access_key"] for c in document["credentials"]} == {MASK}
    assert {c["username"] for c in document["credentials"]} == {"alice", "bob", "root"}
    assert document["settings"] == {"region": "eu-west-1"}
    alice = next(u for u in document["users"] if u["username"] == "alice")
    assert alice["user_id"] == made["alice"].user_id and alice["grants"] == []
    team = document["teams"][0]
    assert team["members"] == [{"user_id": made["alice"].user_id, "username": "alice"}]
    assert team["grants"] == [{"grant_id": made["grant"].grant_id, "name": "read-all"}]
    photos = next(b for b in document["buckets"] if b["name"] == "photos")
    assert photos["owner"] == {"user_id": made["alice"].user_id, "username": "alice"}
    assert photos["versioning"] == "Suspended" and photos["config"] == {
        "lifecycle": LIFECYCLE, "tagging": '[["team", "devs"]]', "encryption": ENCRYPTION}
    vault = next(b for b in document["buckets"] if b["name"] == "vault")
    assert vault["object_lock"] is True and vault["versioning"] == "Enabled"


def test_secrets_only_when_asked_and_sections_filter(nodes: tuple[Node, Node]) -> None:
    a, _ = nodes
    populate(a)
    document = a.export(("users", "credentials"), secrets=True)
    assert set(document) >= {"users", "credentials"} and "grants" not in document
    secrets = {c["access_key_id"]: c["secret_access_key"] for c in document["credentials"]}
    assert secrets["AKALICE001"] == "alice-secret-0001"


def test_parse_sections() -> None:
    assert parse_sections(None) == SECTIONS
    assert parse_sections("grants, users") == ("users", "grants")
    with pytest.raises(AdminError):
        parse_sections("users,secrets")


# -- round trip ----------------------------------------------------------------------------


def test_round_trip_into_a_fresh_node_preserves_everything(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    made = populate(a)
    exported = a.export(secrets=True)
    report = b.import_(exported)
    assert report["errors"] == []
    assert sorted(report["created"]["users"]) == ["alice", "bob"]
    assert report["skipped"]["users"] == ["root"] and report["skipped"]["settings"] == []
    again = b.export(secrets=True)
    assert comparable(again) == comparable(exported)
    # ids are preserved, and the imported credential authenticates with its secret
    assert b.store.get_user(made["alice"].user_id) is not None
    credential = b.store.get_credential("AKALICE001")
    assert credential is not None and credential.secret_access_key == "alice-secret-0001"
    assert b.store.get_credential("AKBOB00001").active is False  # type: ignore[union-attr]
    assert b.store.get_setting("node_id") == "node-b"


def test_a_second_import_skips_everything(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    populate(a)
    exported = a.export(secrets=True)
    b.import_(exported)
    report = b.import_(exported, "overwrite")
    assert report["errors"] == []
    assert all(items == [] for items in report["created"].values())
    assert all(items == [] for items in report["updated"].values())


def test_masked_secrets_create_nothing(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    populate(a)
    report = b.import_(a.export())
    assert report["created"]["credentials"] == []
    assert {e["item"] for e in report["errors"]} == {"AKALICE001", "AKBOB00001"}
    assert all("masked" in e["message"] for e in report["errors"])
    assert b.store.get_credential("AKALICE001") is None


def test_masked_secret_of_an_existing_credential_is_fine(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    populate(a)
    b.import_(a.export(secrets=True))
    report = b.import_(a.export(), "overwrite")
    assert report["errors"] == [] and len(report["skipped"]["credentials"]) == 3


# -- modes -----------------------------------------------------------------------------------


def test_dry_run_reports_and_changes_nothing(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    populate(a)
    before = b.export(secrets=True)
    report = b.import_(a.export(secrets=True), "dry_run")
    assert report["dry_run"] is True and report["errors"] == []
    assert sorted(report["created"]["users"]) == ["alice", "bob"]
    assert report["created"]["teams"] == ["devs"]
    assert sorted(report["created"]["buckets"]) == ["photos", "vault"]
    assert report["created"]["settings"] == ["region"]
    assert comparable(b.export(secrets=True)) == comparable(before)


def test_skip_leaves_existing_entities_and_overwrite_replaces_them(
        nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    made = populate(a)
    document = a.export(secrets=True)
    b.import_(document)
    alice_id, team_id = made["alice"].user_id, made["team"].team_id
    run(b.iam.update_user(b.root, alice_id, None, "changed on b"))
    run(b.iam.remove_member(b.root, team_id, alice_id))
    run(b.iam.add_member(b.root, team_id, made["bob"].user_id))
    run(b.meta.put_bucket_config("photos", "lifecycle", "{}"))

    skipped = b.import_(document)
    assert "alice" in skipped["skipped"]["users"] and skipped["updated"]["users"] == []
    assert b.store.get_user(alice_id).description == "changed on b"  # type: ignore[union-attr]

    preview = b.import_(document, "skip", dry_run=True)
    assert preview["updated"]["users"] == [] and preview["dry_run"] is True
    overwritten = b.import_(document, "overwrite")
    assert overwritten["updated"]["users"] == ["alice"]
    assert overwritten["updated"]["teams"] == ["devs"]
    assert overwritten["updated"]["buckets"] == ["photos"]
    assert comparable(b.export(secrets=True)) == comparable(document)


def test_root_is_never_imported_nor_overwritten(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    populate(a)
    document = a.export(secrets=True)
    for user in document["users"]:
        if user["is_root"]:
            user["description"] = "hijacked"
    root_key = next(c for c in document["credentials"] if c["username"] == "root")
    root_key["access_key_id"], root_key["secret_access_key"] = "AKNEWROOT1", "new-root-secret"
    report = b.import_(document, "overwrite")
    assert "root" in report["skipped"]["users"] and "AKNEWROOT1" in report["skipped"][
        "credentials"]
    assert b.store.get_credential("AKNEWROOT1") is None
    assert all(u.description != "hijacked" for u in b.store.list_users())


def test_a_name_taken_by_another_id_matches_by_name(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    made = populate(a)
    local = run(b.iam.create_user(b.root, "alice", "local alice"))
    report = b.import_(a.export(secrets=True), "overwrite")
    assert report["errors"] == [] and report["updated"]["users"] == ["alice"]
    assert b.store.get_user(made["alice"].user_id) is None
    members = b.store.list_team_members(made["team"].team_id) or []
    assert [m.user_id for m in members] == [local.user_id]  # references follow the match
    assert b.store.get_credential("AKALICE001").user_id == local.user_id  # type: ignore[union-attr]


def test_an_id_and_a_name_of_two_entities_is_an_error(nodes: tuple[Node, Node]) -> None:
    _, b = nodes
    one = run(b.iam.create_user(b.root, "one", ""))
    run(b.iam.create_user(b.root, "two", ""))
    document = {"users": [{"user_id": one.user_id, "username": "two"}]}
    report = b.import_(document, "overwrite")
    assert report["errors"][0]["item"] == "two" and "different" in report["errors"][0]["message"]


def test_unknown_references_are_errors_but_the_entity_is_created(
        nodes: tuple[Node, Node]) -> None:
    _, b = nodes
    document = {"teams": [{"name": "ops", "members": [{"username": "ghost"}],
                           "grants": ["S3FullAccess"]}]}
    report = b.import_(document)
    assert report["created"]["teams"] == ["ops"]
    assert len(report["errors"]) == 1 and "ghost" in report["errors"][0]["message"]
    team = next(t for t in b.store.list_team_summaries() if t.team.name == "ops")
    assert [g.name for g in b.store.list_team_grants(team.team.team_id) or []] == [
        "S3FullAccess"]


def test_bad_entries_are_errors_and_the_rest_goes_on(nodes: tuple[Node, Node]) -> None:
    _, b = nodes
    document = {
        "grants": [{"name": "bad", "document": {"Version": "1999"}},
                   {"name": "good", "document": DOC}],
        "users": ["not an object", {"username": "", "user_id": "x"},
                  {"username": "ok", "user_id": "not-a-uuid"}],
        "buckets": [{"name": "Bad_Name"}, {"name": "fine", "versioning": "Sometimes"}],
        "settings": {"region": "UPPER", "node_id": "stolen", "unknown": "x"},
    }
    report = b.import_(document)
    assert report["created"]["grants"] == ["good"]
    assert report["skipped"]["settings"] == ["node_id"]
    assert len(report["errors"]) == 8
    assert b.store.get_setting("node_id") == "node-b"


def test_bucket_rules_hold_on_overwrite(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    populate(a)
    document = a.export(secrets=True)
    b.import_(document)
    document["buckets"] = [dict(bucket, object_lock=not bucket["object_lock"])
                           for bucket in document["buckets"]]
    report = b.import_(document, "overwrite")
    assert {e["item"] for e in report["errors"]} == {"photos", "vault"}


def test_invalid_documents_and_modes_are_400(nodes: tuple[Node, Node]) -> None:
    _, b = nodes
    for document, mode in (([], "skip"), ({"format": "other"}, "skip"), ({"version": 99}, "skip"),
                           ({"users": {}}, "skip"), ({"settings": []}, "skip"), ({}, "merge")):
        with pytest.raises(AdminError) as caught:
            b.import_(document, mode)
        assert caught.value.status == 400


def test_import_of_only_some_sections(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    populate(a)
    report = b.import_(a.export(secrets=True), sections=("grants",))
    assert set(report["created"]) == {"grants"} and report["created"]["grants"] == ["read-all"]
    assert b.store.get_user_by_name("alice") is None
    assert str(uuid.UUID(b.store.list_grants()[0].grant_id))


def test_list_settings_on_every_backend(meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.put_setting("b", "2")
    meta_store.put_setting("a", "1")
    meta_store.put_setting("a", "one")
    meta_store.delete_setting("b")
    assert meta_store.list_settings() == {"a": "one"}


def test_lifecycle_documents_are_checked_even_in_a_dry_run(nodes: tuple[Node, Node]) -> None:
    _, b = nodes
    broken = {"buckets": [{"name": "logs", "config": {"lifecycle": '{"rules": []}'}},
                          {"name": "junk", "config": {"lifecycle": "not json"}}]}
    for mode in ("dry_run", "skip"):
        report = b.import_(broken, mode)
        assert [e["item"] for e in report["errors"]] == ["logs", "junk"]
        assert report["created"]["buckets"] == []
    assert b.store.get_bucket("logs") is None


def test_encryption_documents_are_checked_even_in_a_dry_run(nodes: tuple[Node, Node]) -> None:
    _, b = nodes
    dsse = '{"algorithm": "aws:kms:dsse"}'
    broken = {"buckets": [{"name": "kms", "config": {"encryption": dsse}},
                          {"name": "junk", "config": {"encryption": "not json"}}]}
    for mode in ("dry_run", "skip"):
        report = b.import_(broken, mode)
        assert [e["item"] for e in report["errors"]] == ["kms", "junk"]
        assert report["created"]["buckets"] == []
    assert b.store.get_bucket("kms") is None


def fenced_administrator(node: Node) -> Caller:
    """A non-root caller with AdministratorAccess and a Deny of s3:DeleteBucket, beside
    carol (S3FullAccess, one credential), whom it therefore does not cover."""
    iam = node.iam
    builtin = {g.name: g.grant_id for g in run(iam.list_grants())}
    exporter = run(iam.create_user(node.root, "exporter", ""))
    run(iam.attach_user_grant(node.root, exporter.user_id, builtin["AdministratorAccess"]))
    fence = run(iam.create_grant(node.root, "fence", "", {"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Action": ["s3:DeleteBucket"], "Resource": ["*"]}]}))
    run(iam.attach_user_grant(node.root, exporter.user_id, fence.grant_id))
    carol = run(iam.create_user(node.root, "carol", ""))
    run(iam.attach_user_grant(node.root, carol.user_id, builtin["S3FullAccess"]))
    run(iam.create_credential(node.root, carol.user_id,
                              NewCredential("", "AKCAROL001", "carol-secret-0001")))
    return Caller(Principal(exporter.user_id, "exporter", False, "AKEXPORTER"))


def test_a_non_root_export_shows_only_the_secrets_of_users_it_covers(
    nodes: tuple[Node, Node]
) -> None:
    a, _ = nodes
    populate(a)
    caller = fenced_administrator(a)
    document = run(a.transfer.export(caller, ("credentials",), include_secrets=True))
    secrets = {c["username"]: c["secret_access_key"] for c in document["credentials"]}
    assert secrets["alice"] == "alice-secret-0001"  # reads only: within the caller
    assert secrets["bob"] == "bob-secret-00001"
    assert secrets["carol"] == MASK  # may delete buckets, which the caller may not
    assert secrets["root"] == MASK
    everything = a.export(("credentials",), secrets=True)  # root sees every secret
    assert MASK not in {c["secret_access_key"] for c in everything["credentials"]}


def test_a_non_root_import_changes_only_what_the_caller_covers(
    nodes: tuple[Node, Node]
) -> None:
    a, _ = nodes
    populate(a)
    caller = fenced_administrator(a)
    document = a.export(("credentials",), secrets=True)
    carol = next(c for c in document["credentials"] if c["username"] == "carol")
    alice = next(c for c in document["credentials"] if c["username"] == "alice")
    document["credentials"] = [
        {**carol, "access_key_id": "AKCAROL002", "secret_access_key": "carol-secret-0002"},
        {**alice, "access_key_id": "AKALICE002", "secret_access_key": "alice-secret-0002"}]
    report = run(a.transfer.import_document(caller, document, mode="skip",
                                            sections=("credentials",)))
    assert [e["item"] for e in report["errors"]] == ["AKCAROL002"]
    assert report["created"] == {"credentials": ["AKALICE002"]}
    assert a.store.get_credential("AKCAROL002") is None
