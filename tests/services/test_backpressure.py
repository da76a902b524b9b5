"""Back-pressure: a full queue is a 503 with Retry-After at once; a deadline is a 504 with the partial trace."""

from __future__ import annotations

import asyncio
import json

from agents.vlm.base import ChatMessage, ChatResult, SamplingParams
from tests.agents.conftest import is_extract, replies
from tests.fakes.vlm import ScriptedVLM


class GatedVLM:
    """A VLM double whose calls wait on a gate (per stage), then answer like the scripted one."""

    model_id = "gated-vlm"

    def __init__(self, hold_extract: bool = True, hold_reason: bool = True) -> None:
        self.inner = ScriptedVLM(default=replies())
        self.gate = asyncio.Event()
        self.hold_extract = hold_extract
        self.hold_reason = hold_reason
        self.entered = 0

    async def chat(self, messages: list[ChatMessage], sampling: SamplingParams | None = None) -> ChatResult:
        self.entered += 1
        if self.hold_extract if is_extract(messages) else self.hold_reason:
            await self.gate.wait()
        return await self.inner.chat(messages, sampling)


async def wait_until(predicate, limit: int = 2000) -> None:
    for _ in range(limit):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_a_full_queue_is_refused_at_once_with_retry_after(make_client, zhuge_png):
    vlm = GatedVLM()
    async with make_client(vlm=vlm, api_max_in_flight=1, api_queue_size=1) as (client, services):
        post = lambda: client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")})  # noqa: E731
        first = asyncio.create_task(post())
        await wait_until(lambda: services.admission.running == 1 and vlm.entered == 1)
        second = asyncio.create_task(post())
        await wait_until(lambda: services.admission.waiting == 1)
        refused = await post()
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["code"] == "busy" and "retry in" in error["message"] and "queue limit 1" in error["message"]
        metrics = (await client.get("/metrics")).text
        assert "kar_explain_queue_depth 1.0" in metrics and "kar_explain_in_flight 1.0" in metrics
        vlm.gate.set()
        done = await asyncio.gather(first, second)
        assert [r.status_code for r in done] == [200, 200] and all(r.json()["response"] for r in done)
        metrics = (await client.get("/metrics")).text
        assert 'kar_explain_rejected_total{reason="queue_full"} 1.0' in metrics
        assert "kar_explain_queue_wait_seconds_count 2.0" in metrics
        assert "kar_explain_queue_depth 0.0" in metrics
        assert 'kar_errors_total{code="busy"} 1.0' in metrics
        assert "kar_cpu_pool_workers" in metrics
        # the queue is free again
        assert (await post()).status_code == 200


async def test_the_deadline_answers_504_with_the_stages_that_finished(make_client, zhuge_png):
    vlm = GatedVLM(hold_extract=False, hold_reason=True)
    async with make_client(vlm=vlm, request_timeout_s=4.0) as (client, services):
        r = await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")})
        assert r.status_code == 504
        body = r.json()
        assert body["error"]["code"] == "request_timeout" and body["error"]["stage"] == "reason"
        assert "KAR_REQUEST_TIMEOUT_S = 4 s" in body["error"]["message"]
        trace = body["result"]["trace"]
        assert trace["completed_stages"] == ["extract", "ground", "search"]
        assert trace["extraction"]["entities"][0]["name"] == "诸葛亮"
        assert "诸葛亮" in [h["name"] for h in trace["grounding"]["hits"]], "the grounding that finished in time is in the partial trace"
        assert trace["queries"] and set(trace["timings"]) == {"extract", "ground", "search"}
        assert body["result"]["response"] is None and body["result"]["image"]["width"] == 640
        metrics = (await client.get("/metrics")).text
        assert 'kar_explain_timeouts_total{stage="reason"} 1.0' in metrics
        assert services.admission.running == 0 and services.admission.waiting == 0


async def test_a_request_whose_deadline_passes_in_the_queue_is_a_504_from_the_queue(make_client, zhuge_png):
    async with make_client(api_max_in_flight=1, api_queue_size=4, request_timeout_s=1.0) as (client, services):
        admission = services.admission
        holder = admission.admit()
        async with admission.slot(holder):  # the only pipeline slot is taken for the whole request
            r = await client.post("/v1/explain", files={"image": ("z.png", zhuge_png, "image/png")})
        admission.leave(holder)
        assert r.status_code == 504
        body = r.json()
        assert body["error"]["code"] == "request_timeout" and body["error"]["stage"] == "queue"
        assert body["result"]["trace"]["completed_stages"] == []
        assert admission.waiting == 0 and admission.running == 0
        metrics = (await client.get("/metrics")).text
        assert 'kar_explain_timeouts_total{stage="queue"} 1.0' in metrics


