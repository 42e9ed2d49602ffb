"""Lifecycle configuration: XML parsing and rendering, validation as AWS answers it,
filter matching, when actions fall due, the stored form and the x-amz-expiration header.
Pure functions; no reactor."""

from __future__ import annotations

import datetime
from collections.abc import Callable

import pytest
from lxml import etree

from objstore.engine import lifecycle_rules as rules
from objstore.engine.lifecycle_rules import (
    Expiration,
    LifecycleConfiguration,
    LifecycleRule,
    NoncurrentExpiration,
    RuleFilter,
)
from objstore.errors import S3Error
from objstore.s3.lifecycle import expiration_header
from objstore.s3.lifecycle_xml import lifecycle_document, parse_lifecycle
from objstore.s3.xml import S3_NS

DAY = 86400.0
NS = {"s": S3_NS}


def doc(rules_xml: str) -> bytes:
    return f'<LifecycleConfiguration xmlns="{S3_NS}">{rules_xml}</LifecycleConfiguration>'.encode()


def rule_xml(body: str, rule_id: str = "r1", status: str = "Enabled") -> str:
    id_part = f"<ID>{rule_id}</ID>" if rule_id else ""
    return f"<Rule>{id_part}<Status>{status}</Status>{body}</Rule>"


def parsed(body: str, **kwargs: str) -> LifecycleConfiguration:
    config = parse_lifecycle(doc(rule_xml(body, **kwargs)), new_id=lambda: "generated")
    rules.validate(config)
    return config


def refused(body: bytes | str, code: str) -> S3Error:
    data = doc(rule_xml(body)) if isinstance(body, str) else body
    with pytest.raises(S3Error) as caught:
        rules.validate(parse_lifecycle(data))
    assert caught.value.code == code, caught.value.message
    return caught.value


def midnight(year: int, month: int, day: int) -> float:
    return datetime.datetime(year, month, day, tzinfo=datetime.UTC).timestamp()


# -- parsing --------------------------------------------------------------------------


def test_parse_every_action_and_filter_form() -> None:
    body = doc(
        rule_xml("<Filter><Prefix>logs/</Prefix></Filter><Expiration><Days>30</Days>"
                 "</Expiration>", "a")
        + rule_xml("<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>"
                   "<Expiration><Date>2030-01-01T00:00:00.000Z</Date></Expiration>", "b")
        + rule_xml("<Filter><And><Prefix>p/</Prefix><Tag><Key>a</Key><Value>1</Value></Tag>"
                   "<Tag><Key>b</Key><Value>2</Value></Tag>"
                   "<ObjectSizeGreaterThan>10</ObjectSizeGreaterThan>"
                   "<ObjectSizeLessThan>100</ObjectSizeLessThan></And></Filter>"
                   "<NoncurrentVersionExpiration><NoncurrentDays>7</NoncurrentDays>"
                   "<NewerNoncurrentVersions>3</NewerNoncurrentVersions>"
                   "</NoncurrentVersionExpiration>", "c", "Disabled")
        + rule_xml("<Prefix>tmp/</Prefix><AbortIncompleteMultipartUpload>"
                   "<DaysAfterInitiation>2</DaysAfterInitiation>"
                   "</AbortIncompleteMultipartUpload>", "d")
        + rule_xml("<Filter/><Expiration><ExpiredObjectDeleteMarker>true"
                   "</ExpiredObjectDeleteMarker></Expiration>", "")
        + rule_xml("<Filter><ObjectSizeGreaterThan>5</ObjectSizeGreaterThan></Filter>"
                   "<Expiration><Days>1</Days></Expiration>", "f")
    )
    config = parse_lifecycle(body, new_id=lambda: "generated")
    rules.validate(config)
    a, b, c, d, e, f = config.rules
    assert a == LifecycleRule("a", "Enabled", RuleFilter(rules.FORM_PREFIX, "logs/"),
                              Expiration(days=30))
    assert b.filter == RuleFilter(rules.FORM_TAG, tags=(("k", "v"),))
    assert b.expiration == Expiration(date=midnight(2030, 1, 1))
    assert c.filter == RuleFilter(rules.FORM_AND, "p/", (("a", "1"), ("b", "2")), 10, 100)
    assert c.noncurrent_expiration == NoncurrentExpiration(7, 3)
    assert not c.enabled
    assert d.filter == RuleFilter(rules.FORM_LEGACY, "tmp/") and d.abort_days == 2
    assert e.rule_id == "generated" and e.filter == RuleFilter(rules.FORM_EMPTY)
    assert e.expiration == Expiration(expired_object_delete_marker=True)
    assert f.filter == RuleFilter(rules.FORM_SIZE_GT, size_greater_than=5)
    assert config.enabled_rules() == (a, b, d, e, f)


