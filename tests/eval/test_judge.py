"""The checklist judge: parsing, re-asks, unscored handling, resume, cache, cost, end-to-end HTTP."""

from __future__ import annotations

import json

import pytest

from agents.vlm import OpenAICompatibleVLM, VLMError
from eval.tasks.memebench import load_benchmark
from eval.records import load_judged, load_predictions
from eval.judges.checklist import (
    ChecklistJudge,
    JudgeCache,
    JudgePrompts,
    ReplyParseError,
    parse_judge_reply,
    run_judge,
)
from eval.metrics.vikr import condition_metrics, vikr_matrix
from tests.eval.evalkit import judge_reply_for_prompt, make_item, write_bench
from tests.fakes.openai_server import FakeOpenAIServer, FakeReply
from tests.fakes.vlm import ScriptedVLM


@pytest.fixture
def item(tmp_path):
    path = write_bench(tmp_path, [make_item(0, n_checks=(2, 1, 1, 1))])
    return load_benchmark(path)[0]


def reply(v=(1, 1), i=(1,), k=(1,), r=(1,), **extra) -> str:
    dims = dict(visual=v, identity=i, knowledge=k, reasoning=r)
    body = {"item_results": {d: [{"index": j + 1, "pass": p, "reason": f"{d}{j}"} for j, p in enumerate(ps)] for d, ps in dims.items()}}
    body.update(extra)
    return json.dumps(body)


def test_parse_itemized_json_and_derive_fields_by_code(item):
    # the judge's own derived claims are ignored
    ev = parse_judge_reply(reply(v=(1, 0), checklist_result=[1, 1, 1, 1], overall_correctness="YES"), item)
    assert ev["checklist_result"] == [0, 1, 1, 1]
    assert ev["dimension_result"] == {"visual": 0, "identity": 1, "knowledge": 1, "reasoning": 1}
    assert ev["checklist_score"] == 3 and ev["complete_vikr"] is False
    assert ev["overall_correctness"] == "YES"  # I ∧ K ∧ R
    assert ev["item_results"]["visual"] == [
        {"index": 1, "pass": 1, "reason": "visual0"}, {"index": 2, "pass": 0, "reason": "visual1"}
    ]
    assert ev["parse_success"] is True and ev["format"] == "itemized_json"
    ev = parse_judge_reply(reply(k=(0,)), item)
    assert ev["overall_correctness"] == "NO" and ev["checklist_result"] == [1, 1, 0, 1]


def test_parse_fenced_reordered_zero_based_and_string_passes(item):
    body = json.loads(reply())
    body["item_results"]["visual"] = [
        {"index": 1, "pass": "no", "reason": "b"}, {"index": 0, "pass": "yes", "reason": "a"}
    ]
    ev = parse_judge_reply("Here you go:\n```json\n" + json.dumps(body) + "\n```", item)
    assert [(r["index"], r["pass"], r["reason"]) for r in ev["item_results"]["visual"]] == [(1, 1, "a"), (2, 0, "b")]
    assert ev["checklist_result"][0] == 0


def test_parse_text_fallback(item):
    ev = parse_judge_reply("analysis...\n**CHECKLIST_RESULT**: [1, 0, 1, 1]\nOVERALL_CORRECTNESS: YES", item)
    assert ev["checklist_result"] == [1, 0, 1, 1] and ev["item_results"] is None
    assert ev["overall_correctness"] == "NO" and ev["format"] == "text_fallback"
    assert "recomputed" in ev["parse_warning"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "empty reply"),
        ("I think it is good.", "no JSON object"),
        (reply(v=(1,)), "item_results.visual has 1 entries, expected 2"),
        (json.dumps({"item_results": {"visual": []}}), "lacks dimension(s): identity, knowledge, reasoning"),
        (reply(v=(1, 7)), "item_results.visual[2].pass must be 0 or 1"),
        (json.dumps({"verdict": "pass"}), "item_results"),
    ],
)
def test_parse_errors(item, text, error):
    with pytest.raises(ReplyParseError, match=error.replace("(", "\\(").replace(")", "\\)").replace("[", "\\[").replace("]", "\\]")):
        parse_judge_reply(text, item)


