"""The evaluation report: metrics.json, markdown/CSV tables, PNG plots, one HTML file.

Judged files are named ``NAME`` on the command line; ``model/condition`` names group
conditions by model (``gpt-4o/kar``), a name without ``/`` is a condition of an unnamed
model.  Each non-baseline condition is paired with the baseline condition of the same
model (``--baseline``, default ``vanilla``).
"""

from __future__ import annotations

import base64
import csv
import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.tasks.memebench import BenchmarkItem
from eval.metrics.stats import N_BOOTSTRAP
from eval.metrics.vikr import STATES, breakdown, condition_metrics, paired_metrics, vikr_matrix
from eval.report.common import PlainRows, dumps_indented, jsonable, markdown_table_html
from eval.verdicts import LAYERS

Records = Sequence[dict[str, Any]]


def split_name(name: str) -> tuple[str, str]:
    """``"model/condition"`` → (model, condition); ``"cond"`` → ("", cond)."""
    model, _, condition = name.rpartition("/")
    return model, condition


def build_report(
    bench: Sequence[BenchmarkItem],
    judged: Mapping[str, Records],
    *,
    baseline: str | None = "vanilla",
    n_boot: int = N_BOOTSTRAP,
    seed: int = 0,
    reliability: dict[str, Any] | None = None,
    reference: dict[str, Any] | None = None,
    diagnostics: dict[str, Any] | None = None,
    matrices_out: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """All metrics as one JSON-able dict (infinities are kept; :func:`jsonable` encodes them).

    ``diagnostics`` (from :func:`eval.diagnostics.diagnose`, or ``{"skipped": reason}``) is joined with
    the judgments here (repairs and damages per layer by cause) and kept under ``diagnostics``.
    ``matrices_out``, when given, receives each judged run's VIKR matrix (for a later :func:`add_diagnostics`)."""
    matrices = {name: vikr_matrix(bench, records) for name, records in judged.items()}
    if matrices_out is not None:
        matrices_out.update(matrices)
    conditions: dict[str, Any] = {}
    for name, matrix in matrices.items():
        model, condition = split_name(name)
        conditions[name] = {
            "model": model,
            "condition": condition,
            "metrics": condition_metrics(matrix),
            "by_language": breakdown(matrix, "language"),
            "by_domain": breakdown(matrix, "domain"),
        }
    paired: dict[str, Any] = {}
    for name, base_name in pairing(matrices, baseline).items():
        model, condition = split_name(name)
        paired[name] = {
            "model": model,
            "condition": condition,
            "baseline": base_name,
            "layers": paired_metrics(matrices[base_name], matrices[name], n_boot=n_boot, seed=seed),
        }
    report: dict[str, Any] = {
        "n_items": len(bench),
        "baseline": baseline,
        "n_bootstrap": n_boot,
        "seed": seed,
        "conditions": conditions,
        "paired": paired,
        "definitions": {
            "denominator": "every benchmark item; unscored items count as failures",
            "success": "V∧I∧K∧R",
            "repair": "share of baseline failures that pass (null when the baseline has none)",
            "damage": "share of baseline passes that fail (null when the baseline has none)",
            "ratio": "repair/damage; null with ratio_status 'infinite' when damage is 0 and repair > 0, "
            "'undefined' when 0/0 or either side is undefined",
            "ci": "paired percentile bootstrap, 95%, over items",
            "mcnemar_p": "exact two-sided McNemar test (binomial on discordant pairs)",
        },
    }
    if reliability is not None:
        report["reliability"] = reliability
    if reference is not None:
        report["reference"] = reference
    if diagnostics is not None:
        add_diagnostics(report, bench, judged, diagnostics, matrices)
    return report


def pairing(names: Iterable[str], baseline: str | None) -> dict[str, str]:
    """Each run name paired with its baseline's (``model/condition`` with ``model/{baseline}``, ``condition`` with
    ``baseline``) when that run is among ``names``: the report's pairs, without their figures."""
    names = list(names)
    pairs: dict[str, str] = {}
    for name in names if baseline else ():
        model, condition = split_name(name)
        base_name = f"{model}/{baseline}" if model else baseline
        if condition != baseline and base_name in names:
            pairs[name] = base_name
    return pairs


def join_diagnostics(diagnostics: dict[str, Any], bench: Sequence[BenchmarkItem], judged: Mapping[str, Records],
                     pairs: Mapping[str, str], matrices: Mapping[str, Any] | None = None) -> None:
    """Join ``diagnostics`` with the judgments of each pair (:func:`pairing`), in place (``matrices``: the judged runs'
    VIKR matrices when already built, else built here from ``judged``)."""
    from eval.diagnostics.joined import join_all

    if matrices is None:
        needed = set(pairs) | set(pairs.values())
        matrices = {name: vikr_matrix(bench, judged[name]) for name in needed if name in judged}
    join_all(diagnostics, matrices, {name: {"baseline": base} for name, base in pairs.items()})


def add_diagnostics(report: dict[str, Any], bench: Sequence[BenchmarkItem], judged: Mapping[str, Records],
                    diagnostics: dict[str, Any], matrices: Mapping[str, Any] | None = None, joined: bool = False) -> dict[str, Any]:
    """Join ``diagnostics`` (:func:`eval.diagnostics.diagnose`, or ``{"skipped": why}``) with the report's pairings
    (unless ``joined``: :func:`join_diagnostics` was called already, in ``kar report``'s worker process) and keep
    them under ``report["diagnostics"]``; the report, for chaining."""
    if "skipped" not in diagnostics:
        if not joined:
            pairs = {name: entry["baseline"] for name, entry in report["paired"].items()}
            join_diagnostics(diagnostics, bench, judged, pairs, matrices)
        for entry in diagnostics.values():  # built by eval.diagnostics of plain JSON values only
            if isinstance(entry, dict) and type(entry.get("rows")) is list:
                entry["rows"] = PlainRows(entry["rows"])
            for layer in ((entry.get("joined") or {}).get("layers") or {}).values() if isinstance(entry, dict) else ():
                layer["cells"] = {cell: PlainRows(ids) for cell, ids in layer["cells"].items()}  # item ids (str)
    report["diagnostics"] = diagnostics
    return report


# -- tables -------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{100 * x:.1f}"


def _num(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:.{digits}f}"


def _ratio(stats: Mapping[str, Any]) -> str:
    if stats["ratio_status"] == "infinite":
        return "∞ (no damage)"
    return _num(stats["ratio"])


def leaderboard_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per judged file, sorted by Success (the study's main leaderboard)."""
    rows = []
    for name, entry in report["conditions"].items():
        m = entry["metrics"]
        rows.append(
            {
                "name": name,
                "model": entry["model"],
                "condition": entry["condition"],
                "n": m["n"],
                "success": m["success"],
                **{layer: m["coverage"][layer] for layer in LAYERS},
                "relaxed_3of4": m["relaxed_3of4"],
                "ikr": m["ikr"],
                "mean_layers_passed": m["mean_layers_passed"],
                "non_monotonic": m["non_monotonic_share"],
                "unscored": m["n_unscored"],
            }
        )
    return sorted(rows, key=lambda r: (-r["success"], r["name"]))


def augmentation_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per (condition vs baseline): the controlled-augmentation table."""
    rows = []
    for name, entry in report["paired"].items():
        layers = entry["layers"]
        s = layers["Success"]
        row: dict[str, Any] = {
            "name": name,
            "model": entry["model"],
            "condition": entry["condition"],
            "baseline": entry["baseline"],
            "delta_success": s["delta"],
            "delta_ci_low": (s.get("delta_ci") or [None, None])[0],
            "delta_ci_high": (s.get("delta_ci") or [None, None])[1],
            "repair": s["repair"],
            "damage": s["damage"],
            "ratio": s["ratio"],
            "ratio_status": s["ratio_status"],
            "ratio_ci_low": (s.get("ratio_ci") or [None, None])[0],
            "ratio_ci_high": (s.get("ratio_ci") or [None, None])[1],
            "mcnemar_p": s["mcnemar_p"],
        }
        for layer in LAYERS:
            row[f"{layer}_repair"] = layers[layer]["repair"]
            row[f"{layer}_damage"] = layers[layer]["damage"]
            row[f"{layer}_delta"] = layers[layer]["delta"]
        rows.append(row)
    return sorted(rows, key=lambda r: (r["model"], r["condition"]))


def leaderboard_markdown(report: Mapping[str, Any]) -> str:
    n = report["n_items"]
    lines = [
        "| # | Model / condition | Success | V | I | K | R | 3/4 | I∧K∧R | unscored |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rank, row in enumerate(leaderboard_rows(report), 1):
        lines.append(
            f"| {rank} | {row['name']} | {_pct(row['success'])} | "
            + " | ".join(_pct(row[layer]) for layer in LAYERS)
            + f" | {_pct(row['relaxed_3of4'])} | {_pct(row['ikr'])} | {row['unscored']} |"
        )
    return f"Rates in % over all n = {n} items (unscored = failure).\n\n" + "\n".join(lines) + "\n"


def augmentation_markdown(report: Mapping[str, Any]) -> str:
    if not report["paired"]:
        return "No condition has a baseline to compare against.\n"
    lines = [
        "| Model | Condition | ΔSuccess [95% CI] | Repair | Damage | Ratio [95% CI] | McNemar p | "
        + " | ".join(f"{layer} rep/dam" for layer in LAYERS)
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(LAYERS),
    ]
    for row in augmentation_rows(report):
        ci = f"[{_pct(row['delta_ci_low'])}, {_pct(row['delta_ci_high'])}]"
        rci = f"[{_num(row['ratio_ci_low'])}, {_num(row['ratio_ci_high'])}]"
        ratio = "∞ (no damage)" if row["ratio_status"] == "infinite" else _num(row["ratio"])
        layer_cells = " | ".join(f"{_pct(row[f'{lay}_repair'])}/{_pct(row[f'{lay}_damage'])}" for lay in LAYERS)
        lines.append(
            f"| {row['model'] or '–'} | {row['condition']} | {_pct(row['delta_success'])} {ci} | "
            f"{_pct(row['repair'])} | {_pct(row['damage'])} | {ratio} {rci} | {_num(row['mcnemar_p'], 3)} | {layer_cells} |"
        )
    return (
        f"Paired against `{report['baseline']}`; percentages; bootstrap {report['n_bootstrap']} resamples.\n\n"
        + "\n".join(lines)
        + "\n"
    )


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        if not rows:
            return
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("inf" if isinstance(v, float) and math.isinf(v) else v) for k, v in row.items()})


# -- plots --------------------------------------------------------------------------------------


def _save(fig: Any, path: Path) -> Path:
    """Lay out, write (110 dpi) and close one figure; returns its path.  Drawn once: ``tight_layout`` leaves a
    placeholder layout engine behind, for which ``savefig`` lays every text out in a draw of its own before the
    drawing that writes the pixels; the layout is already done, so the engine is dropped first."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.set_layout_engine(None)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def make_plots(report: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Coverage bars, Visual vs Knowledge, repair vs damage, VIKR state histogram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    paths: list[Path] = []
    rows = leaderboard_rows(report)
    names = [r["name"] for r in rows]

    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(names) + 3), 4))
    width = 0.16
    x = np.arange(len(names))
    for j, key in enumerate([*LAYERS, "success"]):
        ax.bar(x + (j - 2) * width, [100 * r[key] for r in rows], width, label=key if key != "success" else "Success")
    ax.set_xticks(x, names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("% of items")
    ax.set_title("Layer coverage per condition")
    ax.legend(fontsize=7, ncols=5)
    paths.append(_save(fig, out_dir / "coverage.png"))

    fig, ax = plt.subplots(figsize=(5, 5))
    for condition in sorted({r["condition"] for r in rows}):
        sub = [r for r in rows if r["condition"] == condition]
        ax.scatter([100 * r["V"] for r in sub], [100 * r["K"] for r in sub], label=condition, s=18)
    ax.set_xlabel("Visual coverage (%)")
    ax.set_ylabel("Knowledge coverage (%)")
    ax.set_title("Visual vs Knowledge across models")
    ax.legend(fontsize=7)
    paths.append(_save(fig, out_dir / "visual_vs_knowledge.png"))

    aug = augmentation_rows(report)
    if aug:
        fig, ax = plt.subplots(figsize=(5, 5))
        for condition in sorted({r["condition"] for r in aug}):
            sub = [r for r in aug if r["condition"] == condition and r["repair"] is not None and r["damage"] is not None]
            ax.scatter([100 * r["damage"] for r in sub], [100 * r["repair"] for r in sub], label=condition, s=18)
        lim = max([100 * (r["repair"] or 0) for r in aug] + [100 * (r["damage"] or 0) for r in aug] + [1])
        ax.plot([0, lim], [0, lim], color="grey", lw=0.8, ls="--")
        ax.set_xlabel("Damage (% of baseline successes lost)")
        ax.set_ylabel("Repair (% of baseline failures fixed)")
        ax.set_title("Repair vs damage (Success)")
        ax.legend(fontsize=7)
        paths.append(_save(fig, out_dir / "repair_vs_damage.png"))

    fig, ax = plt.subplots(figsize=(8, 4))
    by_condition: dict[str, np.ndarray] = {}
    for entry in report["conditions"].values():
        shares = np.array([entry["metrics"]["state_shares"][s] for s in STATES])
        by_condition.setdefault(entry["condition"], np.zeros(16))
        by_condition[entry["condition"]] += shares
    counts = {c: sum(1 for e in report["conditions"].values() if e["condition"] == c) for c in by_condition}
    width = 0.8 / max(1, len(by_condition))
    for j, (condition, shares) in enumerate(sorted(by_condition.items())):
        ax.bar(np.arange(16) + j * width, 100 * shares / counts[condition], width, label=condition)
    ax.set_xticks(np.arange(16) + 0.4 - width / 2, STATES, rotation=90, fontsize=7)
    ax.set_xlabel("VIKR state (V I K R)")
    ax.set_ylabel("% of items (mean over models)")
    ax.set_title("VIKR state histogram")
    ax.legend(fontsize=7)
    paths.append(_save(fig, out_dir / "vikr_states.png"))
    return paths


# -- HTML ---------------------------------------------------------------------------------------


def render_html(report: Mapping[str, Any], plots: Sequence[Path], metrics_text: str | None = None) -> str:
    from eval.report.diagnostics import html_section

    images = "".join(
        f'<figure><img alt="{html.escape(p.stem)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}"><figcaption>{html.escape(p.stem)}</figcaption></figure>'
        for p in plots
    )
    unscored = "".join(
        f"<li>{html.escape(name)}: {e['metrics']['n_unscored']} unscored "
        f"{html.escape(json.dumps(e['metrics']['unscored_reasons']))}</li>"
        for name, e in report["conditions"].items()
        if e["metrics"]["n_unscored"]
    )
    style = (
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f3f3f3}"
        "figure{display:inline-block;margin:1em}img{max-width:640px}"
    )
    if metrics_text is None:
        metrics_text = json.dumps(jsonable(report), ensure_ascii=False, indent=1)
    metrics_json = html.escape(metrics_text[:2_000_000])
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>CultureKAR VIKR report</title>"
        f"<style>{style}</style></head><body><h1>CultureKAR VIKR report</h1>"
        f"<h2>Leaderboard</h2>{markdown_table_html(leaderboard_markdown(report))}"
        f"<h2>Controlled augmentation</h2>{markdown_table_html(augmentation_markdown(report))}"
        f"<h2>Unscored items</h2><ul>{unscored or '<li>none</li>'}</ul>"
        f"{html_section(report.get('diagnostics'))}"
        f"<h2>Plots</h2>{images or '<p>plots disabled</p>'}"
        f"<details><summary>metrics.json</summary><pre>{metrics_json}</pre></details>"
        "</body></html>"
    )


