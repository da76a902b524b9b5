"""Real-size CultureBases for ``bench/grounding_precision.py``: real name lists, cached embeddings.

Entities (all built from files as published, read from ``--real``, default ``../shared/data/real``):

- the sample KB (``examples/culturebase_sample.jsonl``, 172 hand-written records);
- KnowYourMeme entries (``kym-imkg/*.json`` as scraped by IMKG, ``kym-2023/memes.json`` as a
  Scrapy export of two concatenated JSON arrays): name = title, description = ``og:description``;
- Moegirlpedia characters (``moegirl/char2subject.json``): name = the page title without its
  disambiguator (``米拉(空洞骑士)`` → ``米拉``) or work prefix (``碧蓝航线:瑞凤`` → ``瑞凤``),
  description = ``《work》中的角色`` with the first work listed.  The work stays out of
  ``source_work`` and no alias is added, so a character's ``identity`` text is
  its bare name; it has no visual description and no cultural usage, so it gets no ``visual`` and
  no ``usage`` vector (what is not described is not searched by description; an OCR cue scores it on
  its identity vector): one embedding per character, what 2 shared CPU cores can embed for 40,000
  names (measured: 150 texts/s on an idle core, 6-20 texts/s with the 2 cores shared).  Names, the
  part that collides, are as published.  (Before issue 31 the shared per-work description was embedded
  as every character's ``visual`` vector and the empty usage text as its ``usage`` vector: thousands
  of identical points that cut HNSW's graph into islands.)

Sizes: ``200`` = sample + KYM (≈ 230); ``5000`` and ``40000`` add the first Moegirl characters in
file order up to that total (40000 takes every one of the 39,619).

Embeddings are cached on disk keyed by (embedder, passage/query, text) in ``.npy`` chunks, so a
rebuild or a rerun embeds nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from culturebase.entity import Entity
from retrieval.embedders.base import EmbeddingBatch

log = logging.getLogger("bench.precision_kb")

_DISAMBIG = re.compile(r"\s*[(（][^()（）]*[)）]\s*$")


class CachedEmbedder:
    """Wraps an embedder: every text is embedded once, then read from ``folder`` (``.npy`` chunks)."""

    def __init__(self, inner: Any, folder: Path, on_progress: Callable[[int, int], None] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.has_sparse = False
        self.folder = folder / inner.name.replace("/", "_")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.on_progress = on_progress
        self._index: dict[str, np.ndarray] = {}
        for meta in sorted(self.folder.glob("chunk-*.json")):
            keys = json.loads(meta.read_text("utf-8"))
            vecs = np.load(meta.with_suffix(".npy"))
            self._index.update(zip(keys, vecs))
        self.embedded = 0

    @staticmethod
    def key(kind: str, text: str) -> str:
        return hashlib.sha1(f"{kind}\0{text}".encode()).hexdigest()

    def _encode(self, texts: list[str], kind: str) -> EmbeddingBatch:
        keys = [self.key(kind, t) for t in texts]
        missing = list(dict.fromkeys(t for t, k in zip(texts, keys) if k not in self._index))
        step = 256
        for start in range(0, len(missing), step):
            part = missing[start : start + step]
            enc = self.inner.encode_queries(part) if kind == "query" else self.inner.encode_documents(part)
            pkeys = [self.key(kind, t) for t in part]
            self._index.update(zip(pkeys, enc.dense))
            stem = self.folder / f"chunk-{time.time_ns()}"
            np.save(stem.with_suffix(".npy"), enc.dense.astype(np.float32))
            stem.with_suffix(".json").write_text(json.dumps(pkeys))
            self.embedded += len(part)
            if self.on_progress:
                self.on_progress(start + len(part), len(missing))
        if not texts:
            return EmbeddingBatch(np.zeros((0, self.dim), dtype=np.float32))
        return EmbeddingBatch(np.stack([self._index[k] for k in keys]).astype(np.float32))

    def encode_documents(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(list(texts), "passage")

    def encode_queries(self, texts: list[str]) -> EmbeddingBatch:
        return self._encode(list(texts), "query")


# -- entities from real files ---------------------------------------------------------------------


def sample_entities(repo: Path) -> list[Entity]:
    """The sample KB's records."""
    path = repo / "examples" / "culturebase_sample.jsonl"
    return [Entity.model_validate(json.loads(line)) for line in path.read_text("utf-8").splitlines() if line.strip()]


