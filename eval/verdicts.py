"""The per-item judge verdict (``evaluation``) in the MemeBench release's format.

An evaluation is a plain dict, written to and read from judge files unchanged::

    {"checklist_result": [V, I, K, R], "checklist_score": 0..4,
     "dimension_result": {"visual": 0|1, ...},
     "item_results": {"visual": [{"index": 1, "pass": 1, "reason": "..."}], ...},
     "overall_correctness": "YES" | "NO",        # YES iff I ∧ K ∧ R
     "complete_vikr": bool,                      # V ∧ I ∧ K ∧ R
     "parse_success": bool, "parse_error": str | None, ...}

Derived fields are always computed here from the item-level verdicts, never taken
from a judge.  :func:`verdict_of` reads any evaluation (ours, the official MemeBench
judge's, or a merged one) into a :class:`Verdict`; an evaluation that is missing,
unparsed or lacks a 4-element vector is *unscored*, which every metric counts as a
failure of all four layers and reports separately.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DIMENSIONS: tuple[str, str, str, str] = ("visual", "identity", "knowledge", "reasoning")
LAYERS: tuple[str, str, str, str] = ("V", "I", "K", "R")

# Why an item has no score (reported separately; each counts as a failure).
UNSCORED_MISSING = "missing"  # no record / no evaluation for the item
UNSCORED_NO_RESPONSE = "no_response"  # the model produced no response
UNSCORED_PARSE = "parse_failure"  # the judge reply could not be parsed after retries
UNSCORED_JUDGE_ERROR = "judge_error"  # the judge call failed after retries
UNSCORED_INVALID = "invalid_evaluation"  # an evaluation without a usable VIKR vector


def binary(value: Any) -> int | None:
    """0/1 from bools, 0/1 ints and common strings; ``None`` when not a binary value."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return value
    if isinstance(value, float) and value in (0.0, 1.0):
        return int(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in {"1", "true", "yes", "pass", "passed", "y"}:
            return 1
        if text in {"0", "false", "no", "fail", "failed", "n"}:
            return 0
    return None


def derived_fields(vector: list[int]) -> dict[str, Any]:
    """The fields computed from a [V, I, K, R] vector."""
    v = [int(x) for x in vector]
    return {
        "checklist_result": v,
        "checklist_score": sum(v),
        "dimension_result": dict(zip(DIMENSIONS, v, strict=True)),
        "complete_vikr": bool(all(v)),
        "overall_correctness": "YES" if v[1] and v[2] and v[3] else "NO",
    }


def evaluation_from_item_results(item_results: dict[str, list[dict[str, Any]]], **extra: Any) -> dict[str, Any]:
    """A scored evaluation: a dimension passes iff all of its checklist items pass."""
    normalized: dict[str, list[dict[str, Any]]] = {}
    for dim in DIMENSIONS:
        rows = item_results.get(dim)
        if not rows:
            raise ValueError(f"item_results.{dim} is missing or empty")
        normalized[dim] = [dict(row, **{"pass": int(binary(row.get("pass")) or 0)}) for row in rows]
    vector = [int(all(row["pass"] for row in normalized[dim])) for dim in DIMENSIONS]
    evaluation: dict[str, Any] = derived_fields(vector)
    evaluation.update(item_results=normalized, parse_success=True, parse_error=None)
    evaluation.update(extra)
    return evaluation


def evaluation_from_vector(vector: list[int], **extra: Any) -> dict[str, Any]:
    """A scored evaluation known only at dimension level (no item_results)."""
    evaluation = derived_fields(vector)
    evaluation.update(item_results=None, parse_success=True, parse_error=None)
    evaluation.update(extra)
    return evaluation


def unscored_evaluation(reason: str, error: str, **extra: Any) -> dict[str, Any]:
    """An unscored evaluation (counts as a failure everywhere; ``unscored_reason`` says why)."""
    evaluation: dict[str, Any] = derived_fields([0, 0, 0, 0])
    evaluation.update(
        item_results=None, parse_success=False, parse_error=error, unscored_reason=reason
    )
    evaluation.update(extra)
    return evaluation


@dataclass(frozen=True)
class Verdict:
    """What metrics need from one evaluation."""

    vector: tuple[int, int, int, int] | None  # None = unscored
    unscored_reason: str | None = None
    items_passed: int | None = None  # checklist items passed (itemized evaluations only)
    items_total: int | None = None

    @property
    def scored(self) -> bool:
        return self.vector is not None


def _vector_of(evaluation: dict[str, Any]) -> list[int] | None:
    raw = evaluation.get("checklist_result")
    if isinstance(raw, (list, tuple)) and len(raw) == 4:
        values = [binary(x) for x in raw]
        if all(v is not None for v in values):
            return [int(v) for v in values]  # type: ignore[arg-type]
        return None
    dims = evaluation.get("dimension_result")
    if isinstance(dims, dict):
        values = [binary(dims.get(d)) for d in DIMENSIONS]
        if all(v is not None for v in values):
            return [int(v) for v in values]  # type: ignore[arg-type]
    items = evaluation.get("item_results")
    if isinstance(items, dict) and all(isinstance(items.get(d), list) and items.get(d) for d in DIMENSIONS):
        return [int(all(binary(r.get("pass")) == 1 for r in items[d] if isinstance(r, dict))) for d in DIMENSIONS]
    return None


def item_counts(evaluation: dict[str, Any]) -> tuple[int, int] | None:
    """(passed, total) checklist items of an itemized evaluation, else ``None``."""
    items = evaluation.get("item_results")
    if not isinstance(items, dict):
        return None
    passed = total = 0
    for dim in DIMENSIONS:
        rows = items.get(dim)
        if not isinstance(rows, list) or not rows:
            return None
        total += len(rows)
        passed += sum(1 for r in rows if isinstance(r, dict) and binary(r.get("pass")) == 1)
    return passed, total


def verdict_of(evaluation: Any) -> Verdict:
    """Read an evaluation (ours, the official judge's, or merged) into a :class:`Verdict`."""
    if not isinstance(evaluation, dict):
        return Verdict(None, UNSCORED_MISSING)
    if evaluation.get("parse_success") is False:
        return Verdict(None, str(evaluation.get("unscored_reason") or UNSCORED_PARSE))
    vector = _vector_of(evaluation)
    if vector is None:
        return Verdict(None, UNSCORED_INVALID)
    counts = item_counts(evaluation)
    return Verdict(
        tuple(vector),  # type: ignore[arg-type]
        None,
        counts[0] if counts else None,
        counts[1] if counts else None,
    )