def test_document_round_trips() -> None:
    body = doc(
        rule_xml("<Filter><Prefix></Prefix></Filter><Expiration><Days>3</Days></Expiration>"
                 "<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays>"
                 "</NoncurrentVersionExpiration>", "a")
        + rule_xml("<Prefix>x</Prefix><Expiration><Date>2031-05-01</Date></Expiration>", "b")
        + rule_xml("<Filter><And><Tag><Key>a</Key><Value></Value></Tag></And></Filter>"
                   "<Expiration><Days>1</Days></Expiration>", "c")
        + rule_xml("<Filter/><AbortIncompleteMultipartUpload><DaysAfterInitiation>4"
                   "</DaysAfterInitiation></AbortIncompleteMultipartUpload>", "d")
    )
    config = parse_lifecycle(body)
    rendered = lifecycle_document(config)
    assert parse_lifecycle(rendered) == config
    root = etree.fromstring(rendered)
    first = root.find("s:Rule", NS)
    assert first is not None
    assert [etree.QName(c).localname for c in first] == [
        "Expiration", "ID", "Filter", "Status", "NoncurrentVersionExpiration"]
    assert root.findtext("s:Rule/s:Filter/s:Prefix", namespaces=NS) == ""
    assert root.findtext("s:Rule[2]/s:Prefix", namespaces=NS) == "x"
    assert root.findtext("s:Rule[2]/s:Expiration/s:Date", namespaces=NS) == \
        "2031-05-01T00:00:00.000Z"
    assert root.find("s:Rule[4]/s:Filter", NS) is not None
    assert len(root.find("s:Rule[4]/s:Filter", NS)) == 0  # type: ignore[arg-type]


def test_stored_form_round_trips() -> None:
    config = parse_lifecycle(doc(
        rule_xml("<Filter><And><Prefix>p</Prefix><Tag><Key>k</Key><Value>v</Value></Tag>"
                 "<ObjectSizeLessThan>9</ObjectSizeLessThan></And></Filter>"
                 "<Expiration><ExpiredObjectDeleteMarker>false</ExpiredObjectDeleteMarker>"
                 "</Expiration><NoncurrentVersionExpiration><NoncurrentDays>2</NoncurrentDays>"
                 "<NewerNoncurrentVersions>1</NewerNoncurrentVersions>"
                 "</NoncurrentVersionExpiration>")
        + rule_xml("<Prefix/><AbortIncompleteMultipartUpload><DaysAfterInitiation>1"
                   "</DaysAfterInitiation></AbortIncompleteMultipartUpload>", "r2")))
    assert rules.from_json(rules.to_json(config)) == config


@pytest.mark.parametrize("body", [
    b"",
    b"not xml",
    b"<Other/>",
    doc("<Bogus/>"),
    doc(rule_xml("<Expiration><Days>1</Days></Expiration>")),  # no Filter nor Prefix
    doc("<Rule><ID>x</ID><Filter/><Expiration><Days>1</Days></Expiration></Rule>"),  # Status
    doc(rule_xml("<Filter/><Prefix>a</Prefix><Expiration><Days>1</Days></Expiration>")),
    doc(rule_xml("<Filter><Prefix>a</Prefix><Tag><Key>k</Key><Value>v</Value></Tag>"
                 "</Filter><Expiration><Days>1</Days></Expiration>")),
    doc(rule_xml("<Filter><And/></Filter><Expiration><Days>1</Days></Expiration>")),
    doc(rule_xml("<Filter><Tag><Key>k</Key></Tag></Filter>"
                 "<Expiration><Days>1</Days></Expiration>")),
    doc(rule_xml("<Filter/><Expiration><Days>x</Days></Expiration>")),
    doc(rule_xml("<Filter/><Expiration><Days>1.5</Days></Expiration>")),
    doc(rule_xml("<Filter/><Expiration><Days>99999999999</Days></Expiration>")),
    doc(rule_xml("<Filter/><Expiration><Days>" + "9" * 5000 + "</Days></Expiration>")),
    doc(rule_xml("<Filter/><Expiration><Days>٣</Days></Expiration>")),
    doc(rule_xml("<Filter/><Expiration/>")),
    doc(rule_xml("<Filter/><Expiration><Days>1</Days><Date>2030-01-01</Date></Expiration>")),
    doc(rule_xml("<Filter/><Expiration><Days>1</Days><ExpiredObjectDeleteMarker>true"
                 "</ExpiredObjectDeleteMarker></Expiration>")),
    doc(rule_xml("<Filter/><Expiration><ExpiredObjectDeleteMarker>yes"
                 "</ExpiredObjectDeleteMarker></Expiration>")),
    doc(rule_xml("<Filter/><Expiration><Days>1</Days></Expiration>"
                 "<Expiration><Days>2</Days></Expiration>")),
    doc(rule_xml("<Filter/><NoncurrentVersionExpiration/>")),
    doc(rule_xml("<Filter/><AbortIncompleteMultipartUpload/>")),
    doc(rule_xml("<Filter/><Transition><Days>1</Days></Transition>")),
    doc(rule_xml("<Filter/><Expiration><Days>1</Days></Expiration>", status="On")),
    doc(""),  # no rules
    doc(rule_xml("<Filter/><Expiration><Days>1</Days></Expiration>", "x") * 1001),
    b'<!DOCTYPE x [<!ENTITY e "x">]><LifecycleConfiguration/>',
])
def test_malformed(body: bytes) -> None:
    refused(body, "MalformedXML")


