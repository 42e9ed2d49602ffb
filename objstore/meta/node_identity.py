"""The node's id: `[cluster] node_id` when configured, otherwise the `node_id` setting,
generated once at first start and kept in the metadata database.

The setting is node-local: it names this node in its audit log, its metrics history and
the `node` label of per-node views, and must never be exported to, imported into or
replicated onto another node. Runs synchronously at start-up, before the reactor serves.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Protocol

NODE_ID_SETTING = "node_id"


class SettingsStore(Protocol):
    def get_setting(self, key: str) -> str | None: ...

    def put_setting(self, key: str, value: str) -> None: ...


def ensure_node_id(
    store: SettingsStore,
    configured: str = "",
    new_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> str:
    """The node id; stores a new one only when none is configured nor stored."""
    if configured:
        if store.get_setting(NODE_ID_SETTING) != configured:
            store.put_setting(NODE_ID_SETTING, configured)
        return configured
    stored = store.get_setting(NODE_ID_SETTING)
    if stored:
        return stored
    generated = new_id()
    store.put_setting(NODE_ID_SETTING, generated)
    return generated
