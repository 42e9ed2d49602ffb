"""What a start says to the operator, and the checks before anything is prepared: the
configuration (exit 2 with one line naming what is wrong; settings this version can not
honour named first), start-up errors and warnings on the real stderr, and the
announcement of the endpoint (with a generated root secret, shown once).

Used by the twistd entry point (`daemon.py`), the composition root (`service.py`) and the
worker processes (`prefork/`); it imports none of them, so none imports another to speak.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from objstore import __version__
from objstore.config import (
    Config,
    ConfigError,
    config_from_data,
    read_config_file,
)
from objstore.notify.settings import target_settings

if TYPE_CHECKING:
    from objstore.iam.bootstrap import BootstrapResult


def fail_startup(message: str) -> SystemExit:
    """One clear line on the process's real stderr (twistd may have redirected sys.stderr
    into its log by now) and a non-zero exit."""
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"objstore: {message}\n")
    stream.flush()
    return SystemExit(2)


def warn_startup(message: str) -> None:
    """A warning line on the process's real stderr, where start-up errors go."""
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"objstore: warning: {message}\n")
    stream.flush()


def checked_config(path: str | None) -> Config:
    """The configuration, or exit 2 with one line naming what is wrong. A setting this
    version cannot honour is named first, before the checks of its other keys (which
    would send the operator off to fix a file for a feature that is not there)."""
    try:
        data = read_config_file(path)
        unsupported = unsupported_settings(data)
        if unsupported:
            raise fail_startup(unsupported)
        config = config_from_data(data, path)
        target_settings(config.notifications)  # each target's keys, by its kind
        return config
    except ConfigError as exc:
        raise fail_startup(str(exc)) from None
    if config.metadata_override_path is not None:
        warn_startup(f"metadata backend {config.storage.metadata_backend} from "
                     f"{config.metadata_override_path} (written by a migrate-db job), not "
                     "from [storage]: copy its metadata_backend and postgres_url into the "
                     "config file, then remove it")
    return config


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name)
    return value if isinstance(value, Mapping) else {}


# Settings the config file may name (they are part of its contract) but this version cannot
# honour yet. Refusing them is kinder than silently running without them. Each predicate
# sees the parsed TOML before validation; a value that is not even valid is left to the
# validation, which names it.
_NOT_YET: tuple[tuple[str, Callable[[Mapping[str, Any]], bool]], ...] = (
    ('[logging] level: a log level other than "info"',
     lambda d: _table(d, "logging").get("level") in ("debug", "warn", "error")),
    ('[logging] format = "json": JSON logs',
     lambda d: _table(d, "logging").get("format") == "json"),
)


def unsupported_settings(data: Mapping[str, Any]) -> str | None:
    for what, applies in _NOT_YET:
        if applies(data):
            return f"{what} is not available in objstore {__version__} yet"
    return None


def announce(config: Config, bootstrap: BootstrapResult) -> None:
    """Tell the operator how to connect. A generated secret is shown here once, never again."""
    server = config.server
    scheme = "https" if server.tls else "http"
    everywhere = server.host in ("0.0.0.0", "::", "")
    host = "127.0.0.1" if everywhere else server.host
    endpoint = f"{scheme}://{host}:{server.port}"
    where = (f"listening on port {server.port} of every address ({server.host or '0.0.0.0'}); "
             f"from this machine: {endpoint}" if everywhere else f"endpoint {endpoint}")
    lines = [f"objstore {__version__}: {where}, data in {config.storage.data_dir}"]
    if bootstrap.new_secret:
        lines += [
            "A root credential was generated. The secret is shown ONLY NOW; store it safely:",
            f"  AWS_ACCESS_KEY_ID={bootstrap.access_key}",
            f"  AWS_SECRET_ACCESS_KEY={bootstrap.new_secret}",
            f"  try: aws --endpoint-url {endpoint} s3 ls",
        ]
    elif bootstrap.from_environment:
        lines.append(f"root access key {bootstrap.access_key} (from the environment)")
    else:
        lines.append(f"root access key {bootstrap.access_key} (secret shown at first start)")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
