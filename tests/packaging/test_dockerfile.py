"""The Dockerfile's structure, checked without a container engine: the layout matches the
Debian package, the daemon runs as a non-root user, port 9000 is exposed and the health
check asks /admin/health. Fast: no build, no daemon (test_container.py builds and runs the
image where buildah is installed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments out."""
    text = (REPO / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    result = []
    for line in joined.splitlines():
        if line.strip():
            name, _, args = line.strip().partition(" ")
            result.append((name.upper(), " ".join(args.split())))
    return result


def last_stage() -> list[tuple[str, str]]:
    steps = instructions()
    start = max(i for i, (name, _) in enumerate(steps) if name == "FROM")
    return steps[start:]


def test_known_instructions_only() -> None:
    known = {"FROM", "WORKDIR", "COPY", "RUN", "USER", "VOLUME", "EXPOSE", "STOPSIGNAL",
             "HEALTHCHECK", "ENTRYPOINT", "CMD", "ENV", "ARG", "LABEL"}
    steps = instructions()
    assert steps[0][0] == "FROM"
    assert {name for name, _ in steps} <= known, steps


def test_layout_matches_the_debian_package() -> None:
    stage = last_stage()
    copies = [args for name, args in stage if name == "COPY"]
    assert "--from=build /opt/objstore /opt/objstore" in copies
    assert "etc/objstore.toml /etc/objstore/objstore.toml" in copies
    assert ("WORKDIR", "/var/lib/objstore") in stage
    assert ("VOLUME", "/var/lib/objstore") in stage
    run = " ".join(args for name, args in stage if name == "RUN")
    assert "getPlugins" in run  # the plugin cache is written while the files are writable
    assert "useradd --system" in run and "install -d -o objstore" in run


def test_non_root_user_port_and_health_check() -> None:
    stage = last_stage()
    users = [args for name, args in stage if name == "USER"]
    assert users and users[-1] == "objstore"
    assert ("EXPOSE", "9000") in stage
    (health,) = [args for name, args in stage if name == "HEALTHCHECK"]
    assert "http://127.0.0.1:9000/admin/health" in health
    entry = json.loads(dict(stage)["ENTRYPOINT"])
    assert entry[0] == "/opt/objstore/bin/twistd" and entry[-1] == "objstore"
    assert json.loads(dict(stage)["CMD"]) == ["--config", "/etc/objstore/objstore.toml"]


def test_dockerignore_keeps_local_state_out() -> None:
    ignored = (REPO / ".dockerignore").read_text().split()
    for entry in (".venv", "data", ".git"):
        assert entry in ignored
