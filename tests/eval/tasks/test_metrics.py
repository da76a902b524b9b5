"""Task metrics against hand-computed values and edge cases."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from eval.tasks.avmeme import AVMemeItem
from eval.tasks.memereacon import MemeReaConItem
from eval.metrics.tasks import choice_metrics, choice_outcomes, macro_f1, paired_pass_fail, rouge_l
from eval.judges.rubric import RubricJudge, RubricScores, judged_row, parse_rubric_reply, rubric_summary
from agents.vlm.base import ChatResult
from tests.eval.tasks.benchkit import avmeme, memereacon


def test_accuracy_breakdowns_and_unparseable_counted_apart():
    items = [AVMemeItem.model_validate(avmeme(i, language=lang, splits=splits)) for i, (lang, splits) in
             enumerate([("en", ["meme-full", "meme-main"]), ("en", ["meme-full"]), ("ja", ["meme-full", "meme-main"]), ("ja", ["meme-full"])])]
    replies = {"av0": "(B)", "av1": "A", "av2": "no idea"}  # av3 has no reply
    rows = choice_outcomes(items, replies)
    m = choice_metrics(items, rows)
    assert m["accuracy"] == 0.25 and m["n_correct"] == 1
    assert m["n_unparseable"] == 1 and m["n_missing"] == 1 and m["accuracy_of_parsed"] == 0.5
    assert m["breakdowns"]["language"] == {"en": {"n": 2, "accuracy": 0.5}, "ja": {"n": 2, "accuracy": 0.0}}
    assert m["breakdowns"]["split"]["meme-main"] == {"n": 2, "accuracy": 0.5}
    assert m["breakdowns"]["question_type"]["humor"]["n"] == 4


def test_macro_f1_hand_computed_and_one_class_absent():
    # gold S S D E ; pred S D D (unparseable)
    # S: tp1 fp0 fn1 → P1 R.5 F.667 ; D: tp1 fp1 fn0 → F.667 ; E: tp0 → F0 ; macro = 4/9
    assert macro_f1(["Support", "Support", "Deny", "Extension"], ["Support", "Deny", "Deny", None],
                    ("Support", "Deny", "Extension")) == pytest.approx(4 / 9)
    # Extension in neither column: left out, so macro over Support/Deny = (1 + 1)/2
    assert macro_f1(["Support", "Deny"], ["Support", "Deny"], ("Support", "Deny", "Extension")) == 1.0
    # all wrong
    assert macro_f1(["Support", "Support"], ["Deny", None], ("Support", "Deny", "Extension")) == 0.0


def test_classification_metrics_all_wrong():
    items = [MemeReaConItem.model_validate(memereacon(i, "CSAC-A")) for i in range(3)]
    rows = choice_outcomes(items, {i.id: "Consistent" for i in items})
    m = choice_metrics(items, rows)
    assert m["accuracy"] == 0.0 and m["macro_f1"] == 0.0
    assert m["per_class"]["Inconsistent"] == {"support": 3, "predicted": 0, "correct": 0}


def test_rouge_l_hand_computed():
    # LCS("the cat sat on the mat", "the cat on a mat") = the cat on mat = 4; P = 4/5, R = 4/6, F = 2PR/(P+R) = 8/11
    assert rouge_l("the cat on a mat", ["the cat sat on the mat"]) == pytest.approx(8 / 11)
    assert rouge_l("the cat on a mat", ["nothing alike", "the cat sat on the mat"]) == pytest.approx(8 / 11)  # best reference
    assert rouge_l("诸葛亮骂王朗", ["诸葛亮 骂 死 王朗"]) == pytest.approx(2 * (6 / 6) * (6 / 7) / (1 + 6 / 7))  # CJK chars count
    assert rouge_l(None, ["x"]) == 0.0 and rouge_l("   ", ["x"]) == 0.0


def test_repair_damage_on_pass_fail():
    base = np.array([1, 1, 0, 0, 0], dtype=bool)
    cond = np.array([1, 0, 1, 1, 0], dtype=bool)
    p = paired_pass_fail(base, cond, n_boot=200, seed=0)
    assert p["repair"] == pytest.approx(2 / 3) and p["damage"] == 0.5 and p["ratio"] == pytest.approx(4 / 3)
    assert p["delta"] == pytest.approx(0.2) and len(p["delta_ci"]) == 2
    same = paired_pass_fail(base, base, n_boot=0, seed=0)
    assert same["damage"] == 0 and same["ratio_status"] == "undefined" and same["mcnemar_p"] == 1.0


def test_rubric_total_has_no_floor_and_ranges_are_the_releases():
    s = RubricScores(aligned=True, core_intent=5, rhetorical_signal=3, affective_or_social_meaning=2, grounding=2,
                     hallucination_penalty=0, literal_only_penalty=0, vague_or_overgeneralized_penalty=0)
    assert s.total == 12
    low = parse_rubric_reply('{"aligned": false, "core_intent": 1, "rhetorical_signal": 0, "affective_or_social_meaning": 0,'
                             ' "grounding": 1, "hallucination_penalty": 3, "literal_only_penalty": 2, "vague_or_overgeneralized_penalty": "1"}')
    assert low.total == -4  # 2 − 6, kept negative as the release keeps it
    worst = RubricScores(aligned=False, core_intent=0, rhetorical_signal=0, affective_or_social_meaning=0, grounding=0,
                         hallucination_penalty=3, literal_only_penalty=3, vague_or_overgeneralized_penalty=2)
    assert worst.total == -8
    old_names = parse_rubric_reply('{"aligned": false, "core_intent": 1, "rhetorical_signal": 0, "affective_social": 0,'
                                   ' "grounding": 1, "hallucination": 3, "literal_only": 2, "vagueness": 1}')
    assert old_names == low
    with pytest.raises(ValueError, match="core_intent"):
        parse_rubric_reply('{"aligned": true, "core_intent": 6, "rhetorical_signal": 0, "affective_or_social_meaning": 0,'
                           ' "grounding": 0, "hallucination_penalty": 0, "literal_only_penalty": 0, "vague_or_overgeneralized_penalty": 0}')
    with pytest.raises(ValueError, match="grounding"):
        parse_rubric_reply(GOOD.replace('"grounding": 2', '"grounding": true'))


class ScriptedVLM:
    model_id = "judge"

    def __init__(self, replies):
        self.replies = list(replies)
        self.calls = []

    async def chat(self, messages, sampling=None):
        self.calls.append(messages)
        return ChatResult(self.replies.pop(0), "judge")


GOOD = ('{"aligned": true, "core_intent": 4, "rhetorical_signal": 2, "affective_or_social_meaning": 1, "grounding": 2,'
        ' "hallucination_penalty": 1, "literal_only_penalty": 0, "vague_or_overgeneralized_penalty": 0, "reason": "ok"}')


def test_rubric_judge_reasks_on_out_of_range_then_fails_in_the_release_row_shape():
    vlm = ScriptedVLM([GOOD.replace('"core_intent": 4', '"core_intent": 9'), GOOD])
    verdict, error, attempts = asyncio.run(RubricJudge(vlm, max_retries=2).score("narr", "resp"))
    assert verdict.total == 8 and error is None and attempts == 2
    assert "core_intent" in vlm.calls[1][-1].text  # the error is quoted back
    never = ScriptedVLM(["not json"] * 3)
    verdict, error, attempts = asyncio.run(RubricJudge(never, max_retries=2).score("narr", "resp"))
    assert verdict is None and "unparseable after 3 replies" in error and len(never.calls) == 3
    good = judged_row({"file": "a.mp4", "annotation": "narr", "input_mode": "full"}, "resp", parse_rubric_reply(GOOD))
    bad = judged_row({"file": "b.mp4", "annotation": "narr", "input_mode": "full"}, "resp", None, error)
    assert good["judge_score_total"] == 8 and good["judge_affective_or_social_meaning"] == 1 and good["judge_reason"] == "ok"
    assert bad["judge_aligned"] is None and bad["judge_error"] == error and not any(k.startswith("judge_core") for k in bad)
    summary = rubric_summary([good, bad])
    assert summary["n"] == 2 and summary["n_judged"] == 1 and summary["n_failed"] == 1
    assert summary["score_total"] == 8 and summary["aligned_pct"] == 100.0


def test_csac_c_reports_both_scorings_named(tmp_path):
    from eval.report.tasks import build_task_report, task_markdown
    from eval.tasks import load_bench
    from tests.eval.tasks.benchkit import write_jsonl

    lines = []
    for i, (stance, affect) in enumerate([("Support", "Consistent"), ("Deny", "Inconsistent"), ("Extension", "Consistent")]):
        lines.append(memereacon(i, "CSAC-S", id=f"s{i}", comment=f"comment {i}", label=stance))
        lines.append(memereacon(i, "CSAC-A", id=f"a{i}", comment=f"comment {i}", label=affect))
    bench = load_bench(write_jsonl(tmp_path / "mr.jsonl", lines), check_media=False)
    # stance right on s0, s1; affect right on a0, a2: both right only on comment 0
    run = [{"id": "s0", "response": "Answer: Support"}, {"id": "s1", "response": "Answer: Deny"}, {"id": "s2", "response": "Answer: Deny"},
           {"id": "a0", "response": "Answer: Consistent"}, {"id": "a1", "response": "Answer: Consistent"}, {"id": "a2", "response": "Answer: Consistent"}]
    report = build_task_report(bench, {"vanilla": run}, n_boot=0)
    csac = report["combined"]["CSAC-C"]
    assert csac["n_comments"] == 3
    pairs, stance = csac["runs"]["vanilla"]["pairs"], csac["runs"]["vanilla"]["stance"]
    assert pairs["scoring"] == "six stance × affect pairs" and pairs["accuracy"] == pytest.approx(1 / 3)
    assert stance["scoring"] == "stance alone" and stance["accuracy"] == pytest.approx(2 / 3)
    assert pairs["macro_f1"] < stance["macro_f1"]
    assert "## CSAC-C (3 comments asked both stance and affect)" in task_markdown(report)
