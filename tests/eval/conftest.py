"""Fixtures for the eval tests: tiny benchmarks with real PNGs in tmp_path."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # make `tests.*` importable

from tests.eval.evalkit import make_item, write_bench  # noqa: E402


@pytest.fixture
def bench_factory(tmp_path):
    def factory(n: int = 4, **kwargs: Any) -> tuple[Path, list[dict[str, Any]]]:
        items = [make_item(i, **kwargs) for i in range(n)]
        return write_bench(tmp_path, items), items

    return factory
