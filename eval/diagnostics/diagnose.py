"""Retrieval diagnostics per item and condition, from the benchmark, the run's traces and CultureBase.

No VLM is called (unless a knowledge judge is given: :mod:`eval.diagnostics.knowledge`).  One row per
(condition, item):

* ``gold_in_kb``: every gold entity is in CultureBase by name or alias (None: no KB, or no gold);
* ``identity_grounded`` / ``gold_rank``: a gold entity among the entities that passed τ, and its rank
  (1 = best); None for a condition that does not ground (Vanilla, CoT, Search-CoT);
* ``extra_entities``: the entities that passed τ and are not gold (related ones are not wrong: a
  count to read, not an error rate);
* ``knowledge_in_prompt``: the share of the item's knowledge units the reasoning prompt's material
  (KAR's CultureBase entries and the evidence) states, with ``knowledge_method`` ``proxy`` or ``judge``;
* ``evidence_off_entity``: the share of the evidence (by characters) in pieces that name no gold entity;
* ``evidence_status``: ``n/a``, ``none`` or the search backend;
* ``prompts``: how the reasoning prompt was read: ``recorded`` (the trace holds what each VLM call was sent:
  the CultureBase block and the evidence block are read off the recorded reasoning prompt, so a fact past a
  field's cut or a page's text past the trace's snippet count as what they were) or ``reconstructed`` (a run
  recorded before prompts were: rebuilt from the trace's grounded entities' full fields and its evidence,
  which can count a fact the prompt cut off); ``prompt_cut``: the record itself was cut (see
  :mod:`agents.vlm.record`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from statistics import mean
from typing import Any

from eval.diagnostics.gold import Gold, KBNames, gold_of, knowledge_units, mentions, named_entities, normalized_name
from eval.diagnostics.knowledge import JUDGE, PROXY, KnowledgeJudge, Material, Materials, judge_many, proxy_decide
from eval.diagnostics.params import PARAMS
from eval.diagnostics.traces import (
    RECONSTRUCTED,
    RECORDED,
    SEARCH_CONDITIONS,
    Piece,
    SentPrompt,
    evidence_status,
    evidence_text,
    grounded_hits,
    kb_entries,
    kb_text,
    listed_pieces,
    parse_evidence_block,
    prompts_recorded,
    sent_prompt,
    trace_of,
)

#: conditions whose pipeline grounds entities in CultureBase
GROUNDING_CONDITIONS = frozenset({"kar"})


def condition_of(name: str) -> str:
    """``model/condition`` → ``condition``."""
    return name.rpartition("/")[2]


def _hit_keys(hit: Mapping[str, Any]) -> set[str]:
    names = [hit.get("name"), *(hit.get("aliases") or [])]
    return {key for n in names if isinstance(n, str) and (key := normalized_name(n))}


def _is_gold(hit: Mapping[str, Any], gold: Gold) -> bool:
    return (hit.get("id") is not None and hit.get("id") in gold.kb_ids) or bool(_hit_keys(hit) & gold.keys)


def material(trace: Mapping[str, Any], condition: str) -> str:
    """What the reasoning prompt carried besides the image: KAR's KB entries and the evidence block, as the trace
    recorded them sent (empty when no reasoning prompt was sent), else rebuilt from the trace's fields."""
    if prompts_recorded(dict(trace)):
        sent = sent_prompt(dict(trace))
        return "" if sent is None else "\n".join(p for p in ("\n".join(sent.kb_entries()), sent.evidence) if p)
    parts = [kb_text(dict(trace), condition)]
    if condition in SEARCH_CONDITIONS:
        parts.append(evidence_text(dict(trace)))
    return "\n".join(p for p in parts if p)


