"""One JSONL item shape per benchmark of the MemeBench family (MemeReaCon, AVMeme Exam,
DrivelHub+, MemeCULT-1K).

Every line is one task instance with ``benchmark``, ``task`` and ``id``; the rest depends on
the benchmark (README: "Benchmark family", table of fields).  Media paths are relative to the
JSONL file's folder (or ``--media-root``) unless absolute.
"""

from __future__ import annotations

import string
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LETTERS = string.ascii_uppercase
MAX_OPTIONS = 10

#: MemeReaCon tasks: classification label sets and generation tasks
MEMEREACON_LABELS: dict[str, tuple[str, ...]] = {
    "CMI-C": ("CEM", "MEC"),  # context explains meme / meme enhances context
    "CSAC-S": ("Support", "Deny", "Extension"),  # CSAC-C: the comment's stance
    "CSAC-A": ("Consistent", "Inconsistent"),  # CSAC-C: literal affect vs intended meaning
}
MEMEREACON_GENERATION = ("PC-G", "PI-G")  # post-meme-comment connection; poster's intent
AVMEME_QUESTION_TYPES = (
    "audio_analysis", "language_analysis", "contextual_inference", "emotion", "humor", "usage", "world_knowledge",
)
AVMEME_SOUND_CATEGORIES = ("speech", "song", "music", "sound_effect")
AVMEME_SPLITS = ("meme-full", "meme-main")

TaskKind = Literal["mcq", "classify", "generate"]


def _norm_key(value: str) -> str:
    return value.strip().lower().replace(" ", "_").replace("-", "_")


