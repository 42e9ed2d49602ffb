"""The node's readiness state as GET /admin/health reports it (healthy, draining).

Later states (syncing, read_only) join here; precedence is draining, syncing, read_only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class HealthState:
    draining: bool = False

    def status(self) -> tuple[int, str]:
        """(HTTP status, body status) for a plain readiness probe."""
        if self.draining:
            return 503, "draining"
        return 200, "ok"
