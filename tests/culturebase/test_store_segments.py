"""A bulk import into the embedded store builds its indexes segment by segment (KAR_SEGMENT_POINTS), and
the engine does not merge the segments it built: the index build's memory is one segment's, and the KB
searches the same as one built at the end."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from culturebase.entity import Entity
from culturebase.store import CultureBaseStore, EmbedderInfo
from culturebase.store.edge import EdgeBackend
from culturebase.store.layout import LayoutPolicy

DIM = 128  # 300 points of 128-d: 150 KB a vector, over the 100 KB from which a segment is indexed
INFO = EmbedderInfo("test-embedder", DIM, sparse=False)


def _entities(n: int) -> list[Entity]:
    return [Entity(name=f"entity {i}", language="en", sources=[{"site": "knowyourmeme", "url": f"https://example.org/{i}"}]) for i in range(n)]


def _import(path: Path, n: int, segment_points: int | None, large: bool) -> tuple[CultureBaseStore, int, dict[str, np.ndarray]]:
    policy = LayoutPolicy(segment_points=segment_points, large_kb=1 if large else 10**9)
    store = CultureBaseStore(EdgeBackend(path, layout_policy=policy), INFO)
    store.prepare_layout(n)
    rng = np.random.default_rng(0)
    vecs = {}
    for name in store.entities.spec.dense:
        m = rng.normal(size=(n, DIM)).astype(np.float32)
        vecs[name] = m / np.linalg.norm(m, axis=1, keepdims=True)
    ents = _entities(n)
    with store.bulk_writer(total=n) as writer:
        for start in range(0, n, 100):
            writer.write(store.entity_points(ents[start : start + 100], {k: v[start : start + 100] for k, v in vecs.items()}))
    return store, writer.segments_built, vecs


def test_segments_are_built_as_the_import_writes_and_stay_apart(tmp_path):
    store, built, vecs = _import(tmp_path / "kb", 1000, 300, large=True)
    try:
        assert built == 3  # after 300, 600 and 900 points; the last 100 at the end
        info = store.entities.segment_info()
        assert info["points"] == 1000
        assert info["segments"] >= 4  # three built segments and the tail, not merged into one
        assert store.entities.layout.segment_points == 300
        # every entity is found by its own identity vector, whichever segment holds it
        for i in (0, 299, 300, 650, 999):
            hits = store.search("identity", vecs["identity"][i], limit=1)
            assert hits[0][0].name == f"entity {i}"
    finally:
        store.close()


def test_segment_points_are_recorded_and_kept_on_reopen(tmp_path):
    store, _, _ = _import(tmp_path / "kb", 350, 300, large=False)
    store.close()
    reopened = CultureBaseStore(EdgeBackend(tmp_path / "kb", layout_policy=LayoutPolicy(segment_points=5000)), INFO, create=False)
    try:
        assert reopened.entities.layout.segment_points == 300  # the collection's own, not the new policy's
        assert reopened.count() == 350
    finally:
        reopened.close()


def test_without_segment_points_the_index_is_built_once_at_the_end(tmp_path):
    store, built, _ = _import(tmp_path / "kb", 700, None, large=False)
    try:
        assert built == 0
        assert store.entities.segment_info()["points"] == 700
    finally:
        store.close()


def test_max_segment_size_is_one_built_segment():
    from culturebase.store.layout import StoreLayout

    assert StoreLayout(segment_points=10_000).max_segment_kb(384) == 15_000
    assert StoreLayout(segment_points=10_000).max_segment_kb(1024) == 40_000
    assert StoreLayout().max_segment_kb(384) is None
