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
