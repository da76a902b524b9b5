"""Reference-based metrics for datasets with human explanations (MemeCULT-1K, MemeCap).

* Cosine similarity: for each item, the mean over its references of the cosine between
  the response and the reference embeddings (any object with ``encode_documents(texts)``
  returning ``.dense`` L2-normalised rows, e.g. ``retrieval.embedders.build_embedder``).
  A missing response scores 0 (unscored = failure) and is counted.
* LLM rubric (1–5): fluency, cultural correctness, humor relevance, one judge call per
  item (prompt in ``eval/prompts/rubric.md``); an unparseable reply is unscored (left out
  of the means, counted).
* Paired comparison per language against a baseline: Δ mean with a paired bootstrap 95%
  CI and a two-sided bootstrap p-value, Holm–Bonferroni adjusted across languages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agents.vlm.base import ChatMessage, ImageInput, SamplingParams, VisionLanguageModel, VLMError
from eval.datasets import ReferenceItem

RUBRIC_KEYS = ("fluency", "cultural_correctness", "humor_relevance")
PROMPT_DIR = Path(__file__).parent / "prompts"


class DocumentEncoder(Protocol):
    def encode_documents(self, texts: list[str]) -> Any: ...


def cosine_scores(
    items: Sequence[ReferenceItem], responses: Mapping[str, str | None], embedder: DocumentEncoder
) -> np.ndarray:
    """Per item: mean over references of cos(response, reference); 0 for a missing response."""
    texts: list[str] = []
    for item in items:
        texts.extend(item.references)
    answered = [item for item in items if (responses.get(item.id) or "").strip()]
    texts.extend(responses[item.id] for item in answered)  # type: ignore[misc]
    dense = np.asarray(embedder.encode_documents(texts).dense, dtype=np.float32) if texts else np.zeros((0, 1))
    n_refs = sum(len(item.references) for item in items)
    response_rows = {item.id: dense[n_refs + j] for j, item in enumerate(answered)}
    scores = np.zeros(len(items))
    offset = 0
    for i, item in enumerate(items):
        refs = dense[offset : offset + len(item.references)]
        offset += len(item.references)
        if item.id in response_rows:
            scores[i] = float((refs @ response_rows[item.id]).mean())
    return scores


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1)."""
    ordered = sorted(p_values.items(), key=lambda kv: kv[1])
    m = len(ordered)
    adjusted: dict[str, float] = {}
    running = 0.0
    for rank, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[key] = running
    return adjusted


