"""The control-plane snapshot on the database (meta/control_snapshot_queries.py), on
SQLite and PostgreSQL: one node's snapshot merged into another gives it the same control
plane; deletions travel as tombstones (bucket, credential, team with its memberships,
upload completed or aborted, setting); node-local settings never travel; a bucket that
still holds objects here is not deleted; a row from a peer with a wrong type is left out;
built-in grants seeded again on a rebuilt node lose to the peers' copies."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from objstore.blobs.control import ControlRecord
from objstore.cluster.control_wire import decode_snapshot, encode_snapshot
from objstore.convergence.control_merge import GRANT, FamilyPlan, plan
from objstore.iam.bootstrap import BUILTIN_STAMP, builtin_grant, ensure_builtin_grants
from objstore.iam.policy import BUILTIN_GRANTS
from objstore.meta.iam_records import GrantRecord, TeamRecord
from objstore.meta.records import (
    BucketRecord,
    CredentialRecord,
    ObjectRecord,
    PartRecord,
    PartRef,
    UploadRecord,
    UserRecord,
)
from objstore.meta.store import SyncMetaStore
from objstore.meta.tombstones import TOMBSTONE_UPLOAD
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    meta_store,
    postgres_database,
)

BLOB = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
PART_BLOB = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"


def travels(key: str) -> bool:
    return key != "node_id"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def snapshot_of(store: SyncMetaStore) -> bytes:
    return encode_snapshot("node-x", store.control_state(travels))


def merge(store: SyncMetaStore, body: bytes) -> object:
    return store.merge_control_snapshot(decode_snapshot(body).families, travels)


def wipe(store: SyncMetaStore) -> None:
    """This store becomes a blank node (the tables emptied)."""
    from objstore.meta import schema

    with store.engine.begin() as conn:
        for table in reversed(schema.metadata.sorted_tables):
            if table.name not in ("schema_version", "seq_counter"):
                conn.execute(table.delete())


def populate(store: SyncMetaStore, clock: Callable[[], float]) -> None:
    store.create_bucket(BucketRecord("b1", "u1", "us-east-1", clock(), versioning="Enabled"))
    store.put_bucket_config("b1", "tagging", '{"env":"prod"}')
    store.create_user(UserRecord("u1", "alice", clock()))
    store.create_credential(CredentialRecord("AK1", "secret-1", "u1", clock()))
    store.create_team(TeamRecord("t1", "team", clock()))
    store.add_team_member("t1", "u1", clock())
    store.create_grant(GrantRecord("g1", "grant", {"Version": "2012-10-17",
                                                   "Statement": []}, clock()))
    store.attach_user_grant("u1", "g1", clock())
    store.attach_team_grant("t1", "g1", clock())
    store.put_setting("region", "eu-west-3")
    store.put_setting("node_id", "node-x")
    store.create_upload(UploadRecord("up1", "b1", "key", clock()))
    store.put_part(PartRecord("up1", 1, PART_BLOB, 5, "e", clock()))


def families_without_stamps(store: SyncMetaStore) -> dict[str, object]:
    state = store.control_state(travels)
    return {name: sorted(family.rows) for name, family in state.items()}


def test_a_snapshot_gives_a_blank_node_the_same_control_plane(meta_store: SyncMetaStore  # noqa: F811
                                                              ) -> None:
    store = meta_store
    populate(store, Clock(100.0))
    before = families_without_stamps(store)
    body = snapshot_of(store)
    assert b"node-x\"" in body and b"\"node_id\"" in body  # the snapshot's own node id
    assert "node_id" not in store.control_state(travels)["setting"].rows
    wipe(store)
    store.put_setting("node_id", "node-y")
    outcome = merge(store, body)
    assert families_without_stamps(store) == before
    assert store.get_setting("node_id") == "node-y"  # node-local: never applied
    assert store.get_bucket("b1").versioning == "Enabled"  # type: ignore[union-attr]
    assert store.get_bucket_config("b1", "tagging") == '{"env":"prod"}'
    assert store.lookup_identity("AK1") is not None
    assert outcome.iam_changed and outcome.buckets == {"b1"}  # type: ignore[attr-defined]
    assert outcome.settings == {"region"}  # type: ignore[attr-defined]
    again = merge(store, body)
    assert not again.changed  # type: ignore[attr-defined]


def test_deletions_travel_as_tombstones(meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    populate(store, Clock(100.0))
    held = snapshot_of(store)  # what the other node holds: everything alive
    assert store.delete_credential("AK1")
    assert store.delete_team("t1").status == "deleted"  # type: ignore[attr-defined]
    assert store.delete_setting("region")
    store.delete_upload("up1")
    assert store.get_tombstone(TOMBSTONE_UPLOAD, "up1") is not None
    deleted = snapshot_of(store)
    # the other node: everything alive, then our deletions arrive
    wipe(store)
    merge(store, held)
    assert store.lookup_identity("AK1") is not None
    merge(store, deleted)
    assert store.lookup_identity("AK1") is None
    assert store.get_team("t1") is None
    assert store.list_team_grants("t1") is None
    assert store.get_setting("region") is None
    assert store.get_upload("up1") is None
    assert store.list_parts("up1") == []
    # and the old snapshot does not bring them back
    merge(store, held)
    assert store.lookup_identity("AK1") is None and store.get_team("t1") is None
    assert store.get_upload("up1") is None and store.get_setting("region") is None


def test_a_completed_upload_leaves_a_tombstone(meta_store: SyncMetaStore  # noqa: F811
                                               ) -> None:
    store = meta_store
    populate(store, Clock(100.0))
    record = ObjectRecord("b1", "key", "v1", None, 5, "e-1", 500.0,
                          parts=(PartRef(1, PART_BLOB, 5, "e"),))
    store.complete_upload("up1", record)
    assert store.get_tombstone(TOMBSTONE_UPLOAD, "up1") is not None
    assert "up1" in store.control_state(travels)["upload"].tombstones


def test_a_bucket_deleted_elsewhere_stays_while_it_holds_objects(
        meta_store: SyncMetaStore) -> None:  # noqa: F811
    store = meta_store
    store.create_bucket(BucketRecord("full", "u1", "us-east-1", 10.0))
    store.create_bucket(BucketRecord("empty", "u1", "us-east-1", 10.0))
    store.put_object(ObjectRecord("full", "k", "null", BLOB, 1, "e", 11.0))
    peer = {"bucket": {"rows": [], "tombstones": {"full": 20.0, "empty": 20.0}}}
    import json

    body = json.dumps({"protocol": 1, "node_id": "node-p", "families": peer}).encode()
    merge(store, body)
    assert store.get_bucket("full") is not None
    assert store.get_bucket("empty") is None
    # The kept bucket is re-stamped newer than the tombstone, so the peer that deleted it
    # adopts it back at its next pull (and then takes its objects) instead of diverging.
    kept = store.control_state(travels)["bucket"].rows["full"]
    assert kept["updated_at"] > 20.0
    again = store.control_state(travels)["bucket"]
    merge(store, body)  # the same snapshot once more: nothing changes, no new stamp
    assert store.control_state(travels)["bucket"].rows["full"] == again.rows["full"]


def test_a_row_of_the_wrong_shape_is_left_out() -> None:
    import json

    body = json.dumps({"protocol": 1, "node_id": "p", "future": 1, "families": {
        "bucket": {"rows": [
            {"name": "ok", "owner_id": "u", "region": "r", "created_at": 1.0,
             "versioning": "Disabled", "object_lock": False, "updated_at": 2.0, "new": 1},
            {"name": "bad", "owner_id": "u", "region": "r", "created_at": "yesterday",
             "versioning": "Disabled", "object_lock": False},
            {"name": "missing"},
        ], "tombstones": {"gone": 3.0, "odd": "x"}},
        "a-family-of-tomorrow": {"rows": [{"x": 1}]},
    }}).encode()
    decoded = decode_snapshot(body)
    assert list(decoded.families) == ["bucket"]
    assert list(decoded.families["bucket"].rows) == ["ok"]
    assert "new" not in decoded.families["bucket"].rows["ok"]
    assert decoded.families["bucket"].tombstones == {"gone": 3.0}
    assert decoded.ignored == 3


def test_the_control_record_follows_a_merge_and_recover_rebuilds_from_it(
        meta_store: SyncMetaStore, tmp_path: object) -> None:  # noqa: F811
    from pathlib import Path

    from objstore.blobs.control import ControlRecord
    from objstore.cli.recover import restore_control_plane
    from objstore.cluster.control_mirror import mirror

    store = meta_store
    populate(store, Clock(100.0))
    full = snapshot_of(store)
    control = ControlRecord(str(Path(str(tmp_path)) / "data"), fsync=False)
    control.prepare()
    wipe(store)
    mirror(control, merge(store, full))  # type: ignore[arg-type]
    expected = families_without_stamps(store)
    wipe(store)
    restore_control_plane(store, control)
    rebuilt = families_without_stamps(store)
    for family in ("bucket", "bucket_config", "setting", "user", "credential", "team",
                   "grant", "team_member", "user_grant", "team_grant"):
        assert rebuilt[family] == expected[family], family
    # a deletion merged later leaves the control record too
    store.delete_credential("AK1")
    gone = snapshot_of(store)
    wipe(store)
    merge(store, full)
    mirror(control, merge(store, gone))  # type: ignore[arg-type]
    assert all(key != "AK1" for key, _ in control.items("credentials"))


def test_a_rebuilt_nodes_seeded_builtin_grants_lose_to_the_peers_copies(
        meta_store: SyncMetaStore, tmp_path: Path) -> None:  # noqa: F811
    """A node whose database was lost seeds the built-in grants again (BUILTIN_STAMP, the
    epoch): merging a peer's snapshot gives it the peer's rows (stamped when the peer
    seeded them), and the peer, merging the rebuilt node's, keeps its own."""
    seeded_long_ago = 1_600_000_000.0
    for name in BUILTIN_GRANTS:  # as a node seeded them before (stamped at its start)
        meta_store.create_grant(replace(builtin_grant(name), created_at=seeded_long_ago,
                                        updated_at=seeded_long_ago))
    peer = decode_snapshot(snapshot_of(meta_store)).families
    wipe(meta_store)
    control = ControlRecord(str(tmp_path / "data"), fsync=False)
    control.prepare()
    assert sorted(ensure_builtin_grants(meta_store, control)) == sorted(BUILTIN_GRANTS)
    assert {(g.created_at, g.updated_at) for g in meta_store.list_grants()} == {
        (BUILTIN_STAMP, BUILTIN_STAMP)}
    rebuilt = decode_snapshot(snapshot_of(meta_store)).families
    # The peer keeps its rows: nothing of the rebuilt node's seeding wins there.
    assert not plan(peer, rebuilt, travels).get(GRANT, FamilyPlan()).upserts
    merge(meta_store, encode_snapshot("node-peer", dict(peer)))
    assert {(g.created_at, g.updated_at) for g in meta_store.list_grants()} == {
        (seeded_long_ago, seeded_long_ago)}
    # Two nodes that both seeded now hold identical rows: the merge has nothing to do.
    assert not plan(rebuilt, rebuilt, travels).get(GRANT, FamilyPlan()).changed
