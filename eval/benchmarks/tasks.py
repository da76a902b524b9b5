"""Benchmark-family lines → :class:`agents.tasks.TaskItem` (media resolved, task instruction
rendered from ``eval/prompts/tasks/*.md``, the conditions that make sense for the benchmark)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from agents.pipeline.state import ExplainContext
from agents.tasks import TaskItem
from eval.benchmarks.items import LETTERS, AVMemeItem, BenchItem, DrivelHubItem, MemeCultItem, MemeReaConItem
from eval.benchmarks.loader import BenchFormatError, BenchSet, resolve_media

TASK_PROMPTS = Path(__file__).resolve().parent.parent / "prompts" / "tasks"
#: conditions per benchmark: context_note needs a note (AVMeme: the meme's name); text_only needs a question
BENCH_CONDITIONS: dict[str, tuple[str, ...]] = {
    "avmeme": ("vanilla", "cot", "search_cot", "kar", "context_note", "text_only"),
    "memereacon": ("vanilla", "cot", "search_cot", "kar", "text_only"),
    "drivelhub": ("vanilla", "cot", "search_cot", "kar"),
    "memecult": ("vanilla", "cot", "search_cot", "kar", "context_note"),
}


@lru_cache(maxsize=16)
def _template(name: str) -> str:
    return (TASK_PROMPTS / f"{name}.md").read_text("utf-8")


def instruction(item: BenchItem) -> str | None:
    """The task instruction shown after the media and context (None: plain explanation)."""
    if isinstance(item, AVMemeItem):
        options = "\n".join(f"{LETTERS[i]}. {text}" for i, text in enumerate(item.options))
        return _template("mcq").format(question=item.question, options=options)
    if isinstance(item, MemeReaConItem):
        return _template(item.task).format(comment=item.comment or "")
    if isinstance(item, DrivelHubItem):
        return _template(item.task)
    return None


def to_task_items(bench: BenchSet, media_root: str | Path | None = None) -> list[TaskItem]:
    """Task items with their media files resolved (a missing file is a BenchFormatError naming it)."""
    root = Path(media_root) if media_root is not None else None
    out: list[TaskItem] = []
    for item in bench.items:
        files = {}
        for key, value in item.media_paths.items():
            found = resolve_media(value, bench.path, root)
            if found is None:
                raise BenchFormatError(f"{bench.path}: id={item.id}: field '{key}': file not found: {value}")
            files[key] = found
        context = ExplainContext()
        if isinstance(item, MemeReaConItem):
            context = ExplainContext(post_text=item.post_text, top_comment=item.comment or "\n".join(item.comments[:5]) or None)
        elif isinstance(item, AVMemeItem):
            context = ExplainContext(context_note=item.meme_name)
        elif isinstance(item, MemeCultItem):
            context = ExplainContext(context_note=item.context_note)
        kind = item.task_kind if not isinstance(item, MemeCultItem) else "explain"
        allowed = BENCH_CONDITIONS[item.benchmark]
        if "context_note" in allowed and not context.context_note:
            allowed = tuple(c for c in allowed if c != "context_note")
        out.append(TaskItem(
            id=item.id, benchmark=item.benchmark, task=item.task, kind=kind, instruction=instruction(item),
            media_path=item.media_paths.get("image") or item.media_paths.get("video", ""),
            image_file=files.get("image"), video_file=files.get("video"), audio_file=files.get("audio"),
            language=item.language, context=context, conditions=allowed,
        ))
    return out
