"""The 1–5 reference rubric of MemeCULT-1K / MemeCap (fluency, cultural correctness, humor
relevance): one judge call per item through :func:`eval.judges.base.ask_valid`; an unparseable
reply after the re-asks is unscored (left out of the means, counted)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.vlm.base import ChatMessage, ImageInput, VisionLanguageModel
from eval.judges.base import PARAMS as JUDGE_PARAMS, ask_valid, fill, json_object
from eval.records import ReferenceItem


RUBRIC_KEYS = ("fluency", "cultural_correctness", "humor_relevance")
PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts"


def parse_rubric(text: str) -> dict[str, int]:
    """The three 1–5 scores from a rubric reply (JSON, possibly fenced); ValueError otherwise."""
    payload = json_object(text)
    scores: dict[str, int] = {}
    for key in RUBRIC_KEYS:
        value = payload.get(key)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 5:
            raise ValueError(f"rubric field {key!r} must be an integer 1-5, got {value!r}")
        scores[key] = value
    return scores


async def rubric_score(
    vlm: VisionLanguageModel,
    item: ReferenceItem,
    response: str,
    image: bytes | None,
    *,
    max_parse_retries: int = JUDGE_PARAMS.max_parse_retries,
    template: str | None = None,
) -> dict[str, int] | None:
    """Rubric scores for one response; ``None`` when unparseable after retries or on judge error."""
    template = template or (PROMPT_DIR / "rubric.md").read_text(encoding="utf-8")
    prompt = fill(template, references="\n".join(f"- {r}" for r in item.references), context=item.context or "(none)",
                  response=response)
    images = (ImageInput(image, Path(item.image_path).name),) if image else ()
    asked = await ask_valid(vlm, [ChatMessage("user", prompt, images=images)], parse_rubric, max_retries=max_parse_retries,
                            repair=lambda problem: f"Your reply could not be used ({problem}). Reply with only the JSON object.")
    return asked.value


def summarize_rubric(scores: Sequence[dict[str, int] | None]) -> dict[str, Any]:
    """Means per rubric key over scored items, with the unscored count."""
    scored = [s for s in scores if s is not None]
    return {
        "n": len(scores),
        "n_unscored": len(scores) - len(scored),
        **{key: (float(np.mean([s[key] for s in scored])) if scored else None) for key in RUBRIC_KEYS},
    }


def answered(response: str | None) -> bool:
    """Whether the response says anything (a blank or missing response is unanswered)."""
    return bool((response or "").strip())


async def run_rubric(
    vlm: VisionLanguageModel,
    items: Sequence[ReferenceItem],
    responses: Mapping[str, str | None],
    images: Mapping[str, bytes | None],
    *,
    concurrency: int = 8,
    max_parse_retries: int = JUDGE_PARAMS.max_parse_retries,
    on_progress: Any = None,
) -> list[dict[str, int] | None]:
    """Rubric scores per item (``None``: no response, or the judge's reply unusable); one call per answered item."""
    import asyncio

    template = (PROMPT_DIR / "rubric.md").read_text(encoding="utf-8")
    limiter = asyncio.Semaphore(concurrency)
    results: list[dict[str, int] | None] = [None] * len(items)
    done = 0

    async def one(index: int, item: ReferenceItem) -> None:
        nonlocal done
        response = responses.get(item.id)
        if answered(response):
            async with limiter:
                results[index] = await rubric_score(
                    vlm, item, response or "", images.get(item.id),
                    max_parse_retries=max_parse_retries, template=template,
                )
        done += 1
        if on_progress is not None:
            on_progress(done, len(items))

    await asyncio.gather(*(one(i, item) for i, item in enumerate(items)))
    return results
