"""The DrivelHub+ rubric judge: a video LLM scores an explanation against the human narrative.

Scores are validated by pydantic within their ranges (Core Intent 0–5, Rhetorical Signal 0–3,
Affective/Social 0–2, Grounding 0–2; penalties Hallucination 0–3, Literal-only 0–3,
Vagueness 0–2).  A reply that is not JSON or is out of range is re-asked (the validation error
is quoted back) up to ``max_retries`` times; after that the item is *unscored* (counted, never
zero).  Total = positives − penalties, floored at 0, out of 12, computed by code.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.vlm.base import ChatMessage, ImageInput, SamplingParams, VisionLanguageModel

PROMPT = Path(__file__).resolve().parent.parent / "prompts" / "drivelhub_rubric.md"
POSITIVE = ("core_intent", "rhetorical_signal", "affective_social", "grounding")
PENALTIES = ("hallucination", "literal_only", "vagueness")
MAX_TOTAL = 12


class RubricScores(BaseModel):
    """One judge verdict; every score must lie within its range."""

    model_config = ConfigDict(extra="ignore")
    aligned: bool
    core_intent: int = Field(ge=0, le=5)
    rhetorical_signal: int = Field(ge=0, le=3)
    affective_social: int = Field(ge=0, le=2)
    grounding: int = Field(ge=0, le=2)
    hallucination: int = Field(ge=0, le=3)
    literal_only: int = Field(ge=0, le=3)
    vagueness: int = Field(ge=0, le=2)
    reason: str = ""

    @property
    def total(self) -> int:
        """Positives minus penalties, floored at 0 (out of 12)."""
        return max(0, sum(getattr(self, k) for k in POSITIVE) - sum(getattr(self, k) for k in PENALTIES))


def parse_rubric_reply(text: str) -> RubricScores:
    """The verdict in a reply (the first JSON object in it); ValueError/ValidationError otherwise."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if not match:
        raise ValueError("no JSON object in the reply")
    data = json.loads(match.group(0))
    if isinstance(data, dict):
        for key, value in list(data.items()):  # "3" → 3, but 3.5 stays invalid
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                data[key] = int(value)
    return RubricScores.model_validate(data)


@dataclass
class RubricJudge:
    """Calls the judge model once per item (plus re-asks on invalid replies)."""

    vlm: VisionLanguageModel
    max_retries: int = 2

    def prompt(self, narrative: str, response: str, transcript: str | None, timestamps: Sequence[float]) -> str:
        template = PROMPT.read_text("utf-8")
        return template.format(
            narrative=narrative,
            response=response,
            transcript=f"Transcript of the audio:\n{transcript}\n" if transcript else "",
            timestamps=", ".join(f"{t:.2f}" for t in timestamps) or "(no frames)",
        )

    async def score(
        self, narrative: str, response: str, frames: Sequence[bytes] = (), timestamps: Sequence[float] = (),
        transcript: str | None = None,
    ) -> dict[str, Any]:
        """``{"scores": {...}, "total": int, "attempts": n}`` or ``{"scores": None, "error": ...}``."""
        images = tuple(ImageInput(f, f"frame{i}") for i, f in enumerate(frames))
        messages = [ChatMessage("user", self.prompt(narrative, response, transcript, timestamps), images)]
        problem = ""
        for attempt in range(1, self.max_retries + 2):
            result = await self.vlm.chat(messages, SamplingParams(temperature=0.0, json_mode=True))
            try:
                verdict = parse_rubric_reply(result.text)
            except (ValueError, ValidationError) as exc:
                problem = _brief(exc)
                messages = [*messages, ChatMessage("assistant", result.text),
                            ChatMessage("user", f"Your reply was invalid: {problem}. Reply again with the JSON object only, every score within its range.")]
                continue
            return {"scores": verdict.model_dump(), "total": verdict.total, "attempts": attempt}
        return {"scores": None, "total": None, "attempts": self.max_retries + 1, "error": f"invalid after retries: {problem}"}


def _brief(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    return str(exc)


async def judge_all(
    judge: RubricJudge, jobs: Sequence[dict[str, Any]], concurrency: int = 4
) -> list[dict[str, Any]]:
    """Score many items (``{id, narrative, response, frames, timestamps, transcript}``); order kept.
    A call that fails is recorded as unscored with its error, never dropped."""
    limiter = asyncio.Semaphore(max(1, concurrency))

    async def one(job: dict[str, Any]) -> dict[str, Any]:
        base = {"id": job["id"], "response": job.get("response")}
        if not (job.get("response") or "").strip():
            return base | {"evaluation": {"scores": None, "total": None, "error": "no response"}}
        async with limiter:
            try:
                verdict = await judge.score(job["narrative"], job["response"], job.get("frames", ()),
                                            job.get("timestamps", ()), job.get("transcript"))
            except Exception as exc:  # recorded, not lost
                verdict = {"scores": None, "total": None, "error": f"{type(exc).__name__}: {exc}"}
        return base | {"evaluation": verdict}

    return list(await asyncio.gather(*(one(job) for job in jobs)))


def rubric_summary(records: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """Means over scored items, aligned share over every item, unscored counted."""
    n = len(records)
    scored = [r["evaluation"]["scores"] for r in records if r and (r.get("evaluation") or {}).get("scores")]
    totals = [max(0, sum(s[k] for k in POSITIVE) - sum(s[k] for k in PENALTIES)) for s in scored]
    return {
        "n": n,
        "n_scored": len(scored),
        "n_unscored": n - len(scored),
        "total_mean": sum(totals) / len(totals) if totals else None,
        "total_max": MAX_TOTAL,
        "aligned_share": sum(bool(s["aligned"]) for s in scored) / n if n else None,
        "dimension_means": {k: (sum(s[k] for s in scored) / len(scored) if scored else None) for k in (*POSITIVE, *PENALTIES)},
    }
