"""Package import direction: crawlers → culturebase ← retrieval ← agents ← services; eval reads agents.

The command line lives in services/cli only: eval/ and agents/ never import services (nor typer; eval not rich),
and culturebase/ imports neither typer nor rich.  Read from the source (every import statement,
including the ones inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FORBIDDEN = {
    "eval": ("services", "typer", "rich"),
    "agents": ("services", "eval", "typer"),
    "retrieval": ("services", "eval", "agents", "typer"),
    "culturebase": ("services", "eval", "agents", "retrieval", "crawlers", "typer", "rich"),
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text("utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_to_its_right(package):
    bad = []
    for path in sorted((REPO / package).rglob("*.py")):
        for line, module in imported_modules(path):
            if module.split(".")[0] in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(REPO)}:{line}: imports {module}")
    assert not bad, "\n".join(bad)


def test_the_detector_sees_a_nested_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from services.cli.console import fail\n    import typer\n")
    assert imported_modules(source) == [(2, "services.cli.console"), (3, "typer")]
