"""CultureKAR evaluation.

Trip map: a benchmark file → :func:`eval.tasks.load` (its module in :mod:`eval.tasks` says how
its items are asked) → the runner in ``agents`` writes predictions → a judge in
:mod:`eval.judges` scores them → :mod:`eval.metrics` → :mod:`eval.report`.  Record files
(predictions, judge files) are read by :mod:`eval.records`; the VIKR verdict vocabulary is
:mod:`eval.verdicts`.
"""

from eval.judges.checklist import ChecklistJudge, JudgeCache, JudgePrompts, JudgeRunSummary, parse_judge_reply, run_judge
from eval.judges.merge import merge_evaluations, merge_files
from eval.judges.reference_rubric import rubric_score
from eval.metrics.reference import compare_by_language, cosine_scores
from eval.metrics.reliability import judge_reliability, kappa
from eval.metrics.stats import holm, mcnemar_exact, paired_bootstrap
from eval.metrics.vikr import (
    VikrMatrix,
    breakdown,
    condition_metrics,
    paired_metrics,
    repair_damage,
    transition_counts,
    vikr_matrix,
)
from eval.records import DatasetError, Prediction, ReferenceItem, load_judged, load_predictions
from eval.report.vikr import build_report, jsonable, write_report
from eval.tasks.memebench import BenchmarkFileError, BenchmarkItem, load_benchmark
from eval.tasks.memecap import load_memecap
from eval.tasks.memecult import load_memecult
from eval.verdicts import (
    DIMENSIONS,
    LAYERS,
    Verdict,
    evaluation_from_item_results,
    evaluation_from_vector,
    unscored_evaluation,
    verdict_of,
)

__all__ = [
    "DIMENSIONS",
    "LAYERS",
    "BenchmarkFileError",
    "BenchmarkItem",
    "ChecklistJudge",
    "JudgeCache",
    "JudgePrompts",
    "JudgeRunSummary",
    "DatasetError",
    "Prediction",
    "ReferenceItem",
    "Verdict",
    "VikrMatrix",
    "breakdown",
    "build_report",
    "compare_by_language",
    "cosine_scores",
    "holm",
    "jsonable",
    "judge_reliability",
    "kappa",
    "paired_bootstrap",
    "parse_judge_reply",
    "rubric_score",
    "run_judge",
    "write_report",
    "condition_metrics",
    "evaluation_from_item_results",
    "evaluation_from_vector",
    "load_benchmark",
    "load_judged",
    "load_memecap",
    "load_memecult",
    "load_predictions",
    "mcnemar_exact",
    "merge_evaluations",
    "merge_files",
    "paired_metrics",
    "repair_damage",
    "transition_counts",
    "unscored_evaluation",
    "verdict_of",
    "vikr_matrix",
]
