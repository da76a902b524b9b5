"""The BM25 ``lexical`` sparse vector with Qdrant's IDF modifier, congruent across backends, and
stores created before it (no lexical vector) still opening."""

from __future__ import annotations

import math

import pytest

from culturebase.store import CultureBaseStore, EmbedderInfo
from culturebase.store.culturebase import ENTITY_LEXICAL, entity_spec
from tests.culturebase.test_store import _backend, _entities, _vectors

INFO = EmbedderInfo("test-embedder", 16, sparse=False)


@pytest.fixture(params=["embedded", "local", pytest.param("server", marks=pytest.mark.server)])
def backend_kind(request):
    return request.param


def test_lexical_vector_is_created_with_idf(backend_kind, tmp_path):
    backend = _backend(backend_kind, tmp_path)
    store = CultureBaseStore(backend, INFO)
    try:
        assert store.has_lexical and store.entities.spec.idf_sparse == (ENTITY_LEXICAL,)
        ents = _entities(6)
        # token 1 is in every entity but one, token 2 only in entity 3: equal document weights
        lexical = [{1: 1.0} if i != 3 else {2: 1.0} for i in range(6)]
        store.upsert_entities(ents, _vectors(6), {ENTITY_LEXICAL: lexical})
        hits = store.search_sparse(ENTITY_LEXICAL, {1: 1.0, 2: 1.0}, limit=6)
        assert hits[0][0].id == ents[3].id  # the rare token outweighs the common one: IDF at work
        n = 6
        idf = lambda df: math.log(1 + (n - df + 0.5) / (df + 0.5))  # noqa: E731  (Qdrant's BM25 IDF)
        assert hits[0][1] == pytest.approx(idf(1), rel=1e-3)
        assert hits[1][1] == pytest.approx(idf(5), rel=1e-3)
        assert store.stats()["lexical_index"] is True
    finally:
        if backend_kind == "server":
            backend.drop_collection("entities")
        store.close()


def test_store_built_before_the_lexical_index_opens_without_it(tmp_path):
    from culturebase.store.edge import EdgeBackend

    backend = EdgeBackend(tmp_path / "kb")
    backend.open_collection(entity_spec(INFO, lexical=False), INFO)  # as the previous version created it
    store = CultureBaseStore(backend, INFO)
    try:
        assert not store.has_lexical and ENTITY_LEXICAL not in store.entities.spec.sparse
        store.upsert_entities(_entities(2), _vectors(2), {ENTITY_LEXICAL: [{1: 1.0}, {2: 1.0}]})
        assert store.count() == 2 and store.search_sparse(ENTITY_LEXICAL, {1: 1.0}) == []
    finally:
        store.close()
