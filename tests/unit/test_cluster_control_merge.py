"""The control-plane merge rules (convergence/control_merge.py), pure: last-writer-wins per
entity with tombstones, tombstones adopted first, children of dead parents skipped, a
missing family is no information, node-local settings never travel, unique names; and the
merged state does not depend on the order snapshots are merged in (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from objstore.convergence.control_merge import (
    BUCKET,
    BUCKET_CONFIG,
    CREDENTIAL,
    PART,
    SETTING,
    TEAM,
    TEAM_MEMBER,
    UPLOAD,
    USER,
    FamilyState,
    merged,
    plan,
)


def bucket(name: str, at: float, versioning: str = "Disabled") -> dict[str, Any]:
    return {"name": name, "owner_id": "u", "region": "r", "created_at": 1.0,
            "versioning": versioning, "object_lock": False, "updated_at": at}


def user(user_id: str, at: float, name: str | None = None) -> dict[str, Any]:
    return {"user_id": user_id, "username": name or f"name-{user_id}", "description": "",
            "is_root": False, "created_at": 1.0, "updated_at": at}


def credential(key: str, user_id: str, at: float, active: bool = True) -> dict[str, Any]:
    return {"access_key_id": key, "secret_access_key": "s", "user_id": user_id,
            "description": "", "active": active, "created_at": 1.0, "updated_at": at}


def config(bucket_name: str, key: str, at: float, value: str = "v") -> dict[str, Any]:
    return {"bucket": bucket_name, "key": key, "value": value, "updated_at": at}


def setting(key: str, value: str, at: float) -> dict[str, Any]:
    return {"key": key, "value": value, "updated_at": at}


def fam(rows: dict[str, dict[str, Any]] | None = None,
        tombstones: dict[str, float] | None = None) -> FamilyState:
    return FamilyState(rows or {}, tombstones or {})


def test_the_strictly_newer_row_wins_either_way() -> None:
    old, new = bucket("b", 5.0), bucket("b", 6.0, "Enabled")
    assert plan({BUCKET: fam({"b": old})}, {BUCKET: fam({"b": new})})[BUCKET].upserts == \
        {"b": new}
    assert not plan({BUCKET: fam({"b": new})}, {BUCKET: fam({"b": old})})[BUCKET].changed


def test_equal_stamps_are_broken_by_content_the_same_way_on_every_node() -> None:
    first, second = bucket("b", 5.0, "Enabled"), bucket("b", 5.0, "Suspended")
    one = merged({BUCKET: fam({"b": first})}, {BUCKET: fam({"b": second})})
    other = merged({BUCKET: fam({"b": second})}, {BUCKET: fam({"b": first})})
    assert one == other


def test_a_tombstone_beats_a_row_unless_the_row_is_strictly_newer() -> None:
    local = {BUCKET: fam({"b": bucket("b", 5.0)})}
    tie = plan(local, {BUCKET: fam(tombstones={"b": 5.0})})[BUCKET]
    assert tie.tombstones == {"b": 5.0} and tie.deletes == ["b"]
    newer_row = plan({BUCKET: fam({"b": bucket("b", 6.0)})},
                     {BUCKET: fam(tombstones={"b": 5.0})})[BUCKET]
    assert newer_row.tombstones == {"b": 5.0} and newer_row.deletes == []
    # and an incoming row beaten by a local tombstone is not applied
    beaten = plan({BUCKET: fam(tombstones={"b": 7.0})}, {BUCKET: fam({"b": bucket("b", 6.0)})})
    assert not beaten[BUCKET].changed


def test_an_older_tombstone_is_not_adopted() -> None:
    result = plan({BUCKET: fam(tombstones={"b": 9.0})}, {BUCKET: fam(tombstones={"b": 3.0})})
    assert result[BUCKET].tombstones == {}


def test_a_deleted_credential_is_not_resurrected_by_an_older_copy() -> None:
    local = {USER: fam({"u1": user("u1", 1.0)}), CREDENTIAL: fam(tombstones={"AK": 10.0})}
    incoming = {USER: fam({"u1": user("u1", 1.0)}),
                CREDENTIAL: fam({"AK": credential("AK", "u1", 5.0)})}
    assert not plan(local, incoming)[CREDENTIAL].changed


def test_credentials_of_a_dead_user_are_skipped_and_removed() -> None:
    local = {USER: fam({"u1": user("u1", 1.0)}),
             CREDENTIAL: fam({"AK": credential("AK", "u1", 2.0)})}
    incoming = {USER: fam(tombstones={"u1": 3.0}),
                CREDENTIAL: fam({"AK2": credential("AK2", "u1", 2.5)})}
    result = plan(local, incoming)
    assert result[USER].deletes == ["u1"]
    assert result[CREDENTIAL].deletes == ["AK"]
    assert result[CREDENTIAL].upserts == {} and result[CREDENTIAL].skipped == 1


def test_an_incoming_child_of_an_unknown_parent_keeps_the_local_row() -> None:
    """Each node's own root user: a peer's newer root credential names a user this node
    does not hold (its name is taken here): the local credential stays."""
    local = {USER: fam({"root-b": user("root-b", 1.0, "root")}),
             CREDENTIAL: fam({"ROOT": credential("ROOT", "root-b", 1.0)})}
    incoming = {USER: fam({"root-a": user("root-a", 2.0, "root")}),
                CREDENTIAL: fam({"ROOT": credential("ROOT", "root-a", 2.0)})}
    result = plan(local, incoming)
    assert result[USER].conflicts == 1 and not result[USER].changed
    assert result[CREDENTIAL].skipped == 1 and not result[CREDENTIAL].changed


def test_children_of_a_previous_incarnation_of_the_parent_are_dead() -> None:
    """A bucket deleted (config removed with it, no tombstone of their own) and created
    again: an old config row of the first bucket does not come back."""
    local = {BUCKET: fam({"b": bucket("b", 10.0)}, {"b": 5.0})}
    incoming = {BUCKET: fam({"b": bucket("b", 1.0)}),
                BUCKET_CONFIG: fam({"b:tagging": config("b", "tagging", 2.0)})}
    result = plan(local, incoming)
    assert result[BUCKET_CONFIG].upserts == {}
    newer = plan(local, {BUCKET_CONFIG: fam({"b:tagging": config("b", "tagging", 11.0)})})
    assert list(newer[BUCKET_CONFIG].upserts) == ["b:tagging"]


def test_memberships_of_a_dead_team_and_parts_of_a_dead_upload_go() -> None:
    local = {
        USER: fam({"u1": user("u1", 1.0)}),
        TEAM: fam({"t1": {"team_id": "t1", "name": "t", "description": "",
                          "created_at": 1.0, "updated_at": 1.0}}),
        TEAM_MEMBER: fam({"t1:u1": {"team_id": "t1", "user_id": "u1", "updated_at": 1.0}}),
        BUCKET: fam({"b": bucket("b", 1.0)}),
        UPLOAD: fam({"up": {"upload_id": "up", "bucket": "b", "updated_at": 1.0}}),
        PART: fam({"up:1": {"upload_id": "up", "part_number": 1, "last_modified": 1.0}}),
    }
    incoming = {TEAM: fam(tombstones={"t1": 2.0}), UPLOAD: fam(tombstones={"up": 2.0})}
    result = plan(local, incoming)
    assert result[TEAM_MEMBER].deletes == ["t1:u1"]
    assert result[PART].deletes == ["up:1"]
    assert result[UPLOAD].deletes == ["up"]


def test_a_family_missing_from_the_snapshot_is_no_information() -> None:
    local = {BUCKET: fam({"b": bucket("b", 1.0)}), USER: fam({"u1": user("u1", 1.0)}),
             CREDENTIAL: fam({"AK": credential("AK", "u1", 1.0)})}
    result = plan(local, {BUCKET: fam()})
    assert not any(p.changed for p in result.values())
    assert merged(local, {}) == merged(local, {BUCKET: fam()})


def test_node_local_settings_never_travel() -> None:
    def travels(key: str) -> bool:
        return key != "node_id"

    local = {SETTING: fam({"node_id": setting("node_id", "node-b", 1.0)})}
    incoming = {SETTING: fam({"node_id": setting("node_id", "node-a", 9.0),
                              "region": setting("region", "eu", 2.0)},
                             {"node_id": 10.0})}
    result = plan(local, incoming, travels)[SETTING]
    assert result.upserts == {"region": setting("region", "eu", 2.0)}
    assert result.tombstones == {} and result.deletes == []


def test_a_bucket_that_still_holds_objects_is_pinned() -> None:
    local = {BUCKET: fam({"b": bucket("b", 1.0)}),
             BUCKET_CONFIG: fam({"b:tagging": config("b", "tagging", 2.0)})}
    incoming = {BUCKET: fam(tombstones={"b": 5.0})}
    result = plan(local, incoming, pinned={BUCKET: {"b"}})
    assert result[BUCKET].tombstones == {"b": 5.0} and result[BUCKET].deletes == []
    assert result[BUCKET_CONFIG].deletes == ["b:tagging"]  # older than the tombstone


def test_a_unique_name_held_by_another_entity_is_a_conflict() -> None:
    local = {USER: fam({"u1": user("u1", 1.0, "alice")})}
    incoming = {USER: fam({"u2": user("u2", 2.0, "alice"), "u3": user("u3", 2.0, "bob")})}
    result = plan(local, incoming)[USER]
    assert result.conflicts == 1 and list(result.upserts) == ["u3"]


# -- order independence (hypothesis) ------------------------------------------------------

_KEYS = st.sampled_from(["k1", "k2", "k3"])
_STAMPS = st.sampled_from([1.0, 2.0, 3.0])


@st.composite
def states(draw: st.DrawFn) -> dict[str, FamilyState]:
    """Buckets, their config keys and settings, with tombstones; a config row's bucket is
    one of the generated keys (so parents may be alive, dead or unknown)."""
    buckets = {k: bucket(k, draw(_STAMPS), draw(st.sampled_from(["Enabled", "Disabled"])))
               for k in draw(st.sets(_KEYS))}
    configs = {}
    for parent, name in draw(st.sets(st.tuples(_KEYS, st.sampled_from(["tagging", "quota"])))):
        configs[f"{parent}:{name}"] = config(parent, name, draw(_STAMPS),
                                             draw(st.sampled_from(["x", "y"])))
    settings_rows = {k: setting(k, draw(st.sampled_from(["x", "y"])), draw(_STAMPS))
                     for k in draw(st.sets(_KEYS))}

    def tombstones(keys: Any) -> dict[str, float]:
        return {k: draw(_STAMPS) for k in draw(st.sets(keys))}

    users = {k: user(k, draw(_STAMPS)) for k in draw(st.sets(_KEYS))}
    credentials = {}
    for access_key in draw(st.sets(st.sampled_from(["AK1", "AK2"]))):
        credentials[access_key] = credential(access_key, draw(_KEYS), draw(_STAMPS),
                                             draw(st.booleans()))
    return {
        BUCKET: fam(buckets, tombstones(_KEYS)),
        BUCKET_CONFIG: fam(configs, tombstones(st.sampled_from(list(configs) or ["k1:q"]))),
        SETTING: fam(settings_rows, tombstones(_KEYS)),
        USER: fam(users, tombstones(_KEYS)),
        CREDENTIAL: fam(credentials, tombstones(st.sampled_from(["AK1", "AK2"]))),
    }


@settings(max_examples=300, deadline=None)
@given(states(), states())
def test_merging_is_commutative_for_parentless_families(a: dict[str, FamilyState],
                                                        b: dict[str, FamilyState]) -> None:
    only = {BUCKET, SETTING}
    a = {k: v for k, v in a.items() if k in only}
    b = {k: v for k, v in b.items() if k in only}
    assert merged(a, b) == merged(b, a)


@settings(max_examples=300, deadline=None)
@given(states(), states(), states())
def test_three_nodes_converge_whatever_the_order(a: dict[str, FamilyState],
                                                 b: dict[str, FamilyState],
                                                 c: dict[str, FamilyState]) -> None:
    """Every node merges every other's state, in any order, twice round (what the
    reconcile passes do): all end equal, and a further merge changes nothing."""
    nodes = [a, b, c]
    for _ in range(2):
        for i in range(3):
            for j in (1, 2):
                nodes[i] = merged(nodes[i], nodes[(i + j) % 3])
    assert nodes[0] == nodes[1] == nodes[2]
    assert not any(p.changed for p in plan(nodes[0], nodes[1]).values())


@settings(max_examples=200, deadline=None)
@given(states(), states())
def test_merging_twice_changes_nothing_more(a: dict[str, FamilyState],
                                            b: dict[str, FamilyState]) -> None:
    once = merged(a, b)
    assert not any(p.changed for p in plan(once, b).values())
