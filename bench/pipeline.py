"""Pipeline benchmark; prints JSON.

(a) orchestration overhead per item (LangGraph + prompts + parsing + evidence + trace) with
    zero-latency VLM/search doubles and a precomputed grounder (embedding excluded);
(b) throughput of the batch runner with simulated latencies (VLM 800 ms/call, search
    300 ms/query) at concurrency 1, 16, 64, as a share of the ideal (concurrency / item latency);
(c) web searches per item over the four-condition ablation, with and without the shared cache.

    .venv/bin/python bench/pipeline.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.pipeline import ABLATION_CONDITIONS, KARPipeline, PipelineConfig, PipelineDeps  # noqa: E402
from agents.runner import AblationRunner, RunItem  # noqa: E402
from agents.vlm.base import ChatResult, TokenUsage  # noqa: E402
from culturebase.entity import Entity  # noqa: E402
from retrieval.grounding import GroundedEntity, GroundingResult  # noqa: E402
from retrieval.websearch import CachedSearch, SearchResult  # noqa: E402

IMAGE = REPO / "examples" / "images" / "zhuge_liang_wang_lang.png"
VLM_S, SEARCH_S = 0.8, 0.3


def extraction(i: int) -> str:
    return json.dumps(
        {
            "ocr_text": f"我从未见过有如此厚颜无耻之人 {i}",
            "visual_handle": "手持羽扇的文人",
            "entities": [
                {"name": f"诸葛亮{i}", "source": "三国演义", "confidence": "high"},
                {"name": f"王朗{i}", "source": "三国演义", "confidence": "medium"},
            ],
            "suggested_queries": [f"诸葛亮 骂死王朗 {i}"],
        },
        ensure_ascii=False,
    )


class DelayVLM:
    model_id = "bench-vlm"

    def __init__(self, delay: float) -> None:
        self.delay, self.calls = delay, 0

    async def chat(self, messages, sampling=None):  # noqa: ANN001
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        text = messages[-1].text
        if "You are the extraction step" in text:
            i = int(text.rsplit("ITEM-", 1)[-1].split()[0]) if "ITEM-" in text else 0
            return ChatResult(extraction(i), self.model_id, TokenUsage(900, 80))
        return ChatResult("explanation", self.model_id, TokenUsage(2000, 300))


class DelaySearch:
    name = "bench"

    def __init__(self, delay: float) -> None:
        self.delay, self.calls = delay, 0

    def params(self, max_results: int) -> dict:
        return {"max_results": max_results}

    async def search(self, query: str, max_results: int = 5, names: Sequence[str] | None = None) -> list[SearchResult]:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        return [SearchResult(f"{query} {k}", f"https://e.org/{k}", "内容 " * 60) for k in range(max_results)]


class StubGrounder:
    """Precomputed grounding: two entities ≥ τ for even items, none for odd ones (no embedding)."""

    tau = 0.86
    inline = True  # cheap: called on the loop, not in a worker thread

    def __init__(self) -> None:
        self.entities = [
            Entity.model_validate({"name": n, "source_work": s, "language": "zh", "description": "d", "aliases": []})
            for n, s in (("诸葛亮", "三国演义"), ("王司徒", "三国演义"))
        ]

    def ground(self, cues, language=None):  # noqa: ANN001
        odd = any(ch in cues.ocr_text for ch in "13579") and cues.ocr_text.strip()[-1] in "13579"
        hits = [] if odd else [GroundedEntity(e, 0.95, "name", {"name": 0.9}, e.name, dense=0.9, reasons={"exact": e.name}) for e in self.entities]
        return GroundingResult(hits, hits, self.tau)


def items(n: int) -> list[RunItem]:
    from agents.pipeline import ExplainContext

    # the item index travels in the post text so the extraction double can vary per item
    return [RunItem(f"item-{i}", str(IMAGE), IMAGE, "zh", ExplainContext(post_text=f"ITEM-{i} ")) for i in range(n)]


def pipeline(vlm, search) -> KARPipeline:  # noqa: ANN001
    return KARPipeline(PipelineDeps(vlm=vlm, grounder=StubGrounder(), search=search, config=PipelineConfig(ocr_enabled=False)))


async def overhead(n: int = 300) -> dict:
    image = IMAGE.read_bytes()
    out = {}
    for condition in ("vanilla", "kar"):
        p = pipeline(DelayVLM(0), DelaySearch(0))
        for _ in range(20):
            await p.explain(image, condition, language="zh")
        samples = []
        for i in range(n):
            from agents.pipeline import ExplainContext

            t = time.perf_counter()
            await p.explain(image, condition, ExplainContext(post_text=f"ITEM-{i} "), language="zh")
            samples.append((time.perf_counter() - t) * 1000)
        samples.sort()
        out[condition] = {"median_ms": round(statistics.median(samples), 3), "p95_ms": round(samples[int(0.95 * n)], 3)}
    return {"per_item": out, "target_median_ms": 5.0, "meets_target": out["kar"]["median_ms"] < 5.0}


async def throughput() -> dict:
    ideal_latency = VLM_S + SEARCH_S + VLM_S  # kar: extract, parallel searches, reason
    out = {}
    for concurrency, n in ((1, 3), (16, 48), (64, 192)):
        p = pipeline(DelayVLM(VLM_S), DelaySearch(SEARCH_S))
        with tempfile.TemporaryDirectory() as tmp:
            runner = AblationRunner(p, Path(tmp), ["kar"], concurrency=concurrency)
            t = time.perf_counter()
            summary = await runner.run(items(n))
            wall = time.perf_counter() - t
        assert summary.ran == n and summary.failed == 0, summary
        ideal = concurrency / ideal_latency
        measured = n / wall
        out[str(concurrency)] = {
            "items": n,
            "wall_s": round(wall, 3),
            "items_per_s": round(measured, 3),
            "ideal_items_per_s": round(ideal, 3),
            "share_of_ideal": round(measured / ideal, 3),
        }
    return {"condition": "kar", "vlm_s": VLM_S, "search_s": SEARCH_S, "by_concurrency": out,
            "target_share_at_64": 0.9, "meets_target": out["64"]["share_of_ideal"] >= 0.9}


async def searches_per_item(n: int = 40) -> dict:
    out = {}
    for label in ("without_cache", "with_shared_cache"):
        backend = DelaySearch(0.002)
        with tempfile.TemporaryDirectory() as tmp:
            search = CachedSearch(backend, Path(tmp) / "cache.sqlite") if label == "with_shared_cache" else backend
            runner = AblationRunner(pipeline(DelayVLM(0.001), search), Path(tmp) / "run", list(ABLATION_CONDITIONS), concurrency=8)
            await runner.run(items(n))
            per_condition = {}
            for condition in ABLATION_CONDITIONS:
                lines = (Path(tmp) / "run" / "traces" / f"{condition}.jsonl").read_text().splitlines()
                per_condition[condition] = round(sum(json.loads(l)["trace"]["search_calls"] for l in lines) / n, 3)
        out[label] = {"backend_searches_per_item": round(backend.calls / n, 3), "queries_issued_per_item": per_condition}
    return {"items": n, "conditions": list(ABLATION_CONDITIONS), **out}


async def main() -> None:
    result = {
        "a_orchestration_overhead": await overhead(),
        "b_throughput": await throughput(),
        "c_web_searches": await searches_per_item(),
    }
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    asyncio.run(main())
