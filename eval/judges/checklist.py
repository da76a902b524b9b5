"""The VIKR checklist judge: one VLM call per item, itemized verdicts, derived fields by code.

The judge sees the image, the annotators' reference notes, the numbered checklist items
of the four dimensions and the response, never which model or condition wrote it.  Its
reply is parsed against :class:`JudgeReply` (JSON, possibly fenced); failing that, the
text fallback reads ``CHECKLIST_RESULT: [v, i, k, r]`` (dimension-level only).  A reply
that still cannot be parsed is re-asked ``max_parse_retries`` times; after that the item
is unscored (``parse_success: false``), counted as a failure and reported separately.

:func:`run_judge` judges a whole prediction file with a concurrency limit, resume (items
already scored in the output file for the same response are kept), a persistent cache
keyed by (judge model, prompt hash, item id, response hash), and token/cost accounting.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.vlm.base import ChatMessage, ImageInput, SamplingParams, TokenUsage, VisionLanguageModel
from eval.tasks.memebench import BenchmarkItem, resolve_image
from eval.judges.base import PARAMS as JUDGE_PARAMS, ask_valid, fill
from eval.records import Prediction, RecordIndex, load_judged
from eval.verdicts import (
    DIMENSIONS,
    UNSCORED_JUDGE_ERROR,
    UNSCORED_MISSING,
    UNSCORED_NO_RESPONSE,
    UNSCORED_PARSE,
    binary,
    evaluation_from_item_results,
    evaluation_from_vector,
    unscored_evaluation,
    verdict_of,
)

PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts"


# -- prompts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgePrompts:
    """The judge's prompt templates, loaded from files at run time."""

    system: str
    user: str
    repair: str

    @classmethod
    def load(cls, folder: str | Path | None = None) -> JudgePrompts:
        folder = Path(folder) if folder is not None else PROMPT_DIR
        return cls(
            system=(folder / "judge_checklist_system.md").read_text(encoding="utf-8"),
            user=(folder / "judge_checklist_user.md").read_text(encoding="utf-8"),
            repair=(folder / "judge_repair.md").read_text(encoding="utf-8"),
        )

    @property
    def sha(self) -> str:
        """A short hash of all templates (part of the cache key and of each output)."""
        digest = hashlib.sha256("\x00".join((self.system, self.user, self.repair)).encode()).hexdigest()
        return digest[:16]


_fill = fill  # the one placeholder syntax of every judge prompt


def format_checklist(item: BenchmarkItem) -> str:
    lines: list[str] = []
    for dim in DIMENSIONS:
        lines.append(f"### {dim}")
        lines.extend(f"{j}. {text}" for j, text in enumerate(item.checklist(dim), 1))
    return "\n".join(lines)


def format_reference(item: BenchmarkItem) -> str:
    """The reference notes: the item's four VIKR layers as JSON, whatever their type (as the release's judge)."""
    return json.dumps(item.layers(), ensure_ascii=False, indent=2)


# -- reply parsing --------------------------------------------------------------------------


