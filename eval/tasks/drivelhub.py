"""DrivelHub+: short social-media videos and their implicit, non-literal meaning, as released.

The release (repository ``extraordinarylab/drivel-hub-plus``) publishes, and this module reads:

* ``metadata.csv``: one row per clip, columns ``file, link, type, source, annotator,
  annotation, modalities, speech, caption, verified, remark`` (the newer release adds
  ``human_baseline``).  :func:`read_metadata` (a BOM is fine; a missing column is an error
  naming it); :func:`convert` turns it into our JSONL items (``id`` = ``file``, ``narrative`` =
  ``annotation``, the other columns kept).
* ``qrels.json``: ``{query_file: {doc_file: relevance}}``, one file for both retrieval
  directions; a query missing from it has itself as its only relevant document
  (:func:`read_qrels_json`).
* prediction rows: the metadata row plus ``video_path, input_mode, remove_audio,
  remove_vision, implicit_meaning`` (``error`` on a failed generation), appended and
  resumable by ``file``; input modes :data:`INPUT_MODES`.
* judged rows (``judgments/<family>/<model>/judgments.jsonl``): the prediction row plus
  ``judge_aligned`` and one ``judge_<rubric>`` field per rubric score, ``judge_score_total``
  and ``judge_reason``; a failed judgment has ``judge_aligned: null`` and ``judge_error``.
  :func:`read_judgments` validates each row (line and field named), recomputes a total that
  disagrees with its parts, as the release's judge does, and :func:`summarize` aggregates
  them as the release's ``summarize_judgments`` does: N = every row, Aligned % and each
  rubric mean over the rows whose judgment did not fail.

The Total is the positives minus the penalties with **no floor**: −8 … 12.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from eval.records import DatasetError
from eval.tasks.base import BenchItem, Task, TaskKind, dump_item, register, task_prompt

METADATA_COLUMNS = ("file", "link", "type", "source", "annotator", "annotation", "modalities", "speech", "caption",
                    "verified", "remark")
INPUT_MODES = ("full", "without-audio", "without-vision", "text-cascade")
#: the rubric as released: name → (lowest, highest); the last three are penalties
RUBRIC: dict[str, tuple[int, int]] = {
    "core_intent": (0, 5),
    "rhetorical_signal": (0, 3),
    "affective_or_social_meaning": (0, 2),
    "grounding": (0, 2),
    "hallucination_penalty": (0, 3),
    "literal_only_penalty": (0, 3),
    "vague_or_overgeneralized_penalty": (0, 2),
}
POSITIVE = ("core_intent", "rhetorical_signal", "affective_or_social_meaning", "grounding")
PENALTIES = ("hallucination_penalty", "literal_only_penalty", "vague_or_overgeneralized_penalty")
MIN_TOTAL = -sum(RUBRIC[k][1] for k in PENALTIES)  # −8
MAX_TOTAL = sum(RUBRIC[k][1] for k in POSITIVE)  # 12


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

    def instruction(self) -> str | None:
        return task_prompt(self.task)

    def release_row(self) -> dict[str, Any]:
        """The clip's metadata.csv row as the release writes it into predictions and judgments."""
        extra = self.model_extra or {}
        row = {c: extra.get(c, "") for c in METADATA_COLUMNS}
        row.update({k: v for k, v in extra.items() if k not in row})
        row["file"] = extra.get("file") or Path(self.video).name
        row["annotation"] = self.narrative
        return row


def total(parts: Mapping[str, Any]) -> int:
    """Positives minus penalties, as the release computes it (no floor: −8 … 12)."""
    return sum(int(parts[k]) for k in POSITIVE) - sum(int(parts[k]) for k in PENALTIES)


# -- metadata.csv and qrels.json --------------------------------------------------------------


