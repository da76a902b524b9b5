"""Converters from released benchmark files into our JSONL shapes.

* **AVMeme Exam**: the published record shape is the Hugging Face card of ``mteb/AVMeme-Exam``
  (fields ``video_id, video, audio, language, summary, emotion, question, candidates, answer,
  usage, category``; ``category`` is the sound category: clean speech / noisy speech / song /
  music / sound effect).  Reads that card's rows as JSON, JSONL or Parquet.  The card has no
  question-type column: a ``question_type`` (or ``type``) column is used when present, else the
  item's type is left unset ("unknown" in breakdowns).
* **MemeCULT-1K**: the released CSV (``Filename, Language, Context, Explanation_1..3``) as
  :func:`eval.datasets.load_memecult` reads it; ``Context`` becomes the context note.
* **MemeReaCon** and **DrivelHub+**: their release file layout is not published anywhere we
  could read, so there is no converter; :func:`convert` says so and points at the documented
  JSONL shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from eval.benchmarks.items import AVMemeItem, MemeCultItem
from eval.benchmarks.loader import BenchFormatError, _field_errors, dump_item
from eval.datasets import DatasetError, load_memecult, read_records

SOUND_CATEGORY_MAP = {
    "clean speech": "speech", "noisy speech": "speech", "speech": "speech", "song": "song", "music": "music",
    "sound effect": "sound_effect", "sound effects": "sound_effect", "sfx": "sound_effect", "sound_effect": "sound_effect",
}
NOT_PUBLISHED = {
    "memereacon": "MemeReaCon",
    "drivelhub": "DrivelHub+",
}


class ConversionUnavailableError(DatasetError):
    """No converter exists for this benchmark (its release layout is not published)."""


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


def convert_memecult(path: str | Path, *, image_dir: str | Path | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The MemeCULT-1K CSV → MemeCULT JSONL records (image paths relative to the output file's folder)."""
    items = load_memecult(path, image_dir=image_dir)
    out = []
    for item in items:
        record = {
            "benchmark": "memecult",
            "task": "EXPLAIN-G",
            "id": item.id,
            "image": item.image_path,
            "language": item.language,
            "context_note": item.context,
            "references": list(item.references),
        }
        out.append(dump_item(MemeCultItem.model_validate({k: v for k, v in record.items() if v is not None})))
    return out, []


def convert(benchmark: str, source: str | Path, *, media_dir: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Convert a released file of ``benchmark``; records plus errors (each naming the row)."""
    if benchmark in NOT_PUBLISHED:
        raise ConversionUnavailableError(
            f"no converter for {NOT_PUBLISHED[benchmark]}: its release file layout is not published where we could "
            f"read it; write the documented JSONL shape (README, 'Benchmark family') and check it with "
            f"`kar bench validate FILE`"
        )
    if benchmark == "avmeme":
        return convert_avmeme(source, media_dir=media_dir if media_dir is not None else "videos")
    if benchmark == "memecult":
        return convert_memecult(source, image_dir=media_dir)
    raise BenchFormatError(f"unknown benchmark {benchmark!r}")


def write_jsonl(records: Iterable[dict[str, Any]], out: str | Path) -> int:
    """Write records as JSONL (UTF-8, one object per line); the number written."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            n += 1
    return n
