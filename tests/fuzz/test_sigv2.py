"""SigV2 as a hostile client meets it (objstore/http/sigv2.py): any Authorization header,
presigned query and dates are parsed and verified to a value or a SigV4Error with a 4xx
code; what a correct signer signs always verifies."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from email.utils import format_datetime
from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from objstore.http import sigv2
from objstore.http.sigv4 import RequestView
from tests.fuzz.outcomes import Refused, outcome
from tests.fuzz.strategies import any_text, numbers

NOW = datetime(2024, 5, 24, 12, 0, tzinfo=UTC)
SECRET = "fuzz-secret"
b64 = st.binary(min_size=0, max_size=24).map(lambda b: base64.b64encode(b).decode())


@st.composite
def claimed_requests(draw: st.DrawFn) -> RequestView:
    headers: dict[str, str] = {}
    query = draw(st.one_of(
        st.just(""), any_text,
        st.tuples(any_text, st.one_of(numbers, any_text), b64).map(
            lambda t: f"AWSAccessKeyId={quote(t[0])}&Expires={t[1]}&Signature={quote(t[2])}"),
    ))
    if draw(st.booleans()):
        headers["authorization"] = draw(st.one_of(
            any_text, st.tuples(any_text, b64).map(lambda t: f"AWS {t[0]}:{t[1]}")))
    for name in draw(st.lists(st.sampled_from(["date", "x-amz-date", "x-amz-meta-a",
                                               "content-type", "content-md5"]), max_size=4)):
        headers[name] = draw(st.one_of(st.just(format_datetime(NOW, usegmt=True)),
                                       any_text, numbers))
    path = draw(st.one_of(st.just("/b/k"), any_text.map(lambda t: "/" + t)))
    return RequestView(draw(st.sampled_from(["GET", "PUT"])), path, query, headers)


@given(claimed_requests(), st.one_of(st.none(), any_text))
def test_claims_are_parsed_or_refused(req: RequestView, vhost: str | None) -> None:
    if not sigv2.is_v2(req):
        return
    auth = outcome(sigv2.parse_auth_v2, req)
    if isinstance(auth, Refused):
        return
    outcome(sigv2.verify_v2, auth, req, SECRET, NOW, vhost)


@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30),
       st.dictionaries(st.sampled_from(["x-amz-meta-a", "x-amz-acl", "content-type"]),
                       st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20)))
def test_a_correct_signature_verifies(key: str, headers: dict[str, str]) -> None:
    path = "/bucket/" + quote(key.encode("utf-8"), safe="/")
    date = format_datetime(NOW, usegmt=True)
    sent = {name: value.strip() for name, value in headers.items()}
    amz = "".join(f"{name}:{sent[name]}\n" for name in sorted(sent) if name.startswith("x-amz-"))
    string = f"PUT\n\n{sent.get('content-type', '')}\n{date}\n{amz}{path}"
    signature = sigv2.sign_v2(string.encode("utf-8"), SECRET)
    req = RequestView("PUT", path, "", {**sent, "date": date,
                                        "authorization": f"AWS AK:{signature}"})
    sigv2.verify_v2(sigv2.parse_auth_v2(req), req, SECRET, NOW)