def read_metadata(path: str | Path) -> list[dict[str, str]]:
    """The rows of a release ``metadata.csv`` (UTF-8 with or without BOM); :class:`DatasetError` naming the problem."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        header = [(name or "").strip() for name in reader.fieldnames or []]
        missing = [c for c in METADATA_COLUMNS if c not in header]
        if missing:
            raise DatasetError(f"{path}: column(s) {', '.join(repr(c) for c in missing)} missing from the header "
                               f"(have: {', '.join(header) or 'nothing'}); a DrivelHub+ metadata.csv has {', '.join(METADATA_COLUMNS)}")
        rows: list[dict[str, str]] = []
        seen: dict[str, int] = {}
        for lineno, raw in enumerate(reader, 2):
            row = {(k or "").strip(): (v or "") for k, v in raw.items() if k is not None}
            name = row.get("file", "").strip()
            if not name:
                raise DatasetError(f"{path}: line {lineno}: field 'file' is empty")
            if name in seen:
                raise DatasetError(f"{path}: line {lineno}: field 'file' {name!r} duplicates line {seen[name]}")
            seen[name] = lineno
            rows.append(row | {"file": name})
    if not rows:
        raise DatasetError(f"{path}: no rows")
    return rows


def is_metadata_csv(path: str | Path) -> bool:
    """True for a CSV whose header has the release's ``file`` and ``annotation`` columns."""
    path = Path(path)
    if path.suffix.lower() != ".csv" or not path.is_file():
        return False
    with path.open(encoding="utf-8-sig", newline="") as handle:
        header = {h.strip() for h in next(csv.reader(handle), [])}
    return {"file", "annotation"} <= header


def read_qrels_json(path: str | Path) -> dict[str, dict[str, int]]:
    """``{query_file: {doc_file: relevance}}``; :class:`DatasetError` naming the bad query or value."""
    path = Path(path)
    try:
        data = json.loads(path.read_text("utf-8-sig"))
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: expected an object {{query_file: {{doc_file: relevance}}}}")
    out: dict[str, dict[str, int]] = {}
    for query, docs in data.items():
        if not isinstance(docs, dict):
            raise DatasetError(f"{path}: query {query!r}: expected an object {{doc_file: relevance}}")
        for doc, rel in docs.items():
            if isinstance(rel, bool) or not isinstance(rel, (int, float)) or int(rel) != rel:
                raise DatasetError(f"{path}: query {query!r}, document {doc!r}: relevance must be an integer, got {rel!r}")
        out[str(query)] = {str(d): int(r) for d, r in docs.items()}
    return out


def relevant(qrels: Mapping[str, Mapping[str, int]], query: str, available: Iterable[str]) -> dict[str, int]:
    """The relevant documents of ``query`` among ``available`` (relevance > 0), as the release builds them:
    a query missing from the qrels, or with none left, has itself as its only relevant document."""
    pool = set(available)
    found = {d: r for d, r in qrels.get(query, {query: 1}).items() if d in pool and r > 0}
    return found or {query: 1}


def convert(source: str | Path, *, media_dir: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """A release ``metadata.csv`` → DrivelHub JSONL records (videos under ``media_dir``, default ``data``),
    with the human-verified extra pairs of a ``qrels.json`` beside it; rows without an annotation are rejected."""
    source = Path(source)
    rows = read_metadata(source)
    qrels_path = source.with_name("qrels.json")
    qrels = read_qrels_json(qrels_path) if qrels_path.is_file() else {}
    folder = "data" if media_dir is None else media_dir
    out: list[dict[str, Any]] = []
    errors: list[str] = []
    for lineno, row in enumerate(rows, 2):
        annotation = row.get("annotation", "").strip()
        if not annotation:
            errors.append(f"line {lineno} (file={row['file']}): field 'annotation' is empty")
            continue
        extra = sorted(d for d, r in qrels.get(row["file"], {}).items() if r > 0 and d != row["file"])
        record = {k: v for k, v in row.items() if k != "annotation"} | {
            "benchmark": "drivelhub", "task": "NARRATIVE-G", "id": row["file"],
            "video": f"{folder.rstrip('/')}/{row['file']}" if folder else row["file"],
            "narrative": annotation, "extra_relevant": extra,
        }
        out.append(dump_item(DrivelHubItem.model_validate(record)))
    return out, errors


# -- judged rows --------------------------------------------------------------------------------


@dataclass
class Judgments:
    """One judgments.jsonl as read: its rows and what was noticed in them."""

    path: Path
    rows: list[dict[str, Any]]
    recomputed: list[str] = field(default_factory=list)  # "line N: file F: total T -> U"

    @property
    def judged(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("judge_aligned") is not None]

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("judge_aligned") is None]

    def input_modes(self) -> list[str]:
        return sorted({str(r.get("input_mode") or "full") for r in self.rows})


