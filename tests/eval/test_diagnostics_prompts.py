"""Diagnostics read what the reasoner was sent: a `kar run` (real CLI, fake OpenAI-compatible VLM, fake Tavily)
whose one item's knowledge lies past the 600-character cut of its CultureBase entry's description, and whose one
web page names the entity only past the 300 characters a trace keeps of a page.  From the recorded prompt the
fact did not reach the prompt and the page is on-entity; the same run with its prompts removed (a run recorded
before prompts were) falls back to the reconstruction, which counts both the other way, and says so."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from typer.testing import CliRunner

from eval.report.diagnostics import diagnostics_markdown, items_markdown
from services.cli import app
from tests.fakes.openai_server import FakeOpenAIServer, FakeReply
from tests.fakes.tavily_server import FakeTavilyServer

FACT = "Kabosu died in May 2024 at the age of eighteen"
# 640 characters about the meme that say nothing of the fact, then the fact: past the prompt's 600-character cut
PRELUDE = ("Doge is an internet meme built on a photograph of a Japanese dog looking sideways at the camera with raised "
           "eyebrows, taken by a kindergarten teacher and posted to her personal blog. The picture spread on forums, "
           "where posters surrounded it with multicoloured Comic Sans phrases written as the animal's inner monologue. "
           "Such captions use broken grammar on purpose: a modifier such as such, much, very or so followed by a single "
           "noun, closed with a bare interjection. The format was later reused for cryptocurrency branding, sports "
           "mascots and political campaigns, and it shaped how many online communities write ironic praise today. ")
PAGE = {"title": "A sideways glance that travelled", "url": "https://example.org/sideways-glance",
        "content": "A photograph of a dog glancing sideways was posted to a personal blog and travelled from forum to forum, "
                   "collecting colourful captions and remixes along the way. Communities adopted its exaggerated captions "
                   "for ironic praise, and collectors built archives of the remixes over the next decade. Its best known "
                   "name is Doge, the meme of the Shiba Inu."}


class EveryQuery(dict):
    """Tavily's scripted results: the same page for whatever query."""

    def get(self, query: Any, default: Any = None) -> Any:
        return [dict(PAGE, score=0.9, raw_content=None)]


def kar(*args: str) -> str:
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, f"kar {' '.join(args)} → {result.exit_code}\n{result.output}"
    return result.output


