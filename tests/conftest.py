"""The parallel rule of the whole suite. scripts/test runs the first pass with pytest-xdist
(`-n N --dist loadfile`: every test of a module runs in the same worker process, so its
module-scoped daemons and clusters stay there; the session-scoped shared daemons are one
per worker). A module runs beside others when it only touches what is its own: daemons on
ports from `free_port` (a range per worker), its own PostgreSQL database (`objstore_it_*`,
`objstore_test_*`), its own temporary directories, unique cluster secrets where discovery
could reach other clusters (mDNS), figures of its own daemons only, and deadlines that poll
(`wait_for`) instead of sleeps that assume an idle machine.

Under xdist the modules are handed out in the order of DIRECTORY_ORDER (scripts/test passes
`--no-loadscope-reorder`, which keeps it; xdist's default hands out the modules with the
most tests first, which left the few-test, minute-long cluster modules for the end): the
long, waiting modules (clusters, faults, packaging, daemons) start first and the short,
CPU-bound ones (unit, fuzz) fill the gaps at the end.

A module that stops or restarts a service every other test uses (PostgreSQL) is marked
`serial`: under xdist it is left out, and scripts/test runs it afterwards on its own with
OBJSTORE_TEST_SERIAL=only (which keeps only the `serial` tests). A plain pytest run
without xdist runs everything, serial tests included.
"""

from __future__ import annotations

import os

import pytest

DIRECTORY_ORDER = ("cluster", "faults", "packaging", "integration", "fuzz", "unit")


def _directory_rank(item: pytest.Item) -> int:
    for part in item.path.parts[::-1]:
        if part in DIRECTORY_ORDER:
            return DIRECTORY_ORDER.index(part)
    return len(DIRECTORY_ORDER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    only_serial = os.environ.get("OBJSTORE_TEST_SERIAL") == "only"
    under_xdist = "PYTEST_XDIST_WORKER" in os.environ
    if not (only_serial or under_xdist):
        return
    if under_xdist:  # a stable sort: the same order in every worker, modules kept whole
        items.sort(key=_directory_rank)
    keep, drop = [], []
    for item in items:
        is_serial = item.get_closest_marker("serial") is not None
        (keep if is_serial == only_serial else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
