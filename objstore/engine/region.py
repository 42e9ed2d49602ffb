"""The node's current region: `[server] region` until the `region` setting is set (admin
settings API, configuration import, a cluster peer), then the setting, without a restart.

What reads it: the authenticator (the credential scope a SigV4 request may name, with
us-east-1 always accepted), CreateBucket (a new bucket's region and the LocationConstraint
it accepts). An existing bucket keeps the region it was made in (GetBucketLocation and
x-amz-bucket-region answer it), as on AWS.

`reload` reads the setting again (after a change in this process, or when another worker
announced one); `current` never blocks and never fails.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from twisted.logger import Logger

REGION_SETTING = "region"
ALWAYS_ACCEPTED = "us-east-1"

log = Logger()


class RegionSetting:
    def __init__(self, configured: str,
                 read_setting: Callable[[str], Awaitable[str | None]] | None = None) -> None:
        self._configured = configured
        self._read = read_setting
        self._current = configured

    def current(self) -> str:
        return self._current

    def accepted(self) -> frozenset[str]:
        """The regions a request's credential scope may name."""
        return frozenset({self._current, ALWAYS_ACCEPTED})

    def set(self, value: str | None) -> None:
        self._current = value or self._configured

    async def reload(self) -> None:
        if self._read is None:
            return
        try:
            self.set(await self._read(REGION_SETTING))
        except Exception:  # the database out of reach: keep serving the last known region
            log.failure("could not read the region setting")
