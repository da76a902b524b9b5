"""Reference-based metrics: cosine with a deterministic embedder, rubric parsing, Holm, bootstrap."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from eval.records import ReferenceItem
from eval.metrics.reference import compare_by_language, cosine_scores
from eval.metrics.stats import holm, paired_bootstrap
from eval.judges.reference_rubric import parse_rubric, rubric_score, summarize_rubric
from tests.fakes.vlm import ScriptedVLM


@dataclass
class Batch:
    dense: np.ndarray


class AxisEmbedder:
    """Maps a text to a fixed unit vector: 'a' → e0, 'b' → e1, 'ab' → (e0+e1)/√2."""

    name = "axis"
    dim = 2

    def encode_documents(self, texts):
        rows = []
        for t in texts:
            v = np.array([t.count("a"), t.count("b")], dtype=np.float32)
            rows.append(v / np.linalg.norm(v))
        return Batch(np.stack(rows))


def test_cosine_mean_over_references_by_hand():
    items = [
        ReferenceItem("x", "x.png", ("a", "b"), "hi"),
        ReferenceItem("y", "y.png", ("a",), "hi"),
        ReferenceItem("z", "z.png", ("b",), "bn"),
    ]
    scores = cosine_scores(items, {"x": "a", "y": "ab", "z": None}, AxisEmbedder())
    assert scores[0] == pytest.approx(0.5)  # (1 + 0) / 2
    assert scores[1] == pytest.approx(1 / np.sqrt(2))
    assert scores[2] == 0.0  # missing response = failure


def test_holm_by_hand():
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})
    assert holm({"a": 0.6, "b": 0.9}) == pytest.approx({"a": 1.0, "b": 1.0})


def test_paired_bootstrap_and_languages():
    base = np.array([0.1, 0.2, 0.3, 0.4] * 10)
    cond = base + 0.1
    result = paired_bootstrap(base, cond, n_boot=500)
    assert result["delta"] == pytest.approx(0.1) and result["ci"] == pytest.approx([0.1, 0.1])
    assert result["p"] == 0.0
    items = [ReferenceItem(str(i), "i.png", ("a",), "hi" if i < 20 else "ta") for i in range(40)]
    by_lang = compare_by_language(items, base, np.where(np.arange(40) < 20, cond, base), n_boot=500)
    assert by_lang["hi"]["delta"] == pytest.approx(0.1) and by_lang["ta"]["delta"] == pytest.approx(0.0)
    assert by_lang["ta"]["p_holm"] == 1.0 and by_lang["hi"]["p_holm"] == 0.0


def test_parse_rubric():
    assert parse_rubric('```json\n{"fluency": 5, "cultural_correctness": "3", "humor_relevance": 1}\n```') == {
        "fluency": 5, "cultural_correctness": 3, "humor_relevance": 1
    }
    with pytest.raises(ValueError, match="humor_relevance"):
        parse_rubric('{"fluency": 5, "cultural_correctness": 3, "humor_relevance": 6}')


async def test_rubric_score_with_retry_and_summary():
    item = ReferenceItem("x", "x.png", ("ref one",), "hi", context="post title")
    vlm = ScriptedVLM(script=["bad", '{"fluency": 4, "cultural_correctness": 2, "humor_relevance": 3}'])
    scores = await rubric_score(vlm, item, "my answer", b"img")
    assert scores == {"fluency": 4, "cultural_correctness": 2, "humor_relevance": 3}
    prompt = vlm.calls[0].messages[0].text
    assert "- ref one" in prompt and "post title" in prompt and "my answer" in prompt
    assert await rubric_score(ScriptedVLM(default="never json"), item, "a", None, max_parse_retries=1) is None
    summary = summarize_rubric([scores, None, {"fluency": 2, "cultural_correctness": 4, "humor_relevance": 5}])
    assert summary == {"n": 3, "n_unscored": 1, "fluency": 3.0, "cultural_correctness": 3.0, "humor_relevance": 4.0}