def paired_bootstrap(base: np.ndarray, cond: np.ndarray, n_boot: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Δ mean (cond − base) with a percentile 95% CI and a two-sided bootstrap p-value."""
    diff = np.asarray(cond, dtype=float) - np.asarray(base, dtype=float)
    n = len(diff)
    if n == 0:
        return {"n": 0, "delta": None, "ci": [None, None], "p": None}
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, 1000):  # chunks bound memory for large n
        stop = min(n_boot, start + 1000)
        means[start:stop] = diff[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    p = min(1.0, 2 * min((means <= 0).mean(), (means >= 0).mean()))
    return {"n": n, "delta": float(diff.mean()), "ci": [float(lo), float(hi)], "p": float(p)}


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


def parse_rubric(text: str) -> dict[str, int]:
    """The three 1–5 scores from a rubric reply (JSON, possibly fenced); ValueError otherwise."""
    match = re.search(r"\{.*\}", text or "", flags=re.S)
    if not match:
        raise ValueError("no JSON object in the rubric reply")
    payload = json.loads(match.group(0))
    scores: dict[str, int] = {}
    for key in RUBRIC_KEYS:
        value = payload.get(key)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 5:
            raise ValueError(f"rubric field {key!r} must be an integer 1-5, got {value!r}")
        scores[key] = value
    return scores


async def rubric_score(
    vlm: VisionLanguageModel,
    item: ReferenceItem,
    response: str,
    image: bytes | None,
    *,
    max_parse_retries: int = 2,
    template: str | None = None,
) -> dict[str, int] | None:
    """Rubric scores for one response; ``None`` when unparseable after retries or on judge error."""
    template = template or (PROMPT_DIR / "rubric.md").read_text(encoding="utf-8")
    prompt = (
        template.replace("{{references}}", "\n".join(f"- {r}" for r in item.references))
        .replace("{{context}}", item.context or "(none)")
        .replace("{{response}}", response)
    )
    images = (ImageInput(image, Path(item.image_path).name),) if image else ()
    messages = [ChatMessage("user", prompt, images=images)]
    for _ in range(max_parse_retries + 1):
        try:
            result = await vlm.chat(messages, SamplingParams(temperature=0.0, json_mode=True))
        except VLMError:
            return None
        try:
            return parse_rubric(result.text)
        except (ValueError, json.JSONDecodeError) as exc:
            messages = [
                *messages,
                ChatMessage("assistant", result.text),
                ChatMessage("user", f"Your reply could not be used ({exc}). Reply with only the JSON object."),
            ]
    return None


def summarize_rubric(scores: Sequence[dict[str, int] | None]) -> dict[str, Any]:
    """Means per rubric key over scored items, with the unscored count."""
    scored = [s for s in scores if s is not None]
    return {
        "n": len(scores),
        "n_unscored": len(scores) - len(scored),
        **{key: (float(np.mean([s[key] for s in scored])) if scored else None) for key in RUBRIC_KEYS},
    }


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


def _answered(response: str | None) -> bool:
    return bool((response or "").strip())


async def run_rubric(
    vlm: VisionLanguageModel,
    items: Sequence[ReferenceItem],
    responses: Mapping[str, str | None],
    images: Mapping[str, bytes | None],
    *,
    concurrency: int = 8,
    max_parse_retries: int = 2,
    on_progress: Any = None,
) -> list[dict[str, int] | None]:
    """Rubric scores per item (``None``: no response, or the judge's reply unusable); one call per answered item."""
    import asyncio

    template = (PROMPT_DIR / "rubric.md").read_text(encoding="utf-8")
    limiter = asyncio.Semaphore(concurrency)
    results: list[dict[str, int] | None] = [None] * len(items)
    done = 0

    async def one(index: int, item: ReferenceItem) -> None:
        nonlocal done
        response = responses.get(item.id)
        if _answered(response):
            async with limiter:
                results[index] = await rubric_score(
                    vlm, item, response or "", images.get(item.id),
                    max_parse_retries=max_parse_retries, template=template,
                )
        done += 1
        if on_progress is not None:
            on_progress(done, len(items))

    await asyncio.gather(*(one(i, item) for i, item in enumerate(items)))
    return results


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) else None


def _by_language(items: Sequence[ReferenceItem]) -> dict[str, np.ndarray]:
    languages = np.array([item.language or "unknown" for item in items], dtype=object)
    return {language: languages == language for language in sorted(set(languages.tolist()))}


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
    conditions: dict[str, Any] = {}
    for name, per_item in responses.items():
        scores = cosine[name]
        entry: dict[str, Any] = {
            "n": len(items),
            "n_missing": sum(1 for item in items if not _answered(per_item.get(item.id))),
            "cosine": {
                "mean": _mean(scores),
                "by_language": {lang: {"n": int(m.sum()), "mean": _mean(scores[m])} for lang, m in languages.items()},
            },
        }
        if rubric is not None:
            rows = list(rubric[name])
            entry["rubric"] = {
                **summarize_rubric(rows),
                "by_language": {
                    lang: summarize_rubric([r for r, keep in zip(rows, m) if keep]) for lang, m in languages.items()
                },
            }
        conditions[name] = entry
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
            both = [i for i, (b, c) in enumerate(zip(rubric[baseline], rubric[name])) if b is not None and c is not None]
            sub_items = [items[i] for i in both]
            result["rubric"] = {}
            for key in RUBRIC_KEYS:
                base = np.array([rubric[baseline][i][key] for i in both], dtype=float)  # type: ignore[index]
                cond = np.array([rubric[name][i][key] for i in both], dtype=float)  # type: ignore[index]
                result["rubric"][key] = {
                    "overall": paired_bootstrap(base, cond, n_boot, seed),
                    "by_language": compare_by_language(sub_items, base, cond, n_boot, seed),
                }
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
        "item_scores": {
            item.id: {
                "language": item.language,
                **{f"cosine/{name}": float(cosine[name][i]) for name in responses},
                **(
                    {f"{key}/{name}": (rubric[name][i] or {}).get(key) for name in responses for key in RUBRIC_KEYS}
                    if rubric is not None
                    else {}
                ),
            }
            for i, item in enumerate(items)
        },
    }


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _delta(result: Mapping[str, Any]) -> str:
    if result.get("delta") is None:
        return "–"
    lo, hi = result["ci"]
    return f"{result['delta']:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def reference_markdown(metrics: Mapping[str, Any]) -> str:
    """The summary table per condition and the per-language paired table (markdown)."""
    has_rubric = any("rubric" in c for c in metrics["conditions"].values())
    head = ["condition", "n", "missing", "cosine", f"Δ cosine vs {metrics['baseline']} [95% CI]"]
    if has_rubric:
        head += ["fluency", "cultural", "humor", "rubric unscored"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, entry in metrics["conditions"].items():
        paired = metrics["paired"].get(name)
        row = [name, str(entry["n"]), str(entry["n_missing"]), _num(entry["cosine"]["mean"]),
               _delta(paired["cosine"]["overall"]) if paired else "(baseline)"]
        if has_rubric:
            r = entry["rubric"]
            row += [_num(r["fluency"], 2), _num(r["cultural_correctness"], 2), _num(r["humor_relevance"], 2),
                    str(r["n_unscored"])]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", f"Paired vs {metrics['baseline']} per language (bootstrap {metrics['bootstrap']}, "
              "Holm–Bonferroni across languages):", "",
              "| condition | metric | language | n | Δ [95% CI] | p | p (Holm) |", "|---|---|---|---|---|---|---|"]
    for name, paired in metrics["paired"].items():
        blocks = [("cosine", paired["cosine"])] + [(k, v) for k, v in paired.get("rubric", {}).items()]
        for metric, block in blocks:
            for language, result in block["by_language"].items():
                lines.append(f"| {name} | {metric} | {language} | {result['n']} | {_delta(result)} | "
                             f"{_num(result['p'])} | {_num(result.get('p_holm'))} |")
    return "\n".join(lines) + "\n"
