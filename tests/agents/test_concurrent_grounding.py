"""Grounding from several request workers at once against one open store: no global lock around
search (the pipeline's ground step runs while the store-write lock is held elsewhere), results
identical to sequential ones, and the embedder is the only serialised part."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agents.pipeline import KARPipeline, PipelineConfig, PipelineDeps
from culturebase.settings import Settings
from retrieval.embedders.serial import SerialEmbedder
from retrieval.grounding import EntityGrounder, GroundingCues
from retrieval.knowledge_base import KnowledgeBase
from tests.agents.conftest import RecordingSearch, replies
from tests.crawlers.hash_embedder import HashEmbedder
from tests.fakes.vlm import ScriptedVLM

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "culturebase_sample.jsonl"


class OverlapDetector(HashEmbedder):
    """The hash embedder, slowed down, counting how many calls are inside it at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.max_inside = 0
        self._count_lock = threading.Lock()

    def _encode(self, texts):
        with self._count_lock:
            self.inside += 1
            self.max_inside = max(self.max_inside, self.inside)
        try:
            time.sleep(0.002)
            return super()._encode(texts)
        finally:
            with self._count_lock:
                self.inside -= 1


@pytest.fixture(scope="module")
def hash_kb(tmp_path_factory):
    detector = OverlapDetector()
    kb = KnowledgeBase.open(Settings(kb_path=tmp_path_factory.mktemp("conc") / "kb"), embedder=detector)
    entities, _ = kb.validate_file(SAMPLE)
    kb.bulk_add(entities)
    yield kb, detector
    kb.close()


CUES = ["诸葛亮", "Doge", "Distracted Boyfriend", "王朗", "熊猫头", "This is fine", "Drake", "孔明"]


def test_concurrent_grounding_matches_sequential_and_only_the_embedder_is_serialised(hash_kb):
    kb, detector = hash_kb
    assert isinstance(kb.embedder, SerialEmbedder)
    grounder = EntityGrounder(kb.store, kb.embedder, tau=0.3)
    cues = [GroundingCues.from_text(c) for c in CUES] * 4

    def run(c):
        return [(h.entity.id, round(h.score, 5)) for h in grounder.ground(c).hits]

    sequential = [run(c) for c in cues]
    detector.max_inside = 0
    with ThreadPoolExecutor(8) as pool:
        concurrent = list(pool.map(run, cues))
    assert concurrent == sequential and any(sequential)
    assert detector.max_inside == 1  # encode calls never overlapped


async def test_pipeline_grounds_while_the_store_write_lock_is_held(hash_kb, zhuge_png):
    kb, _ = hash_kb
    grounder = EntityGrounder(kb.store, kb.embedder, tau=0.3)
    deps = PipelineDeps(
        vlm=ScriptedVLM(default=replies()), grounder=grounder, search=RecordingSearch(), config=PipelineConfig(ocr_enabled=False)
    )
    pipeline = KARPipeline(deps)
    with deps.lock:  # e.g. a write through the API in progress: grounding must not wait for it
        results = await asyncio.wait_for(
            asyncio.gather(*(pipeline.explain(zhuge_png, "kar", item_id=f"c{i}") for i in range(4))), timeout=5
        )
    assert all(r.error is None for r in results)
    names = [{h["name"] for h in r.trace["grounding"]["hits"]} for r in results]
    assert all(n == names[0] for n in names) and "诸葛亮" in names[0]


def test_concurrent_first_searches_open_a_collection_once(tmp_path):
    """Eight threads whose first call touches a not-yet-opened collection (the corpus) at once."""
    from culturebase.store import CultureBaseStore, EmbedderInfo
    from culturebase.store.edge import EdgeBackend

    info = EmbedderInfo("test-hash-trigrams", 64)
    writer = CultureBaseStore(EdgeBackend(tmp_path / "kb"), info)
    emb = HashEmbedder()
    from culturebase.store import PointRecord

    texts = [f"page {i} about memes" for i in range(20)]
    vecs = emb.encode_documents(texts).dense
    writer.corpus.upsert([PointRecord(id=f"u{i}", dense={"text": vecs[i]}, payload={"text": t}) for i, t in enumerate(texts)])
    writer.close()
    store = CultureBaseStore(EdgeBackend(tmp_path / "kb"), info)
    try:
        barrier = threading.Barrier(8)

        def first_search(i):
            barrier.wait()
            return store.corpus.search("text", vecs[i], 1)[0].id

        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(first_search, range(8))) == [f"u{i}" for i in range(8)]
    finally:
        store.close()
