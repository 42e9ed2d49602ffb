"""The parallel rule of the whole suite. scripts/test runs the first pass with pytest-xdist
(`-n N --dist loadfile`: every test of a module runs in the same worker process, so its
module-scoped daemons and clusters stay there; the session-scoped shared daemons are one
per worker). A module runs beside others when it only touches what is its own: daemons on
ports from `free_port` (a range per worker), its own PostgreSQL database (`objstore_it_*`,
`objstore_test_*`), its own temporary directories, unique cluster secrets where discovery
could reach other clusters (mDNS), figures of its own daemons only, and deadlines that poll
(`wait_for`) instead of sleeps that assume an idle machine.

A module that stops or restarts a service every other test uses (PostgreSQL) is marked
`serial`: under xdist it is left out, and scripts/test runs it afterwards on its own with
OBJSTORE_TEST_SERIAL=only (which keeps only the `serial` tests). A plain pytest run
without xdist runs everything, serial tests included.
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    only_serial = os.environ.get("OBJSTORE_TEST_SERIAL") == "only"
    under_xdist = "PYTEST_XDIST_WORKER" in os.environ
    if not (only_serial or under_xdist):
        return
    keep, drop = [], []
    for item in items:
        is_serial = item.get_closest_marker("serial") is not None
        (keep if is_serial == only_serial else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
