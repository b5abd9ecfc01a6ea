"""The backends' place in the layers, checked on the source (until an import-linter contract
states it for the whole package): backends import nothing above them, the security rules
import no backend, and only the container backend imports docker."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import devcell

PACKAGE = Path(devcell.__file__).parent
ABOVE_BACKENDS = ("devcell.reconciler", "devcell.controllers", "devcell.cli", "devcell.runs")
DOCKER = ("docker", "requests", "urllib3")


def imported(path: Path) -> Iterator[str]:
    """Every module `path` imports, at the top or inside a function, absolute names."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_backends_import_nothing_above_them() -> None:
    wrong = {(path.name, name) for path in (PACKAGE / "backends").glob("*.py")
             for name in imported(path) if within(name, ABOVE_BACKENDS)}
    assert wrong == set()


def test_the_security_rules_import_no_backend() -> None:
    assert [n for n in imported(PACKAGE / "security.py") if within(n, ("devcell.backends",))] == []


def test_only_the_container_backend_imports_docker() -> None:
    users = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
             if any(within(name, DOCKER) for name in imported(path))}
    assert users == {"backends/container.py"}
