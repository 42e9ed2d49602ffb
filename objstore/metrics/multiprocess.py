"""The node's metrics across several worker processes (`[server] workers` > 1), on
prometheus-client's multiprocess mode: every worker writes its metric values into mmap
files of its own (`<kind>_<pid>.db`) in one directory of the node's runtime directory, and
whichever worker answers a scrape merges the files of all of them, so every worker shows the
same node-wide figures.

The parent calls `prepare_directory` once before it spawns workers and `worker_exited` when
one dies (its live gauges - in flight, pools, audit queue - leave the sum; its counters and
histograms stay, so node totals never go back). A worker calls `enable` before it creates
any metric (`NodeMetrics` does it when given the directory).

What is merged, and how:

* Request counters and the latency histogram: summed over every worker that ever ran
  since the node started, dead ones included.
* `objstore_requests_in_flight` and the gauges of `PublishedCollectors` (pool saturation,
  audit queue): `livesum`, the sum over the live workers. Pool figures are summed per pool
  name, so `objstore_pool_threads{pool="db-write"}` is the node's writer threads; the audit
  queue's depth and capacity are the node's. Counters among them (audit records dropped,
  failed writes) are summed like the request counters.
* Storage figures: measured by the leader alone (a sum over the objects table), written
  atomically to `storage.json` here and read at scrape time by every worker
  (`write_storage` / `read_storage`; per-bucket series come and go with the buckets, which
  multiprocess gauges can not do).
* `process_*`: read from /proc for every live worker, labelled `pid`.

Reading the files is blocking IO whose size grows with the workers that ever ran (a
restarted worker leaves its counter files behind): it runs on a thread pool, never on the
reactor. Writing values is prometheus-client's own mmap stores, cheap enough for the reactor.
This module never touches the metadata database.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final, Literal

from prometheus_client import Counter, Gauge, values
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from twisted.logger import Logger

from objstore.meta.metrics_queries import BucketUsage
from objstore.metrics.storage import StorageFigures

log = Logger()

ENVIRONMENT = "PROMETHEUS_MULTIPROC_DIR"
STORAGE_FILE = "storage.json"
LIVE_GAUGE_MODE: Final[Literal["livesum"]] = "livesum"


def prepare_directory(path: str) -> None:
    """Create `path` and remove what a previous run of the node left in it (the parent
    process, once, before it starts any worker)."""
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".db") or name.startswith(STORAGE_FILE):
            os.remove(os.path.join(path, name))


def worker_exited(path: str, pid: int) -> None:
    """A worker process has died: its live gauges leave the node's sums (its counters and
    histograms stay, so node totals never go back)."""
    mark_process_dead(pid, path)


def enable(path: str, *, process_identifier: Callable[[], int | str] = os.getpid) -> None:
    """Make every metric created from now on in this process store its values in mmap files
    under `path` (a worker process, at start-up, before any metric exists). Metrics created
    before keep their in-memory values and are not seen by other workers.

    `process_identifier` names this process's files; tests pass their own to simulate
    several workers in one process. It must not contain '_'."""
    os.environ[ENVIRONMENT] = path
    values.ValueClass = values.MultiProcessValue(process_identifier)


def enabled(path: str) -> bool:
    """Whether `enable(path)` is in force in this process."""
    multiprocess = getattr(values.ValueClass, "_multiprocess", False)
    return bool(multiprocess) and os.environ.get(ENVIRONMENT) == path


def live_pids(path: str) -> list[int]:
    """The workers alive now: those whose live gauge file `worker_exited` has not removed
    yet (every worker has one from start-up: the in-flight gauge)."""
    pids = []
    for file in glob.glob(os.path.join(path, f"gauge_{LIVE_GAUGE_MODE}_*.db")):
        ident = os.path.basename(file)[len(f"gauge_{LIVE_GAUGE_MODE}_"):-len(".db")]
        if ident.isdigit():
            pids.append(int(ident))
    return sorted(pids)


def merged_families(path: str, *, kinds: Iterable[str] = ("*",)) -> list[Metric]:
    """The metric families of every worker's files, merged (blocking: a thread pool)."""
    files: list[str] = []
    for kind in kinds:
        files += glob.glob(os.path.join(path, f"{kind}_*.db"))
    return list(MultiProcessCollector.merge(sorted(f for f in files if _initialised(f)),
                                            accumulate=True))


# A worker that is starting creates its files empty and then sizes them: a scrape at that
# moment must skip them (prometheus-client would fail to read the missing header).
_HEADER_BYTES = 8


def _initialised(file: str) -> bool:
    try:
        return os.path.getsize(file) >= _HEADER_BYTES
    except OSError:  # removed meanwhile (a dead worker's live gauges)
        return False


