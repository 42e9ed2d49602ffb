"""Which byte ranges of which blobs make up a range of an object.

A plain object is one blob; a multipart (composite) object is its parts' blobs in order,
never rewritten into one file. Pure functions: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from objstore.meta.records import ObjectRecord


@dataclass(frozen=True)
class Segment:
    blob_id: str
    offset: int
    length: int


def plan_segments(record: ObjectRecord, start: int, length: int) -> list[Segment]:
    """Segments covering bytes [start, start + length) of the object."""
    if length <= 0:
        return []
    if not record.parts:
        if record.blob_id is None:
            raise ValueError("a delete marker has no bytes")
        return [Segment(record.blob_id, start, length)]
    segments: list[Segment] = []
    part_start = 0
    end = start + length
    for part in record.parts:
        part_end = part_start + part.size
        if part_end > start and part_start < end:
            first = max(start, part_start)
            last = min(end, part_end)
            segments.append(Segment(part.blob_id, first - part_start, last - first))
        if part_end >= end:
            break
        part_start = part_end
    return segments


def part_span(record: ObjectRecord, part_number: int) -> tuple[int, int] | None:
    """(start, length) of part `part_number` (1-based) of the object, for GET ?partNumber=.
    A plain object has exactly one part, the whole object."""
    if not record.parts:
        return (0, record.size) if part_number == 1 else None
    offset = 0
    for index, part in enumerate(record.parts, start=1):
        if index == part_number:
            return offset, part.size
        offset += part.size
    return None
