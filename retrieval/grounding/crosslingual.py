"""Cross-lingual dense matching: an English description of a Chinese entity, or the reverse.

multilingual-e5-small scores two texts in one language higher than two texts in two languages
that say the same thing: an English description of ``葛优躺`` is nearer to unrelated English
entities than to the Chinese record it describes, and the right entity is often not even among
the 20 best of its language.  This module removes the language-identity component before the
comparison (language mean-centering, Libovický et al. 2020, "On the language neutrality of
pre-trained multilingual representations") and a hubness term (the local scaling of CSLS,
Conneau et al. 2018, "Word translation without parallel data"), both measured on a fixed bundled
reference set, so nothing depends on the KB's size or content.

For a dense query ``q`` in language ``Lq`` (by script: :func:`query_language`) and the entities of
another language ``L`` (both with reference texts in ``language_reference.json``)::

    q̃ = q − μ_query[Lq]              ṽ = v − μ_passage[L]       (means of the reference texts embedded
                                                                   as queries / passages)
    c(q, v) = cos(q̃, ṽ) − hub_weight · hub_Lq(ṽ)                  hub: mean of ṽ's k_hub best cosines with
                                                                   the centered reference queries of Lq
    mapped(q, v) = a_q + b_q · c(q, v)                             a_q, b_q: least squares of the raw q·r on
                                                                   c(q, r) over the reference passages r of Lq
    height(q, v) = b_q · (c(q, v) − c_K)                           c_K: the K-th best c among the candidates of L

``mapped`` is the plain cosine a passage *in the query's own language* with the same centered
similarity would get, so it lives on the scale τ was calibrated on; ``height`` is its margin over
the query's K-th neighbour among the other language's candidates (the accept rule reads it like
the per-language height).  Candidates of ``L`` are the best ``limit`` for ``q̃`` (one more search
per other language) plus those the plain search already found; their stored vectors are re-read
(``retrieve_dense``) and scored exactly.  The grounder keeps, per entity, the larger of the plain
cosine and ``mapped`` (:mod:`retrieval.grounding.routes.dense`, route ``visual`` only: :data:`ROUTES`).
``hub_weight`` and ``k_hub`` are :data:`retrieval.grounding.params.PARAMS`'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from culturebase.entity import Entity
from retrieval.grounding.candidates import ENTITIES
from retrieval.grounding.language_search import search_by_language
from retrieval.grounding.params import PARAMS

#: the dense routes the pass runs on: the VLM's visual handle is a description whose language is the
#: VLM's choice, not the entity's; names, aliases and OCR'd catchphrases are matched in their own language
ROUTES = ("visual",)
REFERENCE_FILE = "language_reference.json"

log = logging.getLogger(__name__)

_HANGUL = re.compile(r"[\uac00-\ud7af]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")


def query_language(text: str) -> str:
    """The language of a cue by its script: ``ko`` (Hangul), ``ja`` (kana), ``zh`` (Han), else ``en``."""
    if _HANGUL.search(text):
        return "ko"
    if _KANA.search(text):
        return "ja"
    if _HAN.search(text):
        return "zh"
    return "en"


def reference_texts() -> dict[str, list[str]]:
    """The bundled reference sentences per language (translations of each other, naming no entity)."""
    data = json.loads(resources.files("retrieval.grounding").joinpath(REFERENCE_FILE).read_text("utf-8"))
    out = {k: v for k, v in data.items() if isinstance(v, list)}
    for lang, texts in out.items():
        if len(texts) < 2 * PARAMS.k_hub or not all(isinstance(t, str) and t.strip() for t in texts):
            raise ValueError(f"{REFERENCE_FILE}: language {lang!r} needs at least {2 * PARAMS.k_hub} non-empty texts")
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b.T`` for the small matrices here without BLAS (multithreaded OpenBLAS took 30 ms for a
    40×384 by 384×80 product on 2 busy cores; einsum 0.3 ms)."""
    return np.einsum("...j,kj->...k", a, np.atleast_2d(b)) if b.ndim == 2 else np.einsum("...j,j->...", a, b)


