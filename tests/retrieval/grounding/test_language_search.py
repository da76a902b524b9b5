"""One unfiltered dense search split by language gives what one filtered search per language gives."""

from __future__ import annotations

import numpy as np

from culturebase.entity import Entity
from culturebase.store import CultureBaseStore, EmbedderInfo, PayloadFilter
from culturebase.store.edge import EdgeBackend
from retrieval.grounding.language_search import search_by_language

DIM = 16


def test_split_search_equals_one_filtered_search_per_language(tmp_path):
    rng = np.random.default_rng(3)
    # a crowded language and a small one, as on a KB of Moegirl names beside a few English entries
    langs = ["zh"] * 90 + ["en"] * 12
    ents = [Entity(name=f"entity {i}", language=lg) for i, lg in enumerate(langs)]
    vecs = {}
    for name in ("identity", "visual", "usage"):
        m = rng.normal(size=(len(ents), DIM)).astype(np.float32)
        vecs[name] = m / np.linalg.norm(m, axis=1, keepdims=True)
    vecs["usage"] = [v if i % 7 == 0 else None for i, v in enumerate(vecs["usage"])]  # few carry usage
    store = CultureBaseStore(EdgeBackend(tmp_path / "kb"), EmbedderInfo("t", DIM))
    try:
        store.upsert_entities(ents, vecs, {})
        coll = store.entities
        for vector_name, lacks in (("identity", ()), ("usage", ()), ("identity", ("usage",))):
            for q in rng.normal(size=(8, DIM)).astype(np.float32):
                by_language, best = search_by_language(coll, vector_name, q, 10, ["zh", "en"], lacks)
                for lg in ("zh", "en"):
                    flt = PayloadFilter.of(language=lg)
                    expected = coll.search(vector_name, q, 10, flt.lacking(*lacks) if lacks else flt, exact=True)
                    assert [h.id for h in by_language[lg]] == [h.id for h in expected]
                unfiltered = coll.search(vector_name, q, 10, PayloadFilter.without_vectors(None, *lacks) if lacks else None, exact=True)
                assert [h.id for h in best] == [h.id for h in unfiltered]
    finally:
        store.close()
