"""SSE-C keys (crypto/customer_key.py): the three headers judged as AWS does, a data key
sealed under a customer key opening only with it and only for its object, the verifier
never revealing the key, and the ETag not an MD5."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from objstore.crypto.customer_key import (
    COPY_SOURCE_PREFIX,
    HEADER_PREFIX,
    CustomerKey,
    customer_key,
    etag_of,
    key_for_object,
    require_key,
    response_headers,
)
from objstore.errors import S3Error

KEY = bytes(range(32))


def _headers(prefix: str = HEADER_PREFIX, **override: str | None) -> dict[str, str]:
    found = {prefix + "algorithm": "AES256", prefix + "key": base64.b64encode(KEY).decode(),
             prefix + "key-md5": base64.b64encode(hashlib.md5(KEY).digest()).decode()}
    for name, value in override.items():
        name = prefix + name.replace("_", "-")
        if value is None:
            found.pop(name)
        else:
            found[name] = value
    return found


def test_no_headers_no_key_and_a_complete_set_is_read() -> None:
    assert customer_key({}) is None
    key = customer_key(_headers())
    assert key is not None and "hidden" in repr(key) and KEY.hex() not in repr(key)
    assert customer_key(_headers(prefix=COPY_SOURCE_PREFIX), COPY_SOURCE_PREFIX) is not None
    assert customer_key(_headers(prefix=COPY_SOURCE_PREFIX)) is None  # another prefix
    shown = response_headers(key)
    assert shown[HEADER_PREFIX + "algorithm"] == "AES256"
    assert shown[HEADER_PREFIX + "key-MD5"] == _headers()[HEADER_PREFIX + "key-md5"]


@pytest.mark.parametrize(("override", "code"), [
    ({"algorithm": None}, "InvalidArgument"),
    ({"algorithm": "AES128"}, "InvalidEncryptionAlgorithmError"),
    ({"key": None}, "InvalidArgument"),
    ({"key_md5": None}, "InvalidArgument"),
    ({"key": base64.b64encode(b"short").decode()}, "InvalidArgument"),
    ({"key": "not base64!"}, "InvalidArgument"),
    ({"key_md5": base64.b64encode(hashlib.md5(b"x").digest()).decode()}, "InvalidArgument"),
])
def test_incomplete_or_inconsistent_headers_are_400(override: dict[str, str | None],
                                                    code: str) -> None:
    with pytest.raises(S3Error) as caught:
        customer_key(_headers(**override))
    assert caught.value.code == code and caught.value.status == 400


@given(st.dictionaries(st.sampled_from(["algorithm", "key", "key-md5"]), st.text(max_size=60)))
def test_any_header_values_are_a_key_or_a_400(values: dict[str, str]) -> None:
    headers = {HEADER_PREFIX + name: value for name, value in values.items()}
    try:
        customer_key(headers)
    except S3Error as error:
        assert error.status == 400


def test_sealed_data_key_opens_only_with_its_key_and_object() -> None:
    key = CustomerKey(KEY, "m")
    other = CustomerKey(bytes(32), "m")
    params = key.seal(b"d" * 32, b"bucket\0key\0v1")
    assert KEY.hex() not in str(params) and base64.b64encode(KEY).decode() not in str(params)
    assert key.matches(params) and not other.matches(params)
    assert key.unseal(params, b"bucket\0key\0v1") == b"d" * 32
    with pytest.raises(ValueError):
        key.unseal(params, b"bucket\0key\0v2")
    with pytest.raises(ValueError):
        other.unseal(params, b"bucket\0key\0v1")
    assert require_key(params, key) is key
    for given_key, status in ((None, 400), (other, 403)):
        with pytest.raises(S3Error) as caught:
            require_key(params, given_key)
        assert caught.value.status == status
    assert not key.matches({"ssec_salt": "%%%", "ssec_hmac": "x"})
    assert key.matches(key.verifier()) and not other.matches(key.verifier())


def test_a_key_for_an_object_that_is_not_sse_c_is_400() -> None:
    assert key_for_object("AES256", {}, None) is None
    with pytest.raises(S3Error) as caught:
        key_for_object(None, {}, CustomerKey(KEY, "m"))
    assert caught.value.status == 400


def test_the_etag_is_stable_and_not_the_md5() -> None:
    md5 = hashlib.md5(b"data").hexdigest()
    params = CustomerKey(KEY, "m").verifier()
    assert etag_of(md5, params) == etag_of(md5, params) != md5
    assert len(etag_of(md5, params)) == 32
