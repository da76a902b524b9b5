"""Reasoning-as-retrieval (DrivelHub+): TREC run/qrels files, embed + faiss search, IR metrics.

* Query ids carry their direction as a prefix: ``v2n:ID`` (the video's explanation → the
  narratives) and ``n2v:ID`` (a narrative → the videos, represented by their explanations).
  Ids without a prefix form one direction, ``all``.
* Metrics come from ``ir-measures`` (pytrec_eval underneath): R@1/5/10, Success@1/5/10,
  MRR (``RR``) and nDCG@5/10.  A query of the qrels that the run lacks scores 0 on every
  measure (as ``trec_eval -c``) and is counted (``missing_in_run``); a run query without
  judgments, or whose judgments have no relevant document, cannot be scored and is counted
  apart (``not_in_qrels``, ``no_relevant``), never averaged in as a zero.
* Ties in score are broken as trec_eval does (document id, descending), and the per-query
  first-relevant rank in ``ranks.csv`` uses that same order.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.records import DatasetError

MEASURE_NAMES = ("R@1", "R@5", "R@10", "Success@1", "Success@5", "Success@10", "RR", "nDCG@5", "nDCG@10")
DIRECTIONS = {"v2n": "video→narrative", "n2v": "narrative→video"}


class TrecFormatError(DatasetError):
    """A TREC run or qrels file is malformed; the message names the file and line."""


@dataclass(frozen=True)
class RunRow:
    query: str
    doc: str
    score: float


def read_run(path: str | Path) -> list[RunRow]:
    """A TREC run: ``qid Q0 docid rank score tag`` per line (rank is ignored; score orders)."""
    path = Path(path)
    if not path.is_file():
        raise TrecFormatError(f"{path}: file not found")
    rows: list[RunRow] = []
    seen: set[tuple[str, str]] = set()
    for lineno, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 6:
            raise TrecFormatError(f"{path}: line {lineno}: expected 6 columns 'qid Q0 docid rank score tag', got {len(parts)}")
        try:
            score = float(parts[4])
        except ValueError:
            raise TrecFormatError(f"{path}: line {lineno}: score {parts[4]!r} is not a number") from None
        if not math.isfinite(score):
            raise TrecFormatError(f"{path}: line {lineno}: score {parts[4]!r} is not finite")
        if (parts[0], parts[2]) in seen:
            raise TrecFormatError(f"{path}: line {lineno}: document {parts[2]} listed twice for query {parts[0]}")
        seen.add((parts[0], parts[2]))
        rows.append(RunRow(parts[0], parts[2], score))
    if not rows:
        raise TrecFormatError(f"{path}: the run is empty")
    return rows


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """TREC qrels: ``qid iter docid relevance`` per line → {qid: {docid: relevance}}."""
    path = Path(path)
    if not path.is_file():
        raise TrecFormatError(f"{path}: file not found")
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for lineno, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 4:
            raise TrecFormatError(f"{path}: line {lineno}: expected 4 columns 'qid 0 docid relevance', got {len(parts)}")
        try:
            qrels[parts[0]][parts[2]] = int(parts[3])
        except ValueError:
            raise TrecFormatError(f"{path}: line {lineno}: relevance {parts[3]!r} is not an integer") from None
    if not qrels:
        raise TrecFormatError(f"{path}: the qrels file is empty")
    return dict(qrels)


def direction_of(query: str) -> str:
    prefix, sep, _ = query.partition(":")
    return prefix if sep and prefix in DIRECTIONS else "all"


def ranked(rows: Sequence[RunRow]) -> dict[str, list[RunRow]]:
    """Per query, documents in trec_eval order: score descending, then document id descending."""
    by_query: dict[str, list[RunRow]] = defaultdict(list)
    for row in rows:
        by_query[row.query].append(row)
    for docs in by_query.values():
        docs.sort(key=lambda r: r.doc, reverse=True)
        docs.sort(key=lambda r: r.score, reverse=True)  # stable: ties keep the doc-id order
    return dict(by_query)


def _measures() -> list[Any]:
    import ir_measures

    return [ir_measures.parse_measure(name) for name in MEASURE_NAMES]


def evaluate_run(rows: Sequence[RunRow], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, Any]:
    """Per direction: mean of each measure over the judged queries, counts, and per-query rows."""
    import ir_measures

    measures = _measures()
    by_query = ranked(rows)
    judged = {q: docs for q, docs in qrels.items() if any(rel > 0 for rel in docs.values())}
    no_relevant = sorted(set(qrels) - set(judged))
    not_in_qrels = sorted(set(by_query) - set(qrels))
    missing_in_run = sorted(set(judged) - set(by_query))
    per_query: dict[str, dict[str, float]] = {q: {name: 0.0 for name in MEASURE_NAMES} for q in judged}
    qrel_objs = [ir_measures.Qrel(q, d, rel) for q, docs in judged.items() for d, rel in docs.items()]
    run_objs = [ir_measures.ScoredDoc(r.query, r.doc, r.score) for q in by_query if q in judged for r in by_query[q]]
    if run_objs:
        for metric in ir_measures.iter_calc(measures, qrel_objs, run_objs):
            per_query[metric.query_id][str(metric.measure)] = float(metric.value)
    ranks: dict[str, int | None] = {}
    for query in judged:
        docs = by_query.get(query, [])
        ranks[query] = next((i for i, r in enumerate(docs, 1) if judged[query].get(r.doc, 0) > 0), None)
    directions: dict[str, Any] = {}
    for direction in sorted({direction_of(q) for q in [*qrels, *by_query]}):
        queries = [q for q in judged if direction_of(q) == direction]
        directions[direction] = {
            "name": DIRECTIONS.get(direction, direction),
            "n_queries": len(queries),
            "missing_in_run": sum(direction_of(q) == direction for q in missing_in_run),
            "not_in_qrels": sum(direction_of(q) == direction for q in not_in_qrels),
            "no_relevant": sum(direction_of(q) == direction for q in no_relevant),
            "metrics": {name: (float(np.mean([per_query[q][name] for q in queries])) if queries else None) for name in MEASURE_NAMES},
        }
    return {
        "directions": directions,
        "missing_in_run": missing_in_run,
        "not_in_qrels": not_in_qrels,
        "no_relevant": no_relevant,
        "per_query": per_query,
        "ranks": ranks,
        "n_relevant": {q: sum(rel > 0 for rel in docs.values()) for q, docs in judged.items()},
    }


def write_ranks_csv(result: Mapping[str, Any], path: str | Path) -> None:
    """One row per judged query: direction, query, relevant count, first relevant rank, measures."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    missing = set(result["missing_in_run"])
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["direction", "query", "n_relevant", "first_relevant_rank", "in_run", *MEASURE_NAMES])
        for query, values in sorted(result["per_query"].items()):
            rank = result["ranks"].get(query)
            writer.writerow([direction_of(query), query, result["n_relevant"][query], "" if rank is None else rank,
                             query not in missing, *(f"{values[m]:.6f}" for m in MEASURE_NAMES)])