@pytest.mark.parametrize("body", [
    "<Filter/><Expiration><Days>0</Days></Expiration>",
    "<Filter/><Expiration><Days>-3</Days></Expiration>",
    "<Filter/><Expiration><Date>2030-01-01T10:00:00Z</Date></Expiration>",
    "<Filter/><Expiration><Date>yesterday</Date></Expiration>",
    "<Filter/><NoncurrentVersionExpiration><NoncurrentDays>0</NoncurrentDays>"
    "</NoncurrentVersionExpiration>",
    "<Filter/><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays>"
    "<NewerNoncurrentVersions>0</NewerNoncurrentVersions></NoncurrentVersionExpiration>",
    "<Filter/><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays>"
    "<NewerNoncurrentVersions>101</NewerNoncurrentVersions></NoncurrentVersionExpiration>",
    "<Filter/><AbortIncompleteMultipartUpload><DaysAfterInitiation>0</DaysAfterInitiation>"
    "</AbortIncompleteMultipartUpload>",
    "<Filter><ObjectSizeGreaterThan>-1</ObjectSizeGreaterThan></Filter>"
    "<Expiration><Days>1</Days></Expiration>",
    "<Filter><And><ObjectSizeGreaterThan>10</ObjectSizeGreaterThan>"
    "<ObjectSizeLessThan>10</ObjectSizeLessThan></And></Filter>"
    "<Expiration><Days>1</Days></Expiration>",
])
def test_invalid_argument(body: str) -> None:
    refused(body, "InvalidArgument")


def test_rule_ids_are_unique_and_short() -> None:
    twice = rule_xml("<Filter/><Expiration><Days>1</Days></Expiration>", "same")
    assert refused(doc(twice * 2), "InvalidArgument").message.startswith("Rule ID must be")
    long_id = rule_xml("<Filter/><Expiration><Days>1</Days></Expiration>", "x" * 256)
    assert "255" in refused(doc(long_id), "InvalidArgument").message
    ok = rule_xml("<Filter/><Expiration><Days>1</Days></Expiration>", "x" * 255)
    rules.validate(parse_lifecycle(doc(ok)))


def test_a_thousand_rules_are_accepted() -> None:
    many = "".join(rule_xml("<Filter/><Expiration><Days>1</Days></Expiration>", f"r{n}")
                   for n in range(1000))
    assert len(parse_lifecycle(doc(many)).rules) == 1000
    rules.validate(parse_lifecycle(doc(many)))


@pytest.mark.parametrize("body", [
    "<Filter/>",  # no action
    "<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>"
    "<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation>"
    "</AbortIncompleteMultipartUpload>",
    "<Filter><ObjectSizeLessThan>5</ObjectSizeLessThan></Filter>"
    "<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation>"
    "</AbortIncompleteMultipartUpload>",
    "<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>"
    "<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>",
    "<Filter><And><Tag><Key>k</Key><Value>1</Value></Tag><Tag><Key>k</Key><Value>2</Value>"
    "</Tag></And></Filter><Expiration><Days>1</Days></Expiration>",
])
def test_invalid_request(body: str) -> None:
    refused(body, "InvalidRequest")


def test_invalid_tag() -> None:
    refused(f"<Filter><Tag><Key>{'k' * 129}</Key><Value>v</Value></Tag></Filter>"
            "<Expiration><Days>1</Days></Expiration>", "InvalidTag")


@pytest.mark.parametrize("body", [
    "<Filter/><Transition><Days>30</Days><StorageClass>STANDARD_IA</StorageClass></Transition>",
    "<Filter/><Transition><Date>2030-01-01</Date><StorageClass>GLACIER</StorageClass>"
    "</Transition>",
    "<Filter/><NoncurrentVersionTransition><NoncurrentDays>30</NoncurrentDays>"
    "<StorageClass>GLACIER</StorageClass></NoncurrentVersionTransition>",
    "<Filter/><Expiration><Days>5</Days></Expiration>"
    "<Transition><Days>1</Days><StorageClass>STANDARD</StorageClass></Transition>",
])
def test_transitions_are_refused(body: str) -> None:
    refused(body, "InvalidStorageClass")


