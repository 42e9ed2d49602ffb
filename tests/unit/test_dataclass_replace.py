"""`fast_replace` (objstore/dataclass_replace.py) makes the copy `dataclasses.replace`
makes, and refuses what its shortcut could get wrong."""

from __future__ import annotations

import dataclasses

import pytest

from objstore.dataclass_replace import fast_replace
from objstore.meta.records import ObjectRecord


def record() -> ObjectRecord:
    return ObjectRecord(bucket="b", key="k", version_id="v1", blob_id="a" * 32, size=4096,
                        etag="e", last_modified=1.5, tags={"t": "1"})


def test_the_copy_is_replaces_copy() -> None:
    original = record()
    copy = fast_replace(original, version_id="v2", retention_mode="GOVERNANCE")
    assert copy == dataclasses.replace(original, version_id="v2", retention_mode="GOVERNANCE")
    assert type(copy) is ObjectRecord and copy is not original
    assert original.version_id == "v1" and original.retention_mode is None  # unchanged
    assert copy.tags is original.tags  # shared, as replace shares it
    assert hash(copy.version_id) == hash("v2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.size = 1  # type: ignore[misc]
    assert fast_replace(original) == original


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(TypeError, match="no field colour"):
        fast_replace(record(), colour="red")


@dataclasses.dataclass(frozen=True, slots=True)
class Slotted:
    a: int


@dataclasses.dataclass
class Checked:
    a: int

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("negative")


@dataclasses.dataclass
class Derived:
    a: int
    b: int = dataclasses.field(init=False, default=0)


@pytest.mark.parametrize("instance", [Slotted(1), Checked(1), Derived(1), object()])
def test_what_the_shortcut_could_get_wrong_is_refused(instance: object) -> None:
    with pytest.raises(TypeError):
        fast_replace(instance, a=2)