class BenchItem(BaseModel):
    """Fields every benchmark line has (extra fields are kept verbatim)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    benchmark: str
    task: str
    id: str = Field(min_length=1)
    language: str | None = None

    kind: ClassVar[dict[str, TaskKind]] = {}

    @field_validator("id", mode="before")
    @classmethod
    def _id_str(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value

    @property
    def task_kind(self) -> TaskKind:
        return self.kind[self.task]

    @property
    def media_paths(self) -> dict[str, str]:
        """Media fields of this item that name a file: image / video / audio."""
        return {k: getattr(self, k) for k in ("image", "video", "audio") if getattr(self, k, None)}

    @property
    def label_set(self) -> tuple[str, ...]:
        return ()

    @property
    def references(self) -> list[str]:
        return []

    def group_values(self) -> dict[str, str]:
        """Breakdown keys of this item (language plus benchmark-specific ones)."""
        return {"language": self.language or "unknown"}


class MemeReaConItem(BenchItem):
    """A Reddit meme with its post (and, for CSAC, one top-level comment)."""

    benchmark: Literal["memereacon"]
    task: Literal["CMI-C", "CSAC-S", "CSAC-A", "PC-G", "PI-G"]
    image: str = Field(min_length=1)
    post_text: str
    comment: str | None = None
    comments: list[str] = Field(default_factory=list)
    label: str | None = None
    refs: list[str] = Field(default_factory=list, alias="references")

    kind: ClassVar[dict[str, TaskKind]] = {t: "classify" for t in MEMEREACON_LABELS} | {
        t: "generate" for t in MEMEREACON_GENERATION
    }

    @model_validator(mode="after")
    def _task_fields(self) -> MemeReaConItem:
        if self.task in MEMEREACON_LABELS:
            labels = MEMEREACON_LABELS[self.task]
            if self.label is None:
                raise ValueError(f"field 'label': required for {self.task} (one of {', '.join(labels)})")
            match = {lab.lower(): lab for lab in labels}.get(self.label.strip().lower())
            if match is None:
                raise ValueError(f"field 'label': {self.label!r} is not one of {', '.join(labels)}")
            object.__setattr__(self, "label", match)
            if self.task.startswith("CSAC") and not (self.comment or "").strip():
                raise ValueError(f"field 'comment': required for {self.task}")
        elif not [r for r in self.refs if r.strip()]:
            raise ValueError(f"field 'references': {self.task} needs at least one reference text")
        return self

    @property
    def label_set(self) -> tuple[str, ...]:
        return MEMEREACON_LABELS.get(self.task, ())

    @property
    def references(self) -> list[str]:
        return [r for r in self.refs if r.strip()]


class AVMemeItem(BenchItem):
    """An audio-visual meme clip with one multiple-choice question."""

    benchmark: Literal["avmeme"]
    task: Literal["MCQ"] = "MCQ"
    video: str = Field(min_length=1)
    audio: str | None = None
    question: str = Field(min_length=1)
    options: list[str] = Field(min_length=2, max_length=MAX_OPTIONS)
    answer: str
    question_type: str | None = None
    sound_category: str | None = None
    splits: list[str] = Field(default_factory=lambda: ["meme-full"])
    meme_name: str | None = None

    kind: ClassVar[dict[str, TaskKind]] = {"MCQ": "mcq"}

    @model_validator(mode="after")
    def _answer_among_options(self) -> AVMemeItem:
        if any(not str(o).strip() for o in self.options):
            raise ValueError("field 'options': an option is empty")
        letters = LETTERS[: len(self.options)]
        raw = self.answer.strip()
        letter = raw.upper().strip("()") if len(raw.strip("()")) == 1 else None
        if letter is None or letter not in letters:
            by_text = [i for i, o in enumerate(self.options) if o.strip().lower() == raw.lower()]
            if not by_text:
                raise ValueError(
                    f"field 'answer': {self.answer!r} is not among the {len(self.options)} options "
                    f"(a letter {letters[0]}-{letters[-1]} or an option's exact text)"
                )
            letter = letters[by_text[0]]
        object.__setattr__(self, "answer", letter)
        if self.question_type is not None:
            qt = _norm_key(self.question_type)
            if qt not in AVMEME_QUESTION_TYPES:
                raise ValueError(f"field 'question_type': {self.question_type!r} is not one of {', '.join(AVMEME_QUESTION_TYPES)}")
            object.__setattr__(self, "question_type", qt)
        if self.sound_category is not None:
            sc = _norm_key(self.sound_category)
            if sc not in AVMEME_SOUND_CATEGORIES:
                raise ValueError(f"field 'sound_category': {self.sound_category!r} is not one of {', '.join(AVMEME_SOUND_CATEGORIES)}")
            object.__setattr__(self, "sound_category", sc)
        bad = [s for s in self.splits if s not in AVMEME_SPLITS]
        if bad:
            raise ValueError(f"field 'splits': {bad} not among {', '.join(AVMEME_SPLITS)}")
        return self

    def group_values(self) -> dict[str, str]:
        return super().group_values() | {
            "question_type": self.question_type or "unknown",
            "sound_category": self.sound_category or "unknown",
        }


class DrivelHubItem(BenchItem):
    """A short video with its human implicit-narrative annotation."""

    benchmark: Literal["drivelhub"]
    task: Literal["NARRATIVE-G"] = "NARRATIVE-G"
    video: str = Field(min_length=1)
    audio: str | None = None
    narrative: str = Field(min_length=1)
    extra_relevant: list[str] = Field(default_factory=list)  # human-verified extra pairs (item ids)

    kind: ClassVar[dict[str, TaskKind]] = {"NARRATIVE-G": "generate"}

    @property
    def references(self) -> list[str]:
        return [self.narrative]


class MemeCultItem(BenchItem):
    """A meme image with human reference explanations and its cultural context note."""

    benchmark: Literal["memecult"]
    task: Literal["EXPLAIN-G"] = "EXPLAIN-G"
    image: str = Field(min_length=1)
    context_note: str | None = None
    refs: list[str] = Field(min_length=1, alias="references")

    kind: ClassVar[dict[str, TaskKind]] = {"EXPLAIN-G": "generate"}

    @property
    def references(self) -> list[str]:
        return [r for r in self.refs if r.strip()]


ITEM_TYPES: dict[str, type[BenchItem]] = {
    "memereacon": MemeReaConItem,
    "avmeme": AVMemeItem,
    "drivelhub": DrivelHubItem,
    "memecult": MemeCultItem,
}
BENCHMARKS: tuple[str, ...] = tuple(ITEM_TYPES)