class ItemVerdictModel(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    index: int | None = None
    passed: Any = Field(alias="pass")
    reason: str = ""


class JudgeReply(BaseModel):
    """The schema a judge reply must follow (other keys are ignored: derived fields are ours)."""

    model_config = ConfigDict(extra="ignore")

    item_results: dict[str, list[ItemVerdictModel]]


class ReplyParseError(ValueError):
    """A judge reply that cannot be used; the message says why (it is sent back on re-asks)."""


_VECTOR = re.compile(r"checklist[\s_]*result\s*:?\s*\[\s*([01])\s*,\s*([01])\s*,\s*([01])\s*,\s*([01])\s*\]", re.I)
_CORRECTNESS = re.compile(r"overall[\s_]*correctness\s*:?\s*(YES|NO)\b", re.I)


def _json_candidates(text: str) -> list[str]:
    stripped = text.strip()
    candidates = [stripped]
    candidates += [b.strip() for b in re.findall(r"```(?:json)?\s*(.*?)```", stripped, flags=re.S | re.I)]
    start, end = stripped.find("{"), stripped.rfind("}")
    if 0 <= start < end:
        candidates.append(stripped[start : end + 1])
    return candidates


def _ordered_rows(dim: str, rows: list[ItemVerdictModel], expected: int) -> list[dict[str, Any]]:
    if len(rows) != expected:
        raise ReplyParseError(f"item_results.{dim} has {len(rows)} entries, expected {expected}")
    indices = [r.index for r in rows]
    if all(i is not None for i in indices):
        if sorted(indices) == list(range(1, expected + 1)):  # type: ignore[type-var]
            rows = sorted(rows, key=lambda r: r.index)  # type: ignore[arg-type, return-value]
        elif sorted(indices) == list(range(expected)):  # type: ignore[type-var]
            rows = sorted(rows, key=lambda r: r.index)  # type: ignore[arg-type, return-value]
        else:
            raise ReplyParseError(f"item_results.{dim} indices {indices} are not 1..{expected}")
    out: list[dict[str, Any]] = []
    for j, row in enumerate(rows, 1):
        value = binary(row.passed)
        if value is None:
            raise ReplyParseError(f"item_results.{dim}[{j}].pass must be 0 or 1, got {row.passed!r}")
        out.append({"index": j, "pass": value, "reason": row.reason.strip()})
    return out


def parse_judge_reply(text: str | None, item: BenchmarkItem) -> dict[str, Any]:
    """A scored evaluation from a judge reply; :class:`ReplyParseError` when unusable."""
    if not text or not text.strip():
        raise ReplyParseError("empty reply")
    json_error: str | None = None
    for candidate in _json_candidates(text):
        try:
            payload = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if not isinstance(payload, dict):
            continue
        try:
            reply = JudgeReply.model_validate(payload)
        except ValidationError as exc:
            first = exc.errors()[0]
            json_error = f"JSON does not match the schema at {'.'.join(map(str, first['loc']))}: {first['msg']}"
            continue
        missing = [d for d in DIMENSIONS if d not in reply.item_results]
        if missing:
            json_error = f"item_results lacks dimension(s): {', '.join(missing)}"
            continue
        try:
            rows = {d: _ordered_rows(d, reply.item_results[d], len(item.checklist(d))) for d in DIMENSIONS}
        except ReplyParseError as exc:
            json_error = str(exc)
            continue
        return evaluation_from_item_results(rows, raw_content=text, format="itemized_json")
    match = _VECTOR.search(text.replace("*", "").replace("`", ""))
    if match:
        vector = [int(match.group(i)) for i in range(1, 5)]
        extra: dict[str, Any] = {"raw_content": text, "format": "text_fallback"}
        claimed = _CORRECTNESS.search(text.replace("*", ""))
        if claimed and (claimed.group(1).upper() == "YES") != bool(vector[1] and vector[2] and vector[3]):
            extra["parse_warning"] = f"judge said OVERALL_CORRECTNESS {claimed.group(1).upper()}; recomputed from I∧K∧R"
        return evaluation_from_vector(vector, **extra)
    raise ReplyParseError(json_error or "no JSON object with item_results and no CHECKLIST_RESULT line")


# -- the judge ------------------------------------------------------------------------------


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class JudgeOutcome:
    evaluation: dict[str, Any]
    usage: TokenUsage
    calls: int


class ChecklistJudge:
    """Judges one response at a time with a :class:`VisionLanguageModel`."""

    def __init__(
        self,
        vlm: VisionLanguageModel,
        *,
        max_parse_retries: int = JUDGE_PARAMS.max_parse_retries,
        sampling: SamplingParams | None = None,
        prompts: JudgePrompts | None = None,
    ):
        self.vlm = vlm
        self.max_parse_retries = max_parse_retries
        self.sampling = sampling or SamplingParams(temperature=0.0, json_mode=True)
        self.prompts = prompts or JudgePrompts.load()

    @property
    def model_id(self) -> str:
        return self.vlm.model_id

    def messages(self, item: BenchmarkItem, response: str, image: bytes) -> list[ChatMessage]:
        user = _fill(
            self.prompts.user,
            reference=format_reference(item),
            checklist=format_checklist(item),
            response=response,
        )
        return [
            ChatMessage("system", self.prompts.system),
            ChatMessage("user", user, images=(ImageInput(image, name=Path(item.image_path).name),)),
        ]

    async def judge(self, item: BenchmarkItem, response: str, image: bytes) -> JudgeOutcome:
        """Judge one response; never raises for judge failures (they become unscored)."""
        counts = {f"n_{d}": len(item.checklist(d)) for d in DIMENSIONS}
        asked = await ask_valid(
            self.vlm, self.messages(item, response, image), lambda raw: parse_judge_reply(raw, item),
            max_retries=self.max_parse_retries, sampling=self.sampling,
            repair=lambda error: _fill(self.prompts.repair, error=error, **counts),
        )
        if asked.value is not None:
            return JudgeOutcome(asked.value, asked.usage, asked.calls)
        reason = UNSCORED_JUDGE_ERROR if asked.failure == "call" else UNSCORED_PARSE
        return JudgeOutcome(unscored_evaluation(reason, asked.error or "no reply", raw_content=asked.raw), asked.usage, asked.calls)


# -- cache ------------------------------------------------------------------------------------


class JudgeCache:
    """Scored evaluations in SQLite, keyed by (judge model, prompt hash, item id, response hash)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS judge_cache (key TEXT PRIMARY KEY, evaluation TEXT NOT NULL)")
        self._db.commit()

    @staticmethod
    def key(model: str, prompt_sha: str, item_id: str, response_sha: str) -> str:
        return hashlib.sha256(json.dumps([model, prompt_sha, item_id, response_sha]).encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT evaluation FROM judge_cache WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, evaluation: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO judge_cache (key, evaluation) VALUES (?, ?)",
                (key, json.dumps(evaluation, ensure_ascii=False)),
            )
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM judge_cache").fetchone()[0])

    def close(self) -> None:
        self._db.close()


# -- whole files ------------------------------------------------------------------------------


@dataclass
class JudgeRunSummary:
    """What a judge run did and cost."""

    judge_model: str
    prompt_sha: str
    items: int = 0
    judged: int = 0  # items sent to the judge in this run
    resumed: int = 0  # kept from the existing output file
    cache_hits: int = 0
    scored: int = 0
    unscored: dict[str, int] = field(default_factory=dict)
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    wall_s: float = 0.0

    @property
    def parse_failures(self) -> int:
        return self.unscored.get(UNSCORED_PARSE, 0)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["parse_failures"] = self.parse_failures
        out["calls_per_judged_item"] = self.calls / self.judged if self.judged else 0.0
        out["tokens_per_judged_item"] = (
            (self.prompt_tokens + self.completion_tokens) / self.judged if self.judged else 0.0
        )
        return out


def write_records(path: str | Path, records: Sequence[dict[str, Any]]) -> None:
    """Atomically write judge records: JSONL for ``*.jsonl``, else a JSON list (the release's form)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        if path.suffix == ".jsonl":
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        else:
            json.dump(list(records), handle, ensure_ascii=False, indent=1)
    os.replace(tmp, path)


def _reusable(existing: dict[str, Any] | None, response_sha: str, response: str | None) -> bool:
    if not existing:
        return False
    evaluation = existing.get("evaluation")
    if not verdict_of(evaluation).scored:
        return False
    meta = evaluation.get("judge") if isinstance(evaluation, dict) else None
    if isinstance(meta, dict) and meta.get("response_sha"):
        return meta["response_sha"] == response_sha
    return existing.get("response") == response  # files written by other tools


def plan_records(
    bench: Sequence[BenchmarkItem],
    predictions: Sequence[Prediction],
    existing: RecordIndex,
    judge: ChecklistJudge,
    cache: JudgeCache | None,
    summary: JudgeRunSummary,
) -> tuple[list[dict[str, Any] | None], list[tuple[int, BenchmarkItem, str, str]]]:
    """Each item's record where no judge call is needed (no prediction, empty response, kept from the
    existing file, cached), and the (index, item, response, response sha) still to judge."""
    pred_index = RecordIndex(
        [{"id": p.id, "image_path": p.image_path, "response": p.response, "_pred": p} for p in predictions]
    )
    records: list[dict[str, Any] | None] = [None] * len(bench)
    pending: list[tuple[int, BenchmarkItem, str, str]] = []
    for i, item in enumerate(bench):
        pred = pred_index.get(item.id, item.image_path)
        response = pred["response"] if pred else None
        base = {"id": item.source_id, "image_path": item.image_path, "response": response}
        if pred is None:
            records[i] = base | {"evaluation": unscored_evaluation(UNSCORED_MISSING, "no prediction for this item")}
            continue
        if response is None or not response.strip():
            records[i] = base | {"evaluation": unscored_evaluation(UNSCORED_NO_RESPONSE, "empty or null response")}
            continue
        response_sha = sha(response)
        old = existing.get(item.id, item.image_path)
        if _reusable(old, response_sha, response):
            records[i] = base | {"evaluation": old["evaluation"]}  # type: ignore[index]
            summary.resumed += 1
            continue
        if cache is not None:
            hit = cache.get(JudgeCache.key(judge.model_id, judge.prompts.sha, item.id, response_sha))
            if hit is not None:
                hit.setdefault("judge", {})["cached"] = True
                records[i] = base | {"evaluation": hit}
                summary.cache_hits += 1
                continue
        pending.append((i, item, response, response_sha))
    return records, pending


async def judge_item(judge: ChecklistJudge, item: BenchmarkItem, response: str, bench_file: Path, root: Path | None) -> JudgeOutcome:
    """The judge's outcome for one item (unscored, saying so, when its image file is not found)."""
    source = Path(item.source_file) if item.source_file else bench_file
    image_file = resolve_image(item.image_path, source, root)
    if image_file is None:
        return JudgeOutcome(
            unscored_evaluation(UNSCORED_JUDGE_ERROR, f"image file not found: {item.image_path}"),
            TokenUsage(),
            0,
        )
    return await judge.judge(item, response, image_file.read_bytes())


def record_outcome(judge: ChecklistJudge, outcome: JudgeOutcome, response_sha: str, summary: JudgeRunSummary) -> dict[str, Any]:
    """The outcome's evaluation with its ``judge`` block (model, prompt, calls, tokens); its cost counted in ``summary``."""
    evaluation = outcome.evaluation
    evaluation["judge"] = {
        "model": judge.model_id,
        "prompt_sha": judge.prompts.sha,
        "response_sha": response_sha,
        "calls": outcome.calls,
        "prompt_tokens": outcome.usage.prompt_tokens,
        "completion_tokens": outcome.usage.completion_tokens,
        "cached": False,
    }
    summary.calls += outcome.calls
    summary.prompt_tokens += outcome.usage.prompt_tokens
    summary.completion_tokens += outcome.usage.completion_tokens
    summary.judged += 1
    return evaluation


def count_verdicts(summary: JudgeRunSummary, final: Sequence[dict[str, Any]], price_input_per_1m: float | None,
                   price_output_per_1m: float | None) -> None:
    """Scored and unscored (by reason) counts of the written records, and the cost when priced."""
    for record in final:
        verdict = verdict_of(record["evaluation"])
        if verdict.scored:
            summary.scored += 1
        else:
            key = verdict.unscored_reason or UNSCORED_MISSING
            summary.unscored[key] = summary.unscored.get(key, 0) + 1
    if price_input_per_1m is not None or price_output_per_1m is not None:
        summary.cost_usd = (
            summary.prompt_tokens / 1e6 * (price_input_per_1m or 0.0)
            + summary.completion_tokens / 1e6 * (price_output_per_1m or 0.0)
        )


async def run_judge(
    bench: Sequence[BenchmarkItem],
    predictions: Sequence[Prediction],
    out_path: str | Path,
    judge: ChecklistJudge,
    *,
    bench_path: str | Path | None = None,
    image_root: str | Path | None = None,
    concurrency: int = 8,
    cache: JudgeCache | None = None,
    resume: bool = True,
    price_input_per_1m: float | None = None,
    price_output_per_1m: float | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    flush_every_s: float = 2.0,
) -> JudgeRunSummary:
    """Judge every benchmark item's prediction and write ``out_path`` in benchmark order."""
    started = time.perf_counter()
    out_path = Path(out_path)
    summary = JudgeRunSummary(judge_model=judge.model_id, prompt_sha=judge.prompts.sha, items=len(bench))
    existing = RecordIndex(load_judged(out_path)) if resume and out_path.exists() else RecordIndex([])
    records, pending = plan_records(bench, predictions, existing, judge, cache, summary)
    done = len(bench) - len(pending)
    if on_progress:
        on_progress(done, len(bench))
    limiter = asyncio.Semaphore(concurrency)
    last_flush = time.monotonic()
    bench_file = Path(bench_path) if bench_path is not None else Path.cwd() / "bench.json"
    root = Path(image_root) if image_root is not None else None

    async def one(i: int, item: BenchmarkItem, response: str, response_sha: str) -> None:
        nonlocal done, last_flush
        async with limiter:
            outcome = await judge_item(judge, item, response, bench_file, root)
        evaluation = record_outcome(judge, outcome, response_sha, summary)
        records[i] = {"id": item.source_id, "image_path": item.image_path, "response": response, "evaluation": evaluation}
        if cache is not None and evaluation.get("parse_success"):
            cache.put(JudgeCache.key(judge.model_id, judge.prompts.sha, item.id, response_sha), evaluation)
        done += 1
        if on_progress:
            on_progress(done, len(bench))
        if time.monotonic() - last_flush >= flush_every_s:
            last_flush = time.monotonic()
            write_records(out_path, [r for r in records if r is not None])

    await asyncio.gather(*(one(*args) for args in pending))
    final = [r for r in records if r is not None]
    write_records(out_path, final)
    count_verdicts(summary, final, price_input_per_1m, price_output_per_1m)
    summary.wall_s = time.perf_counter() - started
    return summary
