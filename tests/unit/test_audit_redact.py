"""The audit log's redaction (audit/redact.py): secrets and SSE-C keys never recorded."""

from __future__ import annotations

from objstore.audit.redact import REDACTED, redact_text, safe_details

CUSTOMER_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def test_customer_key_values_are_redacted_in_text() -> None:
    for text in (f"x-amz-server-side-encryption-customer-key={CUSTOMER_KEY}",
                 f"x-amz-copy-source-server-side-encryption-customer-key: {CUSTOMER_KEY}",
                 f"X-Amz-Signature=abc&x-amz-server-side-encryption-customer-key={CUSTOMER_KEY}"):
        redacted = redact_text(text)
        assert CUSTOMER_KEY not in redacted and REDACTED in redacted


def test_customer_key_fields_are_dropped_from_details() -> None:
    details = safe_details({"x-amz-server-side-encryption-customer-key": CUSTOMER_KEY,
                            "customer_key": CUSTOMER_KEY, "bucket": "b"})
    assert details == {"bucket": "b"}


def test_plain_text_is_kept() -> None:
    assert redact_text("a=1, b: two") == "a=1, b: two"
