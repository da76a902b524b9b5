"""Benchmark-family task items on the KAR pipeline: multiple choice, classification and
generation over images or videos, under the usual conditions plus ``text_only``.

:class:`TaskRunner` is the ablation runner (same resumable traces and predictions) with
per-item media preparation: a video's frames, its audio (native WAV or a transcript, or
neither) and the task instruction go into the pipeline; ``text_only`` runs the vanilla prompt
with no media at all.  The media are prepared once per item, shared by its conditions, freed
after its last one, and prefetched up to ``concurrency + 1`` items ahead so that decoding
overlaps the model calls.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.media import MediaBundle, MediaError, Transcriber, prepare_video
from agents.media.explain import clip_inputs
from agents.pipeline.pipeline import KARPipeline
from agents.pipeline.state import CONDITIONS, ExplainContext, ExplainResult
from agents.runner import AblationRunner, read_done

TASK_CONDITIONS: tuple[str, ...] = (*CONDITIONS, "text_only")


@dataclass
class TaskItem:
    """One task instance as the runner needs it (built from a benchmark-family line)."""

    id: str
    benchmark: str
    task: str
    kind: str  # mcq | classify | generate | explain
    instruction: str | None  # None: the plain explanation prompts (MemeCULT-1K)
    media_path: str  # as written in the dataset
    image_file: Path | None = None
    video_file: Path | None = None
    audio_file: Path | None = None
    language: str | None = None
    context: ExplainContext = field(default_factory=ExplainContext)
    conditions: tuple[str, ...] = TASK_CONDITIONS  # the conditions that make sense for this item
    audio_only: bool = False  # a video whose frames give the answer away: its audio (or transcript) only

    @property
    def image_path(self) -> str:  # the prediction record's media path (AblationRunner writes it)
        return self.media_path

    @property
    def output_id(self) -> str:  # the prediction record's id (AblationRunner writes it)
        return self.id


class TaskRunner(AblationRunner):
    """The ablation runner for :class:`TaskItem` (video/audio media, task prompts, ``text_only``)."""

    def __init__(
        self,
        pipeline: KARPipeline,
        out_dir: Path,
        conditions: list[str],
        *,
        settings: Any,
        concurrency: int = 4,
        manifest: dict[str, Any] | None = None,
        retry_failed: bool = False,
        transcriber: Transcriber | None = None,
    ) -> None:
        unknown = [c for c in conditions if c not in TASK_CONDITIONS]
        if unknown:
            raise ValueError(f"unknown condition(s) {', '.join(unknown)}; choose from {', '.join(TASK_CONDITIONS)}")
        base = [c for c in conditions if c != "text_only"] or ["vanilla"]
        super().__init__(pipeline, out_dir, base, concurrency=concurrency, manifest=manifest, retry_failed=retry_failed)
        self.conditions = list(dict.fromkeys(conditions))
        self.settings = settings
        self.transcriber = transcriber
        self._media: dict[str, asyncio.Future[Any]] = {}
        self._pending: dict[str, int] = {}
        self._slots: asyncio.Semaphore | None = None
        self._prefetched: set[str] = set()

    def check(self, items: list[TaskItem]) -> None:
        """Every requested condition must make sense for every item (else a ValueError naming them)."""
        bad: dict[tuple[str, str], int] = {}
        for item in items:
            for condition in self.conditions:
                if condition not in item.conditions:
                    bad[(item.benchmark, condition)] = bad.get((item.benchmark, condition), 0) + 1
        if bad:
            detail = "; ".join(f"{c} does not apply to {b} ({n} items)" for (b, c), n in sorted(bad.items()))
            raise ValueError(f"{detail}")

    async def run(self, items: list[TaskItem], progress: Any = None, dataset: str | None = None) -> Any:  # type: ignore[override]
        self.check(items)
        # how many conditions will still ask for each item's media (finished pairs never do), so the
        # frames are freed as soon as the item's last pending condition has them
        done = {c: {i for i, rec in read_done(self.trace_path(c)).items() if not (self.retry_failed and rec.get("response") is None)}
                for c in self.conditions}
        self._pending = {item.id: sum(item.id not in done[c] for c in self.conditions) for item in items}
        # media of the next items are prepared while the current ones wait for the model
        self._slots = asyncio.Semaphore(self.concurrency + 1)
        prefetch = asyncio.ensure_future(self._prefetch(items))
        try:
            return await super().run(items, progress=progress, dataset=dataset)  # type: ignore[arg-type]
        finally:
            prefetch.cancel()
            await asyncio.gather(prefetch, return_exceptions=True)

    async def _prefetch(self, items: list[TaskItem]) -> None:
        """Start preparing media in run order, at most ``concurrency + 1`` items ahead of their use."""
        assert self._slots is not None
        for item in items:
            if self._pending.get(item.id, 0) <= 0 or item.id in self._media:
                continue
            await self._slots.acquire()
            if self._pending.get(item.id, 0) <= 0 or item.id in self._media:
                self._slots.release()
                continue
            self._media[item.id] = asyncio.ensure_future(asyncio.to_thread(self._prepare, item))
            self._prefetched.add(item.id)

    def _prepare(self, item: TaskItem) -> tuple[bytes, MediaBundle | None, float]:
        started = time.perf_counter()
        if item.video_file is not None:
            bundle = prepare_video(item.video_file, settings=self.settings, audio_path=item.audio_file,
                                   transcriber=self.transcriber, language=item.language)
            return bundle.frames[0].jpeg, bundle, time.perf_counter() - started
        assert item.image_file is not None
        try:
            data = item.image_file.read_bytes()
        except OSError as exc:
            raise MediaError(f"{item.image_file}: {exc.strerror or exc}") from None
        return data, None, time.perf_counter() - started

    async def _media_for(self, item: TaskItem) -> tuple[bytes, MediaBundle | None, float]:
        task = self._media.get(item.id)
        if task is None:
            task = asyncio.ensure_future(asyncio.to_thread(self._prepare, item))
            self._media[item.id] = task
        try:
            return await task
        finally:
            self._pending[item.id] = self._pending.get(item.id, 1) - 1
            if self._pending[item.id] <= 0:
                self._media.pop(item.id, None)  # every condition has it: free the frames
                if item.id in self._prefetched and self._slots is not None:
                    self._prefetched.discard(item.id)
                    self._slots.release()

    def _failed(self, item: TaskItem, condition: str, stage: str, exc: BaseException) -> ExplainResult:
        err = {"stage": stage, "type": type(exc).__name__, "message": str(exc)}
        return ExplainResult(item.id, condition, None, err, {"id": item.id, "condition": condition, "error": err}, item.media_path)

    async def _run_one(self, item: TaskItem, condition: str) -> ExplainResult:  # type: ignore[override]
        try:
            image, bundle, prep_s = await self._media_for(item)
        except MediaError as exc:
            return self._failed(item, condition, "media", exc)
        except Exception as exc:  # a bug must not lose the item
            return self._failed(item, condition, "media", exc)
        extras: dict[str, Any] = {}
        if item.instruction is not None:
            extras["task"] = {"benchmark": item.benchmark, "task": item.task, "kind": item.kind, "instruction": item.instruction}
        if condition == "text_only":
            extras["text_only"] = True
            extras["media"] = {"kind": "none", "text_only": True}
        elif bundle is not None:
            _, clip = clip_inputs(bundle, prep_s, audio_only=item.audio_only)
            extras.update(clip)
        else:
            extras["media"] = {"kind": "image", "path": item.media_path, "prepare_s": round(prep_s, 4)}
        pipeline_condition = "vanilla" if condition == "text_only" else condition
        try:
            result = await self.pipeline.explain(
                image, pipeline_condition, item.context, item_id=item.id, language=item.language,
                image_path=item.media_path, extras=extras,
            )
        except Exception as exc:
            return self._failed(item, condition, "pipeline", exc)
        if condition != pipeline_condition:
            result.condition = condition
            result.trace["condition"] = condition
            result.trace["pipeline_condition"] = pipeline_condition
        return result
