"""The MemeBench family: MemeReaCon, AVMeme Exam, DrivelHub+ and MemeCULT-1K.

Item shapes (:mod:`.items`), the strict loader (:mod:`.loader`), converters from released
files (:mod:`.converters`), answer extraction (:mod:`.answers`), task metrics (:mod:`.metrics`),
the DrivelHub+ rubric judge (:mod:`.rubric`), reasoning-as-retrieval (:mod:`.retrieval`) and
the task report (:mod:`.report`).
"""

from eval.benchmarks.items import BENCHMARKS, AVMemeItem, BenchItem, DrivelHubItem, MemeCultItem, MemeReaConItem
from eval.benchmarks.loader import BenchFormatError, BenchSet, is_bench_file, load_bench

__all__ = [
    "BENCHMARKS", "AVMemeItem", "BenchItem", "BenchFormatError", "BenchSet", "DrivelHubItem", "MemeCultItem",
    "MemeReaConItem", "is_bench_file", "load_bench",
]
