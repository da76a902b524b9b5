"""The text blocks the nodes render into prompts: the item's context lines, the CultureBase entries, the extraction summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.pipeline.prompts import load_prompt

CONTEXT_LABELS = {
    "en": {"post_text": "Post text", "top_comment": "Top comment", "context_note": "Cultural context note",
           "media": "Media", "transcript": "Audio transcript", "frame_text": "Text read off the video frames"},
    "zh": {"post_text": "帖子正文", "top_comment": "热门评论", "context_note": "文化背景说明",
           "media": "媒体", "transcript": "音频转写", "frame_text": "视频帧中的文字"},
}


@dataclass(frozen=True)
class KnowledgeBlockParams:
    """How much of each CultureBase entry the reasoning prompt shows.

    Both were set by hand with the pipeline's first version (no bench chose them); the prompt-record cap
    (``PipelineConfig.prompt_record_max_chars``) is sized from them.
    """

    field_chars: int = 600  #: each text field (description, visual, usage) cut to this many characters
    aliases: int = 6  #: the first this many aliases


PARAMS = KnowledgeBlockParams()


def context_block(context: dict[str, str], language: str, skip: tuple[str, ...] = ()) -> str:
    """The item's context lines (post text, comment, note, transcript, ...) as the ``context`` prompt renders them."""
    items = [(k, v) for k, v in (context or {}).items() if v and k not in skip]
    if not items:
        return ""
    labels = CONTEXT_LABELS["zh" if language.startswith("zh") else "en"]
    body = "\n".join(f"- {labels.get(k, k)}: {v}" for k, v in items)
    return load_prompt("context").render(items=body)


def extraction_summary(ex: dict[str, Any]) -> str:
    """The extraction's OCR text, visual handle and candidate entities, one line each."""
    ents = "; ".join(
        f"{e['name']}" + (f" ({e['source']})" if e.get("source") else "") + f" [{e.get('confidence', 'medium')}]"
        for e in ex.get("entities") or []
    )
    return "\n".join(
        [
            f"- OCR text: {ex.get('ocr_text') or '(none)'}",
            f"- Visual handle: {ex.get('visual_handle') or '(none)'}",
            f"- Candidate entities: {ents or '(none)'}",
        ]
    )


def knowledge_block(hits: list[Any], params: KnowledgeBlockParams = PARAMS) -> str:
    """The grounded CultureBase entries as the ``knowledge`` prompt renders them ("" when none)."""
    if not hits:
        return ""
    entries = []
    for i, h in enumerate(hits, start=1):
        e = h.entity
        parts = [f"{i}. {e.name}" + (f" — {e.source_work}" if e.source_work else "") + f" (score {h.score:.2f})"]
        if e.aliases:
            parts.append(f"   aliases: {', '.join(e.aliases[:params.aliases])}")
        for label, value in (("description", e.description), ("visual", e.visual_desc), ("usage", e.cultural_usage)):
            if value:
                parts.append(f"   {label}: {value[:params.field_chars]}")
        entries.append("\n".join(parts))
    return load_prompt("knowledge").render(entries="\n".join(entries))


def block_sections(text: str, blocks: dict[str, str]) -> dict[str, list[int]]:
    """Where each non-empty block lies in the rendered ``text`` (``[start, end)``, in the order given)."""
    found: dict[str, list[int]] = {}
    start = 0
    for name, block in blocks.items():
        at = text.find(block, start) if block else -1
        if at >= 0:
            found[name] = [at, at + len(block)]
            start = at + len(block)
    return found
