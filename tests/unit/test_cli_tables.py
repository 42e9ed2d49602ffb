"""Table and record rendering of the admin commands (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from objstore.cli.tables import cell, human_bytes, render_record, render_table


@pytest.mark.parametrize(("value", "text"), [
    (None, "-"), ("", "-"), (True, "yes"), (False, "no"), (0, "0"), ([], "-"),
    (["a", "b"], "a, b"), ({"b": 1, "a": [2]}, '{"a":[2],"b":1}'), ("two\nlines", "two lines"),
])
def test_cells(value: Any, text: str) -> None:
    assert cell(value) == text


@pytest.mark.parametrize(("size", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (5 * 1024**3, "5.0 GiB"), (None, "-"), ("many", "many"), (True, "yes"),
])
def test_human_bytes(size: Any, text: str) -> None:
    assert human_bytes(size) == text


def test_tables_align_columns_and_strip_trailing_space() -> None:
    rows = [{"name": "alice", "id": 1, "note": ""}, {"name": "bo", "id": 12345, "note": "x"}]
    text = render_table(rows, [("NAME", "name"), ("ID", "id"), ("NOTE", "note")])
    assert text.splitlines() == [
        "NAME   ID     NOTE",
        "alice  1      -",
        "bo     12345  x",
    ]


def test_empty_tables_and_missing_fields() -> None:
    assert render_table([], [("A", "a")]) == "(none)"
    assert render_table([{}], [("A", "a")]).splitlines()[1] == "-"


def test_records_align_labels_and_pick_fields() -> None:
    record = {"user_id": "u1", "username": "alice", "is_root": False}
    assert render_record(record).splitlines() == [
        "user_id:  u1", "username: alice", "is_root:  no"]
    assert render_record(record, ["username", "missing"]) == "username: alice"
    assert render_record({}) == "(none)"
