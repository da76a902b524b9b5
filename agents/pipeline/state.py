"""Pipeline state (the LangGraph channel schema), inputs, results and stage events."""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal, TypedDict

Condition = Literal["vanilla", "cot", "search_cot", "kar", "context_note"]
CONDITIONS: tuple[str, ...] = ("vanilla", "cot", "search_cot", "kar", "context_note")
#: the four-condition ablation of the study (each adds one variable to the previous)
ABLATION_CONDITIONS: tuple[str, ...] = ("vanilla", "cot", "search_cot", "kar")
RETRIEVAL_CONDITIONS = frozenset({"search_cot", "kar"})


def merge_dicts(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    return {**(left or {}), **(right or {})}


@dataclass
class ExplainContext:
    """Optional text that came with the image; it reaches the prompts."""

    post_text: str | None = None
    top_comment: str | None = None
    context_note: str | None = None

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if v}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "ExplainContext":
        data = data or {}
        return cls(**{k: (str(data[k]) if data.get(k) else None) for k in ("post_text", "top_comment", "context_note")})


class PipelineState(TypedDict, total=False):
    # inputs
    item_id: str
    condition: str
    image: bytes
    image_name: str
    language: str | None
    context: dict[str, str]
    # optional media / task inputs (benchmark-family items; absent for plain images)
    frames: list[bytes]  # video frames in time order (sent instead of ``image``)
    audio: bytes | None  # WAV sent natively as an input_audio part
    text_only: bool  # send no media at all (the text-only ablation)
    audio_only: bool  # send the audio alone (no image, no frames, no OCR of them)
    task: dict[str, Any] | None  # {"kind", "instruction"}: answer this task instead of the plain explanation
    media: dict[str, Any] | None  # how the media were prepared (recorded in the trace)
    # stage outputs
    ocr: dict[str, Any] | None
    extraction: dict[str, Any] | None
    grounding: dict[str, Any] | None
    hits: list[Any]
    queries: list[dict[str, Any]]
    searches: list[dict[str, Any]]
    evidence: dict[str, Any] | None
    response: str | None
    error: dict[str, Any] | None
    # accumulated
    timings: Annotated[dict[str, float], merge_dicts]
    prompt_hashes: Annotated[dict[str, str], merge_dicts]
    vlm_calls: Annotated[list[dict[str, Any]], operator.add]
    prompts: Annotated[list[dict[str, Any]], operator.add]  # what each VLM call was sent (agents.vlm.record)
    notes: Annotated[list[str], operator.add]


@dataclass
class StageEvent:
    """Emitted when a stage finishes: its name, what it produced, and the elapsed time."""

    stage: str
    data: dict[str, Any]
    elapsed_s: float
    result: "ExplainResult | None" = None

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "data": self.data, "elapsed_s": round(self.elapsed_s, 4)}


@dataclass
class ExplainResult:
    """The explanation (None when none was produced) plus the full trace."""

    id: str
    condition: str
    response: str | None
    error: dict[str, Any] | None
    trace: dict[str, Any] = field(default_factory=dict)
    image_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.response is not None and self.error is None

    def prediction(self) -> dict[str, Any]:
        """The MemeBench prediction record."""
        return {"id": self.id, "image_path": self.image_path, "response": self.response}

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "image_path": self.image_path,
            "condition": self.condition,
            "response": self.response,
            "error": self.error,
            "trace": self.trace,
        }
