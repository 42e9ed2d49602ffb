"""Public links as bucket policy statements (objstore anonymous, issue 29): the pure
rewrite keeps the operator's statements, round-trips through `list`, and says which
prefixes anyone may read."""

from __future__ import annotations

import json

import pytest

from objstore.iam.anonymous_access import (
    AnonymousAccessError,
    anonymous_rules,
    public_prefixes,
    set_anonymous,
)
from objstore.iam.bucket_policy import Caller, PolicyDocumentError, parse_bucket_policy
from objstore.iam.conditions import FixedValues

B = "site"
OWN = {"Sid": "Mine", "Effect": "Allow", "Principal": {"AWS": "u-1"},
       "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{B}/*"}


def can(text: str, action: str, resource: str, prefix: str | None = None) -> bool:
    policy = parse_bucket_policy(text, B)
    values = FixedValues({} if prefix is None else {"s3:prefix": (prefix,)})
    deny, allow = policy.verdict(Caller(None), (action,), resource, values)
    return deny is None and allow is not None


def test_levels_round_trip_and_keep_the_operators_statements() -> None:
    text = json.dumps({"Version": "2012-10-17", "Statement": [OWN]})
    text = set_anonymous(text, B, "pub/", "download")
    text = set_anonymous(text, B, "drop/", "upload")
    assert text is not None
    assert anonymous_rules(text) == [{"prefix": "drop/", "access": "upload"},
                                     {"prefix": "pub/", "access": "download"}]
    assert can(text, "s3:GetObject", f"arn:aws:s3:::{B}/pub/x")
    assert not can(text, "s3:GetObject", f"arn:aws:s3:::{B}/drop/x")
    assert can(text, "s3:ListBucket", f"arn:aws:s3:::{B}", prefix="pub/a")
    assert not can(text, "s3:ListBucket", f"arn:aws:s3:::{B}", prefix="other")
    assert can(text, "s3:PutObject", f"arn:aws:s3:::{B}/drop/x")
    assert public_prefixes(text, B) == ["pub/"]
    again = set_anonymous(text, B, "pub/", "public")
    assert again is not None and {"prefix": "pub/", "access": "public"} in anonymous_rules(again)
    cleared = set_anonymous(set_anonymous(again, B, "pub/", "none"), B, "drop/", "none")
    assert cleared is not None and json.loads(cleared)["Statement"] == [OWN]
    assert set_anonymous(None, B, "", "none") is None


def test_whole_bucket_and_refusals() -> None:
    text = set_anonymous(None, B, "", "download")
    assert text is not None and public_prefixes(text, B) == [""]
    assert can(text, "s3:ListBucket", f"arn:aws:s3:::{B}")
    with pytest.raises(AnonymousAccessError):
        set_anonymous(None, B, "", "everything")
    with pytest.raises(AnonymousAccessError):
        set_anonymous(None, B, "a*", "download")
    broken = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow"}]})
    with pytest.raises(PolicyDocumentError):
        set_anonymous(broken, B, "", "download")
    assert anonymous_rules("not json") == [] and public_prefixes("not json", B) == []


def test_cli_text_of_a_bucket_view() -> None:
    from objstore.cli.admin_commands import anonymous_text

    assert anonymous_text({"bucket": "b", "rules": [], "public_prefixes": []}) == \
        "b: no public links"
    text = anonymous_text({"bucket": "b", "rules": [{"prefix": "p/", "access": "download"}],
                           "public_prefixes": ["p/", ""]})
    assert text.splitlines() == ["b/p/  download", "readable by anyone: b/p/*, b/*"]
