"""Notification target kinds: one module each, named here (the dispatch table); each module
exposes `KIND: TargetKind` (see `base.py`). `kind_of(name)` loads a kind's module on first
use, so a connector library is imported only when a target of its kind is configured."""

from __future__ import annotations

import importlib

from objstore.notify.targets.base import TargetConfigError, TargetKind

KIND_MODULES: dict[str, str] = {
    "webhook": "objstore.notify.targets.webhook",
    "amqp": "objstore.notify.targets.amqp",
    "mqtt": "objstore.notify.targets.mqtt",
    "nats": "objstore.notify.targets.nats",
    "redis": "objstore.notify.targets.redis",
    "postgresql": "objstore.notify.targets.postgresql",
    "mysql": "objstore.notify.targets.mysql",
    "smtp": "objstore.notify.targets.smtp",
    "syslog": "objstore.notify.targets.syslog",
}


def kind_of(kind: str) -> TargetKind:
    """The target kind named `kind`, or TargetConfigError naming the kinds there are."""
    module = KIND_MODULES.get(kind)
    if module is None:
        raise TargetConfigError(
            f"unknown target kind {kind!r} (one of: {', '.join(KIND_MODULES)})")
    loaded: TargetKind = importlib.import_module(module).KIND
    return loaded


__all__ = ["KIND_MODULES", "kind_of"]