class Shared:
    """What rows read alike, each normalised or parsed once: CultureBase entries (the same entity is grounded
    for many items), and per item the evidence blocks and pages (conditions that searched alike carry the
    same ones) and whether a page names a gold entity.  :meth:`item` starts an item."""

    #: CultureBase entries kept (each a few kB): more than a run grounds, in any KB this project builds
    ENTRIES = 8192

    def __init__(self) -> None:
        self.entries: dict[str, Material] = {}
        self.blocks: dict[str, Material] = {}
        self.parsed: dict[str, list[Piece]] = {}
        self.sent: dict[str, list[Piece]] = {}
        self.named: dict[Piece, bool] = {}

    def item(self) -> None:
        self.blocks.clear()
        self.parsed.clear()
        self.sent.clear()
        self.named.clear()
        if len(self.entries) > self.ENTRIES:
            self.entries.clear()

    def entry(self, text: str) -> Material:
        found = self.entries.get(text)
        if found is None:
            found = self.entries[text] = Material(text)
        return found

    def block(self, text: str) -> Material:
        found = self.blocks.get(text)
        if found is None:
            found = self.blocks[text] = Material(text)
        return found

    def pieces(self, text: str) -> list[Piece]:
        found = self.parsed.get(text)
        if found is None:
            found = self.parsed[text] = parse_evidence_block(text)
        return found

    def names_gold(self, gold: Gold, piece: Piece) -> bool:
        found = self.named.get(piece)  # a piece is its title, URL and text (conditions that searched alike share them)
        if found is None:
            found = self.named[piece] = mentions(gold.keys, piece.all_text)
        return found


def _evidence(trace: dict[str, Any], shared: Shared) -> tuple[Material | None, list[Piece]]:
    """The evidence's material (None: the prompt carried none) and pieces, exactly as :func:`evidence_text`
    and :func:`eval.diagnostics.traces.evidence_pieces` read them."""
    evidence = trace.get("evidence")
    if not isinstance(evidence, dict):
        return None, []
    raw = evidence.get("text")
    pieces = listed_pieces(trace) or shared.pieces(str(raw or ""))
    text = raw if isinstance(raw, str) else "\n".join(p.all_text for p in pieces)
    return (shared.block(text) if text else None), pieces


def _sent_evidence(sent: SentPrompt | None, shared: Shared) -> tuple[Material | None, list[Piece]]:
    """The recorded reasoning prompt's evidence block (None: it carried none) and its pages as sent."""
    if sent is None or not sent.evidence:
        return None, []
    found = shared.sent.get(sent.evidence)
    if found is None:
        found = shared.sent[sent.evidence] = sent.evidence_pieces()
    return shared.block(sent.evidence), found


