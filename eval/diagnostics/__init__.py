"""Why KAR repaired or damaged an item: retrieval diagnostics per item and condition, joined with the judgments.

:func:`diagnose` (dataset + traces + CultureBase, no VLM), :func:`judge_knowledge` (the knowledge
judge instead of the proxy), :func:`join_all` (repairs and damages per VIKR layer, by cause).
Shown by ``kar report`` (:mod:`eval.report.diagnostics`) and the API's ablation jobs.
"""

from eval.diagnostics.diagnose import GROUNDING_CONDITIONS, diagnose, judge_knowledge, material
from eval.diagnostics.gold import Gold, GoldEntity, KBNames, gold_of, knowledge_units, named_entities
from eval.diagnostics.joined import CELLS, DAMAGE_CELLS, JOIN_LAYERS, REPAIR_CELLS, join, join_all
from eval.diagnostics.kb import open_kb_names
from eval.diagnostics.knowledge import JUDGE, PROXY, KnowledgeJudge, proxy_decide
from eval.diagnostics.params import PARAMS, DiagnosticsParams
from eval.diagnostics.traces import read_traces

__all__ = [
    "CELLS", "DAMAGE_CELLS", "GROUNDING_CONDITIONS", "JOIN_LAYERS", "JUDGE", "PARAMS", "PROXY",
    "REPAIR_CELLS", "DiagnosticsParams", "Gold", "GoldEntity", "KBNames", "KnowledgeJudge", "diagnose", "gold_of", "join",
    "join_all", "judge_knowledge", "knowledge_units", "material", "named_entities", "open_kb_names", "proxy_decide",
    "read_traces",
]
