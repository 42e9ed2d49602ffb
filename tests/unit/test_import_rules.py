"""The import rules of docs/ARCHITECTURE.md ("Import rules"), read from the source with
`ast`: every `import` and `from ... import` of a module counts, at any depth (inside
functions and `if TYPE_CHECKING:` too), so an upward import cannot hide in a function."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "objstore"

# (importing package, imported package it must never import, why)
FORBIDDEN = [
    ("objstore.engine", "objstore.cluster", "the engine reaches the cluster through seams"),
    ("objstore.meta", "objstore.cluster", "rules below meta/ live in convergence/"),
    ("objstore.http", "objstore.cluster", "http/ is the listener's plumbing, below cluster/"),
    ("objstore.blobs", "objstore.cluster", "blobs/ is below the cluster"),
    ("objstore.convergence", "objstore.cluster", "convergence/ is below meta/"),
    ("objstore.http", "objstore.s3", "http/ renders S3 errors itself (http/error_xml.py)"),
    ("objstore.http", "objstore.admin", "http/ is below the APIs"),
    ("objstore.engine", "objstore.s3", "the engine has no HTTP in it"),
    ("objstore.engine", "objstore.admin", "the engine has no HTTP in it"),
    ("objstore.meta", "objstore.engine", "meta/ is below the engine"),
    ("objstore.meta", "objstore.http", "meta/ does no HTTP"),
    ("objstore.meta", "twisted.web", "meta/ never imports Twisted web"),
    ("objstore.meta", "klein", "meta/ never imports Klein"),
    ("objstore.blobs", "twisted.web", "blobs/ never imports Twisted web"),
    ("objstore.blobs", "klein", "blobs/ never imports Klein"),
]

# What the pure rules below meta/ may import besides the standard library.
CONVERGENCE_MAY_IMPORT = ("objstore.convergence", "objstore.config", "objstore.errors",
                          "objstore.meta.records", "objstore.json_input",
                          "objstore.utc_dates", "cryptography")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module `path` imports, absolute; `from a import b` counts a and a.b."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{alias.name}" for alias in node.names)
    return found


@functools.cache
def modules() -> dict[str, set[str]]:
    """Every module of the package and its imports, read once per test run."""
    return {module_name(path): imports_of(path) for path in sorted(PACKAGE.rglob("*.py"))}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize(("importer", "imported", "why"), FORBIDDEN,
                         ids=[f"{a}-not-{b}" for a, b, _ in FORBIDDEN])
def test_no_module_imports_upward(importer: str, imported: str, why: str) -> None:
    offenders = sorted(f"{name} imports {target}"
                       for name, targets in modules().items() if within(name, importer)
                       for target in targets if within(target, imported))
    assert not offenders, f"{why}: {offenders}"


def test_the_convergence_rules_import_only_the_standard_library_and_plain_data() -> None:
    import sys
    offenders = sorted(
        f"{name} imports {target}"
        for name, targets in modules().items() if within(name, "objstore.convergence")
        for target in targets
        if target.split(".")[0] not in sys.stdlib_module_names
        and not any(within(target, allowed) or within(allowed, target)
                    for allowed in CONVERGENCE_MAY_IMPORT))
    assert not offenders, offenders


def test_the_rules_read_real_imports() -> None:
    """The checker is not vacuous: it sees the imports a known module has."""
    imported = imports_of(PACKAGE / "engine" / "versions.py")
    assert "objstore.convergence.lww" in imported
    assert any(within(t, "objstore.meta") for t in imported)