def _line_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope and intercept of y on x."""
    xm, ym = float(x.mean()), float(y.mean())
    var = float(((x - xm) ** 2).sum())
    slope = float(((x - xm) * (y - ym)).sum()) / var if var > 0 else 0.0
    return slope, ym - slope * xm


@dataclass(frozen=True)
class LanguageReference:
    """One language's reference statistics for one embedder."""

    mean_query: np.ndarray  # μ_query: mean of the reference texts embedded as queries
    mean_passage: np.ndarray  # μ_passage: mean of the reference texts embedded as passages
    passages: np.ndarray  # the reference passages (for the per-query map to the raw scale)
    passages_centered: np.ndarray  # unit(r − μ_passage)
    passages_hub: np.ndarray  # hub_L of each centered reference passage
    queries_centered: np.ndarray  # unit(r − μ_query): the hubness reference of a query in this language

    def hub(self, centered: np.ndarray) -> np.ndarray:
        """Mean of each centered vector's ``k_hub`` best cosines with this language's centered reference queries."""
        sims = _dot(centered, self.queries_centered)
        k = min(PARAMS.k_hub, sims.shape[1])
        return np.partition(sims, sims.shape[1] - k, axis=1)[:, -k:].mean(axis=1)


_CACHE: dict[tuple[str, int], dict[str, LanguageReference]] = {}
_LOCK = threading.Lock()


def _statistics(queries: np.ndarray, passages: np.ndarray) -> LanguageReference:
    """One language's statistics from its reference texts embedded as queries and as passages."""
    queries, passages = np.asarray(queries, dtype=np.float64), np.asarray(passages, dtype=np.float64)
    mq, mp = queries.mean(axis=0), passages.mean(axis=0)
    qc, pc = _unit(queries - mq), _unit(passages - mp)
    ref = LanguageReference(mq, mp, passages, pc, np.zeros(len(pc)), qc)
    return LanguageReference(mq, mp, passages, pc, ref.hub(pc), qc)


