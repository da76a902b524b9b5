"""Two-judge intersection, as the MemeBench release aggregates dual judges.

* Both judges scored the item and both have item-level verdicts of equal shape: a
  checklist item passes only if both judges pass it; a dimension passes iff all of its
  merged items pass (``format: dual_aggregated``).
* Both scored it but item-level verdicts are unusable: dimension-level AND of the two
  vectors (``format: dual_aggregated_dimension_fallback``).
* Missing or unscored on either side: an unscored failure.

The merged evaluation keeps both judges' verdicts and reasons (``judge_a_pass``,
``judge_b_pass``, ``judge_a_reason``, ``judge_b_reason`` per checklist item, and the
per-judge vectors under ``judges``).
"""

from __future__ import annotations

from typing import Any

from eval.tasks.memebench import BenchmarkItem
from eval.records import RecordIndex, item_key
from eval.verdicts import (
    DIMENSIONS,
    UNSCORED_MISSING,
    binary,
    evaluation_from_item_results,
    evaluation_from_vector,
    unscored_evaluation,
    verdict_of,
)


def _judge_summary(name: str, evaluation: Any) -> dict[str, Any]:
    verdict = verdict_of(evaluation)
    judge = evaluation.get("judge") if isinstance(evaluation, dict) else None
    return {
        "name": name,
        "model": judge.get("model") if isinstance(judge, dict) else None,
        "checklist_result": list(verdict.vector) if verdict.vector else None,
        "parse_success": verdict.scored,
        "unscored_reason": verdict.unscored_reason,
    }


def _itemized(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[dict[str, Any]]] | None:
    items_a, items_b = a.get("item_results"), b.get("item_results")
    if not isinstance(items_a, dict) or not isinstance(items_b, dict):
        return None
    merged: dict[str, list[dict[str, Any]]] = {}
    for dim in DIMENSIONS:
        rows_a, rows_b = items_a.get(dim), items_b.get(dim)
        if not isinstance(rows_a, list) or not isinstance(rows_b, list) or len(rows_a) != len(rows_b) or not rows_a:
            return None
        rows: list[dict[str, Any]] = []
        for idx, (ra, rb) in enumerate(zip(rows_a, rows_b, strict=True)):
            ra = ra if isinstance(ra, dict) else {}
            rb = rb if isinstance(rb, dict) else {}
            pa, pb = int(binary(ra.get("pass")) == 1), int(binary(rb.get("pass")) == 1)
            rows.append(
                {
                    "index": ra.get("index", idx),
                    "pass": int(pa and pb),
                    "judge_a_pass": pa,
                    "judge_b_pass": pb,
                    "judge_a_reason": str(ra.get("reason", "")),
                    "judge_b_reason": str(rb.get("reason", "")),
                }
            )
        merged[dim] = rows
    return merged


def merge_evaluations(a: Any, b: Any, names: tuple[str, str] = ("a", "b")) -> dict[str, Any]:
    """The intersection of two evaluations of the same response."""
    judges = {"a": _judge_summary(names[0], a), "b": _judge_summary(names[1], b)}
    va, vb = verdict_of(a), verdict_of(b)
    if not va.scored or not vb.scored:
        missing = [names[i] for i, v in enumerate((va, vb)) if not v.scored]
        reasons = [v.unscored_reason for v in (va, vb) if not v.scored]
        return unscored_evaluation(
            UNSCORED_MISSING if all(r == UNSCORED_MISSING for r in reasons) else reasons[0] or UNSCORED_MISSING,
            f"unscored by judge(s) {', '.join(missing)}: {', '.join(r or '?' for r in reasons)}",
            format="dual_aggregated",
            judges=judges,
        )
    assert isinstance(a, dict) and isinstance(b, dict)
    itemized = _itemized(a, b)
    if itemized is not None:
        return evaluation_from_item_results(itemized, format="dual_aggregated", judges=judges)
    vector = [int(x and y) for x, y in zip(va.vector, vb.vector, strict=True)]  # type: ignore[arg-type]
    return evaluation_from_vector(vector, format="dual_aggregated_dimension_fallback", judges=judges)


def merge_files(
    judged_a: list[dict[str, Any]],
    judged_b: list[dict[str, Any]],
    bench: list[BenchmarkItem] | None = None,
    names: tuple[str, str] = ("a", "b"),
) -> list[dict[str, Any]]:
    """Merge two judge files item by item.

    With ``bench`` the output has exactly the benchmark's items in its order (an item
    absent from either file is an unscored failure); without it, the union of both files.
    """
    index_a, index_b = RecordIndex(judged_a), RecordIndex(judged_b)
    if bench is not None:
        skeleton = [{"id": item.source_id, "image_path": item.image_path} for item in bench]
    else:
        seen: dict[str, dict[str, Any]] = {}
        for record in [*judged_a, *judged_b]:
            seen.setdefault(item_key(record), {"id": record.get("id"), "image_path": record.get("image_path")})
        skeleton = list(seen.values())
    merged: list[dict[str, Any]] = []
    for base in skeleton:
        ra = index_a.get(base["id"], base["image_path"])
        rb = index_b.get(base["id"], base["image_path"])
        merged.append(
            {
                "id": base["id"],
                "image_path": base["image_path"],
                "response": (ra or rb or {}).get("response"),
                "evaluation": merge_evaluations(
                    (ra or {}).get("evaluation"), (rb or {}).get("evaluation"), names
                ),
            }
        )
    return merged


def merged_summary(merged: list[dict[str, Any]], items: list[BenchmarkItem] | None) -> dict[str, Any]:
    """Success, coverage and unscored count of merged judge records (no benchmark: the union of both files is the denominator)."""
    from types import SimpleNamespace

    from eval.metrics.vikr import condition_metrics, vikr_matrix

    rows: Any = items
    if rows is None:
        rows = [SimpleNamespace(id=r["id"], image_path=r["image_path"], language=None, domain=None) for r in merged]
    metrics = condition_metrics(vikr_matrix(rows, merged))
    return {"n": metrics["n"], "n_unscored": metrics["n_unscored"], "success": metrics["success"], "coverage": metrics["coverage"]}
