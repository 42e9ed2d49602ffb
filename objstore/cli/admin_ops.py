"""The operator's admin subcommands of `objstore` beyond IAM, objects and jobs: bucket
quotas, server settings, the metrics history (with a small terminal chart) and the cluster
view. Each is a call of the admin API; `COMMANDS` here joins the table of
`admin_commands.py`. Never imports Twisted.

`sparkline` and `history_chart` are pure: the chart is one line of block characters per
figure, scaled to its own maximum, oldest sample on the left.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from objstore.cli.admin_iam import CommandFailed, Result, Session
from objstore.cli.admin_spec import Arg, Command, arg
from objstore.cli.tables import human_bytes, render_record, render_table

BLOCKS = " ▁▂▃▄▅▆▇█"
CHART_FIGURES = ("requests", "errors", "bytes_in", "bytes_out", "objects", "stored_bytes")
BYTE_FIGURES = frozenset({"bytes_in", "bytes_out", "stored_bytes"})


# -- pure rendering ----------------------------------------------------------------------


def sparkline(values: Sequence[float], width: int = 60) -> str:
    """`values` as block characters, at most `width` (the newest kept), scaled to the
    largest; all zero is a flat line of the lowest block."""
    shown = list(values)[-width:]
    if not shown:
        return ""
    top = max(shown)
    if top <= 0:
        return BLOCKS[1] * len(shown)
    last = len(BLOCKS) - 1
    return "".join(BLOCKS[max(1, round(value / top * last))] if value > 0 else BLOCKS[1]
                   for value in shown)


def history_chart(samples: Sequence[Mapping[str, Any]], figures: Sequence[str],
                  width: int = 60) -> str:
    """One chart line per figure (samples newest first, as the API answers), with the
    newest value and the maximum."""
    if not samples:
        return "(no samples yet)"
    ordered = list(reversed(samples))
    first, last = ordered[0].get("time", "?"), ordered[-1].get("time", "?")
    label_width = max(len(name) for name in figures)
    lines = [f"{len(ordered)} samples, {first} .. {last}"]
    for name in figures:
        values = [_number(sample.get(name)) for sample in ordered]
        shown = human_bytes if name in BYTE_FIGURES else _plain
        lines.append(f"{name:<{label_width}} {sparkline(values, width)} "
                     f"now {shown(values[-1])}, max {shown(max(values))}")
    return "\n".join(lines)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else 0.0


def _plain(value: float) -> str:
    return f"{value:.0f}"


# -- quotas ------------------------------------------------------------------------------


def _quota_path(a: argparse.Namespace) -> str:
    return f"/buckets/{a.bucket}/quota"


def _quota_text(found: Mapping[str, Any]) -> str:
    usage = found.get("usage") or {}
    return render_record({
        "bucket": found.get("bucket"),
        "max_bytes": "unlimited" if found.get("max_bytes") is None
        else f"{found['max_bytes']} ({human_bytes(found['max_bytes'])})",
        "max_objects": "unlimited" if found.get("max_objects") is None
        else found["max_objects"],
        "used_bytes": f"{usage.get('bytes', 0)} ({human_bytes(usage.get('bytes', 0))})",
        "used_objects": usage.get("objects", 0),
    })


def quota_get(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("GET", _quota_path(a))
    return Result(found, _quota_text(found))


def quota_set(s: Session, a: argparse.Namespace) -> Result:
    if a.max_bytes is None and a.max_objects is None:
        raise CommandFailed("give --max-bytes, --max-objects or both (a PUT states the whole "
                            "quota; `quota delete` removes it)")
    found = s.client.call("PUT", _quota_path(a),
                          body={"max_bytes": a.max_bytes, "max_objects": a.max_objects})
    return Result(found, _quota_text(found))


def quota_delete(s: Session, a: argparse.Namespace) -> Result:
    s.client.call("DELETE", _quota_path(a))
    return Result({"bucket": a.bucket, "max_bytes": None, "max_objects": None},
                  f"quota of {a.bucket} removed")


def size(text: str) -> int:
    """A byte count: digits with an optional K, M, G or T (powers of 1024)."""
    units = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
    stripped = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = stripped[-1:] if stripped[-1:] in units and stripped[-1:] else ""
    digits = stripped[:-1] if unit else stripped
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 500G, 1024, 10M)")
    return int(digits) * units[unit]


# -- settings ----------------------------------------------------------------------------


def settings_list(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("GET", "/settings")
    return Result(found, render_table(found, [("KEY", "key"), ("VALUE", "value"),
                                              ("WRITABLE", "writable"),
                                              ("NODE_LOCAL", "node_local"),
                                              ("DESCRIPTION", "description")]))


def settings_get(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("GET", f"/settings/{a.key}")
    return Result(found, render_record(found))


def settings_set(s: Session, a: argparse.Namespace) -> Result:
    try:
        value: Any = json.loads(a.value)
    except ValueError:
        value = a.value  # plain text: a string setting
    found = s.client.call("PUT", f"/settings/{a.key}", body={"key": a.key, "value": value})
    return Result(found, render_record(found))


def settings_delete(s: Session, a: argparse.Namespace) -> Result:
    s.client.call("DELETE", f"/settings/{a.key}")
    return Result({"key": a.key}, f"{a.key} back to its default")


# -- metrics history and cluster -----------------------------------------------------------


def metrics_history(s: Session, a: argparse.Namespace) -> Result:
    query = {name: getattr(a, name) for name in ("since", "until", "limit", "node")}
    page = s.client.call("GET", "/metrics/history", query=query)
    samples = page.get("samples", []) if isinstance(page, dict) else []
    figures = a.figure or list(CHART_FIGURES)
    return Result(page, history_chart(samples, figures, width=a.width))


NODE_COLUMNS = [("NODE", "node_id"), ("STATE", "state"), ("ELIGIBLE", "eligible"),
                ("CONFIG_OK", "config_ok"), ("CLOCK_OFFSET_S", "clock_offset_seconds"),
                ("LAST_SEEN", "last_seen"), ("ADDRESS", "address")]


def cluster_status(s: Session, a: argparse.Namespace) -> Result:
    found = s.client.call("GET", "/cluster")
    summary = {key: found.get(key) for key in (
        "enabled", "node_id", "consistency", "cluster_size", "write_quorum", "gate",
        "eligible_node_count", "live_node_count", "worker_leader", "syncing",
        "tombstone_gc_blocked") if key in found}
    text = render_record(summary) + "\n\n" + render_table(found.get("nodes", []), NODE_COLUMNS)
    return Result(found, text)


BUCKET = arg("bucket")
TIME_FILTERS: tuple[Arg, ...] = (
    arg("--since", help="ISO 8601 time (inclusive)"),
    arg("--until", help="ISO 8601 time (exclusive)"),
    arg("--limit", type=int, help="samples (default 1000, at most 10000)"),
    arg("--node", help="a node id, or all"),
)

COMMANDS: tuple[Command, ...] = (
    Command(("buckets", "quota", "get"), "a bucket's quota and usage", quota_get, (BUCKET,)),
    Command(("buckets", "quota", "set"), "limit a bucket's bytes and/or objects", quota_set,
            (BUCKET, arg("--max-bytes", type=size, help="e.g. 500G, 10M, 1048576"),
             arg("--max-objects", type=int, help="object versions"))),
    Command(("buckets", "quota", "delete"), "remove a bucket's quota", quota_delete,
            (BUCKET,)),
    Command(("settings", "list"), "server settings with their values", settings_list),
    Command(("settings", "get"), "one setting", settings_get, (arg("key"),)),
    Command(("settings", "set"), "change a setting (the value read as JSON if it is)",
            settings_set, (arg("key"), arg("value"))),
    Command(("settings", "delete"), "return a setting to its default", settings_delete,
            (arg("key"),)),
    Command(("metrics", "history"), "the metrics history as terminal charts",
            metrics_history,
            (*TIME_FILTERS,
             arg("--figure", action="append", choices=CHART_FIGURES,
                 help="a figure to chart (repeatable; default all)"),
             arg("--width", type=int, default=60, help="chart width in samples"))),
    Command(("cluster", "status"), "the cluster as this node sees it", cluster_status),
)

GROUPS: dict[tuple[str, ...], str] = {
    ("buckets", "quota"): "bucket quotas (bytes, objects)",
    ("settings",): "server settings (region, lifecycle interval, ...)",
    ("metrics",): "metrics history",
    ("cluster",): "cluster status",
}

__all__ = ["COMMANDS", "GROUPS", "history_chart", "size", "sparkline"]
