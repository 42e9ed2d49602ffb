"""`fast_replace`: `dataclasses.replace` for the records copied on every request.

`dataclasses.replace` looks up the class's fields and calls `__init__` with every one of
them on each call: 8.3 us for an `ObjectRecord` (32 fields), and a small PUT made four
such copies on the reactor thread. `fast_replace` copies the instance's `__dict__` and sets
the changed fields: 1.1 us. It takes only what that shortcut cannot get wrong: a dataclass
without `__slots__`, `__post_init__` or fields left out of `__init__` (checked once per
class), and names of its fields (checked on every call), so the copy is the one `replace`
would make.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_FIELDS: dict[type, frozenset[str]] = {}


def _fields_of(cls: type) -> frozenset[str]:
    found = _FIELDS.get(cls)
    if found is None:
        if not dataclasses.is_dataclass(cls) or "__slots__" in cls.__dict__:
            raise TypeError(f"fast_replace: {cls.__name__} is not a dataclass with a __dict__")
        if hasattr(cls, "__post_init__"):
            raise TypeError(f"fast_replace: {cls.__name__} has a __post_init__")
        fields = dataclasses.fields(cls)
        if not all(field.init for field in fields):
            raise TypeError(f"fast_replace: {cls.__name__} has fields outside __init__")
        found = frozenset(field.name for field in fields)
        _FIELDS[cls] = found
    return found


def fast_replace(obj: T, /, **changes: Any) -> T:
    """A copy of dataclass instance `obj` with `changes`, as `dataclasses.replace(obj,
    **changes)` makes it (TypeError for a name that is not a field)."""
    cls = type(obj)
    if not changes.keys() <= _fields_of(cls):
        unknown = sorted(changes.keys() - _fields_of(cls))
        raise TypeError(f"fast_replace: {cls.__name__} has no field {', '.join(unknown)}")
    copy = object.__new__(cls)
    state = copy.__dict__
    state.update(obj.__dict__)
    state.update(changes)
    return copy
