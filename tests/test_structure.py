"""The layout's rules hold: no import circle, no import of a higher floor, no private name imported
across modules, no library function over 80 lines (bench/import_graph.py, bench/function_lengths.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_import_graph_has_no_cycle_no_upward_edge_and_no_private_import() -> None:
    figures = _load("import_graph").report()
    assert figures["modules"] > 150  # the whole library was read
    assert figures["cycle_members"] == []
    assert figures["upward"] == []
    assert figures["private"] == []


def test_a_cycle_an_upward_edge_and_a_private_import_are_found(tmp_path: Path) -> None:
    graph = _load("import_graph")
    for package in ("culturebase", "retrieval"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "culturebase" / "core.py").write_text("from retrieval.helpers import _hidden\n")
    (tmp_path / "retrieval" / "helpers.py").write_text("from culturebase import core\n_hidden = 1\n")
    figures = graph.report(tmp_path, ("culturebase", "retrieval"))
    assert figures["cycle_members"] == [["culturebase.core", "retrieval.helpers"]]
    assert [(e["from"], e["to"]) for e in figures["upward"]] == [("culturebase.core", "retrieval.helpers")]
    assert figures["private"] == [{"module": "culturebase.core", "imports": "retrieval.helpers._hidden"}]


def test_no_library_function_is_over_80_lines() -> None:
    lengths = _load("function_lengths")
    assert lengths.over(lengths.LIBRARY, 80) == []


def test_the_length_of_a_long_function_is_counted(tmp_path: Path) -> None:
    lengths = _load("function_lengths")
    source = tmp_path / "m.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(90))
    source.write_text(f"def long():\n{body}\n\nclass C:\n    def short(self):\n        return 1\n")
    found = {name: size for name, _, size in lengths.lengths(source)}
    assert found == {"long": 91, "C.short": 2}