async def test_a_queued_request_is_not_read_until_it_has_a_slot(make_client):
    """Memory is bounded by the slots, not the queue: a queued request's body stays unread (so
    even a non-image is not refused yet); once the slot frees, it is read and judged."""
    async with make_client(api_max_in_flight=1, api_queue_size=4) as (client, services):
        admission = services.admission
        holder = admission.admit()
        await admission.start(holder)
        queued = asyncio.create_task(client.post("/v1/explain", files={"image": ("x.png", b"%PDF-1.7 not an image", "image/png")}))
        await wait_until(lambda: admission.waiting == 1)
        await asyncio.sleep(0.3)
        assert not queued.done(), "the body was read before the request had a slot"
        admission.leave(holder)
        r = await queued
        assert r.status_code == 415 and "PDF" in r.json()["error"]["message"]
        assert admission.waiting == 0 and admission.running == 0


async def test_a_streamed_request_past_its_deadline_ends_with_a_timeout_event(make_client, zhuge_png):
    from tests.services.test_explain import parse_sse

    vlm = GatedVLM(hold_extract=False, hold_reason=True)
    async with make_client(vlm=vlm, request_timeout_s=4.0) as (client, services):
        r = await client.post("/v1/explain?stream=true", files={"image": ("z.png", zhuge_png, "image/png")})
        events = parse_sse(r.text)
        names = [name for name, _ in events]
        assert names[:2] == ["extraction", "entities"] and names[-1] == "error"
        assert events[-1][1]["error"]["code"] == "request_timeout" and events[-1][1]["error"]["stage"] == "reason"
        assert services.admission.running == 0 and services.admission.waiting == 0
        assert json.dumps(events)  # every event is JSON


async def test_clips_beyond_the_clip_slots_are_refused_with_retry_after_never_left_to_time_out(make_client, zhuge_png, tmp_path):
    """A clip costs a whole decode and a dozen OCR reads: at most KAR_MEDIA_MAX_IN_FLIGHT run at once; one that
    cannot get a slot while its deadline leaves a clip's service time is a 503 with Retry-After (not a 504
    later), while an image still runs; once the slot is free a clip runs again."""
    from tests.support.clips import make_clip

    clip = make_clip(tmp_path / "clip.mp4", seconds=1.0).read_bytes()
    vlm = GatedVLM()
    async with make_client(vlm=vlm, media_max_in_flight=1, api_max_in_flight=4) as (client, services):
        # clips have lately taken longer than any deadline: a clip finding the slot taken does not wait for it
        services.admission._media_recent.append(10 * services.settings.request_timeout_s)
        post = lambda name, data: client.post("/v1/explain", files={"media": (name, data, "application/octet-stream")})  # noqa: E731
        first = asyncio.create_task(post("a.mp4", clip))
        await wait_until(lambda: vlm.entered == 1)  # the first clip holds the slot, in the pipeline
        refused = await post("b.mp4", clip)
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["code"] == "busy" and "1 at a time" in error["message"] and "retry in" in error["message"]
        # a clip that waits for the slot is refused as soon as its deadline no longer leaves a clip's expected time
        services.admission._media_recent.clear()
        services.admission._media_recent.append(0.001)
        waiting = asyncio.create_task(post("w.mp4", clip))
        await wait_until(lambda: services.admission.media_waiting == 1)
        services.admission._media_recent.append(10 * services.settings.request_timeout_s)  # a slow clip just finished
        late = await waiting
        assert late.status_code == 503 and "retry-after" in late.headers, late.text
        assert services.admission.media_waiting == 0
        image = asyncio.create_task(post("z.png", zhuge_png))  # an image needs no clip slot
        await wait_until(lambda: vlm.entered == 2)
        vlm.gate.set()
        done = await asyncio.gather(first, image)
        assert [r.status_code for r in done] == [200, 200]
        metrics = (await client.get("/metrics")).text
        assert 'kar_explain_rejected_total{reason="media_full"} 2.0' in metrics
        again = await post("c.mp4", clip)
        assert again.status_code == 200, again.text
