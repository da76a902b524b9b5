"""CultureKAR evaluation: dataset loaders, checklist judge, dual-judge merge, VIKR metrics, reports."""

from eval.datasets import (
    BenchmarkFileError,
    BenchmarkItem,
    DatasetError,
    Prediction,
    ReferenceItem,
    load_benchmark,
    load_judged,
    load_memecap,
    load_memecult,
    load_predictions,
)
from eval.judge import ChecklistJudge, JudgeCache, JudgePrompts, JudgeRunSummary, parse_judge_reply, run_judge
from eval.merge import merge_evaluations, merge_files
from eval.metrics import (
    VikrMatrix,
    breakdown,
    condition_metrics,
    mcnemar_exact,
    paired_metrics,
    repair_damage,
    transition_counts,
    vikr_matrix,
)
from eval.reference import compare_by_language, cosine_scores, holm, paired_bootstrap, rubric_score
from eval.reliability import judge_reliability, kappa
from eval.report import build_report, jsonable, write_report
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