def item_row(item: Any, gold: Gold, gold_in_kb: bool | None, name: str, record: Mapping[str, Any] | None,
             manifest: Mapping[str, Any] | None = None, shared: Shared | None = None) -> dict[str, Any]:
    """One item's diagnostics under one condition (``name``: condition or model/condition); knowledge by the proxy.
    ``shared``: what the item's other rows (and other items' rows) already read (:class:`Shared`)."""
    condition = condition_of(name)
    row: dict[str, Any] = {
        "id": item.id,
        "gold": [e.name for e in gold.entities],
        "gold_source": gold.gold_source,
        "gold_in_kb": gold_in_kb,
        "gold_missing_from_kb": [e.name for e in gold.entities if e.kb_id is None] if gold_in_kb is not None else [],
        "traced": record is not None,
        "error": None,
        "grounds": condition in GROUNDING_CONDITIONS,
        "grounded": [],
        "identity_grounded": None,
        "gold_rank": None,
        "extra_entities": None,
        "n_extra": None,
        "knowledge_units": len(gold.knowledge),
        "knowledge_stated": None,
        "knowledge_in_prompt": None,
        "knowledge_method": PROXY,
        "knowledge_error": None,
        "evidence_status": "n/a" if condition not in SEARCH_CONDITIONS else "unknown",
        "evidence_pieces": 0,
        "evidence_off_entity": None,
        "prompts": None,
        "prompt_cut": False,
    }
    if record is None:
        return row
    if shared is None:
        shared = Shared()
        shared.item()
    trace = trace_of(dict(record))
    error = record.get("error") or trace.get("error")
    row["error"] = f"{error.get('stage', '?')}: {error.get('message', '')}" if isinstance(error, dict) else (str(error) if error else None)
    hits = grounded_hits(trace)
    row["grounded"] = [str(h["name"]) for h in hits]
    recorded = prompts_recorded(trace)
    sent = sent_prompt(trace) if recorded else None
    row["prompts"] = RECORDED if recorded else RECONSTRUCTED
    row["prompt_cut"] = bool(sent and sent.cut)
    if row["grounds"] and gold.entities:
        ranks = [i for i, h in enumerate(hits, 1) if _is_gold(h, gold)]
        row["identity_grounded"] = bool(ranks)
        row["gold_rank"] = ranks[0] if ranks else None
        # injected: what the reasoning prompt carried (recorded), or every entity that passed τ (reconstructed)
        injected = [h for i, h in enumerate(hits, 1) if not recorded or (sent is not None and sent.carries_entity(i, str(h["name"])))]
        row["extra_entities"] = [str(h["name"]) for h in injected if not _is_gold(h, gold)]
        row["n_extra"] = len(row["extra_entities"])
    searched = condition in SEARCH_CONDITIONS
    if recorded:
        held, pieces = _sent_evidence(sent, shared)
    else:
        held, pieces = _evidence(trace, shared) if searched else (None, [])
    if gold.knowledge:
        # the prompt's material: KAR's KB entries, then the evidence block (material() joins them by line breaks)
        entries = (sent.kb_entries() if sent is not None else []) if recorded else kb_entries(trace, condition)
        parts = [shared.entry(text) for text in entries]
        if held is not None:
            parts.append(held)
        stated = proxy_decide(gold.knowledge, Materials(parts))
        row["knowledge_stated"] = stated
        row["knowledge_in_prompt"] = sum(stated) / len(stated)
    row["evidence_status"] = evidence_status(trace, condition, dict(manifest) if manifest else None)
    if searched:
        row["evidence_pieces"] = len(pieces)
        if pieces and gold.entities:
            sizes = [p.size for p in pieces]
            off = sum(size for size, p in zip(sizes, pieces) if not shared.names_gold(gold, p))
            row["evidence_off_entity"] = off / sum(sizes)
    return row


