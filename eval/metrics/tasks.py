"""Per-task metrics of the benchmark family.

* Multiple choice and classification: accuracy over **every** item (a missing or unparseable
  reply is wrong and counted apart), with breakdowns (language, question type, sound category,
  split), macro-F1 (scikit-learn) over the classes present in the gold labels or the valid
  predictions, and per-item pass/fail for repair/damage against a baseline
  (:func:`eval.metrics.repair_damage` with its paired-bootstrap CIs and exact McNemar p).
* Generation: ROUGE-L F1 (Google's ``rouge-score``), best over an item's references, with a
  tokenizer that keeps CJK characters (one token each) so Chinese references score too; a
  missing reply scores 0 and is counted.  Paired Δ against the baseline with a bootstrap CI.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from eval.metrics.answers import Parsed, parse_choice, parse_label
from eval.tasks.base import BenchItem
from eval.metrics.stats import bootstrap_transition, mcnemar_exact
from eval.metrics.vikr import repair_damage, transition_counts

_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|[^\W_]+", re.UNICODE)


def parse_reply(item: BenchItem, response: str | None) -> Parsed:
    """Parse a reply for an MCQ or classification item."""
    if item.task_kind == "mcq":
        return parse_choice(response, list(item.options))  # type: ignore[attr-defined]
    return parse_label(response, item.label_set)


def gold(item: BenchItem) -> str:
    """The gold answer: the MCQ letter or the class label."""
    return item.answer if item.task_kind == "mcq" else item.label  # type: ignore[attr-defined,return-value]


def choice_outcomes(items: Sequence[BenchItem], responses: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """Per item: gold, parsed answer, status and correctness (items without a reply are ``missing``)."""
    rows = []
    for item in items:
        parsed = parse_reply(item, responses.get(item.id)) if item.id in responses else Parsed(None, "missing")
        rows.append({
            "id": item.id, "gold": gold(item), "pred": parsed.answer, "status": parsed.status,
            "how": parsed.how, "correct": parsed.answer is not None and parsed.answer == gold(item),
        })
    return rows


def macro_f1(y_true: Sequence[str], y_pred: Sequence[str | None], labels: Sequence[str]) -> float | None:
    """Macro-F1 over the classes seen in the gold labels or the valid predictions.

    An unparseable prediction (None) is a miss for its gold class.  A class in the label set
    that appears in neither column has no support and no prediction and is left out (it would
    otherwise count as F1 = 0).
    """
    from sklearn.metrics import f1_score

    if not y_true:
        return None
    present = [lab for lab in labels if lab in set(y_true) or lab in set(y_pred)]
    preds = [p if p is not None else "__unparseable__" for p in y_pred]
    return float(f1_score(list(y_true), preds, labels=present, average="macro", zero_division=0))


def _groups(items: Sequence[BenchItem]) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for item in items:
        for name, value in item.group_values().items():
            keys.setdefault(name, []).append(value)
    return keys


def choice_metrics(items: Sequence[BenchItem], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy, unparseable counts, breakdowns and (classification) macro-F1."""
    n = len(items)
    correct = np.array([r["correct"] for r in rows], dtype=bool)
    statuses = Counter(r["status"] for r in rows)
    out: dict[str, Any] = {
        "n": n,
        "accuracy": float(correct.mean()) if n else None,
        "n_correct": int(correct.sum()),
        "n_missing": statuses.get("missing", 0),
        "n_unparseable": sum(v for k, v in statuses.items() if k not in ("ok", "missing")),
        "unparseable_by_reason": {k: v for k, v in sorted(statuses.items()) if k not in ("ok", "missing")},
        "accuracy_of_parsed": float(correct[[r["status"] == "ok" for r in rows]].mean()) if statuses.get("ok") else None,
    }
    if items and items[0].task_kind == "classify":
        out["macro_f1"] = macro_f1([r["gold"] for r in rows], [r["pred"] for r in rows], items[0].label_set)
        out["per_class"] = _per_class(rows, items[0].label_set)
    breakdowns: dict[str, dict[str, Any]] = {}
    for name, values in _groups(items).items():
        breakdowns[name] = {}
        for value in sorted(set(values)):
            mask = np.array([v == value for v in values])
            breakdowns[name][value] = {"n": int(mask.sum()), "accuracy": float(correct[mask].mean())}
    splits = sorted({s for item in items for s in item.split_values()})  # an item may be in several splits
    if splits:
        breakdowns["split"] = {}
        for split in splits:
            mask = np.array([split in item.split_values() for item in items])
            breakdowns["split"][split] = {"n": int(mask.sum()), "accuracy": float(correct[mask].mean())}
    out["breakdowns"] = breakdowns
    return out


