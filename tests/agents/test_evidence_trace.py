"""The trace says why each piece of evidence is there (KAR: the grounded entity's own page first) and what
was left out, by reason; Search-CoT gets the same floor and dedup with no entity scoping."""

from __future__ import annotations

from agents.pipeline import KARPipeline, PipelineConfig, PipelineDeps
from retrieval.websearch import LocalCorpusSearch
from retrieval.websearch.entity_pages import EntityPages
from tests.agents.conftest import IMAGES, replies
from tests.fakes.vlm import ScriptedVLM

DOGE_EXTRACTION = {
    "ocr_text": "such wow much culture",
    "visual_handle": "a Shiba Inu dog with a sideways glance and Comic Sans captions",
    "entities": [{"name": "Doge", "source": "", "confidence": "high"}],
    "suggested_queries": ["Shiba Inu dog Comic Sans captions meme"],
}


def make(agents_kb, grounder) -> KARPipeline:
    deps = PipelineDeps(
        vlm=ScriptedVLM(default=replies(DOGE_EXTRACTION)),
        grounder=grounder,
        search=LocalCorpusSearch(agents_kb),
        pages=EntityPages(agents_kb.store),
        config=PipelineConfig(ocr_enabled=False),
    )
    return KARPipeline(deps)


async def test_kar_trace_names_backend_query_rank_score_and_reason(agents_kb, grounder):
    image = (IMAGES / "doge_such_culture.png").read_bytes()
    result = await make(agents_kb, grounder).explain(image, "kar")
    assert result.error is None
    ev = result.trace["evidence"]
    assert "Doge" in {h["name"] for h in result.trace["grounding"]["hits"]}
    first = ev["pieces"][0]
    assert first["reason"] == "entity page" and first["entity"] == "Doge"
    assert first["url"] == "https://knowyourmeme.com/memes/doge" and first["backend"] == "corpus"
    urls = [p["url"] for p in ev["pieces"]]
    assert len(urls) == len(set(urls))  # one piece per page, whatever the number of queries
    for p in ev["pieces"][1:]:
        assert p["backend"] == "local" and p["query"] and p["rank"] >= 1 and isinstance(p["score"], float)
        assert p["reason"] in ("about entity", "above floor")
    assert ev["entity_scoped"] is True and isinstance(ev["dropped"], dict)
    assert sum(ev["dropped"].values()) + len(ev["pieces"]) == ev["considered"]
    assert ev["dropped"].get("duplicate", 0) >= 1  # the Doge page is found again by the searches
    assert "(entity page: Doge)" in ev["text"]


async def test_search_cot_has_the_floor_and_dedup_but_no_entity_scoping(agents_kb, grounder):
    image = (IMAGES / "doge_such_culture.png").read_bytes()
    result = await make(agents_kb, grounder).explain(image, "search_cot")
    ev = result.trace["evidence"]
    assert ev["entity_scoped"] is False
    assert all(p["reason"] == "above floor" and p["entity"] is None for p in ev["pieces"])
    assert ev["considered"] == sum(len(s["results"]) for s in result.trace["searches"])
    if not ev["pieces"]:
        assert ev["none_reason"].startswith("every result was dropped")
