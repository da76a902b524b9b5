"""AVMeme Exam: audio-visual meme clips, one multiple-choice question each.

Released as a Hugging Face dataset; the converter reads the card of ``mteb/AVMeme-Exam``
(fields ``video_id, video, audio, language, summary, emotion, question, candidates, answer,
usage, category``; ``category`` is the sound category: clean speech / noisy speech / song /
music / sound effect) as JSON, JSONL or Parquet.  The card has no question-type column: a
``question_type`` (or ``type``) column is used when present, else the item's type is left
unset ("unknown" in breakdowns).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator

from eval.records import read_records
from eval.tasks.base import LETTERS, MAX_OPTIONS, BenchItem, Task, TaskKind, _field_errors, _norm_key, dump_item, register, task_prompt

if TYPE_CHECKING:
    from agents.pipeline.state import ExplainContext


AVMEME_QUESTION_TYPES = (
    "audio_analysis", "language_analysis", "contextual_inference", "emotion", "humor", "usage", "world_knowledge",
)


AVMEME_SOUND_CATEGORIES = ("speech", "song", "music", "sound_effect")


AVMEME_SPLITS = ("meme-full", "meme-main")


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

    def split_values(self) -> list[str]:
        return list(self.splits)

    def instruction(self) -> str | None:
        options = "\n".join(f"{LETTERS[i]}. {text}" for i, text in enumerate(self.options))
        return task_prompt("mcq").format(question=self.question, options=options)

    def explain_context(self) -> ExplainContext:
        from agents.pipeline.state import ExplainContext

        return ExplainContext(context_note=self.meme_name)


SOUND_CATEGORY_MAP = {
    "clean speech": "speech", "noisy speech": "speech", "speech": "speech", "song": "song", "music": "music",
    "sound effect": "sound_effect", "sound effects": "sound_effect", "sfx": "sound_effect", "sound_effect": "sound_effect",
}


def _rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    return read_records(path)


def _video_name(record: dict[str, Any], media_dir: str) -> str:
    video = record.get("video")
    if isinstance(video, str) and video:
        return video
    if isinstance(video, dict) and video.get("path"):
        return str(video["path"])
    return f"{media_dir.rstrip('/')}/{record['video_id']}.mp4" if media_dir else f"{record['video_id']}.mp4"


def convert_avmeme(path: str | Path, *, media_dir: str = "videos", split: str = "meme-full") -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of the ``mteb/AVMeme-Exam`` card → AVMeme JSONL records, plus per-row errors."""
    path = Path(path)
    out: list[dict[str, Any]] = []
    errors: list[str] = []
    per_video: dict[str, int] = {}
    for index, row in enumerate(_rows(path)):
        where = f"row {index} (video_id={row.get('video_id', '?')})"
        if not row.get("video_id"):
            errors.append(f"{where}: field 'video_id' is missing")
            continue
        vid = str(row["video_id"])
        per_video[vid] = per_video.get(vid, 0) + 1
        category = row.get("category")
        sound = SOUND_CATEGORY_MAP.get(str(category).strip().lower()) if category not in (None, "") else None
        if category not in (None, "") and sound is None:
            errors.append(f"{where}: field 'category': unknown sound category {category!r}")
            continue
        language = row.get("language")
        record = {
            "benchmark": "avmeme",
            "task": "MCQ",
            "id": vid if per_video[vid] == 1 else f"{vid}#{per_video[vid]}",
            "video": _video_name(row, media_dir),
            "question": row.get("question"),
            "options": row.get("candidates") if row.get("candidates") is not None else row.get("options"),
            "answer": row.get("answer"),
            "question_type": row.get("question_type") or row.get("type"),
            "sound_category": sound,
            "language": None if language in (None, "", "N/A") else str(language),
            "splits": [split],
            "meme_name": row.get("meme_name") or row.get("title"),
            "summary": row.get("summary"),
            "emotion": row.get("emotion"),
            "usage": row.get("usage"),
        }
        record = {k: v for k, v in record.items() if v is not None}
        try:
            item = AVMemeItem.model_validate(record)
        except ValidationError as exc:
            errors.append(f"{where}: {_field_errors(exc)}")
            continue
        out.append(dump_item(item))
    return out, errors


def convert(source: str | Path, *, media_dir: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The registry's converter: :func:`convert_avmeme` with videos under ``media_dir`` (default ``videos``)."""
    return convert_avmeme(source, media_dir=media_dir if media_dir is not None else "videos")


TASK = register(Task(
    name="avmeme", title="AVMeme Exam", item_type=AVMemeItem,
    conditions=("vanilla", "cot", "search_cot", "kar", "context_note", "text_only"),
    release="Hugging Face dataset card (mteb/AVMeme-Exam rows)", convert=convert,
    metrics={"MCQ": "accuracy (every item; unparseable = wrong)"},
))