def _per_class(rows: Sequence[dict[str, Any]], labels: Sequence[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for label in labels:
        tp = sum(r["gold"] == label and r["pred"] == label for r in rows)
        support = sum(r["gold"] == label for r in rows)
        predicted = sum(r["pred"] == label for r in rows)
        out[label] = {"support": support, "predicted": predicted, "correct": tp}
    return out


class _CJKTokenizer:
    """rouge-score tokenizer: lower-cased words, each CJK character its own token."""

    def tokenize(self, text: str) -> list[str]:
        return _TOKEN.findall(text.lower())


_SCORER: Any = None


def rouge_l(response: str | None, references: Sequence[str]) -> float:
    """ROUGE-L F1 of a reply against its best-matching reference (0 for no reply)."""
    global _SCORER
    if not response or not response.strip() or not references:
        return 0.0
    if _SCORER is None:
        from rouge_score import rouge_scorer

        _SCORER = rouge_scorer.RougeScorer(["rougeL"], tokenizer=_CJKTokenizer())
    return max(float(_SCORER.score(ref, response)["rougeL"].fmeasure) for ref in references)


def generation_scores(items: Sequence[BenchItem], responses: Mapping[str, str | None]) -> np.ndarray:
    """Per item ROUGE-L F1 (0 for a missing reply)."""
    return np.array([rouge_l(responses.get(item.id), item.references) for item in items], dtype=float)


def generation_metrics(items: Sequence[BenchItem], responses: Mapping[str, str | None], scores: np.ndarray) -> dict[str, Any]:
    """Mean ROUGE-L over every item, missing replies counted, per-language breakdown."""
    n = len(items)
    missing = sum(1 for item in items if not (responses.get(item.id) or "").strip())
    languages = [item.language or "unknown" for item in items]
    return {
        "n": n,
        "rouge_l": float(scores.mean()) if n else None,
        "n_missing": missing,
        "breakdowns": {
            "language": {
                lang: {"n": int(sum(v == lang for v in languages)),
                       "rouge_l": float(scores[[v == lang for v in languages]].mean())}
                for lang in sorted(set(languages))
            }
        },
    }


def paired_pass_fail(base: np.ndarray, cond: np.ndarray, n_boot: int, seed: int) -> dict[str, Any]:
    """Repair/damage/ratio/Δ with paired-bootstrap CIs and exact McNemar p for per-item pass/fail."""
    counts = transition_counts(base, cond)
    stats = repair_damage(*counts)
    stats["mcnemar_p"] = mcnemar_exact(counts[1], counts[2])
    if n_boot:
        stats.update(bootstrap_transition(counts, n_boot, np.random.default_rng(seed)))
    return stats


def paired_scores(base: np.ndarray, cond: np.ndarray, n_boot: int, seed: int) -> dict[str, Any]:
    """Δ mean of a per-item score with a paired-bootstrap 95% CI (items resampled together)."""
    from eval.metrics.stats import paired_bootstrap

    out: dict[str, Any] = {"n": int(base.size), "base_mean": float(base.mean()) if base.size else None,
                           "cond_mean": float(cond.mean()) if cond.size else None,
                           "delta": float((cond - base).mean()) if base.size else None}
    if n_boot and base.size:
        out.update(paired_bootstrap(base, cond, n_boot=n_boot, seed=seed))
    return out
