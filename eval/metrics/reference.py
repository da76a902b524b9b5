"""Reference-based metrics for datasets with human explanations (MemeCULT-1K, MemeCap).

* Cosine similarity: for each item, the mean over its references of the cosine between
  the response and the reference embeddings (any object with ``encode_documents(texts)``
  returning ``.dense`` L2-normalised rows, e.g. ``retrieval.embedders.build_embedder``).
  A missing response scores 0 (unscored = failure) and is counted.
* LLM rubric (1–5, :mod:`eval.judges.reference_rubric`): fluency, cultural correctness, humor
  relevance; unscored items are left out of the means and counted.
* Paired comparison per language against a baseline: Δ mean with a paired bootstrap 95%
  CI and a two-sided bootstrap p-value, Holm–Bonferroni adjusted across languages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from eval.judges.reference_rubric import RUBRIC_KEYS, answered, summarize_rubric
from eval.metrics.stats import holm, paired_bootstrap
from eval.records import ReferenceItem


class DocumentEncoder(Protocol):
    def encode_documents(self, texts: list[str]) -> Any: ...


def cosine_scores(
    items: Sequence[ReferenceItem], responses: Mapping[str, str | None], embedder: DocumentEncoder
) -> np.ndarray:
    """Per item: mean over references of cos(response, reference); 0 for a missing response."""
    texts: list[str] = []
    for item in items:
        texts.extend(item.references)
    with_response = [item for item in items if answered(responses.get(item.id))]
    texts.extend(responses[item.id] for item in with_response)  # type: ignore[misc]
    dense = np.asarray(embedder.encode_documents(texts).dense, dtype=np.float32) if texts else np.zeros((0, 1))
    n_refs = sum(len(item.references) for item in items)
    response_rows = {item.id: dense[n_refs + j] for j, item in enumerate(with_response)}
    scores = np.zeros(len(items))
    offset = 0
    for i, item in enumerate(items):
        refs = dense[offset : offset + len(item.references)]
        offset += len(item.references)
        if item.id in response_rows:
            scores[i] = float((refs @ response_rows[item.id]).mean())
    return scores


def compare_by_language(
    items: Sequence[ReferenceItem],
    base_scores: np.ndarray,
    cond_scores: np.ndarray,
    n_boot: int = 10_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Per-language paired bootstrap with Holm–Bonferroni across languages."""
    languages = np.array([item.language or "unknown" for item in items], dtype=object)
    out: dict[str, Any] = {}
    for language in sorted(set(languages.tolist())):
        mask = languages == language
        out[language] = paired_bootstrap(base_scores[mask], cond_scores[mask], n_boot, seed)
    adjusted = holm({k: v["p"] for k, v in out.items() if v["p"] is not None})
    for language, value in out.items():
        value["p_holm"] = adjusted.get(language)
    return out


# -- LLM rubric -------------------------------------------------------------------------------


# -- whole-dataset evaluation (what ``kar report-refs`` runs) ----------------------------------


class CachingEncoder:
    """Wraps an embedder so each distinct text is encoded once (references repeat across conditions)."""

    def __init__(self, embedder: DocumentEncoder):
        self.embedder = embedder
        self.name = getattr(embedder, "name", type(embedder).__name__)
        self._cache: dict[str, np.ndarray] = {}

    def encode_documents(self, texts: list[str]) -> Any:
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if todo:
            dense = np.asarray(self.embedder.encode_documents(todo).dense, dtype=np.float32)
            self._cache.update(zip(todo, dense))
        rows = [self._cache[t] for t in texts]
        return _Dense(np.stack(rows) if rows else np.zeros((0, 1), dtype=np.float32))


class _Dense:
    def __init__(self, dense: np.ndarray):
        self.dense = dense


def match_responses(items: Sequence[ReferenceItem], predictions: Sequence[Any]) -> tuple[dict[str, str | None], int]:
    """Item id → response for predictions (``.id``, ``.image_path``, ``.response``) matched to items.

    A prediction matches by id, else by image path (as written, or its file name when that is
    unambiguous among the items).  Returns the responses and how many predictions matched no item.
    """
    by_id = {item.id: item for item in items}
    by_path = {item.image_path: item for item in items}
    names: dict[str, list[ReferenceItem]] = {}
    for item in items:
        names.setdefault(Path(item.image_path).name, []).append(item)
    responses: dict[str, str | None] = {}
    unmatched = 0
    for pred in predictions:
        item = by_id.get(pred.id) if pred.id is not None else None
        if item is None and pred.image_path:
            item = by_path.get(pred.image_path)
            if item is None and len(names.get(Path(pred.image_path).name, [])) == 1:
                item = names[Path(pred.image_path).name][0]
        if item is None:
            unmatched += 1
        elif item.id not in responses:
            responses[item.id] = pred.response
    return responses, unmatched


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


