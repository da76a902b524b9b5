"""Print the functions longer than the limit as JSON: the library's (the limit holds there) and bench ``main()``s.

A function's length is its lines from ``def`` (decorators excluded) to its last line, docstring
included. Run: ``python bench/function_lengths.py [--limit 80]``; exit 1 when a library function is
over the limit.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("culturebase", "retrieval", "crawlers", "agents", "eval", "services")


def lengths(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of every function in a file, nested ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[str, int, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((name, child.lineno, (child.end_lineno or child.lineno) - child.lineno + 1))
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return found


def over(folders: tuple[str, ...], limit: int) -> list[dict[str, object]]:
    """Every function in the folders longer than ``limit`` lines, longest first."""
    rows = [
        {"function": f"{path.relative_to(ROOT)}:{name}", "line": line, "lines": size}
        for folder in folders
        for path in sorted((ROOT / folder).rglob("*.py"))
        for name, line, size in lengths(path)
        if size > limit
    ]
    return sorted(rows, key=lambda r: -int(r["lines"]))  # type: ignore[arg-type]


def bench_mains() -> list[dict[str, object]]:
    """The length of every bench script's ``main()``."""
    rows = [
        {"function": f"{path.relative_to(ROOT)}:main", "lines": size}
        for path in sorted((ROOT / "bench").glob("*.py"))
        for name, _, size in lengths(path)
        if name == "main"
    ]
    return sorted(rows, key=lambda r: -int(r["lines"]))  # type: ignore[arg-type]


def main() -> int:
    """Print the figures; exit 1 when a library function is over the limit."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=80)
    args = ap.parse_args()
    library = over(LIBRARY, args.limit)
    figures = {
        "limit": args.limit,
        "library_over_limit": len(library),
        "library": library,
        "bench_main_over_limit": sum(1 for r in bench_mains() if int(r["lines"]) > args.limit),  # type: ignore[arg-type]
        "bench_mains": bench_mains(),
    }
    json.dump(figures, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return int(bool(library))


if __name__ == "__main__":
    raise SystemExit(main())
