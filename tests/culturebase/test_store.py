"""The same store suite against every backend (congruence): embedded Qdrant Edge, qdrant-client's
local mode, and a real Qdrant server when KAR_QDRANT_URL is set."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from culturebase.entity import Entity
from culturebase.settings import Settings
from culturebase.store import (
    CollectionSpec,
    CultureBaseStore,
    EmbedderInfo,
    EmbedderMismatchError,
    PointRecord,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
    open_store,
)
from culturebase.store.culturebase import ENTITY_DENSE
from culturebase.store.edge import EdgeBackend
from tests.culturebase.store_backends import BACKEND_KINDS, make_backend, unit_vectors

DIM = 16
INFO = EmbedderInfo("test-embedder", DIM, sparse=True)


def _backend(kind: str, tmp_path):
    return make_backend(kind, tmp_path)


@pytest.fixture(params=BACKEND_KINDS)
def backend_kind(request):
    return request.param


@pytest.fixture
def store(backend_kind, tmp_path):
    s = CultureBaseStore(_backend(backend_kind, tmp_path), INFO, batch_size=3)
    yield s
    if backend_kind == "server":
        s.backend.drop_collection("entities")
        s.backend.drop_collection("corpus")
    s.close()


def _entities(n: int) -> list[Entity]:
    return [
        Entity(
            name=f"entity {i}",
            aliases=[f"alias {i}", f"别名{i}"],
            language="zh" if i % 2 else "en",
            sources=[{"site": "moegirl" if i % 3 == 0 else "knowyourmeme", "url": f"https://example.org/e/{i}"}],
        )
        for i in range(n)
    ]


def _vectors(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    return unit_vectors(n, ENTITY_DENSE, DIM, seed)


def _sparse(n: int) -> dict[str, list[dict[int, float]]]:
    return {name: [{i: 1.0, 1000 + i: 0.5} for i in range(n)] for name in ("full_sparse", "identity_sparse")}


def test_upsert_is_idempotent_and_batched(store):
    ents, vecs = _entities(10), _vectors(10)
    assert store.upsert_entities(ents, vecs, _sparse(10)) == 10
    store.upsert_entities(ents, vecs, _sparse(10))
    assert store.count() == 10
    assert store.get(ents[4].id) == ents[4]
    assert store.get("missing") is None


def test_filters_by_language_site_and_alias(store):
    ents = _entities(9)
    store.upsert_entities(ents, _vectors(9), _sparse(9))
    assert store.count(language="zh") == 4
    assert store.count(site="moegirl") == 3
    assert [e.name for e in store.find_by_name(["ALIAS 7"])] == ["entity 7"]
    assert [e.name for e in store.find_by_name(["别名3"], language="zh")] == ["entity 3"]
    assert store.find_by_name(["别名3"], language="en") == []


def test_search_returns_nearest_with_filters(store):
    ents, vecs = _entities(12), _vectors(12)
    store.upsert_entities(ents, vecs, _sparse(12))
    for i in (0, 5, 11):
        (top, score), *_ = store.search("identity", vecs["identity"][i], limit=3)
        assert top.id == ents[i].id and score == pytest.approx(1.0, abs=1e-4)
    hits = store.search("visual", vecs["visual"][5], limit=20, language="en")
    assert hits and all(e.language == "en" for e, _ in hits)
    sparse_hits = store.search_sparse("identity_sparse", {7: 1.0}, limit=3)
    assert sparse_hits[0][0].id == ents[7].id and sparse_hits[0][1] == pytest.approx(1.0)
    assert store.entities.retrieve_sparse([ents[2].id], "identity_sparse") == {ents[2].id: {2: 1.0, 1002: 0.5}}
    dense = store.entities.retrieve_dense([ents[2].id, "no-such-id"], "visual")
    assert list(dense) == [ents[2].id]
    both = store.entities.retrieve_vectors([ents[2].id, ents[3].id, "no-such-id"], ["visual", "identity"])
    assert sorted(both) == sorted([ents[2].id, ents[3].id]) and set(both[ents[3].id]) == {"visual", "identity"}
    assert np.array_equal(both[ents[2].id]["visual"], dense[ents[2].id])
    v = vecs["visual"][2]
    assert float(dense[ents[2].id] @ (v / (v @ v) ** 0.5)) == pytest.approx(1.0, abs=1e-3)


def test_a_point_without_a_route_vector_is_not_searched_there(store):
    """An entity with nothing on a route has no vector there: a search on it never returns the entity,
    and a filter on the vector's absence finds exactly such points (the OCR route's identity fallback)."""
    from culturebase.store import PayloadFilter

    ents, vecs = _entities(8), _vectors(8)
    usage = [vecs["usage"][i] if i % 2 else None for i in range(8)]  # even entities: no usage vector
    store.upsert_entities(ents, {**vecs, "usage": usage}, _sparse(8))
    found = {e.id for e, _ in store.search("usage", vecs["usage"][0], limit=20)}
    assert found == {ents[i].id for i in range(1, 8, 2)}
    lacking = store.entities.search("identity", vecs["identity"][0], 20, PayloadFilter.without_vectors(None, "usage"))
    assert {h.id for h in lacking} == {ents[i].id for i in range(0, 8, 2)}
    zh_lacking = PayloadFilter.without_vectors(PayloadFilter.of(language="zh"), "usage")
    assert store.entities.search("identity", vecs["identity"][0], 20, zh_lacking) == []  # zh entities are the odd ones
    assert store.entities.count(PayloadFilter().lacking("usage")) == 4
    assert store.entities.retrieve_vectors([ents[0].id], ["usage", "identity"])[ents[0].id].keys() == {"identity"}


def test_exact_search_is_the_reference_and_ef_is_per_search(store):
    """``exact=True`` scores every point on its original vector: the same order as numpy's; ``hnsw_ef`` is
    accepted per search."""
    ents, vecs = _entities(30), _vectors(30, seed=3)
    store.upsert_entities(ents, vecs, _sparse(30))
    q = vecs["visual"][7] + 0.5 * vecs["visual"][9]
    q = q / np.linalg.norm(q)
    want = [ents[i].id for i in np.argsort(-(vecs["visual"] @ q))[:5]]
    exact = store.entities.search("visual", q, 5, exact=True)
    assert [h.id for h in exact] == want
    assert [h.id for h in store.entities.search("visual", q, 5, hnsw_ef=64)] == want  # 30 points: a full scan either way


def test_delete_scroll_and_stats(store):
    ents = _entities(7)
    store.upsert_entities(ents, _vectors(7), _sparse(7))
    assert store.delete([ents[0].id, "nope"]) == 1
    assert store.count() == 6
    store.upsert_entities(ents[1:], {k: v[1:] for k, v in _vectors(7).items()}, {k: v[1:] for k, v in _sparse(7).items()})  # same ids again
    assert store.count() == 6 and store.count(language="en") + store.count(language="zh") == 6
    assert sorted(e.id for e in store.iter_entities(batch=2)) == sorted(e.id for e in ents[1:])
    stats = store.stats()
    assert stats["entities"] == 6 and stats["by_language"] == {"en": 3, "zh": 3}
    assert stats["embedder"]["name"] == "test-embedder"


def test_search_can_read_a_few_payload_keys_and_the_rest_by_id(store):
    spec = CollectionSpec("pages", dense=("text",), sparse=("lexical",))
    coll = store.backend.open_collection(spec, INFO)
    vecs = _vectors(6)["identity"]

    def points(title: str) -> list[PointRecord]:
        return [
            PointRecord(f"page/{i}#0", {"text": vecs[i]}, {"title": f"{title} {i}", "text": "long text " * 50, "page": f"page/{i}"}, {"lexical": {i: 1.0}})
            for i in range(6)
        ]

    coll.upsert(points("first"))
    lean = coll.search("text", vecs[2], 3, payload_keys=["page"])
    assert lean[0].id == "page/2#0" and lean[0].payload == {"_id": "page/2#0", "page": "page/2"}
    assert [h.id for h in lean] == [h.id for h in coll.search("text", vecs[2], 3)]
    sparse = coll.search_sparse("lexical", {4: 1.0}, 2, payload_keys=["title"])
    assert sparse[0].payload == {"_id": "page/4#0", "title": "first 4"}
    got = coll.retrieve(["page/4#0", "missing", "page/2#0"])  # the whole payloads, in the order asked
    assert [p["title"] for p in got] == ["first 4", "first 2"] and got[0]["text"].startswith("long text")
    got[0]["title"] = "changed by the caller"  # the caller's own copy
    assert coll.retrieve(["page/4#0"])[0]["title"] == "first 4"
    coll.upsert(points("second"))  # a write is read back, never an older copy
    assert coll.retrieve(["page/4#0"])[0]["title"] == "second 4"
    coll.delete(["page/4#0"])
    assert coll.retrieve(["page/4#0"]) == []


def test_count_is_exact_through_writes(store):
    ents = _entities(8)
    store.upsert_entities(ents[:5], {k: v[:5] for k, v in _vectors(8).items()}, {k: v[:5] for k, v in _sparse(8).items()})
    assert store.entities.count() == 5
    store.upsert_entities(ents, _vectors(8), _sparse(8))  # three new, five again
    assert store.entities.count() == 8
    store.delete([ents[0].id])
    assert store.entities.count() == 7


def test_wrong_vector_shape_is_rejected_before_writing(store):
    ents = _entities(2)
    bad = _vectors(2)
    bad["usage"] = np.zeros((2, DIM + 1), dtype=np.float32)
    with pytest.raises(StoreError, match="shape"):
        store.upsert_entities(ents, bad, _sparse(2))
    assert store.count() == 0


def test_embedder_mismatch_is_a_clear_error(backend_kind, tmp_path):
    backend = _backend(backend_kind, tmp_path)
    CultureBaseStore(backend, INFO)
    with pytest.raises(EmbedderMismatchError, match="kar kb reindex"):
        CultureBaseStore(backend, EmbedderInfo("other", 8))
    backend.close()


def test_reindex_swaps_collection_atomically(store):
    ents = _entities(5)
    store.upsert_entities(ents, _vectors(5), _sparse(5))
    new_info = EmbedderInfo("new-embedder", 8)
    from culturebase.store import PointRecord
    from culturebase.store.culturebase import entity_spec

    rng = np.random.default_rng(1)
    points = [
        PointRecord(e.id, {n: rng.normal(size=8).astype(np.float32) for n in ENTITY_DENSE}, e.to_payload()) for e in ents
    ]
    store.backend.replace_collection(entity_spec(new_info), new_info, iter([points[:2], points[2:]]))
    assert store.backend.collection_info("entities")["embedder"] == "new-embedder"
    reopened = CultureBaseStore(store.backend, new_info)
    assert reopened.count() == 5 and reopened.get(ents[3].id).name == "entity 3"


def test_failed_reindex_keeps_the_old_collection(store):
    ents = _entities(3)
    store.upsert_entities(ents, _vectors(3), _sparse(3))
    from culturebase.store.culturebase import entity_spec

    def broken():
        yield []
        raise RuntimeError("embedder crashed")

    with pytest.raises(RuntimeError):
        store.backend.replace_collection(entity_spec(EmbedderInfo("x", 8)), EmbedderInfo("x", 8), broken())
    assert store.backend.collection_info("entities")["embedder"] == "test-embedder"
    assert CultureBaseStore(store.backend, INFO).count() == 3


def test_open_without_create_on_empty_store_says_import_first(tmp_path):
    backend = EdgeBackend(tmp_path / "kb")
    with pytest.raises(StoreNotFoundError, match="kar kb import"):
        CultureBaseStore(backend, INFO, create=False).entities
    backend.close()


def test_embedded_store_survives_reopen(tmp_path):
    settings = Settings(kb_path=tmp_path / "kb")
    ents = _entities(4)
    with open_store(settings, INFO) as s:
        s.upsert_entities(ents, _vectors(4), _sparse(4))
    with open_store(settings, INFO, create=False) as s:
        assert s.count() == 4 and s.get(ents[1].id) == ents[1]


def test_write_generation_changes_with_writes_only(tmp_path):
    """A reader can tell an unchanged collection without opening it: reads leave the generation as it was."""
    from culturebase.store.edge import collection_fingerprint

    settings = Settings(kb_path=tmp_path / "kb")
    assert collection_fingerprint(settings.kb_path, "entities") is None
    ents = _entities(4)
    with open_store(settings, INFO) as s:
        s.upsert_entities(ents, _vectors(4), _sparse(4))
    written = collection_fingerprint(settings.kb_path, "entities")
    assert written is not None
    with open_store(settings, INFO, create=False) as s:
        assert s.count() == 4 and s.find_by_name([ents[0].name])
    assert collection_fingerprint(settings.kb_path, "entities") == written
    with open_store(settings, INFO, create=False) as s:
        s.delete([ents[0].id])
    deleted = collection_fingerprint(settings.kb_path, "entities")
    assert deleted not in (None, written)
    with open_store(settings, INFO, create=False) as s:
        assert s.count() == 3
    assert collection_fingerprint(settings.kb_path, "entities") == deleted


def test_second_process_gets_a_clear_lock_error(tmp_path):
    settings = Settings(kb_path=tmp_path / "kb")
    with open_store(settings, INFO):
        code = (
            "from culturebase.settings import Settings\n"
            "from culturebase.store import open_store, EmbedderInfo, StoreLockedError\n"
            f"try:\n    open_store(Settings(kb_path={str(tmp_path / 'kb')!r}), EmbedderInfo('test-embedder', {DIM}, True))\n"
            "except StoreLockedError as e:\n    print('LOCKED', e)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert "LOCKED" in out.stdout, out.stderr
        assert f"pid {os.getpid()}" in out.stdout and "kar serve" in out.stdout
    # released on close: the same check now opens fine
    with open_store(settings, INFO) as s:
        assert s.count() == 0


def test_in_process_second_open_is_refused_too(tmp_path):
    b = EdgeBackend(tmp_path / "kb")
    with pytest.raises(StoreLockedError):
        EdgeBackend(tmp_path / "kb")
    b.close()


def test_unwritable_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create CultureBase folder"):
        EdgeBackend(blocker / "kb")


def test_a_search_among_given_ids_scores_exactly_those(store):
    """``PayloadFilter.among``: an exact search scores every listed point on its original vector and no other
    (grounding completes its candidates' cosines this way)."""
    from culturebase.store import PayloadFilter

    ents, vecs = _entities(12), _vectors(12)
    store.upsert_entities(ents, vecs, _sparse(12))
    q = vecs["identity"][5]
    ids = [ents[i].id for i in (1, 5, 9)]
    hits = store.entities.search("identity", q, 10, PayloadFilter.among(ids), exact=True)
    assert sorted(h.id for h in hits) == sorted(ids)
    by_id = {h.id: h.score for h in hits}
    for i in (1, 5, 9):
        assert by_id[ents[i].id] == pytest.approx(float(vecs["identity"][i] @ q), abs=1e-4)
    assert store.entities.count(PayloadFilter.among(ids)) == 3


def test_a_search_after_a_write_returns_the_written_payload(store):
    """Searches read payloads through the embedded store's payload cache: a rewritten entity is returned as
    rewritten, a deleted one not at all."""
    ents, vecs = _entities(6), _vectors(6)
    store.upsert_entities(ents, vecs, _sparse(6))
    q = vecs["identity"][2]
    first = store.entities.search("identity", q, 1)
    assert first[0].id == ents[2].id and first[0].payload["name"] == "entity 2"
    renamed = ents[2].model_copy(update={"name": "entity two"})
    store.upsert_entities([renamed], {k: v[2:3] for k, v in vecs.items()}, {k: v[2:3] for k, v in _sparse(6).items()})
    again = store.entities.search("identity", q, 1)
    assert again[0].id == ents[2].id and again[0].payload["name"] == "entity two"
    store.entities.delete([ents[2].id])
    assert ents[2].id not in {h.id for h in store.entities.search("identity", q, 6)}
