"""SigV4 as a hostile client meets it: the Authorization header, presigned query
parameters and the x-amz-* headers it covers, parsed and verified; what our own signer
signs always verifies. A value or a SigV4Error with a 4xx code, nothing else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from objstore.http import sigv4
from objstore.http.sigv4 import RequestView
from tests.fuzz.outcomes import Refused, outcome
from tests.fuzz.strategies import any_text, numbers

NOW = datetime(2024, 5, 24, 12, 0, tzinfo=UTC)
AK, SECRET = "AKIAFUZZ", "fuzz-secret"
HOST = "s3.example.test"
hex64 = st.text("0123456789abcdefABCDEF", min_size=64, max_size=64)
amz_date = st.one_of(st.just("20240524T120000Z"), any_text, numbers)
credential = st.tuples(
    st.one_of(st.just(AK), any_text), st.one_of(st.just("20240524"), any_text, numbers),
    st.one_of(st.just("us-east-1"), any_text), st.sampled_from(["s3", "ec2", ""]),
    st.sampled_from(["aws4_request", "aws5_request"]),
).map("/".join)
signed_headers = st.one_of(st.just("host;x-amz-content-sha256;x-amz-date"),
                           st.lists(any_text, max_size=4).map(";".join))
payload_hash = st.one_of(st.sampled_from([*sigv4.STREAMING_PAYLOADS, sigv4.UNSIGNED_PAYLOAD,
                                          sigv4.EMPTY_SHA256]), hex64, any_text)


def authorization() -> st.SearchStrategy[str]:
    fields = st.tuples(credential, signed_headers, st.one_of(hex64, any_text))
    structured = fields.map(lambda f: f"AWS4-HMAC-SHA256 Credential={f[0]}, "
                                      f"SignedHeaders={f[1]}, Signature={f[2]}")
    return st.one_of(structured, any_text, st.just("AWS AKIA:sig"))


def presigned_query() -> st.SearchStrategy[str]:
    values = st.fixed_dictionaries({
        "X-Amz-Algorithm": st.one_of(st.just("AWS4-HMAC-SHA256"), any_text),
        "X-Amz-Credential": credential, "X-Amz-Date": amz_date,
        "X-Amz-Expires": numbers, "X-Amz-SignedHeaders": signed_headers,
        "X-Amz-Signature": st.one_of(hex64, any_text),
    })
    return values.map(lambda params: "&".join(
        f"{name}={sigv4.uri_encode(value)}" for name, value in params.items()))


@st.composite
def claimed_requests(draw: st.DrawFn) -> RequestView:
    headers = {"host": HOST}
    query = draw(st.one_of(st.just(""), presigned_query(), any_text))
    if draw(st.booleans()):
        headers["authorization"] = draw(authorization())
    for name in draw(st.lists(st.sampled_from(["x-amz-date", "x-amz-content-sha256", "date",
                                               "x-amz-meta-a", "range"]), max_size=4)):
        headers[name] = draw(st.one_of(amz_date, payload_hash, any_text))
    path = draw(st.one_of(st.just("/b/k"), any_text.map(lambda t: "/" + t)))
    return RequestView("GET", path, query, headers)


@given(claimed_requests())
def test_claims_are_parsed_or_refused(req: RequestView) -> None:
    auth = outcome(sigv4.parse_auth, req)
    if auth is None or isinstance(auth, Refused):
        return
    outcome(sigv4.verify, auth, req, SECRET, NOW, ("us-east-1",))


keys = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
values = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=30)


def _names_auth(name: str) -> bool:
    """Query parameters that carry a signature (a second auth mechanism is refused)."""
    return name in ("Signature", "AWSAccessKeyId") or name.lower().startswith("x-amz-")


@given(keys, st.dictionaries(st.sampled_from(["x-amz-meta-a", "x-amz-meta-b", "range",
                                              "content-type", "x-amz-tagging"]), values),
       st.dictionaries(values.filter(lambda name: not _names_auth(name)), values, max_size=3),
       st.sampled_from(["GET", "PUT", "DELETE"]))
def test_what_our_signer_signs_verifies(key: str, headers: dict[str, str],
                                        query: dict[str, str], method: str) -> None:
    path = "/bucket/" + sigv4.uri_encode(key, keep_slash=True)
    raw_query = "&".join(f"{sigv4.uri_encode(k)}={sigv4.uri_encode(v)}" for k, v in
                         query.items())
    url = f"https://{HOST}{path}" + (f"?{raw_query}" if raw_query else "")
    signed = sigv4.sign_headers(method, url, headers, sigv4.UNSIGNED_PAYLOAD, AK, SECRET,
                                "us-east-1", NOW)
    sent = {name.lower(): value.encode("utf-8").decode("utf-8", "surrogateescape")
            for name, value in {**headers, **signed}.items()}
    req = RequestView(method, path, raw_query, sent)
    auth = sigv4.parse_auth(req)
    assert auth is not None
    sigv4.verify(auth, req, SECRET, NOW + timedelta(minutes=1), ("us-east-1",))


@given(any_text)
def test_canonical_encodings_take_any_text(text: str) -> None:
    sigv4.aws_uri_path(text)
    sigv4.canonical_query_string(text)
    sigv4.uri_encode(text, keep_slash=True)
