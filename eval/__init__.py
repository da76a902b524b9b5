"""CultureKAR evaluation: dataset loaders, checklist judge, dual-judge merge, VIKR metrics, reports."""

from eval.datasets import (
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
    "BenchmarkItem",
    "DatasetError",
    "Prediction",
    "ReferenceItem",
    "Verdict",
    "VikrMatrix",
    "breakdown",
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
