"""Driving ApacheBench (`ab`) for the HEAD rows, which wrk 4.1 can not measure.

wrk's HTTP parser waits for the body a HEAD response announces in its Content-Length, so
every HEAD run ends with zero requests (wg/wrk#198). `ab -i` sends HEAD and knows that no
body follows. ab repeats one URL (one presigned HEAD URL here), keeps connections alive
(`-k`, HTTP/1.0 with `Connection: Keep-Alive`) and runs one thread: about 40k requests/s
on this machine, far above objstore's rate. This module owns the command line and the
parsing of ab's summary and percentile file; the parsing is pure and unit-tested.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

from bench.wrk import WrkError, WrkResult

_MARGIN_SECONDS = 30.0


def ab_binary() -> str:
    found = shutil.which("ab")
    if found is None:
        raise WrkError("ab is not installed: apt-get update && apt-get install -y apache2-utils")
    return found


def parse_ab_output(summary: str, percentiles_csv: str) -> WrkResult:
    """The figures of one ab run, as a WrkResult: requests, duration and error counts from
    its summary, p50/p99/max from the CSV it wrote with `-e` (percent, milliseconds)."""
    fields: dict[str, str] = {}
    for line in summary.splitlines():
        name, colon, value = line.partition(":")
        if colon:
            fields[name.strip()] = value.strip()
    if "Complete requests" not in fields:
        raise WrkError("ab printed no summary:\n" + summary[-2000:])
    times: dict[int, float] = {}
    for line in percentiles_csv.splitlines()[1:]:
        percent, _, millis = line.partition(",")
        if percent.strip().isdigit():
            times[int(percent)] = float(millis)
    return WrkResult(
        requests=int(fields["Complete requests"]),
        duration_seconds=float(fields["Time taken for tests"].split()[0]),
        bytes_read=int(fields.get("Total transferred", "0").split()[0]),
        p50_ms=times.get(50, float("nan")),
        p99_ms=times.get(99, float("nan")),
        max_ms=times.get(100, float("nan")),
        socket_errors=int(fields.get("Failed requests", "0").split()[0]),
        status_errors=int(fields.get("Non-2xx responses", "0").split()[0]),
    )


def run_ab(url: str, *, method: str, connections: int, seconds: int, workdir: Path,
           name: str) -> WrkResult:
    """`ab -k` against one URL for `seconds` (HEAD when `method` is HEAD, else GET)."""
    if method not in ("GET", "HEAD"):
        raise ValueError(f"ab sends GET or HEAD, not {method}")
    csv = workdir / f"{name}.ab.csv"
    command = [ab_binary(), "-q", "-k", "-c", str(connections), "-t", str(seconds),
               "-n", "100000000", "-s", "10", "-e", str(csv)]
    if method == "HEAD":
        command.append("-i")
    process = subprocess.Popen(command + [url], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=seconds + _MARGIN_SECONDS)
    except subprocess.TimeoutExpired:
        raise WrkError(f"ab did not finish within {seconds + _MARGIN_SECONDS:.0f} s") from None
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
    if process.returncode != 0:
        raise WrkError(f"ab exited with {process.returncode}:\n{output[-2000:]}")
    return parse_ab_output(output, csv.read_text() if csv.exists() else "")
