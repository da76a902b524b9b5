"""OpenAICompatibleVLM driven through the real openai SDK against a local fake server."""

from __future__ import annotations

import asyncio
import base64
import io
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # make `tests.fakes` importable

from agents.vlm import (  # noqa: E402
    ChatMessage,
    ImageInput,
    OpenAICompatibleVLM,
    SamplingParams,
    VisionLanguageModel,
    VLMError,
    VLMNotConfiguredError,
)
from culturebase.settings import Settings  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer, FakeReply  # noqa: E402


def png_bytes(width: int, height: int, color=(200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, format="PNG")
    return buffer.getvalue()


def fast_vlm(urls, **kwargs) -> OpenAICompatibleVLM:
    kwargs.setdefault("backoff_initial_s", 0.01)
    kwargs.setdefault("backoff_max_s", 0.02)
    return OpenAICompatibleVLM(urls, "test-model", api_key="sk-test", timeout_s=5, **kwargs)


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


async def test_text_reply_usage_and_request_shape(server):
    server.enqueue(FakeReply(text="a cat meme", prompt_tokens=42, completion_tokens=3))
    vlm = fast_vlm([server.base_url])
    assert isinstance(vlm, VisionLanguageModel)
    result = await vlm.chat(
        [ChatMessage("system", "be brief"), ChatMessage("user", "explain", images=(ImageInput(png_bytes(8, 8)),))]
    )
    assert result.text == "a cat meme"
    assert result.usage.prompt_tokens == 42 and result.usage.completion_tokens == 3
    assert result.endpoint == server.base_url
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    body = request.json
    assert body["model"] == "test-model"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    parts = body["messages"][1]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text"]  # images before text
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert parts[1]["text"] == "explain"
    assert "response_format" not in body and "temperature" not in body


async def test_large_image_is_downscaled_to_max_side(server):
    vlm = fast_vlm([server.base_url], max_image_side=64)
    await vlm.chat([ChatMessage("user", "x", images=(ImageInput(png_bytes(400, 100)),))])
    url = server.requests[0].image_urls()[0]
    header, data = url.split(",", 1)
    img = Image.open(io.BytesIO(base64.b64decode(data)))
    assert img.size == (64, 16)
    assert header == "data:image/jpeg;base64"


async def test_an_image_sent_twice_is_encoded_once_in_the_cpu_pool(server, monkeypatch):
    """A two-stage condition sends the same picture twice: it is down-scaled once (in a kar-cpu
    pool thread, not on the event loop) and both requests carry the same data URL."""
    import threading

    from agents.vlm import openai_compat

    threads: list[str] = []
    real = openai_compat.encode_image

    def spy(image, max_side):
        threads.append(threading.current_thread().name)
        return real(image, max_side)

    monkeypatch.setattr(openai_compat, "encode_image", spy)
    vlm = fast_vlm([server.base_url], max_image_side=64)
    big = png_bytes(400, 100)
    for _ in range(2):
        await vlm.chat([ChatMessage("user", "x", images=(ImageInput(big),))])
    first, second = (r.image_urls()[0] for r in server.requests)
    assert first == second and first.startswith("data:image/jpeg;base64,")
    assert len(threads) == 1 and threads[0].startswith("kar-cpu")
    assert (vlm.encoded.hits, vlm.encoded.misses) == (1, 1)
    vlm.encoded.entries = 2  # bounded: the least recently used picture goes first
    for color in ((1, 2, 3), (4, 5, 6), (7, 8, 9)):
        await vlm.chat([ChatMessage("user", "x", images=(ImageInput(png_bytes(400, 100, color)),))])
    assert len(vlm.encoded._urls) == 2 and vlm.encoded.misses == 4


async def test_small_image_sent_unchanged(server):
    raw = png_bytes(10, 20)
    vlm = fast_vlm([server.base_url], max_image_side=64)
    await vlm.chat([ChatMessage("user", "x", images=(ImageInput(raw),))])
    assert server.requests[0].image_urls() == ["data:image/png;base64," + base64.b64encode(raw).decode()]


async def test_undecodable_image_is_a_vlm_error(server):
    vlm = fast_vlm([server.base_url])
    with pytest.raises(VLMError, match="cannot be decoded"):
        await vlm.chat([ChatMessage("user", "x", images=(ImageInput(b"not an image", name="bad.png"),))])
    assert server.requests == []


async def test_sampling_defaults_merged_with_per_call(server):
    vlm = fast_vlm([server.base_url], default_sampling=SamplingParams(temperature=1.0, top_p=0.95, max_tokens=99))
    await vlm.chat([ChatMessage("user", "x")], SamplingParams(temperature=0.0, seed=7, json_mode=True))
    body = server.requests[0].json
    assert body["temperature"] == 0.0
    assert body["top_p"] == 0.95
    assert body["max_tokens"] == 99
    assert body["seed"] == 7
    assert body["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
async def test_retries_transient_status_then_succeeds(server, status):
    server.enqueue(FakeReply(status=status), FakeReply(status=status), FakeReply(text="ok"))
    vlm = fast_vlm([server.base_url], max_retries=4)
    result = await vlm.chat([ChatMessage("user", "x")])
    assert result.text == "ok"
    assert len(server.requests) == 3


async def test_non_retryable_status_fails_at_once(server):
    server.enqueue(FakeReply(status=400, text="bad request"))
    vlm = fast_vlm([server.base_url], max_retries=4)
    with pytest.raises(VLMError, match="HTTP 400"):
        await vlm.chat([ChatMessage("user", "x")])
    assert len(server.requests) == 1


async def test_gives_up_after_max_retries_with_endpoint_in_message(server):
    server.enqueue(*[FakeReply(status=500)] * 10)
    vlm = fast_vlm([server.base_url], max_retries=2)
    with pytest.raises(VLMError) as info:
        await vlm.chat([ChatMessage("user", "x")])
    assert len(server.requests) == 3
    assert server.base_url in str(info.value) and "500" in str(info.value)


async def test_retry_after_header_is_honoured(server):
    server.enqueue(FakeReply(status=429, headers={"Retry-After": "0.4"}), FakeReply(text="ok"))
    vlm = fast_vlm([server.base_url])
    await vlm.chat([ChatMessage("user", "x")])
    first, second = server.requests
    assert second.received_at - first.received_at >= 0.35


async def test_connection_error_is_retried_on_next_base_url():
    with FakeOpenAIServer() as good:
        dead = "http://127.0.0.1:9/v1"  # discard port: connection refused
        vlm = fast_vlm([dead, good.base_url], max_retries=2)
        result = await vlm.chat([ChatMessage("user", "hi")])
        assert result.text == "hi"
        assert result.endpoint == good.base_url


async def test_timeout_is_retried(server):
    server.enqueue(FakeReply(text="late", delay_s=1.5), FakeReply(text="fast"))
    vlm = OpenAICompatibleVLM([server.base_url], "m", timeout_s=0.5, backoff_initial_s=0.01, backoff_max_s=0.02)
    result = await vlm.chat([ChatMessage("user", "x")])
    assert result.text == "fast"


async def test_requests_spread_round_robin_across_base_urls():
    with FakeOpenAIServer() as a, FakeOpenAIServer() as b:
        vlm = fast_vlm([a.base_url, b.base_url])
        results = [await vlm.chat([ChatMessage("user", f"q{i}")]) for i in range(6)]
        assert len(a.requests) == 3 and len(b.requests) == 3
        assert [r.endpoint for r in results[:2]] == [a.base_url, b.base_url]


async def test_concurrency_limit_is_enforced(server):
    server.responder = lambda request: FakeReply(text="ok", delay_s=0.1)
    vlm = fast_vlm([server.base_url], concurrency=2)
    started = time.perf_counter()
    await asyncio.gather(*(vlm.chat([ChatMessage("user", str(i))]) for i in range(6)))
    assert server.max_in_flight == 2
    assert time.perf_counter() - started >= 0.28  # three waves of 0.1 s


def test_from_settings_roles():
    settings = Settings(
        vlm_base_urls="http://a/v1,http://b/v1",
        vlm_model="Qwen/Qwen2.5-VL-7B-Instruct",
        vlm_temperature=1.0,
        vlm_top_p=0.95,
        vlm_concurrency=3,
        judge_base_urls=["http://j/v1"],
        judge_model="judge-m",
        judge_api_key="secret",
        judge_concurrency=5,
    )
    vlm = OpenAICompatibleVLM.from_settings(settings)
    assert vlm.base_urls == ["http://a/v1", "http://b/v1"]
    assert vlm.model_id == "Qwen/Qwen2.5-VL-7B-Instruct" and vlm.concurrency == 3
    assert vlm.sampling_kwargs(None) == {"temperature": 1.0, "top_p": 0.95, "max_tokens": 2048}
    judge = OpenAICompatibleVLM.from_settings(settings, role="judge")
    assert judge.base_urls == ["http://j/v1"] and judge.model_id == "judge-m"
    assert judge.concurrency == 5 and judge._api_key == "secret"


def test_from_settings_unconfigured_names_the_variables():
    with pytest.raises(VLMNotConfiguredError, match="KAR_VLM_BASE_URLS.*KAR_VLM_MODEL"):
        OpenAICompatibleVLM.from_settings(Settings())
    with pytest.raises(VLMNotConfiguredError, match="KAR_JUDGE_BASE_URLS.*KAR_JUDGE_MODEL"):
        OpenAICompatibleVLM.from_settings(Settings(vlm_base_urls="http://a/v1", vlm_model="m"), role="judge")


def test_clients_are_built_lazily():
    vlm = OpenAICompatibleVLM(["http://127.0.0.1:1/v1"], "m")
    assert vlm._clients == {}


def test_works_across_event_loops(server):
    vlm = fast_vlm([server.base_url])
    assert asyncio.run(vlm.chat([ChatMessage("user", "one")])).text == "one"
    assert asyncio.run(vlm.chat([ChatMessage("user", "two")])).text == "two"
