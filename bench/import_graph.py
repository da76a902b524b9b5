"""Print the project's import graph figures as JSON: cycles, upward edges and private names imported.

Every ``import``/``from ... import`` in the library packages counts, including those inside functions.
The floors are declared below, lowest first; a module may import its own floor or any floor below it.
An edge to a floor above is *upward*. A name starting with ``_`` imported from another module is a
*private import*. Run: ``python bench/import_graph.py`` (exit 1 when any of the three is non-zero).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("culturebase", "retrieval", "crawlers", "agents", "eval", "services")

# Floors, lowest first. A module's floor is the longest prefix listed; each package's own name is the
# floor of anything in it that no longer prefix names.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("culturebase",),
    ("retrieval.text", "retrieval.data_cache", "retrieval.ocr"),
    ("retrieval.embedders",),
    (
        "retrieval.calibration.record",
        "retrieval.calibration.resolve",
        "retrieval.calibration.sidecar",
        "retrieval.calibration.peek",
        "retrieval.calibration.stats",
    ),
    ("retrieval.images", "retrieval.sounds", "retrieval.dump_import"),
    ("retrieval.knowledge_base", "retrieval.grounding", "retrieval.warmup", "retrieval"),
    ("retrieval.websearch",),
    ("retrieval.calibration",),
    ("crawlers",),
    ("agents",),
    ("eval",),
    ("services",),
)


def module_name(path: Path, root: Path = ROOT) -> str:
    """Dotted module name of a file under the project root."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def library_files(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    """Every Python file of the library packages."""
    return sorted(p for pkg in packages for p in (root / pkg).rglob("*.py"))


def resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """Absolute module a ``from`` import names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def floor_of(module: str) -> int:
    """Index of the floor a module sits on (the longest declared prefix)."""
    best, rank = -1, -1
    for index, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    return rank


def edges(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> tuple[list[tuple[str, str]], list[dict[str, str]]]:
    """(importer, imported) pairs between project modules, and the private names imported."""
    modules = {module_name(p, root): p for p in library_files(root, packages)}
    found: list[tuple[str, str]] = []
    private: list[dict[str, str]] = []

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = known(alias.name)
                    if target and target != name:
                        found.append((name, target))
            elif isinstance(node, ast.ImportFrom):
                base = resolve(name, path.name == "__init__.py", node)
                for alias in node.names:
                    target = known(f"{base}.{alias.name}") or known(base)
                    if not target or target == name:
                        continue
                    found.append((name, target))
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        private.append({"module": name, "imports": f"{base}.{alias.name}"})
    return sorted(set(found)), private


def report(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict:
    """The figures: cycles, upward edges, private imports."""
    pairs, private = edges(root, packages)
    graph = nx.DiGraph(pairs)
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    upward = [
        {"from": a, "to": b, "floors": [floor_of(a), floor_of(b)]}
        for a, b in pairs
        if floor_of(b) > floor_of(a)
    ]
    return {
        "modules": graph.number_of_nodes(),
        "edges": len(pairs),
        "cycles": len(cycles),
        "cycle_members": cycles,
        "upward_edges": len(upward),
        "upward": upward,
        "private_imports": len(private),
        "private": private,
    }


def main() -> int:
    """Print the report; exit 1 when there is any cycle, upward edge or private import."""
    figures = report()
    json.dump(figures, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return int(bool(figures["cycles"] or figures["upward_edges"] or figures["private_imports"]))


if __name__ == "__main__":
    raise SystemExit(main())