async def test_judge_prompt_contents_and_reask(item):
    vlm = ScriptedVLM(script=["not json", reply()], prompt_tokens=100, completion_tokens=10)
    judge = ChecklistJudge(vlm, max_parse_retries=2)
    outcome = await judge.judge(item, "The response by SOME-MODEL under kar.", b"\x89PNG fake")
    assert outcome.calls == 2 and outcome.usage.prompt_tokens == 200 and outcome.usage.completion_tokens == 20
    assert outcome.evaluation["parse_success"] is True
    first = vlm.calls[0].messages
    user = first[1]
    assert user.images and user.images[0].data == b"\x89PNG fake"
    assert "1. visual check 0 of item 0" in user.text and "2. visual check 1 of item 0" in user.text
    assert "1. reasoning check 0 of item 0" in user.text and "knowledge note 0" in user.text
    assert "The response by SOME-MODEL under kar." in user.text
    assert vlm.calls[0].sampling.json_mode is True and vlm.calls[0].sampling.temperature == 0.0
    second = vlm.calls[1].messages
    assert second[2].role == "assistant" and second[2].text == "not json"
    assert "could not be used" in second[3].text and "visual: 2" in second[3].text


async def test_unparseable_after_retries_is_unscored(item):
    vlm = ScriptedVLM(default="still not json")
    outcome = await ChecklistJudge(vlm, max_parse_retries=2).judge(item, "r", b"img")
    assert outcome.calls == 3
    ev = outcome.evaluation
    assert ev["parse_success"] is False and ev["unscored_reason"] == "parse_failure"
    assert ev["checklist_result"] == [0, 0, 0, 0] and ev["raw_content"] == "still not json"


async def test_judge_error_is_unscored(item):
    outcome = await ChecklistJudge(ScriptedVLM(script=[VLMError("boom")])).judge(item, "r", b"img")
    assert outcome.evaluation["unscored_reason"] == "judge_error" and "boom" in outcome.evaluation["parse_error"]


def test_prompts_are_files_and_hash_changes(tmp_path):
    prompts = JudgePrompts.load()
    assert "{{checklist}}" in prompts.user and "{{response}}" in prompts.user
    (tmp_path / "judge_checklist_system.md").write_text(prompts.system + " Be terse.")
    (tmp_path / "judge_checklist_user.md").write_text(prompts.user)
    (tmp_path / "judge_repair.md").write_text(prompts.repair)
    assert JudgePrompts.load(tmp_path).sha != prompts.sha


def _setup_run(tmp_path, n=4):
    items = [make_item(i) for i in range(n)]
    bench_path = write_bench(tmp_path, items)
    preds = [{"id": f"m{i}", "image_path": f"images/m{i}.png", "response": f"explanation {i}"} for i in range(n)]
    if n >= 3:
        preds[1]["response"] = None  # no response: unscored, no judge call
        del preds[2]  # missing prediction: unscored
    pred_path = tmp_path / "pred.json"
    pred_path.write_text(json.dumps(preds))
    return load_benchmark(bench_path), bench_path, pred_path


async def test_run_judge_resume_cache_and_cost(tmp_path):
    bench, bench_path, pred_path = _setup_run(tmp_path)
    vlm = ScriptedVLM(default=lambda messages: judge_reply_for_prompt(messages[1].text, {("knowledge", 1)}),
                      prompt_tokens=1000, completion_tokens=100)
    judge = ChecklistJudge(vlm)
    cache = JudgeCache(tmp_path / "cache.sqlite")
    out = tmp_path / "out.json"
    progress = []
    summary = await run_judge(bench, load_predictions(pred_path), out, judge, bench_path=bench_path, cache=cache,
                              price_input_per_1m=2.0, price_output_per_1m=10.0, on_progress=lambda d, t: progress.append((d, t)))
    assert len(vlm.calls) == 2  # m0 and m3 only
    assert summary.judged == 2 and summary.scored == 2 and summary.unscored == {"no_response": 1, "missing": 1}
    assert summary.prompt_tokens == 2000 and summary.completion_tokens == 200
    assert summary.cost_usd == pytest.approx(2000 / 1e6 * 2 + 200 / 1e6 * 10)
    assert progress[-1] == (4, 4)
    records = load_judged(out)
    assert [r["id"] for r in records] == ["m0", "m1", "m2", "m3"]
    assert records[0]["evaluation"]["checklist_result"] == [1, 1, 0, 1]
    assert records[0]["evaluation"]["judge"]["model"] == "scripted-vlm"
    assert records[1]["evaluation"]["unscored_reason"] == "no_response"
    metrics = condition_metrics(vikr_matrix(bench, records))
    assert metrics["coverage"]["V"] == 2 / 4 and metrics["coverage"]["K"] == 0.0

    # resume: nothing left to judge
    again = await run_judge(bench, load_predictions(pred_path), out, judge, bench_path=bench_path, cache=cache)
    assert len(vlm.calls) == 2 and again.resumed == 2 and again.judged == 0 and again.cost_usd is None

    # a changed response is re-judged, the other one is resumed
    preds = json.loads(pred_path.read_text())
    preds[0]["response"] = "a different explanation"
    pred_path.write_text(json.dumps(preds))
    third = await run_judge(bench, load_predictions(pred_path), out, judge, bench_path=bench_path, cache=cache)
    assert len(vlm.calls) == 3 and third.judged == 1 and third.resumed == 1

    # a fresh output file is served from the cache
    fresh = await run_judge(bench, load_predictions(pred_path), tmp_path / "fresh.jsonl", judge, bench_path=bench_path, cache=cache)
    assert len(vlm.calls) == 3 and fresh.cache_hits == 2
    assert load_judged(tmp_path / "fresh.jsonl")[3]["evaluation"]["judge"]["cached"] is True

    # another prompt version misses the cache
    other = ChecklistJudge(vlm, prompts=JudgePrompts(judge.prompts.system + "!", judge.prompts.user, judge.prompts.repair))
    await run_judge(bench, load_predictions(pred_path), tmp_path / "other.json", other, bench_path=bench_path, cache=cache)
    assert len(vlm.calls) == 5


