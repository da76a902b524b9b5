"""The corpus sample: the query's background on each route of the hybrid search, read as a quantile of a
fixed sample of the corpus (:class:`CorpusSample`), so that its meaning does not change with the corpus's size;
and the scale a lexical height is a share of (:func:`lexical_scale`)."""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any

from retrieval.text import lexical as lex
from retrieval.text.scripts import script_group
from retrieval.websearch.params import PARAMS, HybridParams


def lexical_scale(query_tokens: int, n_chunks: int, sample_size: int = PARAMS.sample_size) -> float:
    """What a lexical height is a share of: every query token matched as a token found in one chunk of the
    corpus sample (|q| · idf of 1 in min(N, ``sample_size``)).  Not of N: the IDF of 1 in N grows with the
    corpus while the scores of a page's own words need not (filler made of the real pages' sentences
    leaves them where they were), and dividing by it lowered the right page's height at 50,000 chunks
    until a third of description queries' pages fell below the floor.  The background, a quantile of the
    same sample, is what follows the corpus's size."""
    return max(query_tokens, 1) * lex.idf_single(min(max(n_chunks, 1), sample_size))


def _rank_of_quantile(n: int, params: HybridParams) -> int:
    """The rank from the top (1: the best) of the score the best ``q_background`` of ``n`` scores reach (nearest
    rank), and never nearer the top than the ``k_background``-th score: in a small corpus the sample is the
    whole corpus, the right page's chunks among it, and its best 2 % would be the answer itself."""
    return n - max(0, min(int(round((1.0 - params.q_background) * (n - 1))), n - params.k_background))


class CorpusSample:
    """A fixed pseudo-random sample of the corpus's chunks (the first ``sample_size`` by point id, a
    hash of the chunk id): their dense vectors, script groups and normalised title + text.  The dense
    background of a query is the score its best ``q_background`` share of these chunks reach
    (chunks holding every distinctive word of the query left out): a quantile of the corpus, so its
    meaning does not change with the corpus's size, where the K-th best page rises with every page added."""

    def __init__(self, vectors: Any, groups: Sequence[str], texts: Sequence[str], count: int, lexical: Sequence[dict[int, float]] = ()) -> None:
        import numpy as np

        self.vectors = np.asarray(vectors, dtype=np.float32).reshape(len(groups), -1)
        self.groups = np.asarray(list(groups))
        self._group_index = {g: np.flatnonzero(self.groups == g) for g in ("cjk", "latin")}
        self.texts = list(texts)
        self.count = count
        # the sampled chunks' BM25 document weights, by token: rows and weights (the lexical background)
        postings: dict[int, tuple[list[int], list[float]]] = {}
        for row, vec in enumerate(lexical):
            for tok, w in vec.items():
                rows, ws = postings.setdefault(int(tok), ([], []))
                rows.append(row)
                ws.append(float(w))
        self.postings = {t: (np.asarray(r), np.asarray(w, dtype=np.float32)) for t, (r, w) in postings.items()}
        self.has_lexical = bool(lexical)

    @classmethod
    def draw(cls, collection: Any, size: int) -> CorpusSample:
        from itertools import islice

        vecs, groups, texts, sparse = [], [], [], []
        for point in islice(collection.scroll_points(), size):
            v = point.dense.get("text")
            if v is None:
                continue
            vecs.append(v)
            groups.append(script_group(point.payload))
            texts.append(lex.normalize(f"{point.payload.get('title') or ''} {point.payload.get('text') or ''}"))
            sparse.append(point.sparse.get("lexical") or {})
        return cls(vecs, groups, texts, collection.count(), sparse if any(sparse) else ())

    def lexical_background(self, query: dict[int, float], n_chunks: int, distinctive: Sequence[str] = (), params: HybridParams = PARAMS) -> float | None:
        """The BM25 score the best ``q_background`` of the sampled chunks reach for a lexical query, with the
        engine's IDF (ln(1 + (N - n + 0.5) / (n + 0.5))) of each token's document count estimated from the
        sample; None without lexical vectors."""
        import numpy as np

        if not self.has_lexical or not query or not len(self.texts):
            return None
        n_rows = len(self.texts)
        total = max(n_chunks, n_rows)
        at: list[Any] = []
        add: list[Any] = []
        for tok, qw in query.items():
            post = self.postings.get(int(tok))
            if post is None:
                continue
            rows, ws = post
            n = len(rows) * total / n_rows
            idf = math.log(1.0 + (total - n + 0.5) / (n + 0.5))
            at.append(rows)
            add.append(ws * (float(qw) * idf))
        scores = np.bincount(np.concatenate(at), np.concatenate(add), minlength=n_rows) if at else np.zeros(n_rows)
        return self._quantile_not_naming(scores, None, distinctive, params)

    def background(self, query_vector: Any, distinctive: Sequence[str] = (), params: HybridParams = PARAMS) -> dict[str, float]:
        """``{"all": b, group: b_group, ...}``: the dense background overall and per script group (a group
        with at least ``min_group_sample`` sampled chunks)."""
        import numpy as np

        if not len(self.texts):
            return {}
        scores = self.vectors @ np.asarray(query_vector, dtype=np.float32)
        out: dict[str, float] = {}
        b = self._quantile_not_naming(scores, None, distinctive, params)
        if b is not None:
            out["all"] = b
        for g in ("cjk", "latin"):
            rows = self._group_index[g]
            if len(rows) >= params.min_group_sample:
                b = self._quantile_not_naming(scores, rows, distinctive, params)
                if b is not None:
                    out[g] = b
        return out

    def _quantile_not_naming(self, scores: Any, rows: Any, distinctive: Sequence[str], params: HybridParams) -> float | None:
        """The score at the background's rank from the top (:func:`_rank_of_quantile` of the rows' number)
        among the rows (all when None) that do not hold every distinctive word; only the best rows are read
        for the words, in widening batches, never the whole sample's text."""
        import numpy as np

        if rows is not None:
            scores = scores[rows]
        n = len(scores)
        if not n:
            return None
        rank = _rank_of_quantile(n, params)
        if not distinctive:
            return float(np.partition(scores, n - rank)[n - rank])
        texts = self.texts
        m = min(n, max(4 * rank, 64))
        while True:
            top = np.argpartition(-scores, m - 1)[:m] if m < n else np.arange(n)
            top = top[np.argsort(-scores[top], kind="stable")]
            kept = 0
            last: int | None = None
            for i in top.tolist():
                if all(w in texts[i if rows is None else int(rows[i])] for w in distinctive):
                    continue
                kept += 1
                last = i
                if kept == rank:
                    return float(scores[last])
            if m == n:  # fewer rows not naming the query than the rank: the lowest of them
                return float(scores[last]) if last is not None else None
            m = min(n, 4 * m)


_SAMPLES: weakref.WeakKeyDictionary[Any, CorpusSample] = weakref.WeakKeyDictionary()


def corpus_sample(collection: Any, size: int = PARAMS.sample_size) -> CorpusSample:
    """The collection's :class:`CorpusSample`, drawn once and drawn again when the corpus's size has changed
    by more than a tenth (a few pages imported leave a random sample random)."""
    n = collection.count()
    cached = _SAMPLES.get(collection)
    if cached is None or abs(n - cached.count) > 0.1 * max(cached.count, 1) or (len(cached.texts) < min(size, n) and n != cached.count):
        cached = CorpusSample.draw(collection, size)
        _SAMPLES[collection] = cached
    return cached