def test_transition_structure_is_checked_before_the_class() -> None:
    refused("<Filter/><Transition><Days>-1</Days><StorageClass>GLACIER</StorageClass>"
            "</Transition>", "InvalidArgument")
    refused("<Filter/><Transition><Days>1</Days><Date>2030-01-01</Date>"
            "<StorageClass>GLACIER</StorageClass></Transition>", "MalformedXML")


# -- matching and timing ----------------------------------------------------------------


def test_filter_matching() -> None:
    selector = RuleFilter(rules.FORM_AND, "logs/", (("env", "dev"),), 10, 100)
    assert selector.matches("logs/a", 50, {"env": "dev", "x": "y"})
    assert not selector.matches("data/a", 50, {"env": "dev"})
    assert not selector.matches("logs/a", 50, {"env": "prod"})
    assert not selector.matches("logs/a", 50, {})
    assert not selector.matches("logs/a", 10, {"env": "dev"})
    assert not selector.matches("logs/a", 100, {"env": "dev"})
    assert RuleFilter().matches("anything", 0, {})


def test_due_times_round_up_to_the_next_day_boundary() -> None:
    start = midnight(2024, 3, 1) + 3600  # 01:00 UTC
    assert rules.due_after(start, 1, DAY) == midnight(2024, 3, 3)
    assert rules.due_after(midnight(2024, 3, 1), 1, DAY) == midnight(2024, 3, 2)
    assert rules.due_after(100.25, 2, 1.0) == 103.0  # the testing-aid day of one second


def test_object_expiration_picks_the_earliest_enabled_rule() -> None:
    config = LifecycleConfiguration((
        LifecycleRule("late", "Enabled", RuleFilter(), Expiration(days=30)),
        LifecycleRule("early", "Enabled", RuleFilter(rules.FORM_PREFIX, "a/"),
                      Expiration(days=2)),
        LifecycleRule("off", "Disabled", RuleFilter(), Expiration(days=1)),
        LifecycleRule("marker", "Enabled", RuleFilter(),
                      Expiration(expired_object_delete_marker=True)),
    ))
    made = midnight(2024, 1, 1) + 10
    assert rules.object_expiration(config, "a/x", 1, {}, made, DAY) == \
        (midnight(2024, 1, 4), "early")
    assert rules.object_expiration(config, "b/x", 1, {}, made, DAY) == \
        (midnight(2024, 2, 1), "late")
    only_markers = LifecycleConfiguration(config.rules[2:])
    assert rules.object_expiration(only_markers, "a/x", 1, {}, made, DAY) is None


def test_noncurrent_and_marker_and_upload_due() -> None:
    keep_two = LifecycleRule("n", "Enabled", noncurrent_expiration=NoncurrentExpiration(1, 2))
    assert rules.noncurrent_due(keep_two, 100.0, 1, 1.0) is None  # among the 2 newest
    assert rules.noncurrent_due(keep_two, 100.0, 2, 1.0) == 101.0
    days = LifecycleRule("d", "Enabled", expiration=Expiration(days=3))
    eodm = LifecycleRule("e", "Enabled", expiration=Expiration(expired_object_delete_marker=True))
    date = LifecycleRule("t", "Enabled", expiration=Expiration(date=0.0))
    assert rules.marker_due(days, 10.0, 1.0) == 13.0
    assert rules.marker_due(eodm, 10.0, 1.0) == 10.0
    assert rules.marker_due(date, 10.0, 1.0) is None
    assert [rules.cleans_markers(r) for r in (days, eodm, date, keep_two)] == \
        [True, True, False, False]
    abort = LifecycleRule("a", "Enabled", abort_days=2)
    assert rules.upload_due(abort, 5.5, 1.0) == 8.0
    assert rules.upload_due(days, 5.5, 1.0) is None


def test_expiration_header() -> None:
    value = expiration_header(midnight(2012, 12, 23), "picture deletion/rule")
    assert value == ('expiry-date="Sun, 23 Dec 2012 00:00:00 GMT", '
                     'rule-id="picture%20deletion%2Frule"')


def _never_called() -> Callable[[], str]:
    def fail() -> str:
        raise AssertionError("an ID was generated for a rule that has one")
    return fail


def test_ids_are_generated_only_when_missing() -> None:
    config = parse_lifecycle(doc(rule_xml("<Filter/><Expiration><Days>1</Days></Expiration>",
                                          "mine")), new_id=_never_called())
    assert config.rules[0].rule_id == "mine"