async def test_unscored_items_are_rejudged_on_resume(tmp_path):
    bench, bench_path, pred_path = _setup_run(tmp_path, n=1)
    out = tmp_path / "out.json"
    vlm = ScriptedVLM(default="garbage")
    first = await run_judge(bench, load_predictions(pred_path), out, ChecklistJudge(vlm, max_parse_retries=0), bench_path=bench_path)
    assert first.parse_failures == 1 and len(vlm.calls) == 1
    vlm.default = lambda messages: judge_reply_for_prompt(messages[1].text)
    second = await run_judge(bench, load_predictions(pred_path), out, ChecklistJudge(vlm), bench_path=bench_path)
    assert second.scored == 1 and len(vlm.calls) == 2


async def test_end_to_end_through_openai_compatible_vlm(tmp_path):
    bench, bench_path, pred_path = _setup_run(tmp_path)
    with FakeOpenAIServer() as server:
        server.responder = lambda request: FakeReply(
            text=judge_reply_for_prompt(request.user_text(), {("identity", 1)}), prompt_tokens=900, completion_tokens=80
        )
        server.enqueue(FakeReply(status=429, headers={"Retry-After": "0"}))  # one transient failure
        vlm = OpenAICompatibleVLM([server.base_url], "judge-model", timeout_s=10, backoff_initial_s=0.01)
        summary = await run_judge(bench, load_predictions(pred_path), tmp_path / "out.json", ChecklistJudge(vlm),
                                  bench_path=bench_path, concurrency=2)
        assert len(server.requests) == 3  # 2 items + 1 retried 429
        body = server.requests[-1].json
        assert body["model"] == "judge-model" and body["response_format"] == {"type": "json_object"}
        assert body["temperature"] == 0.0
        parts = body["messages"][1]["content"]
        assert parts[0]["type"] == "image_url" and parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
        assert "explanation" in parts[1]["text"]
    assert summary.scored == 2 and summary.calls == 2 and summary.prompt_tokens == 1800
    records = load_judged(tmp_path / "out.json")
    assert records[0]["evaluation"]["checklist_result"] == [1, 0, 1, 1]
    assert records[0]["evaluation"]["overall_correctness"] == "NO"


def test_reference_notes_are_the_layers_as_json_whatever_their_type(tmp_path):
    raw = make_item(0, n_checks=(2, 1, 1, 1))
    raw.update(visual={"ocr": "文字", "entities": [{"eid": "E1"}]}, identity=["a", "b"], knowledge=None, reasoning="plain")
    raw["eval_checklist"]["visual"] = [{"text": "reads 文字"}, "second"]
    (loaded,) = load_benchmark(write_bench(tmp_path, [raw]))
    judge = ChecklistJudge(ScriptedVLM(default="x"))
    text = judge.messages(loaded, "an answer", b"png")[1].text
    layers = {"visual": raw["visual"], "identity": ["a", "b"], "knowledge": None, "reasoning": "plain"}
    assert json.dumps(layers, ensure_ascii=False, indent=2) in text
    assert "### visual\n1. reads 文字\n2. second\n### identity\n1. identity check 0 of item 0" in text
