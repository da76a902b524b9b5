"""``kar report`` for the benchmark family: metrics picked by each item's task.

Names are ``model/condition`` (or a bare condition); each condition is paired with the
``baseline`` condition of the same model.  Inputs are prediction files (``{id, response}``;
what ``kar run`` writes) or, for DrivelHub+, rubric-judged files (``evaluation.scores``).
Every rate is over every benchmark item of the task: a missing or unparseable reply counts as
wrong and is reported apart.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eval.tasks.base import BenchItem
from eval.tasks.base import BenchSet
from eval.metrics.tasks import (
    choice_metrics,
    choice_outcomes,
    generation_metrics,
    generation_scores,
    paired_pass_fail,
    paired_scores,
)
from eval.report.common import jsonable
from eval.tasks import get_task
from eval.judges.rubric import MAX_TOTAL, MIN_TOTAL, rubric_summary


def _split_name(name: str) -> tuple[str, str]:
    model, sep, condition = name.rpartition("/")
    return (model if sep else ""), condition


def _responses(records: Sequence[dict[str, Any]]) -> dict[str, str | None]:
    return {str(r["id"]): r.get("response") for r in records if r.get("id") is not None}


def _rubric_rows(items: Sequence[BenchItem], records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each item's judged row (release judgments shape, matched by ``file``, else ``id``); a missing one is a failed row."""
    by_key: dict[str, dict[str, Any]] = {}
    for r in records:
        for key in (r.get("file"), r.get("id")):
            if key is not None:
                by_key.setdefault(str(key), r)
    out = []
    for item in items:
        found = by_key.get(item.release_row()["file"]) or by_key.get(item.id)  # type: ignore[attr-defined]
        out.append(found or {"file": item.id, "judge_aligned": None, "judge_error": "no judged row"})
    return out


def build_task_report(
    bench: BenchSet, runs: Mapping[str, Sequence[dict[str, Any]]], *, baseline: str = "vanilla", n_boot: int = 10_000, seed: int = 0,
    encoder: Any = None,
) -> dict[str, Any]:
    """Per task, per run: the task's metrics; per non-baseline run: paired comparison to its baseline.

    ``encoder`` (``encode_documents(texts).dense``, e.g. the configured embedder) adds the embedding
    similarity of generation tasks: per item the mean cosine to its references (0 for no reply)."""
    tasks: dict[str, list[BenchItem]] = {}
    for item in bench.items:
        tasks.setdefault(item.task, []).append(item)
    unknown = {name: sorted(set(_responses(records)) - {i.id for i in bench.items}) for name, records in runs.items()}
    report: dict[str, Any] = {
        "benchmark": bench.benchmark,
        "dataset": str(bench.path),
        "n_items": len(bench.items),
        "skipped_items": bench.skipped,
        "runs": list(runs),
        "baseline": baseline,
        "unknown_ids": {k: v[:20] for k, v in unknown.items() if v},
        "n_unknown_ids": {k: len(v) for k, v in unknown.items() if v},
        "tasks": {},
    }
    for task, items in tasks.items():
        kind = items[0].task_kind
        section: dict[str, Any] = {"kind": kind, "n": len(items), "runs": {}, "paired": {}, "items": {}}
        per_item: dict[str, np.ndarray] = {}
        for name, records in runs.items():
            is_rubric = any("judge_aligned" in r for r in records)
            if kind in ("mcq", "classify"):
                rows = choice_outcomes(items, _responses(records))
                section["runs"][name] = choice_metrics(items, rows)
                per_item[name] = np.array([r["correct"] for r in rows], dtype=bool)
                section["items"][name] = rows
            elif is_rubric:
                rows = _rubric_rows(items, records)
                section["runs"][name] = rubric_summary(rows)
                section["metric"] = "rubric_total"
                per_item[name] = np.array([np.nan if r.get("judge_aligned") is None else r["judge_score_total"] for r in rows])
                per_item[f"{name}\x00aligned"] = np.array([r.get("judge_aligned") is True for r in rows], dtype=bool)
                section["items"][name] = [{"id": i.id, "total": r.get("judge_score_total"), "aligned": r.get("judge_aligned")}
                                          for i, r in zip(items, rows)]
            else:
                responses = _responses(records)
                scores = generation_scores(items, responses)
                section["runs"][name] = generation_metrics(items, responses, scores)
                section["metric"] = "rouge_l"
                if encoder is not None:
                    similarity = _similarity(items, responses, encoder)
                    section["runs"][name]["similarity"] = float(similarity.mean()) if similarity.size else None
                    section.setdefault("similarity_items", {})[name] = similarity
                per_item[name] = scores
                section["items"][name] = [{"id": i.id, "rouge_l": s} for i, s in zip(items, scores.tolist())]
        for name in runs:
            model, condition = _split_name(name)
            base_name = f"{model}/{baseline}" if model else baseline
            if condition == baseline or base_name not in per_item:
                continue
            if kind in ("mcq", "classify"):
                section["paired"][name] = paired_pass_fail(per_item[base_name], per_item[name], n_boot, seed) | {"baseline": base_name}
            elif section.get("metric") == "rubric_total":
                both = ~np.isnan(per_item[base_name]) & ~np.isnan(per_item[name])  # Δ Total over the clips judged in both
                section["paired"][name] = paired_scores(per_item[base_name][both], per_item[name][both], n_boot, seed) | {
                    "baseline": base_name, "n_failed_either": int((~both).sum()),
                    "aligned": paired_pass_fail(per_item[f"{base_name}\x00aligned"], per_item[f"{name}\x00aligned"], n_boot, seed)}
            else:
                section["paired"][name] = paired_scores(per_item[base_name], per_item[name], n_boot, seed) | {"baseline": base_name}
                sims = section.get("similarity_items", {})
                if name in sims and base_name in sims:
                    section["paired"][name]["similarity"] = paired_scores(sims[base_name], sims[name], n_boot, seed)
        section.pop("similarity_items", None)
        report["tasks"][task] = section
    combine = get_task(bench.benchmark).combine
    if combine is not None:
        report["combined"] = combine(tasks, {t: s["items"] for t, s in report["tasks"].items()})
    return report


