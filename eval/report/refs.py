"""Markdown of ``kar report-refs`` (reference-based metrics of MemeCULT-1K / MemeCap)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
