"""Plain-text rendering of admin API answers for people: aligned tables of rows and
`field: value` blocks for one record.

Pure functions of their arguments (no I/O, no Twisted); `--json` output bypasses them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

Column = tuple[str, str]  # (heading, field)
EMPTY = "-"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def cell(value: Any) -> str:
    """One value as table text: `-` for nothing, yes/no, lists joined, objects as JSON."""
    if value is None or value == "":
        return EMPTY
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(cell(item) for item in value) or EMPTY
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return " ".join(str(value).split())  # no line breaks inside a row


def human_bytes(size: Any) -> str:
    """`1.5 GiB` style, exact bytes below 1 KiB; non-numbers pass through `cell`."""
    if isinstance(size, bool) or not isinstance(size, int | float):
        return cell(size)
    value = float(size)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return cell(size)  # pragma: no cover (the loop always returns)


def render_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """Rows under upper-case headings, columns padded to their widest cell; `(none)` for
    no rows."""
    if not rows:
        return "(none)"
    grid = [[heading for heading, _ in columns]]
    grid += [[cell(row.get(field)) for _, field in columns] for row in rows]
    widths = [max(len(line[i]) for line in grid) for i in range(len(columns))]
    lines = []
    for line in grid:
        padded = [text.ljust(width) for text, width in zip(line, widths, strict=True)]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def render_record(record: Mapping[str, Any], fields: Sequence[str] | None = None) -> str:
    """`field: value` lines, labels aligned; `fields` picks and orders them (default all)."""
    names = list(fields) if fields is not None else list(record)
    present = [name for name in names if name in record]
    if not present:
        return "(none)"
    width = max(len(name) for name in present) + 1
    return "\n".join(f"{(name + ':').ljust(width)} {cell(record[name])}" for name in present)
