"""What a run's trace says the reasoner received: the grounded entities, the KB text, the evidence.

Traces are the runner's ``traces/{condition}.jsonl`` (one :class:`agents.pipeline.state.ExplainResult`
a line; a retried item's last line counts).  They are read, never modified (the runner's own reader
cuts a torn last line; here such a line is skipped).  Every field is read defensively: an evidence
piece is a dict with ``url``/``title``/``text``/``content``/``snippet`` when the trace lists pieces,
else the numbered entries of the fenced evidence block the prompt carried.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson

from eval.records import DatasetError

#: conditions whose reasoning prompt carries the grounded CultureBase entries
KB_CONDITIONS = frozenset({"kar"})
#: conditions whose reasoning prompt carries web evidence
SEARCH_CONDITIONS = frozenset({"search_cot", "kar"})
PIECE_LIST_KEYS = ("pieces", "results", "items", "sources")
PIECE_TEXT_KEYS = ("text", "content", "snippet", "body")
_ENTRY = re.compile(r"^(\d+)\.\s+(.*)$")
_URL = re.compile(r"^URL:\s*(.*)$")


@dataclass(frozen=True)
class Piece:
    """One piece of evidence as the reasoner saw it."""

    title: str
    url: str
    text: str

    @property
    def all_text(self) -> str:
        return f"{self.title} {self.url} {self.text}"

    @property
    def size(self) -> int:
        return max(1, len(self.title) + len(self.text))


def read_traces(path: str | Path) -> dict[str, dict[str, Any]]:
    """Trace records by item id (the last record of an id wins); :class:`DatasetError` when unreadable."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: trace file not found")
    found: dict[str, dict[str, Any]] = {}
    with path.open("rb") as handle, gc_paused():
        for line in handle:
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                try:  # the stdlib reads what orjson refuses (NaN, Infinity)
                    record = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue  # a torn last line (the run was killed mid-write)
            if isinstance(record, dict) and record.get("id") is not None:
                found[str(record["id"])] = record
    return found


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection meanwhile: parsed JSON holds no cycles, and a collection every few hundred
    new objects walks every object already made (seconds over a run's traces)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def trace_of(record: dict[str, Any] | None) -> dict[str, Any]:
    """The ``trace`` object of a record (a bare trace is accepted too)."""
    if not isinstance(record, dict):
        return {}
    trace = record.get("trace")
    return trace if isinstance(trace, dict) else record


def grounded_hits(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The entities that passed τ, best first (``grounding.hits``)."""
    grounding = trace.get("grounding")
    hits = grounding.get("hits") if isinstance(grounding, dict) else None
    return [h for h in hits or [] if isinstance(h, dict) and h.get("name")]


def kb_entries(trace: dict[str, Any], condition: str) -> list[str]:
    """The CultureBase entries the reasoning prompt carried (KAR only), one text per entity: name, aliases,
    source and texts."""
    if condition not in KB_CONDITIONS:
        return []
    parts = []
    for hit in grounded_hits(trace):
        aliases = hit.get("aliases") or []
        fields = [hit.get("name"), ", ".join(a for a in aliases if isinstance(a, str)), hit.get("source_work"),
                  hit.get("description"), hit.get("visual_desc"), hit.get("cultural_usage")]
        parts.append(" | ".join(str(f) for f in fields if f))
    return parts


def kb_text(trace: dict[str, Any], condition: str) -> str:
    """The CultureBase entries the reasoning prompt carried (KAR only), one line (or more) per entity."""
    return "\n".join(kb_entries(trace, condition))


def _piece_of(raw: dict[str, Any]) -> Piece | None:
    text = next((str(raw[k]) for k in PIECE_TEXT_KEYS if isinstance(raw.get(k), str) and raw[k].strip()), "")
    title, url = str(raw.get("title") or ""), str(raw.get("url") or "")
    if not (text or title or url):
        return None
    return Piece(title, url, text)


_BLOCK_ENTRY = re.compile(r"^\d+\.[ \t]+(.*)\n[ \t]+URL:[ \t]*(.*)\n[ \t]+(.*)$", re.M)


def parse_evidence_block(text: str) -> list[Piece]:
    """The numbered entries of a fenced evidence block (``N. title`` / ``URL: …`` / content), as
    :func:`agents.pipeline.evidence.format_evidence` writes them (one regex pass); a block in another
    layout is read line by line."""
    text = text or ""
    found = [Piece(m.group(1).strip(), m.group(2).strip(), m.group(3).strip()) for m in _BLOCK_ENTRY.finditer(text)]
    if found or not text.strip():
        return found
    return _parse_lines(text)


def _parse_lines(text: str) -> list[Piece]:
    pieces: list[Piece] = []
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is not None:
            pieces.append(Piece(current["title"], current["url"], " ".join(current["text"]).strip()))

    for raw_line in (text or "").splitlines():
        line = raw_line.strip()
        if not line or line.startswith("<<<") or line.endswith(">>>") or line.startswith("[Search:") or line == "(no results)":
            if line.startswith("[Search:"):
                close()
                current = None
            continue
        entry = _ENTRY.match(line) if raw_line[:1].isdigit() else None
        if entry:
            close()
            current = {"title": entry.group(2), "url": "", "text": []}
            continue
        if current is None:
            continue
        url = _URL.match(line)
        if url and not current["url"]:
            current["url"] = url.group(1)
        else:
            current["text"].append(line)
    close()
    return pieces


def listed_pieces(trace: dict[str, Any]) -> list[Piece]:
    """The evidence pieces the trace lists (none when it lists none: the block is then parsed)."""
    evidence = trace.get("evidence")
    if not isinstance(evidence, dict):
        return []
    for key in PIECE_LIST_KEYS:
        listed = evidence.get(key)
        if isinstance(listed, list) and listed:
            pieces = [p for p in (_piece_of(r) for r in listed if isinstance(r, dict)) if p is not None]
            if pieces:
                return pieces
    return []


def evidence_pieces(trace: dict[str, Any]) -> list[Piece]:
    """The evidence the reasoning prompt carried, piece by piece (listed pieces first, else the block parsed)."""
    evidence = trace.get("evidence")
    if not isinstance(evidence, dict):
        return []
    return listed_pieces(trace) or parse_evidence_block(str(evidence.get("text") or ""))


def evidence_text(trace: dict[str, Any]) -> str:
    """The evidence as the prompt carried it (the block, else the pieces joined)."""
    evidence = trace.get("evidence")
    if isinstance(evidence, dict) and isinstance(evidence.get("text"), str):
        return evidence["text"]
    return "\n".join(p.all_text for p in evidence_pieces(trace))


def evidence_status(trace: dict[str, Any], condition: str, manifest: dict[str, Any] | None = None) -> str:
    """``n/a`` (the condition does not search), ``none`` (no backend, or one with nothing to search),
    or the backend's name (``local``, ``tavily``, ``searxng``, …)."""
    if condition not in SEARCH_CONDITIONS:
        return "n/a"
    models = trace.get("models") if isinstance(trace.get("models"), dict) else {}
    status = models.get("evidence") or (manifest or {}).get("evidence")
    backend = models.get("search_backend") or ((manifest or {}).get("models") or {}).get("search_backend")
    if isinstance(status, dict):
        if status.get("available") is False:
            return "none"
        backend = status.get("backend") or backend
    if not backend:
        return "unknown"
    return "none" if str(backend) == "none" else str(backend).lower()


def locate_traces(names: list[str], runs: dict[str, Path], explicit: dict[str, Path]) -> dict[str, Path]:
    """The trace file of each run name: ``explicit[name]``, else ``RUN/traces/{condition}.jsonl`` of the run
    folder of its model (``runs[model]``; ``runs[""]`` for names without a model).  Names with neither are left out;
    a named file that does not exist is a :class:`DatasetError`."""
    found: dict[str, Path] = {}
    for name in names:
        model, _, condition = name.rpartition("/")
        if name in explicit:
            path = explicit[name]
        elif model in runs or "" in runs:
            path = runs.get(model, runs.get("")) / "traces" / f"{condition}.jsonl"  # type: ignore[operator]
        else:
            continue
        if not path.is_file():
            raise DatasetError(f"{path}: trace file not found (traces of {name!r})")
        found[name] = path
    unknown = sorted(set(explicit) - set(names))
    if unknown:
        raise DatasetError(f"--traces names {', '.join(map(repr, unknown))}, which no --judged file has")
    return found


def read_manifest(trace_file: Path) -> dict[str, Any]:
    """The run's ``manifest.json`` next to its ``traces/`` folder ({} when absent or unreadable)."""
    path = trace_file.parent.parent / "manifest.json"
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# -- what was sent: the prompts a run recorded (agents.vlm.record) -------------------------------------------

#: how a row's reasoning prompt was read: from the trace's recorded prompts, or rebuilt from its fields
RECORDED = "recorded"
RECONSTRUCTED = "reconstructed"
#: as the report names each way, per run
PROMPTS_LABELS = {RECORDED: "recorded", RECONSTRUCTED: "reconstructed (run predates prompt recording)"}
_KB_ENTRY_START = re.compile(r"\n(?=\d+\. )")
_SENT_ENTRY = re.compile(r"^\d+\.[ \t]+(.*)\n[ \t]+URL:[ \t]*(.*)\n(?:[ \t]+\((?:[^\n]*)\)\n)?[ \t]+(.*)$", re.M)


@dataclass(frozen=True)
class SentPrompt:
    """The reasoning prompt a run recorded, read as the diagnostics need it: its CultureBase block and its evidence
    block exactly as sent (``""``: the prompt carried none), and whether the record cut either (it keeps a text part
    whole up to a cap: what lies past it is unknown here)."""

    knowledge: str
    evidence: str
    cut: bool

    def kb_entries(self) -> list[str]:
        """The CultureBase entries the prompt carried, one text each (``N. name — source (score)`` and its lines)."""
        return list(self._entries)

    @cached_property
    def _entries(self) -> tuple[str, ...]:
        return tuple(part for part in _KB_ENTRY_START.split(self.knowledge)[1:] if part.strip())

    def carries_entity(self, rank: int, name: str) -> bool:
        """Whether the CultureBase block holds the entry of the ``rank``-th grounded entity (its header line)."""
        return any(entry.startswith(f"{rank}. {name}") for entry in self._entries)

    def evidence_pieces(self) -> list[Piece]:
        """The evidence pages as sent: title, URL and the content (the line saying why a page is there left out)."""
        return [Piece(m.group(1).strip(), m.group(2).strip(), m.group(3).strip()) for m in _SENT_ENTRY.finditer(self.evidence)]


def prompts_recorded(trace: dict[str, Any]) -> bool:
    """Whether the run recorded what its VLM calls were sent (a trace made before that has no ``prompts``)."""
    return isinstance(trace.get("prompts"), list)


def _last_text(call: dict[str, Any]) -> dict[str, Any]:
    for message in reversed(call.get("messages") or []):
        for part in reversed(message.get("content") or [] if isinstance(message, dict) else []):
            if isinstance(part, dict) and part.get("type") == "text":
                return part
    return {}


def sent_prompt(trace: dict[str, Any], stage: str = "reason") -> SentPrompt | None:
    """The last recorded call of ``stage`` (the reasoning call by default) as :class:`SentPrompt`; None when the
    run recorded none (the pipeline stopped before it, or the condition makes no such call)."""
    calls = [c for c in trace.get("prompts") or [] if isinstance(c, dict) and c.get("stage") == stage]
    if not calls:
        return None
    part = _last_text(calls[-1])
    text = str(part.get("text") or "")
    sections = calls[-1].get("sections") if isinstance(calls[-1].get("sections"), dict) else {}
    cut = False
    found = {}
    for name in ("knowledge", "evidence"):
        span = sections.get(name)
        if isinstance(span, list) and len(span) == 2:
            found[name] = text[span[0]:span[1]]
            cut |= span[1] > len(text)
    return SentPrompt(found.get("knowledge", ""), found.get("evidence", ""), cut)