def process_families(pids: Iterable[int]) -> list[Metric]:
    """`process_*` families of the given processes (from /proc), one series per pid."""
    merged: dict[str, Metric] = {}
    current = [0]
    collector = ProcessCollector(pid=lambda: current[0], registry=None)
    for pid in pids:
        current[0] = pid
        for family in collector.collect():
            target = merged.get(family.name)
            if target is None:
                target = merged[family.name] = Metric(family.name, family.documentation,
                                                      family.type, family.unit)
            for sample in family.samples:
                target.add_sample(sample.name, {**sample.labels, "pid": str(pid)},
                                  sample.value)
    return list(merged.values())


def write_storage(path: str, figures: StorageFigures) -> None:
    """Replace the shared storage figures atomically (the leader, on a thread pool)."""
    document = {
        "taken_at": figures.taken_at,
        "buckets": figures.buckets,
        "objects": figures.objects,
        "stored_bytes": figures.stored_bytes,
        "per_bucket": [[u.bucket, u.objects, u.stored_bytes] for u in figures.per_bucket],
    }
    target = os.path.join(path, STORAGE_FILE)
    temporary = f"{target}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as stream:
        json.dump(document, stream, separators=(",", ":"))
    os.replace(temporary, target)


def read_storage(path: str) -> StorageFigures | None:
    """The leader's latest storage figures, None before its first measure (blocking)."""
    try:
        with open(os.path.join(path, STORAGE_FILE), encoding="utf-8") as stream:
            document = json.load(stream)
        return StorageFigures(
            taken_at=float(document["taken_at"]),
            buckets=int(document["buckets"]),
            objects=int(document["objects"]),
            stored_bytes=int(document["stored_bytes"]),
            per_bucket=tuple(BucketUsage(str(b), int(o), int(s))
                             for b, o, s in document["per_bucket"]),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        log.failure("unreadable shared storage figures")
        return None


class PublishedCollectors:
    """Scrape-time collectors of this process (figures held in memory: pools, audit queue)
    copied into multiprocess metrics, so the other workers' scrapes see them.

    `publish` runs on the reactor (a timer, and before every scrape this process answers):
    gauges become `livesum` gauges, counters grow by what they grew since the last
    publish. Only gauge and counter families are supported. A labelled series a collector
    stops reporting is published as 0 (multiprocess files can not forget a series)."""

    def __init__(self) -> None:
        self._collectors: list[Collector] = []
        self._gauges: dict[tuple[str, tuple[str, ...]], Gauge] = {}
        self._counters: dict[tuple[str, tuple[str, ...]], Counter] = {}
        self._published: dict[tuple[str, tuple[str, ...]], dict[tuple[str, ...], float]] = {}

    def add(self, collector: Collector) -> None:
        self._collectors.append(collector)

    def publish(self) -> None:
        for collector in self._collectors:
            for family in collector.collect():
                if family.type == "gauge":
                    self._publish_gauge(family)
                elif family.type == "counter":
                    self._publish_counter(family)
                else:
                    raise TypeError(f"{family.name}: a {family.type} can not be published")

    def _publish_gauge(self, family: Metric) -> None:
        for labelnames, series in _series(family, family.name).items():
            key = (family.name, labelnames)
            gauge = self._gauges.get(key)
            if gauge is None:
                gauge = self._gauges[key] = Gauge(
                    family.name, family.documentation, labelnames, registry=None,
                    multiprocess_mode=LIVE_GAUGE_MODE)
            before = self._published.setdefault(key, {})
            for labelvalues in before.keys() - series.keys():
                series[labelvalues] = 0.0
            for labelvalues, value in series.items():
                if before.get(labelvalues) != value:
                    (gauge.labels(*labelvalues) if labelnames else gauge).set(value)
                    before[labelvalues] = value

    def _publish_counter(self, family: Metric) -> None:
        for labelnames, series in _series(family, family.name + "_total").items():
            key = (family.name, labelnames)
            counter = self._counters.get(key)
            if counter is None:
                counter = self._counters[key] = Counter(
                    family.name, family.documentation, labelnames, registry=None)
            before = self._published.setdefault(key, {})
            for labelvalues, value in series.items():
                first = labelvalues not in before  # shown from the start, at 0
                grown = value - before.get(labelvalues, 0.0)
                if first or grown > 0:
                    child = counter.labels(*labelvalues) if labelnames else counter
                    child.inc(max(grown, 0.0))
                    before[labelvalues] = max(value, before.get(labelvalues, 0.0))


def _series(family: Metric, sample_name: str
            ) -> dict[tuple[str, ...], dict[tuple[str, ...], float]]:
    """{label names: {label values: value}} of the family's samples named `sample_name`."""
    found: dict[tuple[str, ...], dict[tuple[str, ...], float]] = {}
    for sample in family.samples:
        if sample.name != sample_name:
            continue
        labels: Mapping[str, str] = sample.labels
        names = tuple(sorted(labels))
        found.setdefault(names, {})[tuple(labels[n] for n in names)] = float(sample.value)
    return found


class StaticFamilies(Collector):
    """A collector over families already collected (what a render runs through)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)