def write_report(report: Mapping[str, Any], out_dir: str | Path, *, plots: bool = True,
                 plot_paths: Sequence[Path] | None = None, plot_cache: Path | None = None,
                 causes_path: Path | None = None) -> dict[str, Path]:
    """Write metrics.json, leaderboard/augmentation .md and .csv, plots and report.html.  ``plot_paths``: the
    report's plots, already drawn by :func:`make_plots` (``kar report`` draws them while its diagnostics are
    computed in another process).  ``plot_cache``: where the diagnostics' causes plot is kept by what it shows
    (:func:`eval.report.diagnostics.causes_plot`); ``causes_path``: that plot, already drawn (by ``kar report``'s
    diagnostics worker)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    files["metrics"] = out / "metrics.json"
    metrics_text = dumps_indented(jsonable(report))
    files["metrics"].write_text(metrics_text, encoding="utf-8")
    files["leaderboard_md"] = out / "leaderboard.md"
    files["leaderboard_md"].write_text(leaderboard_markdown(report), encoding="utf-8")
    files["augmentation_md"] = out / "augmentation.md"
    files["augmentation_md"].write_text(augmentation_markdown(report), encoding="utf-8")
    files["leaderboard_csv"] = out / "leaderboard.csv"
    _write_csv(files["leaderboard_csv"], leaderboard_rows(report))
    files["augmentation_csv"] = out / "augmentation.csv"
    _write_csv(files["augmentation_csv"], augmentation_rows(report))
    plot_paths = (list(plot_paths) if plot_paths is not None else make_plots(report, out)) if plots else []
    if report.get("diagnostics") is not None:
        from eval.report.diagnostics import causes_markdown, causes_plot, diagnostics_markdown

        files["diagnostics_md"] = out / "diagnostics.md"
        files["diagnostics_md"].write_text(diagnostics_markdown(report["diagnostics"]) + "\n" + causes_markdown(report["diagnostics"]),
                                           encoding="utf-8")
        cause_plot = (causes_path or causes_plot(report["diagnostics"], out, cache=plot_cache)) if plots else None
        if cause_plot is not None:
            plot_paths.append(cause_plot)
    for p in plot_paths:
        files[p.stem] = p
    files["html"] = out / "report.html"
    files["html"].write_text(render_html(report, plot_paths, _html_metrics(report, metrics_text)), encoding="utf-8")
    return files


def _html_metrics(report: Mapping[str, Any], metrics_text: str) -> str:
    """metrics.json as report.html shows it: the diagnostics' per-item rows left to metrics.json (the page lists
    each cell's items; thousands of rows inline would only make it slow to write and to open)."""
    diagnostics = report.get("diagnostics")
    if not isinstance(diagnostics, dict) or not any(isinstance(e, dict) and e.get("rows") for e in diagnostics.values()):
        return metrics_text
    slim = {name: ({**e, "rows": f"{len(e['rows'])} per-item rows: see metrics.json"} if isinstance(e, dict) and e.get("rows") else e)
            for name, e in diagnostics.items()}
    return dumps_indented(jsonable({**report, "diagnostics": slim}))