def _share(values: Sequence[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return mean(values) if values else None


def summarize(rows: Sequence[Mapping[str, Any]], condition: str) -> dict[str, Any]:
    """A condition's figures over its rows (each over the items where it is defined; ``counts`` says how many)."""
    traced = [r for r in rows if r["traced"]]
    kb_known = [r["gold_in_kb"] for r in rows if r["gold_in_kb"] is not None]
    grounded = [r["identity_grounded"] for r in traced if r["identity_grounded"] is not None]
    ranks = [r["gold_rank"] for r in traced if r["gold_rank"] is not None]
    extra = [r["n_extra"] for r in traced if r["n_extra"] is not None]
    knowledge = [r["knowledge_in_prompt"] for r in traced if r["knowledge_in_prompt"] is not None]
    off = [r["evidence_off_entity"] for r in traced if r["evidence_off_entity"] is not None]
    methods = sorted({r["knowledge_method"] for r in traced if r["knowledge_in_prompt"] is not None})
    ways = Counter(r.get("prompts") or RECONSTRUCTED for r in traced)
    return {
        "condition": condition,
        "grounds": condition in GROUNDING_CONDITIONS,
        "gold_in_kb": _share(kb_known),
        "identity_grounded": _share(grounded),
        "mean_gold_rank": _mean(ranks),
        "extra_entities": _mean(extra),
        "items_with_extra": _share([n > 0 for n in extra]),
        "knowledge_in_prompt": _mean(knowledge),
        "knowledge_method": "+".join(methods) if methods else None,
        "knowledge_reached": _share([k >= PARAMS.knowledge_reached for k in knowledge]),
        "evidence_off_entity": _mean(off),
        "evidence_status": dict(sorted(Counter(r["evidence_status"] for r in traced).items())),
        # recorded, reconstructed, or both (a run resumed across the change): "recorded+reconstructed"
        "prompts": "+".join(sorted(ways)) if ways else None,
        "counts": {
            "items": len(rows), "traced": len(traced), "with_gold": sum(1 for r in rows if r["gold"]),
            "gold_in_kb_known": len(kb_known), "grounding_scored": len(grounded), "knowledge_scored": len(knowledge),
            "knowledge_undecided": sum(1 for r in traced if r["knowledge_units"] and r["knowledge_in_prompt"] is None),
            "with_evidence": len(off), "failed": sum(1 for r in traced if r["error"]),
            "prompts_recorded": ways.get(RECORDED, 0), "prompts_reconstructed": ways.get(RECONSTRUCTED, 0),
            "prompts_cut": sum(1 for r in traced if r.get("prompt_cut")),
        },
        "thresholds": {"knowledge_reached": PARAMS.knowledge_reached, "off_entity": PARAMS.off_entity, "proxy_containment": PARAMS.proxy_threshold},
        "rows": list(rows),
    }


def gold_table(items: Sequence[Any], kb: KBNames) -> list[tuple[Gold, bool | None]]:
    """Every item's gold and ``gold_in_kb`` (:func:`~eval.diagnostics.gold.gold_of`), the names looked up in
    CultureBase in batches: all that the diagnostics read of the KB, so it can be closed before the traces are read."""
    kb.prefetch(n for item in items for name, aliases in named_entities(item.identity) for n in (name, *aliases))
    return [gold_of(item, kb) for item in items]


def diagnose(
    items: Sequence[Any],
    traces: Mapping[str, Mapping[str, Mapping[str, Any]]],
    kb: KBNames | Sequence[tuple[Gold, bool | None]],
    manifests: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every item's diagnostics per run name (``traces[name][item id]``: the trace records of that run),
    knowledge decided by the proxy (:func:`judge_knowledge` replaces it with a judge's verdicts).  ``kb``: the
    CultureBase names, or the items' :func:`gold_table` already read from them."""
    golds = gold_table(items, kb) if isinstance(kb, KBNames) else kb
    shared = Shared()
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in traces}
    for item, (gold, in_kb) in zip(items, golds):  # item by item: its conditions share evidence and pages
        shared.item()
        for name, records in traces.items():
            rows[name].append(item_row(item, gold, in_kb, name, records.get(item.id), (manifests or {}).get(name), shared))
    return {name: summarize(rows[name], condition_of(name)) for name in traces}


async def judge_knowledge(
    diagnostics: dict[str, dict[str, Any]],
    items: Sequence[Any],
    traces: Mapping[str, Mapping[str, Mapping[str, Any]]],
    judge: KnowledgeJudge,
    concurrency: int = 4,
) -> dict[str, dict[str, Any]]:
    """The same diagnostics with ``knowledge_in_prompt`` decided per unit by ``judge`` (undecided units: None)."""
    units = {item.id: knowledge_units(item.knowledge) for item in items}  # an item's knowledge needs no KB
    jobs: list[tuple[str, int, tuple[str, list[str], str]]] = []
    for name, entry in diagnostics.items():
        for i, row in enumerate(entry["rows"]):
            record = traces.get(name, {}).get(row["id"])
            if record is None or not row["knowledge_units"]:
                continue
            jobs.append((name, i, (row["id"], units[row["id"]], material(trace_of(dict(record)), condition_of(name)))))
    distinct = list(dict.fromkeys((item_id, tuple(units), text) for _, _, (item_id, units, text) in jobs))  # same prompt: one call
    decided = dict(zip(distinct, await judge_many(judge, [(a, list(u), t) for a, u, t in distinct], concurrency)))
    for name, i, (item_id, units, text) in jobs:
        stated, error = decided[(item_id, tuple(units), text)]
        row = diagnostics[name]["rows"][i]
        row["knowledge_method"] = JUDGE
        row["knowledge_stated"] = stated
        row["knowledge_in_prompt"] = sum(stated) / len(stated) if stated else None
        row["knowledge_error"] = error
    return {name: summarize(entry["rows"], condition_of(name)) for name, entry in diagnostics.items()}