def _cache_file(name: str, dim: int, texts: dict[str, list[str]]) -> Path | None:
    """Where the reference embeddings of one embedder are kept between processes: ``DATA_DIR/cache``
    (a ``kar kb search`` is one process; embedding the 640 texts again would cost it seconds)."""
    try:
        from culturebase.settings import get_settings

        folder = Path(get_settings().data_dir) / "cache"
    except Exception:  # settings that do not validate: no disk cache, the pass still runs
        return None
    digest = hashlib.sha1(json.dumps([name, dim, texts], ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]
    return folder / f"crosslingual-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}-{digest}.npz"


def _embedded(embedder: Any, name: str, dim: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each language's reference texts embedded as queries and as passages: from the disk cache, else embedded
    now and written there (atomically; a folder that cannot be written only costs the next process the time)."""
    texts = reference_texts()
    path = _cache_file(name, dim, texts)
    if path is not None and path.exists():
        try:
            with np.load(path) as data:
                out = {lang: (data[f"{lang}.queries"], data[f"{lang}.passages"]) for lang in texts}
            if all(q.shape == (len(texts[lang]), dim) == p.shape for lang, (q, p) in out.items()):
                return out
        except (OSError, KeyError, ValueError) as exc:
            log.warning("cross-lingual reference cache %s unreadable (%s): embedding again", path, exc)
    out = {
        lang: (np.asarray(embedder.encode_queries(t).dense, dtype=np.float32), np.asarray(embedder.encode_documents(t).dense, dtype=np.float32))
        for lang, t in texts.items()
    }
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
            np.savez(tmp, **{f"{lang}.{kind}": arr for lang, pair in out.items() for kind, arr in zip(("queries", "passages"), pair)})
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cross-lingual reference cache %s not written (%s)", path, exc)
    return out


def language_references(embedder: Any) -> dict[str, LanguageReference]:
    """Reference statistics per language for ``embedder``: embedded once (kept in memory per process and on
    disk under ``DATA_DIR/cache``, keyed by the embedder's name and size and the reference texts)."""
    name = str(getattr(embedder, "name", type(embedder).__name__))
    dim = int(getattr(embedder, "dim", 0) or 0)
    with _LOCK:
        if (name, dim) in _CACHE:
            return _CACHE[(name, dim)]
        embedded = _embedded(embedder, name, dim)
        refs = {lang: _statistics(q, p) for lang, (q, p) in embedded.items()}
        _CACHE[(name, dim)] = refs
        return refs


@dataclass
class CrossLingualHit:
    """An entity of another language scored by the pass: ``score`` on the plain cosine scale, and its height."""

    entity: Entity
    score: float
    height: float
    centered: float  # c(q, v), for traces and benches


class CrossLingualPass:
    """Scores a dense query against the entities of the other languages (module docstring)."""

    def __init__(self, embedder: Any, hub_weight: float = PARAMS.hub_weight, k_background: int = PARAMS.k_background) -> None:
        self.embedder = embedder
        self.hub_weight = hub_weight
        self.k_background = k_background

    def _refs(self) -> dict[str, LanguageReference]:
        return language_references(self.embedder)

    def _centered(self, ref_q: LanguageReference, ref_v: LanguageReference, q_unit: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        vc = _unit(vectors - ref_v.mean_passage)
        c = _dot(vc, q_unit)
        if self.hub_weight:
            c = c - self.hub_weight * ref_q.hub(vc)
        return c

    def score(
        self,
        coll: Any,
        vector_name: str,
        text: str,
        query: np.ndarray,
        languages: list[str],
        known: dict[str, Entity],
        limit: int,
        factor: float = 1.0,
    ) -> list[CrossLingualHit]:
        """The other-language entities for one dense query: the best ``limit`` per other language for the
        centered query, plus ``known`` (entities the plain search found), each mapped to the plain scale.

        ``coll`` is the entity collection (``search``, ``retrieve_dense``), ``languages`` the entity
        languages searched apart, ``known`` id → entity of entities already found."""
        refs = self._refs()
        lq = query_language(text)
        others = [lg for lg in languages if lg != lq and lg in refs]
        if lq not in refs or not others:
            return []
        rq = refs[lq]
        q = np.asarray(query, dtype=np.float64)
        q_centered = q - rq.mean_query
        q_unit = _unit(q_centered)
        # the map back to the plain cosine scale, fitted on this query's own-language reference passages
        raw_ref = _dot(rq.passages, q)
        c_ref = _dot(rq.passages_centered, q_unit) - self.hub_weight * rq.passages_hub
        slope, intercept = _line_fit(c_ref, raw_ref)
        out: list[CrossLingualHit] = []
        by_language, _ = search_by_language(coll, vector_name, q_unit.astype(np.float32), limit, others)
        for lg in others:
            hits = by_language[lg]
            # an entity the plain search found is not rebuilt; the others come from the store's own payload
            found = {h.id: known.get(h.id) or ENTITIES.entity(h) for h in hits}
            for eid, ent in known.items():
                if ent.language == lg:
                    found.setdefault(eid, ent)
            if not found:
                continue
            stored = coll.retrieve_dense(list(found), vector_name)
            ids = [eid for eid in found if eid in stored]
            if not ids:
                continue
            c = self._centered(rq, refs[lg], q_unit, np.stack([stored[eid] for eid in ids]).astype(np.float64))
            c_k = float(np.sort(c)[::-1][min(self.k_background, len(c)) - 1])
            for eid, ci in zip(ids, c):
                mapped = (intercept + slope * float(ci)) * factor
                out.append(CrossLingualHit(found[eid], mapped, float(slope * (ci - c_k)), float(ci)))
        return out
