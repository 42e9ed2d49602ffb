"""`python -m objstore.prefork.prepare`: prepare a node's storage before its workers start.

The supervisor (objstore/daemon.py) runs this once, to its end, before it binds the port:
create the data layout and sweep leftover spools, migrate the schema, make sure the root
credential and built-in grants exist, then print the announcement (with a generated root
secret, the only time it is shown). Exit status 2 with one line on stderr when the storage
cannot be prepared. Running it in a child keeps the database layer out of the long-lived
supervisor's memory.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="objstore-prepare")
    parser.add_argument("--config", default=None)
    args = parser.parse_args(argv)
    from objstore.iam.bootstrap import BootstrapError
    from objstore.startup import announce, checked_config, fail_startup
    from objstore.storage_open import open_storage

    config = checked_config(args.config)
    try:
        bootstrap = open_storage(config, prepare=True).close()
    except (OSError, BootstrapError) as exc:
        raise fail_startup(str(exc)) from None
    announce(config, bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
