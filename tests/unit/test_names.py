import pytest

from objstore.engine.names import bucket_name_problem, key_problem


@pytest.mark.parametrize("name", ["abc", "my-bucket", "a.b.c", "0bucket9", "x" * 63])
def test_valid_bucket_names(name: str) -> None:
    assert bucket_name_problem(name) is None


@pytest.mark.parametrize(
    "name",
    ["ab", "x" * 64, "Upper", "a..b", "a.-b", "a-.b", "-abc", "abc-", "192.168.1.1",
     "under_score", "xn--abc", "has space"],
)
def test_invalid_bucket_names(name: str) -> None:
    assert bucket_name_problem(name) is not None


def test_key_rules() -> None:
    assert key_problem("a/b/c/") is None
    assert key_problem("ünïcödé + %") is None
    assert key_problem("") is not None
    assert key_problem("a\x00b") is not None
    assert key_problem("k" * 1025)[0] == "KeyTooLongError"  # type: ignore[index]
    assert key_problem("é" * 513)[0] == "KeyTooLongError"  # type: ignore[index]


@pytest.mark.parametrize("name", ["admin", "console"])
def test_reserved_bucket_names(name: str) -> None:
    assert "reserved" in (bucket_name_problem(name) or "")
    assert bucket_name_problem(name + "-data") is None