# -- building runs ------------------------------------------------------------------------


def search(queries: np.ndarray, docs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Inner-product top-k with faiss (vectors L2-normalised first, so scores are cosines)."""
    import faiss

    q = np.ascontiguousarray(queries, dtype=np.float32)
    d = np.ascontiguousarray(docs, dtype=np.float32)
    faiss.normalize_L2(q)
    faiss.normalize_L2(d)
    index = faiss.IndexFlatIP(d.shape[1])
    index.add(d)
    return index.search(q, min(k, d.shape[0]))


def run_lines(prefix: str, query_ids: Sequence[str], doc_ids: Sequence[str], scores: np.ndarray, idx: np.ndarray, tag: str) -> list[str]:
    """TREC run lines for one direction."""
    lines = []
    for qi, query in enumerate(query_ids):
        for rank, (di, score) in enumerate(zip(idx[qi], scores[qi]), 1):
            if di < 0:
                continue
            lines.append(f"{prefix}:{query} Q0 {doc_ids[di]} {rank} {float(score):.6f} {tag}")
    return lines


def qrels_lines(items: Sequence[Any]) -> list[str]:
    """Both directions' judgments: each item's own pair plus its human-verified extra pairs."""
    ids = {item.id for item in items}
    lines = []
    for prefix in DIRECTIONS:
        for item in items:
            for doc in dict.fromkeys([item.id, *[e for e in item.extra_relevant if e in ids]]):
                lines.append(f"{prefix}:{item.id} 0 {doc} 1")
    return lines


def build_runs(
    items: Sequence[Any], responses: Mapping[str, str | None], encode: Any, k: int = 10, tag: str = "kar"
) -> tuple[list[str], dict[str, int]]:
    """Embed explanations and narratives (``encode(texts) -> (n, d) array``), search both ways.

    Items without an explanation cannot be queries (v2n) nor documents (n2v): they are counted
    in the returned ``skipped`` and their queries show up as ``missing_in_run`` in the report."""
    answered = [item for item in items if (responses.get(item.id) or "").strip()]
    skipped = {"no_explanation": len(items) - len(answered)}
    if not answered:
        raise DatasetError("no item has an explanation: nothing to retrieve with")
    expl = np.asarray(encode([responses[item.id] for item in answered]), dtype=np.float32)
    narr = np.asarray(encode([item.narrative for item in items]), dtype=np.float32)
    lines: list[str] = []
    scores, idx = search(expl, narr, k)
    lines += run_lines("v2n", [i.id for i in answered], [i.id for i in items], scores, idx, tag)
    scores, idx = search(narr, expl, k)
    lines += run_lines("n2v", [i.id for i in items], [i.id for i in answered], scores, idx, tag)
    return lines, skipped


#: the release's retrieval output: its metric names, from ours, per direction
RELEASE_MEASURES = {"recall@1": "R@1", "recall@5": "R@5", "recall@10": "R@10", "mrr": "RR", "ndcg@5": "nDCG@5", "ndcg@10": "nDCG@10"}
RELEASE_DIRECTIONS = {"text_to_video": "n2v", "video_to_text": "v2n"}


def qrels_from_release(release: Mapping[str, Mapping[str, int]], rows: Sequence[RunRow]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Per-direction qrels of a run from the release's ``qrels.json`` (one file for both directions).

    As the release builds them: every run query's relevant documents are those of the qrels
    that the run holds (relevance > 0); a query absent from qrels.json, or left with none, has
    itself as its only relevant document.  Also returned: ``query → document`` pairs the
    qrels name for a file the run does not hold (dropped, as the release does, and listed)."""
    from eval.tasks.drivelhub import relevant

    pool = {r.doc for r in rows} | {r.query.partition(":")[2] or r.query for r in rows}
    qrels: dict[str, dict[str, int]] = {}
    dropped: set[str] = set()
    for query in sorted({r.query for r in rows}):
        file = query.partition(":")[2] if direction_of(query) != "all" else query
        qrels[query] = relevant(release, file, pool)
        dropped |= {f"{file} -> {d}" for d, rel in release.get(file, {}).items() if rel > 0 and d not in pool}
    return qrels, sorted(dropped)


def release_shape(result: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """``{"text_to_video": {recall@1, …, ndcg@10}, "video_to_text": {…}}`` as the release's retrieval script writes it."""
    out: dict[str, dict[str, float | None]] = {}
    for name, direction in RELEASE_DIRECTIONS.items():
        metrics = result["directions"].get(direction, {}).get("metrics")
        if metrics:
            out[name] = {k: metrics[v] for k, v in RELEASE_MEASURES.items()}
    return out


def release_qrels(items: Sequence[Any]) -> dict[str, dict[str, int]]:
    """The release's ``qrels.json`` of the items: each clip relevant to itself plus its human-verified extra pairs."""
    ids = {item.id for item in items}
    return {item.id: {doc: 1 for doc in dict.fromkeys([item.id, *[e for e in item.extra_relevant if e in ids]])} for item in items}


def build_encoder(settings: Any, embed_base_url: str | None, embed_model: str | None, api_key: str | None) -> tuple[Any, str]:
    """``encode(texts) -> array`` from an OpenAI-compatible /v1/embeddings endpoint, else the configured embedder."""
    if embed_base_url:
        if not embed_model:
            raise DatasetError("--embed-base-url needs --embed-model (the embedding model id served there)")
        from openai import OpenAI

        client = OpenAI(base_url=embed_base_url, api_key=api_key or "EMPTY", max_retries=2)

        def remote(texts: list[str]) -> Any:
            rows: list[list[float]] = []
            for start in range(0, len(texts), 64):
                reply = client.embeddings.create(model=embed_model, input=texts[start:start + 64])
                rows += [d.embedding for d in sorted(reply.data, key=lambda d: d.index)]
            return np.asarray(rows, dtype=np.float32)

        return remote, f"openai-compatible:{embed_model}"
    from retrieval.embedders import build_embedder

    embedder = build_embedder(settings)
    return (lambda texts: np.asarray(embedder.encode_documents(texts).dense, dtype=np.float32)), getattr(embedder, "name", "embedder")
