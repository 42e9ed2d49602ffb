"""The cluster soak, long: tests/cluster/test_soak.py (or with --partition
tests/cluster/test_soak_partition.py) run for longer than its CI 15 s.

Usage (from the repository root):
    .venv/bin/python -m bench.cluster_soak [--minutes 10] [--seed 14] [--backend sqlite]
    .venv/bin/python -m bench.cluster_soak --partition [--minutes 10] [--seed 14]

Three real daemons on loopback (the tests/cluster harness), a light mixed load (puts,
overwrites, deletes on a versioned and a plain bucket) while one node at a time is
SIGKILLed and restarted at random; at the end every node must be healthy and serve the
same version listings and bytes. --partition cuts one node at a time off the others
(TCP relays, available mode) instead of killing it, and heals it. It runs pytest on that
module with
OBJSTORE_CLUSTER_SOAK_SECONDS / OBJSTORE_CLUSTER_SOAK_SEED / OBJSTORE_CLUSTER_SOAK_BACKEND set
(the same variables run the test longer by hand) and exits with pytest's status. Never
part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.cluster_soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--partition", action="store_true",
                        help="partitions healed at random instead of kills")
    args = parser.parse_args(argv)
    env = dict(os.environ, OBJSTORE_CLUSTER_SOAK_SECONDS=str(args.minutes * 60),
               OBJSTORE_CLUSTER_SOAK_SEED=str(args.seed),
               OBJSTORE_CLUSTER_SOAK_BACKEND=args.backend)
    module = "test_soak_partition.py" if args.partition else "test_soak.py"
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-s", f"tests/cluster/{module}"]
    return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main())
