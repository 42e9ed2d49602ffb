"""The replication configuration's XML, validation, stored form and matching, and the
replication credentials setting: pure, no reactor (Hypothesis: any body is a 4xx or a
configuration, never another exception)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from objstore.crypto.master_key import Keyring, LocalMasterKey
from objstore.errors import S3Error
from objstore.replication import credentials
from objstore.replication.rules import from_json, match, parse_stored, to_json, validate
from objstore.replication.worker import Backoff
from objstore.s3.replication_xml import parse_replication, replication_document

DEST = ("<Destination><Bucket>arn:aws:s3:::backup</Bucket>"
        "<Endpoint>http://127.0.0.1:9000</Endpoint><CredentialRef>b</CredentialRef>"
        "<Region>eu-west-1</Region><StorageClass>STANDARD_IA</StorageClass></Destination>")


def doc(*rules: str, role: str = "<Role>arn:aws:iam::1:role/r</Role>") -> bytes:
    return (f'<ReplicationConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f'{role}{"".join(rules)}</ReplicationConfiguration>').encode()


def rule(rule_id: str = "r1", priority: int = 1, filter_xml: str = "<Filter><Prefix>logs/"
         "</Prefix></Filter>", markers: str = "Enabled", dest: str = DEST) -> str:
    return (f"<Rule><ID>{rule_id}</ID><Priority>{priority}</Priority><Status>Enabled</Status>"
            f"{filter_xml}<DeleteMarkerReplication><Status>{markers}</Status>"
            f"</DeleteMarkerReplication>{dest}</Rule>")


def code_of(body: bytes, known: tuple[str, ...] = ("b",)) -> str:
    with pytest.raises(S3Error) as raised:
        validate(parse_replication(body), lambda name: name in known)
    return raised.value.code


def test_a_full_rule_parses_and_renders_back() -> None:
    config = parse_replication(doc(rule(filter_xml="<Filter><And><Prefix>a/</Prefix><Tag>"
                                        "<Key>k</Key><Value>v</Value></Tag></And></Filter>")))
    validate(config, lambda name: name == "b")
    only = config.rules[0]
    assert (only.rule_id, only.priority, only.prefix, only.tags) == ("r1", 1, "a/",
                                                                    (("k", "v"),))
    assert only.destination.bucket == "backup"
    assert only.destination.endpoint == "http://127.0.0.1:9000"
    assert (only.destination.region, only.destination.storage_class) == ("eu-west-1",
                                                                          "STANDARD_IA")
    assert only.delete_markers and not only.existing_objects
    again = parse_replication(replication_document(config))
    assert again == config
    assert from_json(to_json(config)) == config


def test_a_plain_bucket_name_and_the_legacy_prefix_form() -> None:
    dest = DEST.replace("arn:aws:s3:::backup", "backup")
    config = parse_replication(doc("<Rule><Status>Enabled</Status><Prefix>x</Prefix>"
                                   f"{dest}</Rule>"), new_id=lambda: "generated")
    validate(config)
    assert config.rules[0].destination.bucket == "backup"
    assert config.rules[0].rule_id == "generated" and not config.rules[0].has_filter


@pytest.mark.parametrize(("body", "code"), [
    (b"<not xml", "MalformedXML"),
    (doc(), "MalformedXML"),  # no rule
    (doc(rule().replace("<Status>Enabled</Status>", "", 1)), "MalformedXML"),
    (doc(rule().replace("<Priority>1</Priority>", "<Priority>x</Priority>")), "MalformedXML"),
    (doc(rule(dest="")), "MalformedXML"),
    (doc(rule(filter_xml="<Filter><Prefix>a</Prefix><Tag><Key>k</Key><Value>v</Value></Tag>"
                         "</Filter>")), "MalformedXML"),
    (doc(rule() + rule()), "InvalidRequest"),  # same ID
    (doc(rule("a") + rule("b")), "InvalidRequest"),  # same priority
    (doc(rule().replace("<DeleteMarkerReplication><Status>Enabled</Status>"
                        "</DeleteMarkerReplication>", "")), "InvalidRequest"),
    (doc(rule(dest=DEST.replace("<CredentialRef>b</CredentialRef>",
                                "<CredentialRef>nobody</CredentialRef>"))), "InvalidArgument"),
    (doc(rule(dest=DEST.replace("<CredentialRef>b</CredentialRef>", ""))), "InvalidRequest"),
    (doc(rule(dest=DEST.replace("<Endpoint>http://127.0.0.1:9000</Endpoint>", ""))),
     "InvalidRequest"),
    (doc(rule(dest=DEST.replace("http://127.0.0.1:9000", "ftp://x"))), "InvalidArgument"),
    (doc(rule(dest=DEST.replace("http://127.0.0.1:9000", "http://h/path"))),
     "InvalidArgument"),
    (doc(rule(dest=DEST.replace("STANDARD_IA", "CHEAP"))), "InvalidArgument"),
    (doc(rule(rule_id="x" * 256)), "InvalidArgument"),
    (doc(rule()).replace(b"<Role>", b"<Unknown/><Role>"), "MalformedXML"),
    (b'<!DOCTYPE x [<!ENTITY e "e">]><ReplicationConfiguration/>', "MalformedXML"),
])
def test_aws_validation_errors(body: bytes, code: str) -> None:
    assert code_of(body) == code


def test_match_takes_the_highest_priority_rule_per_destination() -> None:
    low = rule("low", 1, "<Filter><Prefix></Prefix></Filter>")
    high = rule("high", 5, "<Filter><Tag><Key>t</Key><Value>1</Value></Tag></Filter>")
    other = rule("other", 3, "<Filter><Prefix>p/</Prefix></Filter>",
                 dest=DEST.replace("backup", "second"))
    config = parse_replication(doc(low, high, other))
    assert [r.rule_id for r in match(config, "p/x", {"t": "1"})] == ["high", "other"]
    assert [r.rule_id for r in match(config, "q", {})] == ["low"]
    disabled = parse_replication(doc(low.replace("<Status>Enabled</Status>",
                                                 "<Status>Disabled</Status>", 1)))
    assert match(disabled, "q", {}) == []


def test_a_damaged_stored_document_replicates_nothing() -> None:
    assert parse_stored(None) is None
    assert parse_stored("{not json") is None
    assert parse_stored('{"rules": [{"bad": 1}]}') is None


def test_credentials_are_checked_and_masked() -> None:
    text = credentials.parse_setting({"b": {"access_key_id": "AK", "secret_access_key": "S"}})
    assert credentials.load(text) == {"b": {"access_key_id": "AK", "secret_access_key": "S"}}
    shown = credentials.masked_text(text)
    assert "S\"" not in shown and credentials.MASK in shown
    assert credentials.holds_mask(shown) and not credentials.holds_mask(text)
    for bad in ({"b": {"access_key_id": "AK"}}, {"b c": {"access_key_id": "A",
                                                         "secret_access_key": "S"}},
                {"b": {"access_key_id": "", "secret_access_key": "S"}}, [], "nope"):
        with pytest.raises(credentials.InvalidCredential):
            credentials.parse_setting(bad if not isinstance(bad, dict) else json.dumps(bad))


def test_a_secret_is_sealed_with_the_master_key_and_opens_with_any_version() -> None:
    old = Keyring([LocalMasterKey(b"o" * 32)])
    rotated = Keyring([LocalMasterKey(b"o" * 32), LocalMasterKey(b"n" * 32)])
    plain = {"access_key_id": "AK", "secret_access_key": "the-secret"}
    sealed = credentials.seal("b", plain, old)
    assert "the-secret" not in json.dumps(sealed) and sealed[credentials.SEALED_BY] == old.key_id
    text = credentials.parse_setting({"b": sealed})  # the stored form is a valid setting
    assert credentials.load(text) == {"b": sealed}
    assert credentials.opened("b", credentials.load(text)["b"], rotated) == plain
    assert credentials.masked(text) == {"b": {"access_key_id": "AK",
                                              "secret_access_key": credentials.MASK}}
    assert credentials.seal("b", sealed, rotated) == sealed  # sealed once
    assert credentials.seal("b", plain, None) == plain  # no master key: as it is
    assert credentials.opened("b", plain, old) == plain  # stored before the key
    for keeper in (None, Keyring([LocalMasterKey(b"x" * 32)])):
        with pytest.raises(credentials.InvalidCredential):
            credentials.opened("b", sealed, keeper)
    with pytest.raises(credentials.InvalidCredential):  # bound to its name
        credentials.opened("other", sealed, old)


def test_backoff_doubles_up_to_the_cap() -> None:
    backoff = Backoff(base_seconds=1.0, max_seconds=3600.0, max_attempts=30)
    assert [backoff.delay(n) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert backoff.delay(25) == 3600.0


_ELEMENTS = st.sampled_from(["Rule", "ID", "Priority", "Status", "Filter", "Prefix", "Tag",
                             "Key", "Value", "And", "Destination", "Bucket", "Endpoint",
                             "CredentialRef", "Region", "StorageClass",
                             "DeleteMarkerReplication", "ExistingObjectReplication", "Role"])
_TEXTS = st.sampled_from(["", "Enabled", "Disabled", "1", "-1", "99999999999", "b",
                          "arn:aws:s3:::x", "http://h:1", "https://h", "STANDARD", "a/b"])


@st.composite
def _trees(draw: st.DrawFn, depth: int = 0) -> str:
    name = draw(_ELEMENTS)
    if depth >= 3 or draw(st.booleans()):
        return f"<{name}>{draw(_TEXTS)}</{name}>"
    children = draw(st.lists(_trees(depth + 1), max_size=4))
    return f"<{name}>{''.join(children)}</{name}>"


@settings(max_examples=150, deadline=None)
@given(st.lists(_trees(), max_size=4))
def test_any_document_is_a_configuration_or_a_client_error(children: list[str]) -> None:
    body = f"<ReplicationConfiguration>{''.join(children)}</ReplicationConfiguration>"
    try:
        config = parse_replication(body.encode())
        validate(config, lambda name: name == "b")
    except S3Error as error:
        assert error.status < 500
    else:
        assert parse_replication(replication_document(config)) == config


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_a_configuration_or_a_client_error(body: bytes) -> None:
    try:
        validate(parse_replication(body))
    except S3Error as error:
        assert error.status < 500