def _similarity(items: Sequence[BenchItem], responses: Mapping[str, str | None], encoder: Any) -> np.ndarray:
    from eval.records import ReferenceItem
    from eval.metrics.reference import cosine_scores

    refs = [ReferenceItem(id=i.id, image_path=i.id, references=tuple(i.references)) for i in items]
    return cosine_scores(refs, responses, encoder)


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return "inf" if np.isinf(value) else f"{value:.{digits}f}"
    return str(value)


def task_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown tables (one per task)."""
    lines = [f"# {report['benchmark']} ({report['n_items']} items)", ""]
    if report["skipped_items"]:
        lines += [f"{len(report['skipped_items'])} item(s) skipped as invalid (see metrics.json).", ""]
    for task, section in report["tasks"].items():
        lines += [f"## {task} ({section['kind']}, n={section['n']})", ""]
        if section["kind"] in ("mcq", "classify"):
            lines += ["| run | accuracy | macro-F1 | unparseable | missing |", "|---|---|---|---|---|"]
            for name, m in section["runs"].items():
                lines.append(f"| {name} | {_fmt(m['accuracy'])} | {_fmt(m.get('macro_f1'))} | {m['n_unparseable']} | {m['n_missing']} |")
            if section["paired"]:
                lines += ["", "| run vs baseline | Δ acc [95% CI] | repair | damage | ratio | McNemar p |", "|---|---|---|---|---|---|"]
                for name, p in section["paired"].items():
                    ci = p.get("delta_ci") or [None, None]
                    ratio = _fmt(p["ratio"]) if p["ratio_status"] == "finite" else p["ratio_status"]
                    lines.append(f"| {name} vs {p['baseline']} | {_fmt(p['delta'])} [{_fmt(ci[0])}, {_fmt(ci[1])}] | "
                                 f"{_fmt(p['repair'])} | {_fmt(p['damage'])} | {ratio} | {_fmt(p['mcnemar_p'])} |")
        elif section.get("metric") == "rubric_total":
            lines += [f"| run | N | Aligned % | Total ({MIN_TOTAL}…{MAX_TOTAL}) | failed |", "|---|---|---|---|---|"]
            for name, m in section["runs"].items():
                lines.append(f"| {name} | {m['n']} | {_fmt(m['aligned_pct'], 1)} | {_fmt(m['score_total'])} | {m['n_failed']} |")
        else:
            lines += ["| run | ROUGE-L | embedding similarity | missing |", "|---|---|---|---|"]
            for name, m in section["runs"].items():
                lines.append(f"| {name} | {_fmt(m['rouge_l'])} | {_fmt(m.get('similarity'))} | {m['n_missing']} |")
        if section["paired"] and section["kind"] == "generate":
            lines += ["", "| run vs baseline | Δ [95% CI] | p |", "|---|---|---|"]
            for name, p in section["paired"].items():
                ci = p.get("ci") or [None, None]
                lines.append(f"| {name} vs {p['baseline']} | {_fmt(p['delta'])} [{_fmt(ci[0])}, {_fmt(ci[1])}] | {_fmt(p.get('p'))} |")
        lines.append("")
    csac = (report.get("combined") or {}).get("CSAC-C")
    if csac and csac["runs"]:
        lines += [f"## CSAC-C ({csac['n_comments']} comments asked both stance and affect)", "",
                  "| run | pairs: accuracy | pairs: macro-F1 (6 labels) | stance: accuracy | stance: macro-F1 |", "|---|---|---|---|---|"]
        for name, m in csac["runs"].items():
            lines.append(f"| {name} | {_fmt(m['pairs']['accuracy'])} | {_fmt(m['pairs']['macro_f1'])} | "
                         f"{_fmt(m['stance']['accuracy'])} | {_fmt(m['stance']['macro_f1'])} |")
        lines.append("")
    return "\n".join(lines)


def write_task_report(report: Mapping[str, Any], out: str | Path) -> dict[str, str]:
    """metrics.json (without per-item rows), report.md, items.csv (one row per item and run)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    slim = {k: v for k, v in report.items() if k != "tasks"} | {
        "tasks": {t: {k: v for k, v in s.items() if k != "items"} for t, s in report["tasks"].items()}
    }
    (out / "metrics.json").write_text(json.dumps(jsonable(slim), ensure_ascii=False, indent=1), "utf-8")
    (out / "report.md").write_text(task_markdown(report), "utf-8")
    with (out / "items.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["task", "run", "id", "gold", "pred", "status", "correct", "score"])
        for task, section in report["tasks"].items():
            for name, rows in section["items"].items():
                for row in rows:
                    score = row["rouge_l"] if "rouge_l" in row else row.get("total")
                    writer.writerow([task, name, row["id"], row.get("gold", ""), row.get("pred") or "",
                                     row.get("status", ""), row.get("correct", ""), "" if score is None else score])
    return {"metrics": str(out / "metrics.json"), "markdown": str(out / "report.md"), "items": str(out / "items.csv")}


def load_task_runs(bench_path: Path, pairs: Sequence[tuple[str, Path]], *, skip_invalid: bool = False) -> tuple[BenchSet, dict[str, list[dict[str, Any]]]]:
    """The benchmark-family file and each named prediction (or rubric-judged) file, validated."""
    from eval.records import load_predictions, read_records
    from eval.tasks import load_bench

    bench = load_bench(bench_path, check_media=False, skip_invalid=skip_invalid)
    runs: dict[str, list[dict[str, Any]]] = {}
    for name, path in pairs:
        records = read_records(path)
        if not any("judge_aligned" in r for r in records):
            load_predictions(path)  # validates ids/responses with file/item/field errors
        runs[name] = records
    return bench, runs


def slim_report(report: Mapping[str, Any]) -> dict[str, Any]:
    """The task report without its per-item rows (what ``--json`` prints)."""
    return {k: v for k, v in report.items() if k != "tasks"} | {
        "tasks": {t: {k: v for k, v in s.items() if k != "items"} for t, s in report["tasks"].items()}}
