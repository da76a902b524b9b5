"""DrivelHub+ judged rows reported as the release reports them, plus our statistics.

``kar report --bench metadata.csv --judged MODEL=FILE …`` (or ``--judged judgments/``) prints
the table of the release's ``scripts/summarize_judgments.py``: Family, Prediction, N (every
row), Aligned % and each rubric mean over the rows whose judgment did not fail, Total last.
Beside it: bootstrap 95% CIs of Aligned % and Total, the rows whose total was recomputed from
its parts, clips missing from the run or absent from metadata.csv, and, between input modes of
one model (``full`` against ``without-audio`` …), repair/damage of alignment and the paired Δ
of the Total over the clips judged in both.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eval.metrics.stats import bootstrap_mean_ci
from eval.metrics.tasks import paired_pass_fail, paired_scores
from eval.records import DatasetError
from eval.tasks.drivelhub import RUBRIC, Judgments, read_judgments, read_metadata, summarize

COLUMNS = ("aligned_pct", *RUBRIC, "score_total")
BASE_MODE = "full"


def label(key: str) -> str:
    """The release's column heading: ``judge_core_intent`` → ``Core Intent``."""
    return {"aligned_pct": "Aligned", "score_total": "Score Total"}.get(key, key.replace("_", " ").title())


def build_release_report(
    metadata: str | Path, judged: Sequence[tuple[str, Path]], *, n_boot: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """Per judgments file (split by input mode when it holds several): the release's row plus our CIs and checks."""
    clips = {row["file"] for row in read_metadata(metadata)}
    runs: dict[str, dict[str, Any]] = {}
    by_mode: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for name, path in judged:
        judgments: Judgments = read_judgments(path)
        modes = judgments.input_modes()
        for mode in modes:
            rows = [r for r in judgments.rows if str(r.get("input_mode") or BASE_MODE) == mode]
            key = name if len(modes) == 1 else f"{name}/{mode}"
            if key in runs:
                raise DatasetError(f"--judged {key!r} given twice")
            family, _, model = name.rpartition("/")
            summary = summarize(rows)
            judged_rows = [r for r in rows if r.get("judge_aligned") is not None]
            files = {str(r["file"]) for r in rows}
            runs[key] = {"family": family, "model": model, "input_mode": mode, "file": str(path)} | summary | {
                "aligned_pct_ci": [None if v is None else 100 * v for v in
                                   bootstrap_mean_ci(np.array([bool(r["judge_aligned"]) for r in judged_rows], float), n_boot, seed)],
                "score_total_ci": bootstrap_mean_ci(np.array([r["judge_score_total"] for r in judged_rows], float), n_boot, seed),
                "n_recomputed_totals": len(judgments.recomputed),
                "recomputed_totals": judgments.recomputed[:20],
                "n_not_in_metadata": len(files - clips),
                "not_in_metadata": sorted(files - clips)[:20],
                "n_missing_clips": len(clips - files),
            }
            by_mode.setdefault((name, mode), {}).update({str(r["file"]): r for r in judged_rows})
    paired: dict[str, Any] = {}
    for (name, mode), rows in by_mode.items():
        base = by_mode.get((name, BASE_MODE))
        if mode == BASE_MODE or base is None:
            continue
        common = sorted(set(base) & set(rows))
        a = np.array([bool(base[f]["judge_aligned"]) for f in common], dtype=bool)
        b = np.array([bool(rows[f]["judge_aligned"]) for f in common], dtype=bool)
        ta = np.array([base[f]["judge_score_total"] for f in common], dtype=float)
        tb = np.array([rows[f]["judge_score_total"] for f in common], dtype=float)
        paired[f"{name}/{mode}"] = {"baseline": f"{name}/{BASE_MODE}", "n_clips": len(common),
                                    "aligned": paired_pass_fail(a, b, n_boot, seed), "score_total": paired_scores(ta, tb, n_boot, seed)}
    return {"benchmark": "drivelhub", "metadata": str(metadata), "n_clips": len(clips), "columns": ["n", *COLUMNS],
            "runs": runs, "paired": paired}

