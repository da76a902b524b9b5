"""Release interoperability, both ways, with files written by hand in the shapes the MemeBench
release documents (its README and its judge/aggregate/score scripts), never by our own writers.

Ours → release: predictions are ``{id, image_path, response}`` with the benchmark's ids as
written (the release's dual-judge aggregation matches ``("id", id)`` by value and type; its
judge matches by ``image_path``); judge files carry ``evaluation`` with a 4-element binary
``checklist_result``, an int ``checklist_score``, ``overall_correctness`` YES/NO,
``item_results`` per layer and ``parse_success`` (what the release's scripts read).

Release → ours: its judge files (itemized JSON, the text fallback, an unparsed reply, a
missing evaluation) and its dual-aggregated output load in ``kar judge merge`` and ``kar report``.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.fakes.openai_server import FakeOpenAIServer
from tests.services.memebench_release import judge_responder, release_items, write_release

DIMS = ("visual", "identity", "knowledge", "reasoning")
runner = CliRunner()


@pytest.fixture
def env(clean_kar_env, tmp_path):
    return clean_kar_env(KAR_DATA_DIR=str(tmp_path / "data"))


def release_complete(evaluation) -> bool:
    """The release's judge accepts an evaluation as complete (4-layer schema) when these hold."""
    vector = evaluation.get("checklist_result")
    return (
        isinstance(evaluation.get("checklist_score"), int) and not isinstance(evaluation.get("checklist_score"), bool)
        and 0 <= evaluation["checklist_score"] <= 4
        and isinstance(vector, list) and len(vector) == 4
        and all(type(v) is int and v in (0, 1) for v in vector)
        and evaluation.get("overall_correctness") in {"YES", "NO"}
    )


async def test_our_predictions_have_the_release_shape_and_ids(tmp_path):
    from agents.pipeline import KARPipeline, PipelineConfig, PipelineDeps
    from agents.runner import AblationRunner
    from eval.tasks.memebench import load_run_items
    from tests.fakes.vlm import ScriptedVLM

    bench, _ = write_release(tmp_path / "memebench")
    pipeline = KARPipeline(PipelineDeps(vlm=ScriptedVLM(default="an answer"), config=PipelineConfig(ocr_enabled=False)))
    await AblationRunner(pipeline, tmp_path / "run", ["vanilla"]).run(load_run_items(bench))
    preds = json.loads((tmp_path / "run" / "predictions" / "vanilla.json").read_text("utf-8"))
    documented = [{"id": it["id"], "image_path": it["image_path"], "response": "an answer"} for it in release_items()]
    assert preds == documented  # the same ids, of the same types, as the benchmark


def test_our_judge_file_has_the_release_shape(env, tmp_path):
    bench, _ = write_release(tmp_path / "memebench")
    pred = tmp_path / "pred.json"  # the release's documented prediction shape, by hand
    pred.write_text(json.dumps([
        {"id": 1, "image_path": "meme_images/image_0001.png", "response": "covers: visual identity. flags: detail."},
        {"id": 2, "image_path": "meme_images/image_0002.png", "response": "covers: visual identity knowledge reasoning. flags: none."},
        {"id": "m-4", "image_path": "meme_images/image_0004.png", "response": None},
    ]), "utf-8")
    out = tmp_path / "judged.json"
    with FakeOpenAIServer(responder=judge_responder(strict=True)) as judge:
        result = runner.invoke(app, ["judge", "--bench", str(bench), "--pred", str(pred), "--out", str(out),
                                     "--judge-model", "j", "--judge-base-url", judge.base_url, "--no-cache"])
    assert result.exit_code == 0, result.output
    records = json.loads(out.read_text("utf-8"))
    assert [r["id"] for r in records] == [1, 2, 3, "m-4"]
    assert [r["image_path"] for r in records] == [it["image_path"] for it in release_items()]
    one, two, three, four = (r["evaluation"] for r in records)
    for scored, vector in ((one, [1, 1, 0, 0]), (two, [0, 1, 1, 1])):
        assert release_complete(scored) and scored["checklist_result"] == vector and scored["parse_success"] is True
        assert scored["overall_correctness"] == ("YES" if all(vector[1:]) else "NO")
        assert scored["dimension_result"] == dict(zip(DIMS, vector))
        assert set(scored["item_results"]) == set(DIMS)
        assert all(set(row) >= {"index", "pass", "reason"} for rows in scored["item_results"].values() for row in rows)
    assert [row["index"] for row in one["item_results"]["visual"]] == [1, 2]
    for unscored in (three, four):  # no prediction / null response: a failure the release scores as NO
        assert unscored["parse_success"] is False and unscored["overall_correctness"] == "NO"


def release_itemized(vector, passes=None, index_base=0):
    """An evaluation as the release's judge writes it for an itemized JSON reply."""
    passes = passes or {d: [v] for d, v in zip(DIMS, vector)}
    return {
        "raw_content": json.dumps({"checklist_result": vector}),
        "checklist_score": sum(vector), "checklist_result": vector,
        "overall_correctness": "YES" if all(vector[1:]) else "NO", "complete_vikr": all(vector),
        "item_results": {d: [{"index": j + index_base, "pass": p, "reason": f"{d} {j}"} for j, p in enumerate(ps)]
                         for d, ps in passes.items()},
        "dimension_result": dict(zip(DIMS, vector)), "parse_success": True, "parse_error": None, "format": "itemized_json",
    }


def release_text_fallback(vector):
    """The release's judge on a plain-text reply: a vector, no item_results, no format key."""
    return {"raw_content": f"CHECKLIST_SCORE: {sum(vector)}/4\nCHECKLIST_RESULT: {vector}\nOVERALL_CORRECTNESS: "
                           f"{'YES' if all(vector[1:]) else 'NO'}",
            "checklist_score": sum(vector), "checklist_result": vector,
            "overall_correctness": "YES" if all(vector[1:]) else "NO", "complete_vikr": all(vector),
            "item_results": None, "dimension_result": dict(zip(DIMS, vector)), "parse_success": True, "parse_error": None}


