"""AVMeme Exam: audio-visual meme clips, one multiple-choice question each.

Two release shapes are read (JSON, JSONL or Parquet), told apart by their columns:

* the official rows (``naplab/AVMeme-Exam``): ``video_path, question, choices, solution`` (the
  answer as the option's *text*), ``language, summary, usage, emotion[], sensitivity[],
  category, question_type``;
* MTEB's re-upload (``mteb/AVMeme-Exam``): ``video_id, video, audio, language, summary,
  emotion, question, candidates, answer, usage, category`` (no question type: "unknown" in
  breakdowns unless a ``question_type``/``type`` column is there).

As the benchmark is run: the options are **shuffled** from A at evaluation time, here with a
seed per item (``option_seed``; the permutation ``option_order`` and the answer letter are
written into the item, so a run is reproducible and each item says which letter is right).
``category`` holds one of five raw sound categories (clean speech, noisy speech, song, music,
sound effect), kept as ``sound_category_raw``; breakdowns also group them as the paper does
into four (:data:`SOUND_GROUPS`: both speech kinds are speech).  Items marked *visual-cheat*
(the frames give the answer away) are run on the audio alone; items marked *text-cheat* (the
question's text gives it away) are left out of the **meme-main** split, and **meme-full** has
every item.  The marks are read from ``sensitivity`` (values such as ``visual cheat``,
``text-cheat``) or from boolean ``visual_cheat``/``text_cheat`` columns.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator

from eval.records import read_records
from eval.tasks.base import LETTERS, MAX_OPTIONS, BenchItem, Task, TaskKind, field_errors, norm_key, dump_item, register, task_prompt

if TYPE_CHECKING:
    from agents.pipeline.state import ExplainContext


AVMEME_QUESTION_TYPES = (
    "audio_analysis", "language_analysis", "contextual_inference", "emotion", "humor", "usage", "world_knowledge",
)


AVMEME_SOUND_CATEGORIES = ("speech", "song", "music", "sound_effect")
#: the five raw sound categories of the release and the four groups the paper reports
SOUND_GROUPS = {"clean_speech": "speech", "noisy_speech": "speech", "song": "song", "music": "music", "sound_effect": "sound_effect"}
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
    sound_category_raw: str | None = None
    splits: list[str] = Field(default_factory=lambda: ["meme-full"])
    meme_name: str | None = None
    visual_cheat: bool = False  # the frames give the answer away: run on the audio alone
    text_cheat: bool = False  # the question's text gives it away: not in meme-main
    option_order: list[int] | None = None  # the shuffled options' indices into the release's choices
    option_seed: int | None = None

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
            qt = norm_key(self.question_type)
            if qt not in AVMEME_QUESTION_TYPES:
                raise ValueError(f"field 'question_type': {self.question_type!r} is not one of {', '.join(AVMEME_QUESTION_TYPES)}")
            object.__setattr__(self, "question_type", qt)
        if self.sound_category_raw is not None:
            raw = norm_key(self.sound_category_raw).replace("sound_effects", "sound_effect")
            if raw not in SOUND_GROUPS:
                raise ValueError(f"field 'sound_category_raw': {self.sound_category_raw!r} is not one of "
                                 f"{', '.join(k.replace('_', ' ') for k in SOUND_GROUPS)}")
            object.__setattr__(self, "sound_category_raw", raw)
            if self.sound_category is None:
                object.__setattr__(self, "sound_category", SOUND_GROUPS[raw])
        if self.sound_category is not None:
            sc = norm_key(self.sound_category)
            if sc not in AVMEME_SOUND_CATEGORIES:
                raise ValueError(f"field 'sound_category': {self.sound_category!r} is not one of {', '.join(AVMEME_SOUND_CATEGORIES)}")
            object.__setattr__(self, "sound_category", sc)
        bad = [s for s in self.splits if s not in AVMEME_SPLITS]
        if bad:
            raise ValueError(f"field 'splits': {bad} not among {', '.join(AVMEME_SPLITS)}")
        if self.text_cheat and "meme-main" in self.splits:
            raise ValueError("field 'splits': a text-cheat item is not in meme-main")
        return self

    def group_values(self) -> dict[str, str]:
        return super().group_values() | {
            "question_type": self.question_type or "unknown",
            "sound_category": self.sound_category or "unknown",
            "sound_category_raw": self.sound_category_raw or "unknown",
        }

    def split_values(self) -> list[str]:
        return list(self.splits)

    def instruction(self) -> str | None:
        options = "\n".join(f"{LETTERS[i]}. {text}" for i, text in enumerate(self.options))
        return task_prompt("mcq", question=self.question, options=options)

    def explain_context(self) -> ExplainContext:
        from agents.pipeline.state import ExplainContext

        return ExplainContext(context_note=self.meme_name)

    @property
    def audio_only(self) -> bool:
        return self.visual_cheat


SOUND_CATEGORY_MAP = {**{k.replace("_", " "): k for k in SOUND_GROUPS}, "sound effects": "sound_effect", "sfx": "sound_effect",
                      **{k: k for k in SOUND_GROUPS}, "speech": None}


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


def _cheats(row: dict[str, Any]) -> tuple[bool, bool]:
    """(visual_cheat, text_cheat) from the row's ``sensitivity`` list or its boolean columns."""
    marks = row.get("sensitivity") or []
    marks = [marks] if isinstance(marks, str) else list(marks)
    flat = {"".join(ch for ch in str(m).lower() if ch.isalpha()) for m in marks}
    return bool(row.get("visual_cheat")) or "visualcheat" in flat, bool(row.get("text_cheat")) or "textcheat" in flat


