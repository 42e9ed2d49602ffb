"""The notification configuration's pure rules: the XML parser (4xx or success for any
input, never a crash), AWS's validation, wildcard and prefix/suffix matching, ARNs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from objstore.errors import S3Error
from objstore.notify.rules import (
    EVENT_NAMES,
    Destination,
    NotificationConfiguration,
    NotificationRule,
    event_selected,
    from_json,
    matching_destinations,
    parse_arn,
    rule_matches,
    to_json,
    validate,
)
from objstore.s3.notification_xml import notification_document, parse_notification

ARN = "arn:objstore:sqs:us-east-1:hooks:webhook"
NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


def known(destination: Destination) -> bool:
    return bool(destination.url) or (destination.target, destination.kind) == ("hooks",
                                                                              "webhook")


def doc(*configs: str) -> bytes:
    return f"<NotificationConfiguration {NS}>{''.join(configs)}</NotificationConfiguration>" \
        .encode()


def queue(*events: str, prefix: str = "", suffix: str = "", arn: str = ARN,
          rule_id: str = "") -> str:
    rules = "".join(f"<FilterRule><Name>{n}</Name><Value>{v}</Value></FilterRule>"
                    for n, v in (("prefix", prefix), ("suffix", suffix)) if v)
    flt = f"<Filter><S3Key>{rules}</S3Key></Filter>" if rules else ""
    ident = f"<Id>{rule_id}</Id>" if rule_id else ""
    evs = "".join(f"<Event>{e}</Event>" for e in events)
    return f"<QueueConfiguration>{ident}<Queue>{arn}</Queue>{evs}{flt}</QueueConfiguration>"


def test_round_trip_of_all_three_kinds() -> None:
    body = doc(queue("s3:ObjectCreated:*", prefix="in/", suffix=".jpg", rule_id="q1"),
               "<TopicConfiguration><Id>t1</Id><Topic>https://h.example/x</Topic>"
               "<Event>s3:ObjectRemoved:Delete</Event></TopicConfiguration>",
               f"<CloudFunctionConfiguration><Id>c1</Id><CloudFunction>{ARN}</CloudFunction>"
               f"<Event>s3:ObjectTagging:*</Event></CloudFunctionConfiguration>")
    config = parse_notification(body)
    validate(config, known)
    assert [r.kind for r in config.rules] == ["Queue", "Topic", "CloudFunction"]
    assert config.rules[0] == NotificationRule("q1", "Queue", ARN, ("s3:ObjectCreated:*",),
                                               "in/", ".jpg")
    again = parse_notification(notification_document(config))
    assert sorted(again.rules, key=lambda r: r.id) == sorted(config.rules, key=lambda r: r.id)
    assert from_json(to_json(config)) == config


def test_empty_configuration_document() -> None:
    assert parse_notification(doc()).rules == ()
    assert b"<NotificationConfiguration" in notification_document(NotificationConfiguration())


def test_id_generated_when_absent() -> None:
    assert parse_notification(doc(queue("s3:ObjectCreated:Put"))).rules[0].id


@pytest.mark.parametrize("body, code", [
    (b"", "MalformedXML"),
    (b"<NotificationConfiguration", "MalformedXML"),
    (b"<Other/>", "MalformedXML"),
    (doc("<QueueConfiguration><Event>s3:ObjectCreated:Put</Event></QueueConfiguration>"),
     "MalformedXML"),
    (doc("<Bogus/>"), "MalformedXML"),
    (doc(queue("s3:ObjectCreated:Put").replace("<Queue>", "<Id>a</Id><Id>b</Id><Queue>")),
     "MalformedXML"),
    (doc(queue("s3:ObjectCreated:Put", prefix="a").replace("prefix", "middle")),
     "InvalidArgument"),
    (doc(queue("s3:ObjectCreated:Put", prefix="a").replace(
        "</S3Key>", "<FilterRule><Name>Prefix</Name><Value>b</Value></FilterRule></S3Key>")),
     "InvalidArgument"),
])
def test_parse_refusals(body: bytes, code: str) -> None:
    with pytest.raises(S3Error) as refused:
        parse_notification(body)
    assert refused.value.code == code


@pytest.mark.parametrize("configs", [
    (queue("s3:ObjectCreated:*"), queue("s3:ObjectCreated:Put", arn="https://x.example/")),
    (queue("s3:ObjectCreated:Put", prefix="a/"), queue("s3:ObjectCreated:*", prefix="a/b")),
    (queue("s3:ObjectCreated:Put", suffix=".jpg"), queue("s3:ObjectCreated:Put",
                                                         suffix="x.jpg")),
])
def test_overlapping_rules_are_refused(configs: tuple[str, ...]) -> None:
    with pytest.raises(S3Error) as refused:
        validate(parse_notification(doc(*configs)), known)
    assert refused.value.code == "InvalidArgument"
    assert "overlap" in refused.value.message


@pytest.mark.parametrize("configs", [
    (queue("s3:ObjectCreated:*"), queue("s3:ObjectRemoved:*")),
    (queue("s3:ObjectCreated:Put", prefix="a/"), queue("s3:ObjectCreated:Put", prefix="b/")),
    (queue("s3:ObjectCreated:Put", suffix=".jpg"), queue("s3:ObjectCreated:Put",
                                                         suffix=".png")),
])
def test_disjoint_rules_are_accepted(configs: tuple[str, ...]) -> None:
    validate(parse_notification(doc(*configs)), known)


@pytest.mark.parametrize("arn", [
    "arn:objstore:sqs:us-east-1:nosuch:webhook",
    "arn:objstore:sqs:us-east-1:hooks:amqp",  # the kind must be the target's
    "arn:aws:sqs:us-east-1:123:queue",
    "ftp://example.com/",
    "arn:objstore:sqs:us-east-1:hooks",
])
def test_unknown_destinations_are_refused(arn: str) -> None:
    with pytest.raises(S3Error) as refused:
        validate(parse_notification(doc(queue("s3:ObjectCreated:Put", arn=arn))), known)
    assert refused.value.code == "InvalidArgument"
    assert "Unable to validate the following destination configurations" in \
        refused.value.message


@pytest.mark.parametrize("event", ["s3:ObjectCreated", "s3:Foo:*", "s3:*", "",
                                   "s3:ObjectRestore:Post"])
def test_unknown_events_are_refused(event: str) -> None:
    with pytest.raises(S3Error) as refused:
        validate(parse_notification(doc(queue(event))), known)
    assert refused.value.code == "InvalidArgument"


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(S3Error):
        validate(parse_notification(doc(queue("s3:ObjectCreated:*", rule_id="a"),
                                        queue("s3:ObjectRemoved:*", rule_id="a"))), known)


def test_wildcards_and_filters() -> None:
    assert event_selected("s3:ObjectCreated:*", "s3:ObjectCreated:Copy")
    assert not event_selected("s3:ObjectCreated:*", "s3:ObjectRemoved:Delete")
    assert event_selected("s3:ObjectRemoved:Delete", "s3:ObjectRemoved:Delete")
    rule = NotificationRule("r", "Queue", ARN, ("s3:ObjectCreated:Put",), "in/", ".jpg")
    assert rule_matches(rule, "s3:ObjectCreated:Put", "in/a.jpg")
    assert not rule_matches(rule, "s3:ObjectCreated:Put", "out/a.jpg")
    assert not rule_matches(rule, "s3:ObjectCreated:Put", "in/a.png")
    assert not rule_matches(rule, "s3:ObjectCreated:Copy", "in/a.jpg")


def test_matching_destinations_once_per_destination() -> None:
    config = NotificationConfiguration((
        NotificationRule("a", "Queue", ARN, ("s3:ObjectCreated:*",), "a/"),
        NotificationRule("b", "Topic", ARN, ("s3:ObjectCreated:*",), "b/"),
        NotificationRule("c", "Topic", "https://h.example/", ("s3:ObjectCreated:Put",)),
    ))
    found = matching_destinations(config, "s3:ObjectCreated:Put", "a/x")
    assert [(r.id, d.name) for r, d in found] == [("a", "hooks"), ("c", "https://h.example/")]


def test_parse_arn() -> None:
    assert parse_arn(ARN) == Destination(target="hooks", kind="webhook")
    assert parse_arn("https://h.example:8080/p") == Destination(url="https://h.example:8080/p")
    assert parse_arn("http://h.example:99999/") is None
    assert parse_arn("arn:objstore:sqs:r::webhook") is None


_xml_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                           blacklist_characters="<>&\x00"), max_size=20)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Queue", "Topic", "CloudFunction", "Bogus"]),
                          st.lists(st.sampled_from([*EVENT_NAMES, "s3:ObjectCreated:*", "x"]),
                                   max_size=3),
                          _xml_text, _xml_text, st.sampled_from([ARN, "https://h/", "", "z"])),
                max_size=4))
def test_any_generated_document_is_accepted_or_refused_with_a_4xx(
        configs: list[tuple[str, list[str], str, str, str]]) -> None:
    parts = []
    for kind, events, prefix, suffix, arn in configs:
        inner = queue(*events, prefix=prefix, suffix=suffix, arn=arn)
        parts.append(inner.replace("Queue", kind))
    try:
        config = parse_notification(doc(*parts))
        validate(config, known)
    except S3Error as refused:
        assert refused.status < 500
        return
    assert from_json(to_json(config)) == config
    again = parse_notification(notification_document(config))
    assert sorted(again.rules, key=lambda r: r.id) == sorted(config.rules, key=lambda r: r.id)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_refused_with_a_4xx_or_parsed(body: bytes) -> None:
    try:
        parse_notification(body)
    except S3Error as refused:
        assert refused.status < 500


def test_a_large_body_of_repeated_events_is_checked_quickly() -> None:
    import time

    many = "".join(["<Event>s3:ObjectCreated:*</Event>"] * 14000)
    body = doc(f"<QueueConfiguration><Queue>{ARN}</Queue>{many}</QueueConfiguration>",
               f"<QueueConfiguration><Queue>{ARN}</Queue>{many}"
               "<Filter><S3Key><FilterRule><Name>prefix</Name><Value>a</Value></FilterRule>"
               "</S3Key></Filter></QueueConfiguration>")
    started = time.monotonic()
    with pytest.raises(S3Error) as refused:
        validate(parse_notification(body), known)
    assert "overlap" in refused.value.message
    assert time.monotonic() - started < 5.0  # quadratic, it took minutes