def vlm(request: Any) -> FakeReply:
    if "You are the extraction step" in request.user_text():
        return FakeReply(text=json.dumps({"ocr_text": "", "visual_handle": "a dog", "suggested_queries": [],
                                          "entities": [{"name": "Doge", "source": "Internet", "confidence": "high"}]}))
    return FakeReply(text="an explanation")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from culturebase.settings import get_settings

    tmp = tmp_path_factory.mktemp("prompts")
    saved = {k: v for k, v in os.environ.items() if k.startswith("KAR_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(KAR_KB_PATH=str(tmp / "kb"), KAR_DATA_DIR=str(tmp / "data"), KAR_OCR_ENABLED="false",
                      KAR_SEARCH_BACKEND="tavily", KAR_TAVILY_API_KEY="tvly-test")
    try:
        (tmp / "images").mkdir()
        Image.new("RGB", (40, 32), (200, 160, 60)).save(tmp / "images" / "doge.png")
        bench = tmp / "bench.json"
        bench.write_text(json.dumps([{
            "id": "late-fact", "image_path": "images/doge.png", "visual": {"ocr": ""},
            "identity": {"entities": [{"eid": "E1", "name": "Doge", "source_work": "Internet"}]},
            "knowledge": {"background": [FACT]}, "reasoning": {"mechanism": "irony"},
            "eval_checklist": {"visual": ["a dog"], "identity": ["Doge"], "knowledge": [FACT], "reasoning": ["irony"]},
        }]), "utf-8")
        assert len(PRELUDE) > 600 and FACT not in PRELUDE[:600]
        kb = tmp / "kb_entries.json"
        kb.write_text(json.dumps([{"name": "Doge", "aliases": ["Shiba meme"], "source": "Internet", "description": PRELUDE + FACT + ".",
                                   "cultural_usage": "ironic praise", "visual_desc": "a dog looking sideways", "meme_ids": []}]), "utf-8")
        kar("kb", "import", str(kb))
        with FakeOpenAIServer(responder=vlm, model="fake-vl") as server, FakeTavilyServer() as tavily:
            tavily.results = EveryQuery()
            os.environ["KAR_TAVILY_API_BASE_URL"] = tavily.base_url
            kar("run", "--dataset", str(bench), "--conditions", "kar", "--out", str(tmp / "run"), "--model", "fake-vl",
                "--base-url", server.base_url)
        # the same run as one recorded before prompts were: its traces without them
        old = tmp / "old" / "traces"
        old.mkdir(parents=True)
        lines = (tmp / "run" / "traces" / "kar.jsonl").read_text("utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        for record in records:
            record["trace"].pop("prompts")
        (old / "kar.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "utf-8")
        yield {"tmp": tmp, "bench": bench, "recorded": tmp / "run" / "traces" / "kar.jsonl", "old": old / "kar.jsonl"}
    finally:
        for key in [k for k in os.environ if k.startswith("KAR_")]:
            del os.environ[key]
        os.environ.update(saved)
        get_settings.cache_clear()


def diagnose(run: dict[str, Any], **files: Path) -> dict[str, Any]:
    from culturebase.settings import get_settings
    from eval.diagnostics.run_folder import diagnose_files
    from eval.tasks.memebench import load_benchmark

    get_settings.cache_clear()
    diagnostics, notes = diagnose_files(load_benchmark(run["bench"], check_images=False), files, get_settings(), use_cache=False)
    assert notes == []
    return diagnostics


def test_the_recorded_prompt_holds_what_was_sent(run):
    record = json.loads(run["recorded"].read_text("utf-8").splitlines()[-1])
    reason = [c for c in record["trace"]["prompts"] if c["stage"] == "reason"][-1]
    text = reason["messages"][0]["content"][-1]["text"]
    assert PRELUDE[:600] in text and FACT not in text  # the description as sent: cut at 600 characters
    assert record["trace"]["evidence"]["pieces"][0]["content"] == PAGE["content"][:300]  # the trace's snippet
    assert PAGE["content"] in text  # the page as sent


def test_diagnostics_read_the_recorded_prompt_and_fall_back_for_an_old_run(run):
    diagnostics = diagnose(run, **{"new/kar": run["recorded"], "old/kar": run["old"]})
    new, old = diagnostics["new/kar"], diagnostics["old/kar"]
    (row,) = new["rows"]
    (before,) = old["rows"]
    assert (row["prompts"], before["prompts"]) == ("recorded", "reconstructed")
    assert (new["prompts"], old["prompts"]) == ("recorded", "reconstructed")
    # the fact past the description's cut: never sent, though the entity's full fields hold it
    assert row["knowledge_stated"] == [False] and before["knowledge_stated"] == [True]
    # the page names Doge past the trace's 300-character snippet: on-entity as sent, off-entity as reconstructed
    assert row["evidence_off_entity"] == 0.0 and before["evidence_off_entity"] == 1.0
    assert row["identity_grounded"] is True and row["extra_entities"] == [] and row["prompt_cut"] is False
    printed = diagnostics_markdown(diagnostics)
    assert "- new/kar: prompts: recorded\n" in printed
    assert "- old/kar: prompts: reconstructed (run predates prompt recording)\n" in printed
    assert "prompt recorded" in items_markdown([row], "new/kar", "Success", "damage.neither")


def test_a_prompt_that_never_carried_an_entity_injects_none(run):
    """Extra entities are those the reasoning prompt carried: a run stopped before reasoning injected none."""
    record = json.loads(run["recorded"].read_text("utf-8").splitlines()[-1])
    trace = record["trace"]
    trace["grounding"]["hits"].append(dict(trace["grounding"]["hits"][0], id="other", name="Grumpy Cat", aliases=[]))
    trace["prompts"] = [c for c in trace["prompts"] if c["stage"] != "reason"]  # the reasoning call never made
    path = run["tmp"] / "stopped" / "traces" / "kar.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, ensure_ascii=False) + "\n", "utf-8")
    reconstructed = dict(record, trace={k: v for k, v in trace.items() if k != "prompts"})
    old = run["tmp"] / "stopped-old" / "traces" / "kar.jsonl"
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_text(json.dumps(reconstructed, ensure_ascii=False) + "\n", "utf-8")
    diagnostics = diagnose(run, **{"stopped/kar": path, "old/kar": old})
    (row,) = diagnostics["stopped/kar"]["rows"]
    (before,) = diagnostics["old/kar"]["rows"]
    assert row["extra_entities"] == [] and row["knowledge_in_prompt"] == 0.0 and row["evidence_off_entity"] is None
    assert before["extra_entities"] == ["Grumpy Cat"]