def check_judged_row(row: dict[str, Any], where: str) -> tuple[dict[str, Any], str | None]:
    """Validate one judged row; the row with its total recomputed from its parts, and a note when it changed."""
    if not str(row.get("file") or "").strip():
        raise DatasetError(f"{where}: field 'file' is missing")
    aligned = row.get("judge_aligned")
    if aligned is None:
        return row, None
    if not isinstance(aligned, bool):
        raise DatasetError(f"{where}: field 'judge_aligned' must be true, false or null, got {aligned!r}")
    for name, (low, high) in RUBRIC.items():
        value = row.get(f"judge_{name}")
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise DatasetError(f"{where}: field 'judge_{name}' must be an integer {low}-{high}, got {value!r}")
    parts = {k: row[f"judge_{k}"] for k in RUBRIC}
    expected = total(parts)
    given = row.get("judge_score_total")
    if given == expected and not isinstance(given, bool):
        return row, None
    return row | {"judge_score_total": expected}, f"file {row['file']}: judge_score_total {given!r} -> {expected}"


def read_judgments(path: str | Path) -> Judgments:
    """A release (or our) judgments.jsonl; :class:`DatasetError` naming the line and field of a bad row."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    seen: dict[tuple[str, str], int] = {}
    for lineno, line in enumerate(path.read_text("utf-8-sig").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: line {lineno}: invalid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{path}: line {lineno}: expected an object, got {type(row).__name__}")
        where = f"{path}: line {lineno} (file={row.get('file', '?')})"
        row, note = check_judged_row(row, where)
        key = (str(row["file"]), str(row.get("input_mode") or "full"))
        if key in seen:
            raise DatasetError(f"{where}: file {key[0]!r} ({key[1]}) duplicates line {seen[key]}")
        seen[key] = lineno
        if note:
            notes.append(f"line {lineno}: {note}")
        rows.append(row)
    if not rows:
        raise DatasetError(f"{path}: no rows")
    return Judgments(path, rows, notes)


def judgment_files(path: str | Path) -> list[tuple[str, Path]]:
    """``(family/model, file)`` for a judgments.jsonl, or for every one under a ``judgments/`` tree."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.rglob("judgments.jsonl"))
        if not files:
            raise DatasetError(f"{path}: no judgments.jsonl under this folder")
        return [(str(f.parent.relative_to(path)).replace("\\", "/") if f.parent != path else path.name, f) for f in files]
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    name = path.parent.name if path.name == "judgments.jsonl" else path.stem.removeprefix("judgments_")
    return [(name, path)]


def judgment_pairs(values: Sequence[str]) -> list[tuple[str, Path]]:
    """``--judged`` for release judgments: NAME=FILE, a judgments.jsonl, or a judgments/ folder (names family/model)."""
    pairs: list[tuple[str, Path]] = []
    for value in values:
        name, sep, path = value.partition("=")
        if sep and name and path and not Path(value).exists():
            pairs.append((name, Path(path)))
        else:
            pairs.extend(judgment_files(value))
    return pairs


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The release's table row: N (every row), Aligned % and each rubric mean over the judged rows, Total last."""
    judged = [r for r in rows if r.get("judge_aligned") is not None]
    out: dict[str, Any] = {"n": len(rows), "n_judged": len(judged), "n_failed": len(rows) - len(judged),
                           "aligned_pct": (100 * sum(bool(r["judge_aligned"]) for r in judged) / len(judged)) if judged else None}
    for name in RUBRIC:
        out[name] = (sum(r[f"judge_{name}"] for r in judged) / len(judged)) if judged else None
    out["score_total"] = (sum(r["judge_score_total"] for r in judged) / len(judged)) if judged else None
    out["score_total_range"] = [MIN_TOTAL, MAX_TOTAL]
    return out


TASK = register(Task(
    name="drivelhub", title="DrivelHub+", item_type=DrivelHubItem,
    conditions=("vanilla", "cot", "search_cot", "kar"),
    release="metadata.csv, qrels.json, prediction and judgments.jsonl rows (extraordinarylab/drivel-hub-plus)",
    convert=convert,
    metrics={"NARRATIVE-G": "rubric (Aligned %, rubric means, Total −8…12) or ROUGE-L; retrieval R@1/5/10, MRR, nDCG@5/10"},
))