def _json_arrays(text: str) -> Iterator[Any]:
    """Every JSON value in a file written as several values one after the other (append-mode exports)."""
    dec = json.JSONDecoder()
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return
        value, pos = dec.raw_decode(text, pos)
        yield value


def kym_entities(real: Path) -> list[Entity]:
    """KnowYourMeme entries of the IMKG sample and the 2023 Scrapy export."""
    rows: list[dict[str, Any]] = []
    for path in sorted((real / "kym-imkg").glob("*.json")) + [real / "kym-2023" / "memes.json"]:
        if not path.exists():
            continue
        for value in _json_arrays(path.read_text("utf-8")):
            rows.extend(r for r in (value if isinstance(value, list) else [value]) if isinstance(r, dict))
    out: dict[str, Entity] = {}
    for r in rows:
        title = (r.get("title") or "").strip()
        if not title:
            continue
        meta = r.get("meta") or {}
        desc = (meta.get("og:description") or meta.get("description") or "").strip()
        e = Entity.model_validate(
            {
                "name": title,
                "description": desc[:1500],
                "language": "en",
                "tags": ["kym", str(r.get("category") or "")],
                "sources": [{"site": "knowyourmeme", "url": r["url"]}] if str(r.get("url", "")).startswith("http") else [],
            }
        )
        out.setdefault(e.id, e)
    return list(out.values())


def moegirl_name(title: str) -> str:
    """A character's name from its page title: no disambiguator, no ``work:`` prefix."""
    name = _DISAMBIG.sub("", title).strip()
    if ":" in name:
        name = name.split(":", 1)[1].strip() or name
    return name or title


def moegirl_entities(real: Path, limit: int) -> list[Entity]:
    """The first ``limit`` Moegirlpedia characters in file order."""
    folder = real / "moegirl"
    subjects: dict[str, list[str]] = json.loads((folder / "char2subject.json").read_text("utf-8"))
    out: list[Entity] = []
    seen: set[str] = set()
    for title, subj in subjects.items():
        if len(out) >= limit:
            break
        works = [s for s in subj if not s.endswith("作品")] or list(subj)
        work = works[0] if works else ""
        name = moegirl_name(title)
        desc = f"《{work}》中的角色" if work else "角色"
        e = Entity.model_validate(
            {
                "name": name,
                "description": desc,
                "language": "zh",
                "tags": ["moegirl"],
                "sources": [{"site": "moegirl", "url": "https://zh.moegirl.org.cn/" + title.replace(" ", "_")}],
            }
        )
        if e.id in seen:
            continue
        seen.add(e.id)
        out.append(e)
    return out


def entities_for_size(repo: Path, real: Path, size: int) -> list[Entity]:
    """The bench KB of about ``size`` entities (module docstring)."""
    base = sample_entities(repo)
    ids = {e.id for e in base}
    base += [e for e in kym_entities(real) if e.id not in ids]
    if size <= len(base):
        return base
    ids = {e.id for e in base}
    return base + [e for e in moegirl_entities(real, size - len(base) + 50) if e.id not in ids][: size - len(base)]


# -- building -----------------------------------------------------------------------------------


def build_kb(kb: Any, entities: Sequence[Entity], progress: Callable[[int], None] | None = None) -> int:
    """Store ``entities`` with the real import path: :meth:`KnowledgeBase.embed_entities` (each distinct
    route text embedded once, no vector on a route an entity has nothing to say on) and the bulk writer."""
    kb.embed_batch = 512
    return kb.bulk_add(list(entities), progress=progress)


def warm_cache(embedder: CachedEmbedder, entities: Sequence[Entity], batch: int = 2048) -> None:
    """Embed every route text of ``entities`` into the cache (resumable)."""
    for start in range(0, len(entities), batch):
        chunk = entities[start : start + batch]
        texts = [e.route_texts() for e in chunk]
        for route in ("identity", "visual", "usage"):
            embedder.encode_documents([t[route] for t in texts if t[route]])
        log.info("cache: %d / %d entities (%d texts embedded)", start + len(chunk), len(entities), embedder.embedded)
