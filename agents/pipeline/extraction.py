"""The extractor's reply: structured JSON, or the MemeBench release's markdown form.

Whatever parses is kept; every problem is recorded in ``parse_errors`` (the pipeline goes
on with the partial extraction).  ``none`` / ``n/a`` / ``无`` (and similar) mean empty.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Confidence = Literal["high", "medium", "low"]
EMPTY_VALUES = {"", "none", "n/a", "na", "null", "nil", "无", "没有", "暂无", "无。", "-", "—", "[]", "空"}
CONFIDENCES = {"high": "high", "medium": "medium", "med": "medium", "low": "low", "高": "high", "中": "medium", "低": "low"}


def is_empty(value: str) -> bool:
    return value.strip().strip("*").strip().lower() in EMPTY_VALUES


@dataclass
class ExtractedEntity:
    name: str
    source: str = ""
    confidence: Confidence = "medium"


@dataclass
class Extraction:
    ocr_text: str = ""
    visual_handle: str = ""
    entities: list[ExtractedEntity] = field(default_factory=list)
    suggested_queries: list[str] = field(default_factory=list)
    format: Literal["json", "markdown", "partial", "none", "ocr_only"] = "none"
    parse_errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _confidence(value: Any, errors: list[str], where: str) -> Confidence:
    key = str(value or "").strip().lower()
    if key in CONFIDENCES:
        return CONFIDENCES[key]  # type: ignore[return-value]
    if key:
        errors.append(f"{where}: unknown confidence {value!r}, read as medium")
    return "medium"


def _clean_str(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        value = "\n".join(str(v) for v in value if v is not None)
    text = str(value).strip()
    return "" if is_empty(text) else text


def _from_json(data: dict[str, Any], errors: list[str]) -> Extraction:
    ex = Extraction(format="json")
    lowered = {str(k).lower().replace(" ", "_"): v for k, v in data.items()}
    ex.ocr_text = _clean_str(lowered.get("ocr_text", lowered.get("ocr")))
    ex.visual_handle = _clean_str(lowered.get("visual_handle"))
    raw_entities = lowered.get("entities") or []
    if not isinstance(raw_entities, list):
        errors.append(f"entities: expected a list, got {type(raw_entities).__name__}")
        raw_entities = []
    for i, ent in enumerate(raw_entities):
        if isinstance(ent, str):
            if not is_empty(ent):
                ex.entities.append(ExtractedEntity(name=ent.strip()))
            continue
        if not isinstance(ent, dict):
            errors.append(f"entities[{i}]: expected an object, got {type(ent).__name__}")
            continue
        ent_l = {str(k).lower(): v for k, v in ent.items()}
        name = _clean_str(ent_l.get("name"))
        if not name:
            errors.append(f"entities[{i}]: no name")
            continue
        ex.entities.append(
            ExtractedEntity(name, _clean_str(ent_l.get("source")), _confidence(ent_l.get("confidence"), errors, f"entities[{i}]"))
        )
    queries = lowered.get("suggested_queries", lowered.get("queries")) or []
    if isinstance(queries, str):
        queries = [queries]
    if not isinstance(queries, list):
        errors.append(f"suggested_queries: expected a list, got {type(queries).__name__}")
        queries = []
    ex.suggested_queries = [q.strip() for q in (str(x) for x in queries if x is not None) if not is_empty(q)]
    return ex


_JSON_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)
_HEADER = re.compile(r"^\s*(?:#+\s*)?(?:[-*]\s*)?\*\*\s*([^*]+?)\s*\*\*\s*[:：]?\s*(.*)$")
_LIST_ITEM = re.compile(r"^\s*(?:\d+[.)、]|[-*•])\s*(.*)$")
_FIELD = re.compile(r"\"(ocr_text|visual_handle)\"\s*:\s*\"((?:[^\"\\]|\\.)*)\"")


def _json_candidates(text: str) -> list[str]:
    out = [m.group(1) for m in _JSON_FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if start != -1:
        out.append(text[start : end + 1] if end > start else text[start:])
    return out


def _section_key(title: str) -> str | None:
    t = title.lower()
    if "ocr" in t or "文字" in t:
        return "ocr"
    if "visual" in t or "视觉" in t:
        return "visual"
    if "entit" in t or "实体" in t:
        return "entities"
    if "quer" in t or "查询" in t or "搜索" in t:
        return "queries"
    return None


def _parse_entity_line(line: str, errors: list[str], where: str) -> ExtractedEntity | None:
    fields: dict[str, str] = {}
    for part in line.split("|"):
        if ":" in part or "：" in part:
            key, _, value = part.replace("：", ":").partition(":")
            fields[key.strip().strip("*").lower()] = value.strip().strip("*").strip()
    name = fields.get("name") or fields.get("名称") or ""
    if not fields:
        name = line.strip()
    if is_empty(name):
        if not is_empty(line):
            errors.append(f"{where}: no entity name in {line.strip()[:80]!r}")
        return None
    source = fields.get("source") or fields.get("出处") or ""
    conf = fields.get("confidence") or fields.get("置信度") or ""
    return ExtractedEntity(name, "" if is_empty(source) else source, _confidence(conf, errors, where))


def _from_markdown(text: str, errors: list[str]) -> Extraction | None:
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m and _section_key(m.group(1)) is not None:
            current = _section_key(m.group(1))
            sections[current] = [m.group(2)] if m.group(2).strip() else []
        elif current is not None:
            sections[current].append(line)
    if not sections:
        return None
    ex = Extraction(format="markdown")
    ex.ocr_text = _clean_str("\n".join(s for s in sections.get("ocr", []) if s.strip()))
    ex.visual_handle = _clean_str(" ".join(s.strip() for s in sections.get("visual", []) if s.strip()))
    for i, line in enumerate(l for l in sections.get("entities", []) if l.strip()):
        m = _LIST_ITEM.match(line)
        body = m.group(1) if m else line
        ent = _parse_entity_line(body, errors, f"entities line {i + 1}")
        if ent is not None:
            ex.entities.append(ent)
    for line in sections.get("queries", []):
        if not line.strip():
            continue
        m = _LIST_ITEM.match(line)
        q = (m.group(1) if m else line).strip().strip('"“”').strip()
        if not is_empty(q):
            ex.suggested_queries.append(q)
    return ex


def parse_extraction(text: str) -> Extraction:
    """Parse the extractor's reply (JSON first, then markdown, then field-wise salvage)."""
    errors: list[str] = []
    if not text or not text.strip():
        return Extraction(format="none", parse_errors=["empty extraction reply"])
    json_errors: list[str] = []
    for candidate in _json_candidates(text):
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError as exc:
            json_errors.append(f"invalid JSON: {exc.msg} at char {exc.pos}")
            continue
        if isinstance(data, dict):
            ex = _from_json(data, errors)
            ex.parse_errors = errors
            return ex
        json_errors.append(f"JSON reply is a {type(data).__name__}, expected an object")
    md = _from_markdown(text, errors)
    if md is not None:
        md.parse_errors = errors
        return md
    # salvage fields from truncated or malformed JSON
    ex = Extraction(format="partial" if _FIELD.search(text) else "none")
    for key, raw in _FIELD.findall(text):
        try:
            value = json.loads(f'"{raw}"')
        except json.JSONDecodeError:
            value = raw
        setattr(ex, key, _clean_str(value))
    ex.parse_errors = (json_errors + errors) or ["reply is neither JSON nor the markdown extraction form"]
    return ex
