"""Storage layout (int8 quantization, on-disk originals, HNSW per vector), the older layout opened
read-only and migrated by reindex, on both backends where they run here (embedded Qdrant Edge,
qdrant-client's local mode; a real server when KAR_QDRANT_URL is set)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from culturebase.entity import Entity
from culturebase.settings import Settings
from culturebase.store import CultureBaseStore, EmbedderInfo
from culturebase.store.base import StoreReadOnlyError
from culturebase.store.culturebase import ENTITY_DENSE, ENTITY_FULL

#: the layout tests cover a KB that stores the opt-in ``full`` vector too (no graph for it)
ALL_DENSE = (ENTITY_FULL, *ENTITY_DENSE)
from culturebase.store.edge import EdgeBackend
from culturebase.store.layout import LayoutPolicy, StoreLayout
from culturebase.store.server import ServerBackend
from tests.culturebase.store_backends import BACKEND_KINDS, make_backend, unit_vectors

DIM = 16
INFO = EmbedderInfo("test-embedder", DIM, sparse=True)
BIG = LayoutPolicy(quantization="int8", on_disk="true", hnsw_vectors=("identity", "usage", "visual", "text"))


def _backend(kind: str, tmp_path: Path, policy: LayoutPolicy | None = None):
    return make_backend(kind, tmp_path, policy)


@pytest.fixture(params=BACKEND_KINDS)
def backend_kind(request):
    return request.param


def _entities(n: int) -> list[Entity]:
    return [
        Entity(name=f"entity {i}", aliases=[f"alias {i}"], language="en", sources=[{"site": "knowyourmeme", "url": f"https://example.org/{i}"}])
        for i in range(n)
    ]


def _vectors(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    return unit_vectors(n, ALL_DENSE, DIM, seed)


def _sparse(n: int) -> dict[str, list[dict[int, float]]]:
    return {name: [{i: 1.0} for i in range(n)] for name in ("full_sparse", "identity_sparse")}


def test_policy_chooses_layout_by_size_and_settings():
    auto = LayoutPolicy(large_kb=1000, hnsw_vectors=("identity", "usage", "visual"))
    small, large = auto.choose(999, ENTITY_DENSE), auto.choose(1000, ENTITY_DENSE)
    assert (small.quantization, small.on_disk) == ("none", False)
    assert (large.quantization, large.on_disk) == ("int8", True)
    assert not large.has_hnsw("full") and large.has_hnsw("identity")
    forced = LayoutPolicy(quantization="int8", on_disk="false").choose(None, ENTITY_DENSE)
    assert (forced.quantization, forced.on_disk, forced.hnsw_vectors) == ("int8", False, None)
    s = Settings(quantization="none", on_disk="true", large_kb_entities=5, hnsw_vectors="identity,usage")
    chosen = LayoutPolicy.from_settings(s).choose(10, ENTITY_DENSE)
    assert (chosen.quantization, chosen.on_disk, chosen.hnsw_vectors) == ("none", True, ("identity", "usage"))
    assert StoreLayout.from_meta({"layout": chosen.to_meta()}) == chosen
    assert StoreLayout.from_meta({"schema_version": 1}) is None


def test_quantized_on_disk_layout_is_recorded_and_searches_exactly(backend_kind, tmp_path):
    store = CultureBaseStore(_backend(backend_kind, tmp_path, BIG), INFO, batch_size=50, full_vector=True)
    try:
        ents, vecs = _entities(300), _vectors(300)
        with store.bulk_writer(total=300, min_free_bytes=0) as writer:
            writer.write(store.entity_points(ents, vecs, _sparse(300)))
        assert writer.stored == 300 and store.count() == 300
        meta = store.backend.collection_info("entities")
        assert meta["layout"]["quantization"] == "int8" and meta["layout"]["on_disk"] is True
        assert store.layout_info()["read_only"] is None
        for route in ("identity", "full"):  # an indexed route and one stored without a graph
            hits = store.search(route, vecs[route][123], limit=3)
            assert hits[0][0].id == ents[123].id and hits[0][1] == pytest.approx(1.0, abs=1e-3)
    finally:
        store.close()


def test_embedded_engine_gets_quantization_mmap_and_no_graph_for_full(tmp_path):
    dim, n = 128, 2500  # 1.25 MB per vector: past the 1 MB indexing threshold set here, so the end of the import indexes
    info = EmbedderInfo("test-embedder", dim)
    rng = np.random.default_rng(1)
    vecs = {name: rng.normal(size=(n, dim)).astype(np.float32) for name in ALL_DENSE}
    policy = LayoutPolicy(quantization="int8", on_disk="true", hnsw_vectors=BIG.hnsw_vectors, indexing_threshold_kb=1000)
    store = CultureBaseStore(
        EdgeBackend(tmp_path / "kb", hnsw_m=8, hnsw_ef_construct=32, layout_policy=policy), info, batch_size=1000,
        full_vector=True,
    )
    try:
        with store.bulk_writer(total=n, min_free_bytes=0) as writer:
            points = store.entity_points(_entities(n), vecs)
            for start in range(0, n, 1000):
                writer.write(points[start : start + 1000])
        hit = store.search("identity", vecs["identity"][42] / np.linalg.norm(vecs["identity"][42]), limit=1)
        assert hit[0][0].name == "entity 42"
    finally:
        store.close()
    configs = [json.loads(p.read_text()) for p in (tmp_path / "kb" / "entities" / "shard" / "segments").glob("*/segment.json")]
    indexed = [c["config"]["vector_data"] for c in configs if c["config"]["vector_data"]["identity"]["index"]["type"] == "hnsw"]
    assert indexed, "the bulk import's end built no HNSW segment"
    for vd in indexed:
        assert vd["identity"]["quantization_config"]["scalar"]["type"] == "int8"
        assert vd["identity"]["storage_type"] != "InRam"
        assert vd["full"]["index"]["options"]["m"] == 0 and vd["identity"]["index"]["options"]["m"] > 0
    payload = json.loads((tmp_path / "kb" / "entities" / "shard" / "edge_config.json").read_text())
    assert payload["payload_memory"] == "cold"


@pytest.mark.parametrize(("threads", "persisted"), [(1, 1), (3, 3), (0, None)])
def test_new_shards_persist_their_search_threads(tmp_path, threads, persisted):
    """KAR_SEARCH_THREADS goes into each new shard's engine config (0: the engine's CPU-derived default)."""
    info = EmbedderInfo("test-embedder", 8)
    store = CultureBaseStore(EdgeBackend(tmp_path / "kb", search_threads=threads), info)
    store.close()
    config = json.loads((tmp_path / "kb" / "entities" / "shard" / "edge_config.json").read_text())
    assert config.get("max_search_threads") == persisted


def test_local_mode_collection_config_carries_the_layout():
    backend = ServerBackend(location=":memory:", prefix="tl", layout_policy=BIG)
    store = CultureBaseStore(backend, INFO, full_vector=True)
    try:
        physical = backend._physical("tl_entities")
        cfg = backend._client.get_collection(physical).config
        params = cfg.params.vectors
        assert params["identity"].quantization_config.scalar.type.value == "int8"
        assert params["identity"].on_disk is True  # (local mode does not keep on_disk_payload; a server does)
        assert params["full"].hnsw_config.m == 0 and params["identity"].hnsw_config is None
    finally:
        store.close()


def test_empty_kb_is_recreated_with_the_layout_for_the_import_size(backend_kind, tmp_path):
    policy = LayoutPolicy(large_kb=100)
    store = CultureBaseStore(_backend(backend_kind, tmp_path, policy), INFO)
    try:
        assert store.layout_info()["layout"]["quantization"] == "none"
        store.prepare_layout(150)
        assert store.layout_info()["layout"]["quantization"] == "int8"
        store.upsert_entities(_entities(3), _vectors(3), _sparse(3))
        store.prepare_layout(10)  # not empty any more: the layout stays until reindex
        assert store.layout_info()["layout"]["quantization"] == "int8" and store.count() == 3
    finally:
        store.close()


# -- the older layout ---------------------------------------------------------------------------


def _write_old_layout(root: Path, n: int) -> dict[str, np.ndarray]:
    """A KB folder exactly as the previous CultureKAR wrote it: float32 vectors in RAM, no quantization,
    metadata with schema_version 1 and no ``layout``."""
    import qdrant_edge as qe

    spec_dense = ALL_DENSE
    folder = root / "entities"
    folder.mkdir(parents=True)
    shard = qe.EdgeShard.create(
        str(folder / "shard"),
        qe.EdgeConfig(
            vectors={name: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine) for name in spec_dense},
            sparse_vectors={name: qe.EdgeSparseVectorParams() for name in ("full_sparse", "identity_sparse")},
            hnsw_config=qe.HnswIndexConfig(m=32, ef_construct=200, full_scan_threshold=10_000),
        ),
    )
    for field_name in ("language", "sites", "match_keys"):
        shard.update(qe.UpdateOperation.create_field_index(field_name, qe.PayloadSchemaType.Keyword))
    vecs = _vectors(n, seed=7)
    from culturebase.store.base import point_uuid

    points = []
    for i, e in enumerate(_entities(n)):
        vectors = {name: vecs[name][i].tolist() for name in spec_dense}
        vectors.update({name: qe.SparseVector(indices=[i], values=[1.0]) for name in ("full_sparse", "identity_sparse")})
        points.append(qe.Point(id=point_uuid(e.id), vector=vectors, payload={**e.to_payload(), "_id": e.id}))
    shard.update(qe.UpdateOperation.upsert_points(points))
    shard.flush()
    shard.close()
    meta = {
        "collection": "entities",
        "embedder": INFO.name,
        "dim": DIM,
        "sparse": True,
        "dense_vectors": list(spec_dense),
        "sparse_vectors": ["full_sparse", "identity_sparse"],
        "schema_version": 1,
        "created_at": "2026-11-01T00:00:00+00:00",
    }
    (folder / "culturekar.json").write_text(json.dumps(meta), "utf-8")
    return vecs


class _NoEmbedding:
    """The embedder that built the old KB, by name; reindex must not call it (vectors are reused)."""

    name, dim, has_sparse = INFO.name, DIM, True

    def encode_documents(self, texts):  # pragma: no cover - failing here is the test failing
        raise AssertionError("reindex re-embedded although the embedder is unchanged")

    encode_queries = encode_documents


def test_older_layout_opens_read_only_and_reindex_migrates_it_reusing_vectors(tmp_path, caplog):
    from retrieval.knowledge_base import KnowledgeBase

    root = tmp_path / "kb"
    vecs = _write_old_layout(root, 40)
    ents = _entities(40)
    store = CultureBaseStore(EdgeBackend(root), INFO, create=False)
    try:
        assert store.count() == 40
        assert store.search("identity", vecs["identity"][5], limit=1)[0][0].id == ents[5].id
        info = store.layout_info()
        assert "kar kb reindex" in info["read_only"] and info["layout"] is None
        with pytest.raises(StoreReadOnlyError, match=r"older CultureKAR.*read-only.*kar kb reindex"):
            store.upsert_entities(ents[:1], {k: v[:1] for k, v in vecs.items()}, None)
        with pytest.raises(StoreReadOnlyError):
            store.delete([ents[0].id])
    finally:
        store.close()
    assert any("kar kb reindex" in r.getMessage() for r in caplog.records)

    settings = Settings(kb_path=root, quantization="int8", on_disk="true")
    result = KnowledgeBase.reindex(settings, _NoEmbedding())
    assert result["reused_vectors"] is True and result["entities"] == 40

    store = CultureBaseStore(EdgeBackend(root), INFO, create=False)
    try:
        assert store.layout_info()["read_only"] is None
        assert store.layout_info()["layout"]["quantization"] == "int8"
        assert store.count() == 40
        for i in (0, 5, 39):
            assert store.search("identity", vecs["identity"][i], limit=1)[0][0].id == ents[i].id
        assert store.entities.retrieve_sparse([ents[5].id], "identity_sparse") == {ents[5].id: {5: 1.0}}
        assert store.get(ents[7].id).name == "entity 7"
        store.upsert_entities(ents[:1], {k: v[:1] for k, v in vecs.items()}, None)  # writable again
    finally:
        store.close()


def test_older_layout_on_a_server_collection_is_read_only(tmp_path):
    backend = ServerBackend(location=":memory:", prefix="old")
    store = CultureBaseStore(backend, INFO)
    store.upsert_entities(_entities(2), _vectors(2), _sparse(2))
    physical = backend._physical("old_entities")
    # what an older CultureKAR wrote has no layout (metadata updates merge keys, so clear it)
    backend._client.update_collection(physical, metadata={"layout": None})
    backend._open.clear()
    reopened = CultureBaseStore(backend, INFO, create=False)
    with pytest.raises(StoreReadOnlyError, match="kar kb reindex"):
        reopened.upsert_entities(_entities(1), _vectors(1), _sparse(1))
    assert reopened.count() == 2
    store.close()


def test_reindex_reuses_stored_vectors_on_both_backends(backend_kind, tmp_path):
    from retrieval.knowledge_base import _reindex_reusing_vectors

    backend = _backend(backend_kind, tmp_path, LayoutPolicy(quantization="none", on_disk="false"))
    store = CultureBaseStore(backend, INFO, full_vector=True)
    ents, vecs = _entities(25), _vectors(25, seed=3)
    store.upsert_entities(ents, vecs, _sparse(25))
    backend.layout_policy = BIG  # only storage/index settings change
    progress: list[int] = []
    result = _reindex_reusing_vectors(backend, store, INFO, 7, progress.append, full=True)
    assert result == {"entities": 25, "corpus_chunks": 0, "from": INFO.describe(), "to": INFO.describe(), "reused_vectors": True}
    assert sum(progress) == 25
    migrated = CultureBaseStore(backend, INFO, create=False)
    try:
        assert migrated.layout_info()["layout"]["quantization"] == "int8" and migrated.count() == 25
        for i in (0, 24):
            assert migrated.search("identity", vecs["identity"][i], limit=1)[0][0].id == ents[i].id
        # these entities have no visual description: the reindex drops the visual vectors an older KB gave them
        assert migrated.search("visual", vecs["visual"][0], limit=1) == []
        assert migrated.entities.retrieve_sparse([ents[3].id], "full_sparse") == {ents[3].id: {3: 1.0}}
    finally:
        migrated.close()


def test_searches_among_fewer_than_5000_vectors_are_exact(tmp_path):
    """The engine's full_scan_threshold (KB of vectors below which a search, or a filtered one, scores every
    point) is the store's exact_search_kb, what 5,000 384-d vectors take; the graph settings are the backend's."""
    from culturebase.store.culturebase import entity_spec
    from culturebase.store.params import PARAMS

    info = EmbedderInfo("x", DIM)
    backend = EdgeBackend(tmp_path / "kb", hnsw_m=24, hnsw_ef_construct=150)
    try:
        backend.open_collection(entity_spec(info), info)
        config = json.loads((tmp_path / "kb" / "entities" / "shard" / "edge_config.json").read_text("utf-8"))
    finally:
        backend.close()
    assert config["hnsw_config"]["full_scan_threshold"] == PARAMS.exact_search_kb == 5000 * 384 * 4 // 1024
    assert (config["hnsw_config"]["m"], config["hnsw_config"]["ef_construct"]) == (24, 150)
