"""The configured notification targets, checked by their kinds: each
`[notifications.targets.<name>]` table goes through `targets.kind_of(kind).validate` once
at start (`startup.checked_config`: the daemon refuses to start with the kind's message),
and again when the node builds its targets (`built_targets`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from objstore.config import ConfigError, Notifications
from objstore.notify.targets import kind_of
from objstore.notify.targets.base import Target, TargetConfigError


@dataclass(frozen=True, slots=True)
class CheckedTarget:
    name: str
    kind: str
    settings: Any  # what the kind's `validate` returned


def target_settings(notifications: Notifications) -> list[CheckedTarget]:
    """Every configured target's settings; ConfigError naming the table otherwise."""
    checked = []
    for target in notifications.targets:
        where = f"[notifications.targets.{target.name}]"
        try:
            kind = kind_of(target.kind)
        except TargetConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        except ImportError as exc:  # a kind whose connector library is not installed
            raise ConfigError(f"{where}: the {target.kind} target kind is not available: "
                              f"{exc}") from None
        try:
            settings = kind.validate(target.name, target.settings())
        except TargetConfigError as exc:
            message = str(exc)
            raise ConfigError(message if message.startswith("[") else f"{where}: {message}"
                              ) from None
        checked.append(CheckedTarget(target.name, target.kind, settings))
    return checked


def built_targets(checked: list[CheckedTarget]) -> dict[str, Target]:
    """The targets of the node, by name (no I/O until their first delivery)."""
    return {c.name: kind_of(c.kind).build(c.settings) for c in checked}


__all__ = ["CheckedTarget", "built_targets", "target_settings"]
