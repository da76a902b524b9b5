"""The DrivelHub+ rubric judge: a video LLM scores an explanation against the human narrative.

The rubric and its ranges are the release's (:data:`eval.tasks.drivelhub.RUBRIC`): Core Intent
0–5, Rhetorical Signal 0–3, Affective or Social Meaning 0–2, Grounding 0–2; penalties
Hallucination 0–3, Literal-only 0–3, Vague or Over-generalized 0–2.  A reply that is not JSON
or is out of range is re-asked through :func:`eval.judges.base.ask_valid` (the validation error
quoted back).  Total = positives − penalties, **no floor** (−8 … 12), computed by code.

Each judged item becomes a row in the release's ``judgments.jsonl`` shape (the clip's
metadata row, ``input_mode``, ``implicit_meaning``, then ``judge_aligned``,
``judge_<rubric>``, ``judge_score_total``, ``judge_reason``); a failed judgment is
``judge_aligned: null`` plus ``judge_error``, so the release's ``summarize_judgments.py`` reads
our files and we read theirs (:func:`eval.tasks.drivelhub.read_judgments`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from agents.vlm.base import ChatMessage, ImageInput, VisionLanguageModel
from eval.judges.base import PARAMS as JUDGE_PARAMS, ask_valid, fill, json_object
from eval.tasks.drivelhub import MAX_TOTAL, MIN_TOTAL, PENALTIES, POSITIVE, RUBRIC, summarize, total

PROMPT = Path(__file__).resolve().parent.parent / "prompts" / "drivelhub_rubric.md"
__all__ = ["MAX_TOTAL", "MIN_TOTAL", "PENALTIES", "POSITIVE", "RubricJudge", "RubricScores", "judge_all", "judged_row",
           "parse_rubric_reply", "rubric_summary"]


class RubricScores(BaseModel):
    """One judge verdict; every score must lie within its range (the release's names; our old names accepted)."""

    model_config = ConfigDict(extra="ignore")
    aligned: bool
    core_intent: int = Field(ge=0, le=5)
    rhetorical_signal: int = Field(ge=0, le=3)
    affective_or_social_meaning: int = Field(ge=0, le=2, validation_alias=AliasChoices("affective_or_social_meaning", "affective_social"))
    grounding: int = Field(ge=0, le=2)
    hallucination_penalty: int = Field(ge=0, le=3, validation_alias=AliasChoices("hallucination_penalty", "hallucination"))
    literal_only_penalty: int = Field(ge=0, le=3, validation_alias=AliasChoices("literal_only_penalty", "literal_only"))
    vague_or_overgeneralized_penalty: int = Field(ge=0, le=2, validation_alias=AliasChoices("vague_or_overgeneralized_penalty", "vagueness"))
    reason: str = Field(default="", validation_alias=AliasChoices("reason", "reasoning_short"))

    @field_validator("core_intent", "rhetorical_signal", "affective_or_social_meaning", "grounding", "hallucination_penalty",
                     "literal_only_penalty", "vague_or_overgeneralized_penalty", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:  # "3" → 3, but 3.5 and true stay invalid
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        if isinstance(value, bool):
            raise ValueError("must be an integer, not a boolean")
        return value

    @property
    def total(self) -> int:
        """Positives minus penalties, no floor (−8 … 12)."""
        return total(self.model_dump())


def parse_rubric_reply(text: str) -> RubricScores:
    """The verdict in a reply (the JSON object in it); ValueError (incl. pydantic's) otherwise."""
    return RubricScores.model_validate(json_object(text))


def judged_row(base: dict[str, Any], response: str | None, verdict: RubricScores | None, error: str | None = None) -> dict[str, Any]:
    """A release judgments.jsonl row: the prediction row, then the judge's fields (or ``judge_aligned: null`` + ``judge_error``)."""
    row = dict(base) | {"implicit_meaning": response or ""}
    if verdict is None:
        return row | {"judge_aligned": None, "judge_error": error or "no verdict"}
    scores = verdict.model_dump()
    row["judge_aligned"] = verdict.aligned
    row.update({f"judge_{k}": scores[k] for k in RUBRIC})
    return row | {"judge_score_total": verdict.total, "judge_reason": verdict.reason}


@dataclass
class RubricJudge:
    """Calls the judge model once per item (plus re-asks on invalid replies)."""

    vlm: VisionLanguageModel
    max_retries: int = JUDGE_PARAMS.max_parse_retries

    def prompt(self, narrative: str, response: str, transcript: str | None, timestamps: Sequence[float]) -> str:
        return fill(
            PROMPT.read_text("utf-8"), narrative=narrative, response=response,
            transcript=f"Transcript of the audio:\n{transcript}\n" if transcript else "",
            timestamps=", ".join(f"{t:.2f}" for t in timestamps) or "(no frames)",
        )

    async def score(
        self, narrative: str, response: str, frames: Sequence[bytes] = (), timestamps: Sequence[float] = (),
        transcript: str | None = None,
    ) -> tuple[RubricScores | None, str | None, int]:
        """``(verdict, None, attempts)`` or ``(None, error, attempts)``."""
        images = tuple(ImageInput(f, f"frame{i}") for i, f in enumerate(frames))
        messages = [ChatMessage("user", self.prompt(narrative, response, transcript, timestamps), images)]
        asked = await ask_valid(
            self.vlm, messages, parse_rubric_reply, max_retries=self.max_retries,
            repair=lambda problem: f"Your reply was invalid: {problem}. Reply again with the JSON object only, every score within its range.",
        )
        return asked.value, asked.error, asked.calls


async def judge_all(judge: RubricJudge, jobs: Sequence[dict[str, Any]], concurrency: int = 4) -> list[dict[str, Any]]:
    """Score many items (``{row, narrative, response, frames, timestamps, transcript}``) into release rows; order kept.
    A call that fails is recorded with ``judge_aligned: null`` and its ``judge_error``, never dropped."""
    limiter = asyncio.Semaphore(max(1, concurrency))

    async def one(job: dict[str, Any]) -> dict[str, Any]:
        response = job.get("response")
        if job.get("error"):
            return judged_row(job["row"], response, None, job["error"])
        if not (response or "").strip():
            return judged_row(job["row"], response, None, "no response to judge")
        async with limiter:
            try:
                verdict, error, _ = await judge.score(job["narrative"], response, job.get("frames", ()),
                                                      job.get("timestamps", ()), job.get("transcript"))
            except Exception as exc:  # recorded, not lost
                verdict, error = None, f"{type(exc).__name__}: {exc}"
        return judged_row(job["row"], response, verdict, error)

    return list(await asyncio.gather(*(one(job) for job in jobs)))


def rubric_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The release's summary of judged rows (:func:`eval.tasks.drivelhub.summarize`)."""
    return summarize(rows)


def prediction_rows(path: str | Path) -> dict[str, dict[str, Any]]:
    """Predictions by item: ours ``{id, response}`` or the release's rows ``{file, implicit_meaning, input_mode, error}``."""
    from eval.records import load_predictions, read_records

    records = read_records(path)
    if records and all("file" in r and "implicit_meaning" in r for r in records):
        return {str(r["file"]): {"response": r.get("implicit_meaning"), "error": r.get("error"), "row": r} for r in records}
    return {p.id: {"response": p.response} for p in load_predictions(path) if p.id is not None}


def rubric_jobs(
    dataset: Any, predictions: dict[str, dict[str, Any]], *, settings: Any, media_root: Path | None,
    frames: int, input_mode: str,
) -> list[dict[str, Any]]:
    """One judge job per clip: the release row, the narrative, the response and the clip's frames
    (a clip without a prediction, or whose video cannot be read, is a job with its ``error``)."""
    from agents.media import MediaError, prepare_video
    from eval.tasks import resolve_media

    jobs = []
    for item in dataset.items:
        base = item.release_row()
        found = predictions.get(item.id) or predictions.get(base["file"]) or {}
        mode = str((found.get("row") or {}).get("input_mode") or input_mode)
        row = base | {k: v for k, v in (found.get("row") or {}).items() if not k.startswith("judge_")} | {
            "input_mode": mode, "remove_audio": mode == "without-audio", "remove_vision": mode == "without-vision"}
        job: dict[str, Any] = {"row": row, "narrative": item.narrative, "response": found.get("response"),
                               "error": found.get("error") or (None if found else "no prediction for this clip")}
        video = resolve_media(item.video, dataset.path, media_root)
        if not job["error"] and (job["response"] or "").strip():
            try:
                media = prepare_video(video, settings=settings, frames=frames, audio_mode="none") if video else None
            except MediaError as exc:
                job["error"] = f"media: {exc}"
                media = None
            if media is not None:
                job["frames"] = [f.jpeg for f in media.frames]
                job["timestamps"] = [f.t for f in media.frames]
        jobs.append(job)
    return jobs


def write_rows(rows: Sequence[dict[str, Any]], out: Path) -> None:
    """Judged rows as JSONL (the release's judgments.jsonl shape)."""
    import json

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
