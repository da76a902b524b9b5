"""The one translation of the store's types into either engine's models (culturebase/store/translate.py)."""

from __future__ import annotations

import numpy as np
import pytest

from culturebase.store.base import CollectionSpec, EmbedderInfo, PayloadFilter, PointRecord, StoreError, point_uuid
from culturebase.store.layout import StoreLayout
from culturebase.store.translate import CLIENT, EDGE, collection_meta, paged, point_parts, with_meta

SPEC = CollectionSpec("entities", dense=("identity",), sparse=("lexical",))
INFO = EmbedderInfo("test-embedder", 3)


def test_client_filter_says_what_the_payload_filter_says():
    flt = PayloadFilter(equals=(("language", ("zh",)), ("sites", ("kym", "moegirl"))), lacks_vectors=("visual",), ids=("a",))
    m = CLIENT.models
    assert CLIENT.filter(flt) == m.Filter(
        must=[
            m.FieldCondition(key="language", match=m.MatchValue(value="zh")),
            m.FieldCondition(key="sites", match=m.MatchAny(any=["kym", "moegirl"])),
            m.HasIdCondition(has_id=[point_uuid("a")]),
        ],
        must_not=[m.HasVectorCondition(has_vector="visual")],
    )
    assert CLIENT.filter(None) is None and EDGE.filter(None) is None


def test_edge_filter_has_the_same_conditions():
    flt = PayloadFilter(equals=(("language", ("zh",)), ("sites", ("kym", "moegirl"))), lacks_vectors=("visual",), ids=("a",))
    text = repr(EDGE.filter(flt))
    for part in ('key="language"', 'MatchValue(value="zh")', 'key="sites"', "MatchAny", "HasId", point_uuid("a"), "HasVector", "visual"):
        assert part in text


@pytest.mark.parametrize("dialect", [EDGE, CLIENT], ids=["edge", "client"])
def test_points_carry_the_string_id_and_sorted_sparse_vectors(dialect):
    point = PointRecord("e1", {"identity": np.array([1.0, 0.0, 0.0])}, {"name": "x"}, sparse={"lexical": {7: 0.5, 2: 1.0}})
    (out,) = dialect.points([point], SPEC, INFO)
    assert str(out.id) == point_uuid("e1")
    assert out.payload == {"name": "x", "_id": "e1"}
    assert list(out.vector["lexical"].indices) == [2, 7]


def test_a_vector_of_the_wrong_size_is_refused():
    point = PointRecord("e1", {"identity": np.zeros(4)}, {})
    with pytest.raises(StoreError, match="expected \\(3,\\)"):
        point_parts(point, SPEC, INFO)


def test_metadata_and_scroll_pages():
    meta = collection_meta(SPEC, INFO, StoreLayout())
    assert meta["embedder"] == "test-embedder" and meta["dim"] == 3 and meta["dense_vectors"] == ["identity"]
    assert with_meta(dict(meta), "calibration", None).get("calibration") is None
    assert with_meta({}, "k", 1) == {"k": 1}
    pages = {None: ([1, 2], "p2"), "p2": ([3], None)}
    assert list(paged(lambda offset: pages[offset])) == [1, 2, 3]
