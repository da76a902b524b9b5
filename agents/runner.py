"""The ablation runner: every condition over a benchmark, resumable, append-only traces.

Output folder::

    OUT/manifest.json                   config, models, prompt hashes, KB, search backend, git commit
    OUT/traces/{condition}.jsonl        one ExplainResult per line, appended as items finish
    OUT/predictions/{condition}.json    MemeBench predictions [{id, image_path, response}], dataset order
    OUT/predictions/{condition}.prompts.jsonl   what each VLM call was sent, one line per item and call, dataset
                                        order: {id, condition, stage, replied, max_chars, messages, sections?}
                                        (agents.vlm.record; read from the traces, which hold the same)

A run killed at any point (even SIGKILL) and restarted finishes with every item exactly
once: finished ids are read back from the traces, a torn last line is cut off, and only
the missing (item, condition) pairs run.  Items whose run failed (response null) count as
done, their error in the trace, unless the runner is asked to retry failures
(``retry_failed=True``, ``kar run --retry-failed``): then each failed pair runs once more and
its new record is appended; the last record of an id is the one that counts.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.pipeline.pipeline import KARPipeline
from agents.pipeline.prompts import all_prompt_hashes
from agents.pipeline.state import CONDITIONS, ExplainContext, ExplainResult

log = logging.getLogger(__name__)
CONTEXT_KEYS = {"post_text": ("post_text", "post"), "top_comment": ("top_comment", "comment"),
                "context_note": ("context_note", "cultural_context", "cultural_note")}


async def _bounded(image: bytes) -> bytes:
    """The item's working copy, made once in the process-wide CPU pool (first frame, upright, longest side
    max(KAR_OCR_MAX_SIDE, KAR_VLM_MAX_IMAGE_SIDE)): an item in flight then holds a bounded copy, never a
    full-size photo, and OCR and the VLM never decode the original again.  Undecodable bytes go on as they
    are, and the pipeline records what fails on them."""
    from culturebase.bounded_image import decode_megapixels
    from culturebase.cpu import cpu_pool
    from culturebase.images import ImageRejected, check_image_bytes
    from culturebase.settings import get_settings

    settings = get_settings()
    side = max(settings.ocr_max_side, settings.vlm_max_image_side)
    try:  # the one byte checker (as the API); started when the decode budget has the megapixels the header announces
        checked = await cpu_pool().run_decode(
            decode_megapixels(image, side), check_image_bytes, image, len(image) + 1, settings.max_image_pixels, side
        )
    except ImageRejected:
        return image
    return checked.data


@dataclass
class RunItem:
    """One benchmark item as the runner needs it.

    ``source_id`` is the id exactly as the benchmark file wrote it (an int stays an int
    in the predictions, so the release's own scripts match them); ``id`` is its string
    form, the key of traces and resumes.  Benchmark files are read and validated by the
    caller (``eval.tasks.memebench.load_benchmark`` through ``eval.tasks.load``; ``kar run`` and the ablation API
    turn its items into these with :meth:`from_record`).
    """

    id: str
    image_path: str
    image_file: Path
    language: str | None = None
    context: ExplainContext = field(default_factory=ExplainContext)
    source_id: Any = None

    @property
    def output_id(self) -> Any:
        return self.id if self.source_id is None else self.source_id

    @classmethod
    def from_record(cls, record: dict[str, Any], image_file: Path, language: str | None = None) -> RunItem:
        """A run item from a validated benchmark record (context fields read under their aliases)."""
        ctx = {k: next((record[a] for a in aliases if record.get(a)), None) for k, aliases in CONTEXT_KEYS.items()}
        return cls(
            id=str(record["id"]),
            image_path=str(record["image_path"]),
            image_file=image_file,
            language=language if language is not None else record.get("language"),
            context=ExplainContext.from_dict(ctx),
            source_id=record["id"],
        )


def git_commit(cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def read_done(path: Path) -> dict[str, dict[str, Any]]:
    """Finished records of a trace file by id (the last attempt of each); a torn last line
    (killed mid-write) is cut off."""
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    with path.open("rb+") as fh:
        data = fh.read()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            fh.truncate(keep)  # drop the partial line
        for line in data[:keep].splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "id" in rec:
                done[str(rec["id"])] = rec  # a retried item's later attempt wins
    return done


def prompts_path(predictions: Path) -> Path:
    """``NAME.prompts.jsonl`` beside the predictions file ``NAME.json``."""
    return predictions.with_name(f"{predictions.stem}.prompts.jsonl")


def prompt_lines(output_id: Any, condition: str, record: dict[str, Any]) -> list[dict[str, Any]]:
    """One line per VLM call of a trace record: what it was sent (none for a record made before prompts were
    recorded, nor for an item that made no call)."""
    trace = record.get("trace") if isinstance(record.get("trace"), dict) else {}
    return [{"id": output_id, "condition": condition, **call} for call in trace.get("prompts") or [] if isinstance(call, dict)]


def write_prompts(path: Path, condition: str, records: list[tuple[Any, dict[str, Any]]]) -> None:
    """Write the prompts file of one condition (atomically): every call of every ``(output id, trace record)``."""
    tmp = path.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for output_id, record in records:
            for line in prompt_lines(output_id, condition, record):
                fh.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
    os.replace(tmp, path)


@dataclass
class RunSummary:
    out_dir: str
    total: int
    ran: int
    skipped: int
    failed: int
    per_condition: dict[str, dict[str, int]]

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


class AblationRunner:
    """Runs ``conditions`` over items with bounded concurrency, writing as items finish."""

    def __init__(
        self,
        pipeline: KARPipeline,
        out_dir: Path,
        conditions: list[str],
        concurrency: int = 4,
        manifest: dict[str, Any] | None = None,
        retry_failed: bool = False,
    ) -> None:
        unknown = [c for c in conditions if c not in CONDITIONS]
        if unknown:
            raise ValueError(f"unknown condition(s) {', '.join(unknown)}; choose from {', '.join(CONDITIONS)}")
        if not conditions:
            raise ValueError("no conditions given")
        self.pipeline = pipeline
        self.out_dir = Path(out_dir)
        self.conditions = list(dict.fromkeys(conditions))
        self.concurrency = max(1, concurrency)
        self.manifest_extra = manifest or {}
        self.retry_failed = retry_failed

    def trace_path(self, condition: str) -> Path:
        return self.out_dir / "traces" / f"{condition}.jsonl"

    def prediction_path(self, condition: str) -> Path:
        return self.out_dir / "predictions" / f"{condition}.json"

    def prompts_path(self, condition: str) -> Path:
        return prompts_path(self.prediction_path(condition))

    def write_manifest(self, items: list[RunItem], done_before: int, dataset: str | None) -> None:
        path = self.out_dir / "manifest.json"
        previous = json.loads(path.read_text("utf-8")) if path.exists() else {}
        manifest = {
            **self.manifest_extra,
            "dataset": dataset,
            "items": len(items),
            "conditions": self.conditions,
            "concurrency": self.concurrency,
            "models": {"vlm": self.pipeline.model_id, **self.pipeline.describe},
            "prompt_hashes": all_prompt_hashes(),
            "git_commit": git_commit(Path(__file__).resolve().parent),
            "created_at": previous.get("created_at") or dt.datetime.now(dt.timezone.utc).isoformat(),
            "sessions": [
                *previous.get("sessions", []),
                {"started_at": dt.datetime.now(dt.timezone.utc).isoformat(), "already_done": done_before},
            ],
        }
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(manifest, ensure_ascii=False, indent=2, default=str), "utf-8")
        os.replace(tmp, path)

    def write_predictions(self, items: list[RunItem]) -> None:
        for condition in self.conditions:
            done = read_done(self.trace_path(condition))
            preds = [
                {"id": it.output_id, "image_path": it.image_path, "response": done[it.id].get("response")}
                for it in items
                if it.id in done
            ]
            path = self.prediction_path(condition)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(preds, ensure_ascii=False, indent=1), "utf-8")
            os.replace(tmp, path)
            write_prompts(self.prompts_path(condition), condition, [(it.output_id, done[it.id]) for it in items if it.id in done])

    async def _run_one(self, item: RunItem, condition: str) -> ExplainResult:
        try:
            image = await asyncio.to_thread(item.image_file.read_bytes)
        except OSError as exc:
            err = {"stage": "load", "type": type(exc).__name__, "message": f"{item.image_file}: {exc.strerror or exc}"}
            return ExplainResult(item.id, condition, None, err, {"id": item.id, "condition": condition, "error": err}, item.image_path)
        image = await _bounded(image)
        try:
            return await self.pipeline.explain(
                image, condition, item.context, item_id=item.id, language=item.language, image_path=item.image_path
            )
        except Exception as exc:  # a bug must not lose the item: record it
            err = {"stage": "pipeline", "type": type(exc).__name__, "message": str(exc)}
            return ExplainResult(item.id, condition, None, err, {"id": item.id, "condition": condition, "error": err}, item.image_path)

    async def run(
        self,
        items: list[RunItem],
        progress: Callable[[int, int], None] | None = None,
        dataset: str | None = None,
    ) -> RunSummary:
        """Run every missing (item, condition) pair; ``progress(done, total)`` after each."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "traces").mkdir(exist_ok=True)
        done = {
            c: {i for i, rec in read_done(self.trace_path(c)).items() if not (self.retry_failed and rec.get("response") is None)}
            for c in self.conditions
        }
        ids = {it.id for it in items}
        todo = [(it, c) for it in items for c in self.conditions if it.id not in done[c]]
        total = len(items) * len(self.conditions)
        skipped = total - len(todo)
        self.write_manifest(items, sum(len(d & ids) for d in done.values()), dataset)
        counts = {c: {"ran": 0, "failed": 0, "skipped": len(done[c] & ids)} for c in self.conditions}
        files = {c: self.trace_path(c).open("a", encoding="utf-8") for c in self.conditions}
        queue: asyncio.Queue[tuple[RunItem, str]] = asyncio.Queue()
        for pair in todo:
            queue.put_nowait(pair)
        finished = skipped
        if progress:
            progress(finished, total)

        async def worker() -> None:
            nonlocal finished
            while True:
                try:
                    item, condition = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                result = await self._run_one(item, condition)
                line = json.dumps(result.to_dict(), ensure_ascii=False, default=str) + "\n"
                fh = files[condition]
                fh.write(line)  # one write per record; the loop thread is the only writer
                fh.flush()  # in the OS once flushed: a SIGKILL cannot lose it (fsync at the end)
                counts[condition]["ran"] += 1
                counts[condition]["failed"] += result.response is None
                finished += 1
                if progress:
                    progress(finished, total)

        try:
            await asyncio.gather(*(worker() for _ in range(min(self.concurrency, max(len(todo), 1)))))
        finally:
            for fh in files.values():
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
            self.write_predictions(items)
        return RunSummary(
            out_dir=str(self.out_dir),
            total=total,
            ran=sum(c["ran"] for c in counts.values()),
            skipped=skipped,
            failed=sum(c["failed"] for c in counts.values()),
            per_condition=counts,
        )