def release_unparsed():
    return {"raw_content": "I cannot judge this.", "checklist_score": None, "checklist_result": None,
            "overall_correctness": None, "complete_vikr": None, "item_results": None, "dimension_result": None,
            "parse_success": False, "parse_error": "missing checklist_score, checklist_result, overall_correctness"}


def test_release_judge_files_load_in_merge_and_report(env, tmp_path):
    bench, _ = write_release(tmp_path / "memebench")
    paths = [it["image_path"] for it in release_items()]
    # judge A: itemized (0-based indices, as the release's normaliser keeps them), a text fallback, unparsed, missing
    a = [
        {"id": 1, "image_path": paths[0], "response": "r1",
         "evaluation": release_itemized([1, 1, 1, 1], {"visual": [1, 1], "identity": [1], "knowledge": [1], "reasoning": [1]})},
        {"id": 2, "image_path": paths[1], "response": "r2", "evaluation": release_text_fallback([1, 1, 1, 0])},
        {"id": 3, "image_path": paths[2], "response": "r3", "evaluation": release_unparsed()},
        {"id": "m-4", "image_path": paths[3], "response": "r4", "evaluation": None},
    ]
    b = [
        {"id": 1, "image_path": paths[0], "response": "r1",
         "evaluation": release_itemized([0, 1, 1, 1], {"visual": [1, 0], "identity": [1], "knowledge": [1], "reasoning": [1]})},
        {"id": 2, "image_path": paths[1], "response": "r2", "evaluation": release_itemized([1, 1, 1, 1], {"visual": [1, 1], "identity": [1], "knowledge": [1], "reasoning": [1]})},
        {"id": 3, "image_path": paths[2], "response": "r3", "evaluation": release_itemized([1, 1, 1, 1], {"visual": [1, 1], "identity": [1], "knowledge": [1], "reasoning": [1]})},
        {"id": "m-4", "image_path": paths[3], "response": "r4", "evaluation": release_itemized([1, 1, 1, 1], {"visual": [1, 1], "identity": [1], "knowledge": [1], "reasoning": [1]})},
    ]
    (tmp_path / "a.json").write_text(json.dumps(a), "utf-8")
    (tmp_path / "b.json").write_text(json.dumps(b), "utf-8")
    result = runner.invoke(app, ["judge", "merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                                 "--bench", str(bench), "--out", str(tmp_path / "dual.json")])
    assert result.exit_code == 0, result.output
    merged = json.loads((tmp_path / "dual.json").read_text("utf-8"))
    assert [r["id"] for r in merged] == [1, 2, 3, "m-4"]
    assert merged[0]["evaluation"]["checklist_result"] == [0, 1, 1, 1]  # item-level AND
    assert merged[0]["evaluation"]["format"] == "dual_aggregated"
    assert merged[1]["evaluation"]["checklist_result"] == [1, 1, 1, 0]  # A judged only per layer
    assert merged[1]["evaluation"]["format"] == "dual_aggregated_dimension_fallback"
    assert [r["evaluation"]["parse_success"] for r in merged] == [True, True, False, False]

    # the release's own dual-aggregated output (written by hand in its shape) reports unchanged
    release_dual = [
        {"id": 1, "image_path": paths[0], "response": "r1", "evaluation": {**release_itemized([1, 1, 1, 1]), "format": "dual_aggregated"}},
        {"id": 2, "image_path": paths[1], "response": "r2", "evaluation": {
            "checklist_score": 2, "checklist_result": [1, 1, 0, 0], "complete_vikr": False, "overall_correctness": "NO",
            "dimension_result": dict(zip(DIMS, [1, 1, 0, 0])), "item_results": None, "parse_success": True,
            "parse_error": None, "format": "dual_aggregated_dimension_fallback"}},
        {"id": 3, "image_path": paths[2], "response": "r3", "evaluation": {
            "checklist_score": 0, "checklist_result": [0, 0, 0, 0], "complete_vikr": False, "overall_correctness": "NO",
            "dimension_result": dict.fromkeys(DIMS, 0),
            "item_results": {d: [{"index": 0, "pass": 0, "reason": "missing judge result"}] for d in DIMS},
            "parse_success": False, "parse_error": "one or both judge evaluations failed to parse", "format": "dual_aggregated"}},
    ]  # item m-4 absent: a failure over the whole benchmark
    (tmp_path / "release_dual.json").write_text(json.dumps(release_dual), "utf-8")
    result = runner.invoke(app, ["report", "--bench", str(bench), "--judged", f"vanilla={tmp_path / 'release_dual.json'}",
                                 "--judged", f"kar={tmp_path / 'dual.json'}", "--out", str(tmp_path / "report"),
                                 "--no-plots", "--bootstrap", "0"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text("utf-8"))
    vanilla, kar = metrics["conditions"]["vanilla"]["metrics"], metrics["conditions"]["kar"]["metrics"]
    assert vanilla["n"] == 4 and vanilla["success"] == 0.25 and vanilla["n_unscored"] == 2
    assert vanilla["coverage"] == {"V": 0.5, "I": 0.5, "K": 0.25, "R": 0.25}
    assert kar["success"] == 0.0 and kar["coverage"] == {"V": 0.25, "I": 0.5, "K": 0.5, "R": 0.25}
    success = metrics["paired"]["kar"]["layers"]["Success"]
    assert (success["repair"], success["damage"], success["ratio_status"]) == (0.0, 1.0, "finite")
