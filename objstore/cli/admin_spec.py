"""The shape of an admin subcommand in the `objstore` command tables: its path of words,
help, handler and arguments (`admin_commands.COMMANDS` and the tables it joins)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from objstore.cli.admin_iam import Handler


@dataclass(frozen=True)
class Arg:
    flags: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)


def arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, options)


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    help: str
    run: Handler
    args: tuple[Arg, ...] = ()


__all__ = ["Arg", "Command", "arg"]