def _by_language(items: Sequence[ReferenceItem]) -> dict[str, np.ndarray]:
    languages = np.array([item.language or "unknown" for item in items], dtype=object)
    return {language: languages == language for language in sorted(set(languages.tolist()))}


def condition_summary(
    items: Sequence[ReferenceItem],
    per_item: Mapping[str, str | None],
    scores: np.ndarray,
    languages: Mapping[str, np.ndarray],
    rubric_rows: Sequence[dict[str, int] | None] | None,
) -> dict[str, Any]:
    """One condition's counts, mean cosine and (when judged) rubric means, overall and per language."""
    entry: dict[str, Any] = {
        "n": len(items),
        "n_missing": sum(1 for item in items if not answered(per_item.get(item.id))),
        "cosine": {
            "mean": _mean(scores),
            "by_language": {lang: {"n": int(m.sum()), "mean": _mean(scores[m])} for lang, m in languages.items()},
        },
    }
    if rubric_rows is not None:
        rows = list(rubric_rows)
        entry["rubric"] = {
            **summarize_rubric(rows),
            "by_language": {
                lang: summarize_rubric([r for r, keep in zip(rows, m) if keep]) for lang, m in languages.items()
            },
        }
    return entry


def paired_rubric(
    items: Sequence[ReferenceItem],
    base_rows: Sequence[dict[str, int] | None],
    cond_rows: Sequence[dict[str, int] | None],
    n_boot: int,
    seed: int,
) -> dict[str, Any]:
    """Per rubric key: the paired bootstrap of condition − baseline over the items scored in both."""
    both = [i for i, (b, c) in enumerate(zip(base_rows, cond_rows)) if b is not None and c is not None]
    sub_items = [items[i] for i in both]
    out: dict[str, Any] = {}
    for key in RUBRIC_KEYS:
        base = np.array([base_rows[i][key] for i in both], dtype=float)  # type: ignore[index]
        cond = np.array([cond_rows[i][key] for i in both], dtype=float)  # type: ignore[index]
        out[key] = {
            "overall": paired_bootstrap(base, cond, n_boot, seed),
            "by_language": compare_by_language(sub_items, base, cond, n_boot, seed),
        }
    return out


def item_scores(
    items: Sequence[ReferenceItem],
    names: Sequence[str],
    cosine: Mapping[str, np.ndarray],
    rubric: Mapping[str, Sequence[dict[str, int] | None]] | None,
) -> dict[str, Any]:
    """Per item: its language, each condition's cosine and (when judged) rubric scores."""
    return {
        item.id: {
            "language": item.language,
            **{f"cosine/{name}": float(cosine[name][i]) for name in names},
            **(
                {f"{key}/{name}": (rubric[name][i] or {}).get(key) for name in names for key in RUBRIC_KEYS}
                if rubric is not None
                else {}
            ),
        }
        for i, item in enumerate(items)
    }


def reference_metrics(
    items: Sequence[ReferenceItem],
    responses: Mapping[str, Mapping[str, str | None]],
    embedder: DocumentEncoder,
    *,
    baseline: str,
    rubric: Mapping[str, Sequence[dict[str, int] | None]] | None = None,
    n_boot: int = 10_000,
    seed: int = 0,
) -> dict[str, Any]:
    """Cosine (and rubric) per condition and language; paired comparisons against ``baseline``.

    ``responses`` maps condition → item id → response.  Cosine: a missing response scores 0
    and every item counts.  Rubric: unscored items (no response, unusable judge reply) are left
    out of the means and counted; paired rubric comparisons use the items scored in both.
    Δ = condition − baseline, bootstrap over items, Holm–Bonferroni across languages
    (separately for each condition and metric).
    """
    if baseline not in responses:
        raise ValueError(f"baseline {baseline!r} is not one of the predictions ({', '.join(responses)})")
    encoder = embedder if isinstance(embedder, CachingEncoder) else CachingEncoder(embedder)
    languages = _by_language(items)
    cosine = {name: cosine_scores(items, per_item, encoder) for name, per_item in responses.items()}
    conditions = {
        name: condition_summary(items, per_item, cosine[name], languages, rubric[name] if rubric is not None else None)
        for name, per_item in responses.items()
    }
    paired: dict[str, Any] = {}
    for name in responses:
        if name == baseline:
            continue
        result: dict[str, Any] = {
            "cosine": {
                "overall": paired_bootstrap(cosine[baseline], cosine[name], n_boot, seed),
                "by_language": compare_by_language(items, cosine[baseline], cosine[name], n_boot, seed),
            }
        }
        if rubric is not None:
            result["rubric"] = paired_rubric(items, rubric[baseline], rubric[name], n_boot, seed)
        paired[name] = result
    return {
        "n_items": len(items),
        "languages": {lang: int(m.sum()) for lang, m in languages.items()},
        "embedder": encoder.name,
        "baseline": baseline,
        "bootstrap": n_boot,
        "seed": seed,
        "conditions": conditions,
        "paired": paired,
        "item_scores": item_scores(items, list(responses), cosine, rubric),
    }