def shuffled(choices: list[str], seed: int, item_id: str) -> list[int]:
    """The option order of one item: a permutation drawn from ``seed`` and the item's id (stable across runs)."""
    rng = random.Random(f"{seed}:{item_id}")
    order = list(range(len(choices)))
    rng.shuffle(order)
    return order


def convert_avmeme(
    path: str | Path, *, media_dir: str = "videos", seed: int | None = 0
) -> tuple[list[dict[str, Any]], list[str]]:
    """Official or MTEB AVMeme Exam rows → AVMeme JSONL records (options shuffled with ``seed``; None keeps
    the release's order), plus per-row errors naming the row and field."""
    path = Path(path)
    out: list[dict[str, Any]] = []
    errors: list[str] = []
    per_video: dict[str, int] = {}
    for index, row in enumerate(_rows(path)):
        official = "choices" in row or "solution" in row or "video_path" in row
        key = str(row.get("video_path") or row.get("video_id") or "")
        where = f"row {index} ({'video_path' if official else 'video_id'}={key or '?'})"
        if not key:
            errors.append(f"{where}: field '{'video_path' if official else 'video_id'}' is missing")
            continue
        vid = Path(key).stem if official else key
        per_video[vid] = per_video.get(vid, 0) + 1
        item_id = vid if per_video[vid] == 1 else f"{vid}#{per_video[vid]}"
        category = row.get("category")
        raw = SOUND_CATEGORY_MAP.get(str(category).strip().lower().replace("_", " ")) if category not in (None, "") else None
        grouped = "speech" if str(category).strip().lower() == "speech" else (SOUND_GROUPS[raw] if raw else None)
        if category not in (None, "") and grouped is None:
            errors.append(f"{where}: field 'category': unknown sound category {category!r} "
                          f"(one of {', '.join(k.replace('_', ' ') for k in SOUND_GROUPS)})")
            continue
        choices = row.get("choices") if official else (row.get("candidates") if row.get("candidates") is not None else row.get("options"))
        answer = row.get("solution") if official else row.get("answer")
        if not isinstance(choices, (list, tuple)) or len(choices) < 2:
            errors.append(f"{where}: field '{'choices' if official else 'candidates'}' must list at least two options")
            continue
        choices = [str(c) for c in choices]
        visual_cheat, text_cheat = _cheats(row)
        order = shuffled(choices, seed, item_id) if seed is not None else None
        options = [choices[i] for i in order] if order else choices
        if order and isinstance(answer, str) and len(answer.strip("() ")) == 1 and answer.strip("() ").upper().isalpha() \
                and not any(c.strip().lower() == answer.strip().lower() for c in choices):
            position = ord(answer.strip("() ").upper()) - 65  # an answer given as the release's letter follows its option
            answer = choices[position] if 0 <= position < len(choices) else answer
        language = row.get("language")
        video = (f"{media_dir.rstrip('/')}/{Path(key).name}" if media_dir else key) if official else _video_name(row, media_dir)
        record = {
            "benchmark": "avmeme", "task": "MCQ", "id": item_id, "video": video,
            "question": row.get("question"), "options": options, "answer": answer,
            "question_type": row.get("question_type") or row.get("type"),
            "sound_category": grouped, "sound_category_raw": raw,
            "language": None if language in (None, "", "N/A") else str(language),
            "splits": ["meme-full"] + ([] if text_cheat else ["meme-main"]),
            "visual_cheat": visual_cheat, "text_cheat": text_cheat,
            "option_order": order, "option_seed": seed if order else None,
            "meme_name": row.get("meme_name") or row.get("title"),
            "summary": row.get("summary"), "emotion": row.get("emotion"), "usage": row.get("usage"),
            "sensitivity": row.get("sensitivity"),
        }
        record = {k: v for k, v in record.items() if v is not None}
        try:
            item = AVMemeItem.model_validate(record)
        except ValidationError as exc:
            errors.append(f"{where}: {field_errors(exc)}")
            continue
        out.append(dump_item(item))
    return out, errors


def convert(source: str | Path, *, media_dir: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The registry's converter: :func:`convert_avmeme` with videos under ``media_dir`` (default ``videos``)."""
    return convert_avmeme(source, media_dir=media_dir if media_dir is not None else "videos")  # options shuffled, seed 0


TASK = register(Task(
    name="avmeme", title="AVMeme Exam", item_type=AVMemeItem,
    conditions=("vanilla", "cot", "search_cot", "kar", "context_note", "text_only"),
    release="dataset rows: the official naplab/AVMeme-Exam shape and MTEB's mteb/AVMeme-Exam", convert=convert,
    metrics={"MCQ": "accuracy (every item; unparseable = wrong)"},
))
