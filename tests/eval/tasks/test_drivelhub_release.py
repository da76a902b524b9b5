"""DrivelHub+ read and written as the release (extraordinarylab/drivel-hub-plus) reads and writes it.

``release_summary`` below is this test's own reading of the release's summarize rules (its
``scripts/summarize_judgments.py``): every ``judgments.jsonl`` under a folder; the ``judge_*``
fields that hold booleans or numbers; N = every row; a boolean field is the share of true
among its non-null values (×100), a numeric one the mean of its non-null values.
"""

from __future__ import annotations

import asyncio
import json
import numbers
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents.vlm.base import ChatResult
from eval.judges.rubric import RubricJudge, judge_all
from eval.records import DatasetError
from eval.tasks import convert, load_bench
from eval.tasks.drivelhub import METADATA_COLUMNS, read_judgments, read_metadata, summarize
from services.cli import app

runner = CliRunner()
REAL = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "real" / "drivelhub-plus"
GEMMA = "judgments_gemma-4-E2B-it-No-Thinking.jsonl"
QWEN = "judgments_Qwen3-VL-8B-Instruct.jsonl"


def release_summary(root: Path) -> dict[str, dict[str, object]]:
    """The release's summarize rules, written independently of eval/: {family/model: {field: value}}."""
    out = {}
    for path in sorted(root.rglob("judgments.jsonl")):
        records = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
        kinds: dict[str, set[str]] = {}
        for record in records:
            for key, value in record.items():
                if key.startswith("judge_"):
                    kind = "bool" if isinstance(value, bool) else "number" if isinstance(value, numbers.Number) else "other"
                    kinds.setdefault(key, set()).add(kind)
        row: dict[str, object] = {"n": len(records)}
        for key, seen in kinds.items():
            if not seen & {"bool", "number"}:
                continue
            values = [r[key] for r in records if r.get(key) is not None]
            if all(isinstance(v, bool) for v in values):
                row[key] = 100 * sum(values) / len(values)
            else:
                nums = [float(v) for v in values if isinstance(v, numbers.Number) and not isinstance(v, bool)]
                row[key] = sum(nums) / len(nums)
        rel = path.relative_to(root)
        out[f"{rel.parts[0]}/{path.parent.name}" if len(rel.parts) >= 3 else path.parent.name] = row
    return out


def _kar(*args: str) -> dict:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def real() -> Path:
    if not (REAL / GEMMA).is_file():
        pytest.skip("the release's judgments are not in ../shared/data/real/drivelhub-plus")
    return REAL


def test_release_judgments_give_the_release_figures(real, tmp_path):
    report = _kar("report", "--bench", str(real / "metadata_from_judgments.csv"), "--judged", f"gemma-4-E2B-it-No-Thinking={real / GEMMA}",
                  "--judged", f"Qwen3-VL-8B-Instruct={real / QWEN}", "--json", "--bootstrap", "200")
    gemma, qwen = report["runs"]["gemma-4-E2B-it-No-Thinking"], report["runs"]["Qwen3-VL-8B-Instruct"]
    # the release's published row: N 1000, Aligned 4.8 %, Score Total −2.811 (one failed judgment, 834 negative totals)
    assert (gemma["n"], round(gemma["aligned_pct"], 1), round(gemma["score_total"], 3)) == (1000, 4.8, -2.811)
    assert gemma["n_failed"] == 1 and gemma["n_recomputed_totals"] == 0
    assert sum(r["judge_score_total"] < 0 for r in read_judgments(real / GEMMA).judged) == 834
    # Qwen3-VL-8B-Instruct against the release's rules computed here from its file
    folder = tmp_path / "judgments" / "Qwen" / "Qwen3-VL-8B-Instruct"
    folder.mkdir(parents=True)
    (folder / "judgments.jsonl").write_bytes((real / QWEN).read_bytes())
    expected = release_summary(tmp_path / "judgments")["Qwen/Qwen3-VL-8B-Instruct"]
    assert qwen["n"] == expected["n"] == 1000
    assert qwen["aligned_pct"] == pytest.approx(expected["judge_aligned"]) and round(qwen["aligned_pct"], 1) == 48.9
    assert qwen["score_total"] == pytest.approx(expected["judge_score_total"]) and round(qwen["score_total"], 3) == 4.721
    for name in ("core_intent", "rhetorical_signal", "affective_or_social_meaning", "grounding", "hallucination_penalty",
                 "literal_only_penalty", "vague_or_overgeneralized_penalty"):
        assert qwen[name] == pytest.approx(expected[f"judge_{name}"])
    assert report["columns"][-1] == "score_total" and qwen["score_total_ci"][0] < qwen["score_total"] < qwen["score_total_ci"][1]
    # a judgments/ tree names its runs family/model, as the release's table does
    tree = _kar("report", "--bench", str(real / "metadata_from_judgments.csv"), "--judged", str(tmp_path / "judgments"), "--json",
                "--bootstrap", "0")
    assert list(tree["runs"]) == ["Qwen/Qwen3-VL-8B-Instruct"] and tree["runs"]["Qwen/Qwen3-VL-8B-Instruct"]["family"] == "Qwen"
    # the human form is the release's table (rendered by services/cli/report.py)
    human = runner.invoke(app, ["report", "--dataset", str(real / "metadata_from_judgments.csv"), "--judged", str(tmp_path / "judgments"),
                                "--bootstrap", "0"])
    assert human.exit_code == 0, human.output
    assert "Family" in human.stdout and "Qwen3-VL-8B-Instruct" in human.stdout and "48.9%" in human.stdout and "4.721" in human.stdout


GOOD = ('{"aligned": true, "core_intent": 4, "rhetorical_signal": 2, "affective_or_social_meaning": 1, "grounding": 2,'
        ' "hallucination_penalty": 1, "literal_only_penalty": 0, "vague_or_overgeneralized_penalty": 0, "reasoning_short": "ok"}')
POOR = ('{"aligned": false, "core_intent": 0, "rhetorical_signal": 0, "affective_or_social_meaning": 0, "grounding": 1,'
        ' "hallucination_penalty": 2, "literal_only_penalty": 3, "vague_or_overgeneralized_penalty": 2, "reason": "literal"}')


class ScriptedVLM:
    model_id = "judge"

    def __init__(self, replies):
        self.replies = list(replies)

    async def chat(self, messages, sampling=None):
        return ChatResult(self.replies.pop(0), "judge")


def _metadata(path: Path, files: list[str], *, bom: bool = False, drop: str | None = None) -> Path:
    columns = [c for c in METADATA_COLUMNS if c != drop]
    lines = [",".join(columns)] + [",".join(f if c == "file" else f"irony in {f}" if c == "annotation" else "" for c in columns) for f in files]
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", "utf-8")
    return path


def test_our_rubric_rows_read_by_the_release_rules(tmp_path):
    meta = _metadata(tmp_path / "metadata.csv", ["a.mp4", "b.mp4", "c.mp4", "d.mp4"], bom=True)
    bench = load_bench(meta, check_media=False)
    responses = {"a.mp4": "ironic", "b.mp4": "literal", "c.mp4": "unparseable", "d.mp4": ""}
    jobs = [{"row": item.release_row() | {"input_mode": "full"}, "narrative": item.narrative, "response": responses[item.id]}
            for item in bench.items]
    vlm = ScriptedVLM([GOOD, POOR, "not json", "not json", "not json"])
    rows = asyncio.run(judge_all(RubricJudge(vlm, max_retries=2), jobs, concurrency=1))
    assert [r["judge_aligned"] for r in rows] == [True, False, None, None]
    assert rows[1]["judge_score_total"] == -6  # 0+0+0+1 − 2−3−2: negative, no floor
    assert "unparseable after 3 replies" in rows[2]["judge_error"] and rows[3]["judge_error"] == "no response to judge"
    folder = tmp_path / "judgments" / "ours" / "kar-vanilla"
    folder.mkdir(parents=True)
    (folder / "judgments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    theirs = release_summary(tmp_path / "judgments")["ours/kar-vanilla"]
    ours = summarize(rows)
    assert theirs == {"n": 4, "judge_aligned": 50.0, **{f"judge_{k}": ours[k] for k in (
        "core_intent", "rhetorical_signal", "affective_or_social_meaning", "grounding", "hallucination_penalty",
        "literal_only_penalty", "vague_or_overgeneralized_penalty")}, "judge_score_total": 1.0}  # (8 + −6) / 2
    report = _kar("report", "--bench", str(meta), "--judged", str(tmp_path / "judgments"), "--json", "--bootstrap", "0")
    run = report["runs"]["ours/kar-vanilla"]
    assert (run["n"], run["n_failed"], run["aligned_pct"], run["score_total"]) == (4, 2, 50.0, 1.0)


def _judged(file: str, mode: str = "full", total: int | None = None, **scores) -> dict:
    parts = {"core_intent": 3, "rhetorical_signal": 1, "affective_or_social_meaning": 1, "grounding": 1, "hallucination_penalty": 0,
             "literal_only_penalty": 1, "vague_or_overgeneralized_penalty": 0} | scores
    row = {"file": file, "annotation": "x", "input_mode": mode, "implicit_meaning": "y", "judge_aligned": parts["core_intent"] >= 3}
    row |= {f"judge_{k}": v for k, v in parts.items()}
    return row | {"judge_score_total": (3 + 1 + 1 + 1 - 1) if total is None else total, "judge_reason": "r"}


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def test_bad_input_failed_rows_recomputed_totals_and_metadata(tmp_path):
    meta = _metadata(tmp_path / "metadata.csv", ["a.mp4", "b.mp4", "c.mp4"])
    rows = [_judged("a.mp4"), _judged("b.mp4", total=11), {"file": "c.mp4", "judge_aligned": None, "judge_error": "timeout"}]
    full = _write(tmp_path / "full.jsonl", rows)
    report = _kar("report", "--bench", str(meta), "--judged", f"m={full}", "--json", "--bootstrap", "0")["runs"]["m"]
    assert report["n"] == 3 and report["n_failed"] == 1 and report["aligned_pct"] == 100.0
    assert report["score_total"] == 5.0  # b's total 11 disagrees with its parts (5) and is recomputed, as the release does
    assert report["n_recomputed_totals"] == 1 and "file b.mp4: judge_score_total 11 -> 5" in report["recomputed_totals"][0]
    # a score out of its range, or a non-boolean judge_aligned, names the line and the field
    _write(tmp_path / "bad.jsonl", [_judged("a.mp4"), _judged("b.mp4", grounding=3)])
    with pytest.raises(DatasetError, match=r"bad.jsonl: line 2 \(file=b.mp4\): field 'judge_grounding' must be an integer 0-2, got 3"):
        read_judgments(tmp_path / "bad.jsonl")
    _write(tmp_path / "bad2.jsonl", [_judged("a.mp4") | {"judge_aligned": "yes"}])
    with pytest.raises(DatasetError, match="line 1 .*'judge_aligned' must be true, false or null"):
        read_judgments(tmp_path / "bad2.jsonl")
    # metadata.csv: a BOM is fine; a missing column is named
    assert [r["file"] for r in read_metadata(_metadata(tmp_path / "bom.csv", ["a.mp4"], bom=True))] == ["a.mp4"]
    missing = _metadata(tmp_path / "nocol.csv", ["a.mp4"], drop="modalities")
    bad = runner.invoke(app, ["report", "--bench", str(missing), "--judged", f"m={full}", "--json"])
    assert bad.exit_code == 2 and "column(s) 'modalities' missing from the header" in bad.output
    # rows for clips not in metadata.csv, and clips without a row, are counted
    other = _write(tmp_path / "other.jsonl", [_judged("a.mp4"), _judged("zzz.mp4")])
    counted = _kar("report", "--bench", str(meta), "--judged", f"m={other}", "--json", "--bootstrap", "0")["runs"]["m"]
    assert counted["n_not_in_metadata"] == 1 and counted["not_in_metadata"] == ["zzz.mp4"] and counted["n_missing_clips"] == 2


def test_input_modes_are_paired_against_full(tmp_path):
    meta = _metadata(tmp_path / "metadata.csv", ["a.mp4", "b.mp4", "c.mp4"])
    rows = [_judged("a.mp4"), _judged("b.mp4"), _judged("c.mp4", core_intent=1),
            _judged("a.mp4", "without-audio"), _judged("b.mp4", "without-audio", core_intent=0), _judged("c.mp4", "without-audio")]
    report = _kar("report", "--bench", str(meta), "--judged", f"m={_write(tmp_path / 'm.jsonl', rows)}", "--json", "--bootstrap", "0")
    assert set(report["runs"]) == {"m/full", "m/without-audio"}
    paired = report["paired"]["m/without-audio"]
    assert paired["baseline"] == "m/full" and paired["n_clips"] == 3
    assert paired["aligned"]["repair"] == 1.0 and paired["aligned"]["damage"] == 0.5  # c repaired; b of {a, b} damaged
    assert paired["score_total"]["delta"] == pytest.approx(((5 - 5) + (2 - 5) + (5 - 3)) / 3)


def test_convert_metadata_and_qrels_json(tmp_path):
    meta = _metadata(tmp_path / "metadata.csv", ["a.mp4", "b.mp4"])
    (tmp_path / "qrels.json").write_text(json.dumps({"a.mp4": {"a.mp4": 1, "b.mp4": 1, "gone.mp4": 1}}), "utf-8")
    records, errors = convert("drivelhub", meta, media_dir="data")
    assert not errors and [r["id"] for r in records] == ["a.mp4", "b.mp4"]
    assert records[0]["video"] == "data/a.mp4" and records[0]["narrative"] == "irony in a.mp4" and records[0]["extra_relevant"] == ["b.mp4", "gone.mp4"]
    assert records[0]["modalities"] == "" and "annotation" not in records[0]
    # reasoning-as-retrieval with the release's qrels.json: a pair naming a file the run lacks is left out and listed
    run = tmp_path / "run.trec"
    run.write_text("n2v:a.mp4 Q0 b.mp4 1 0.9 t\nn2v:a.mp4 Q0 a.mp4 2 0.8 t\nv2n:a.mp4 Q0 a.mp4 1 0.9 t\n"
                   "n2v:b.mp4 Q0 b.mp4 1 0.9 t\nv2n:b.mp4 Q0 a.mp4 1 0.9 t\nv2n:b.mp4 Q0 b.mp4 2 0.5 t\n", "utf-8")
    out = _kar("report-retrieval", "--run", str(run), "--qrels", str(tmp_path / "qrels.json"), "--json")
    assert out["qrels_not_in_run"] == ["a.mp4 -> gone.mp4"]
    assert set(out["text_to_video"]) == {"recall@1", "recall@5", "recall@10", "mrr", "ndcg@5", "ndcg@10"}
    assert out["text_to_video"]["mrr"] == 1.0 and out["text_to_video"]["recall@1"] == 0.75  # a: 1 of {a, b} at rank 1; b: itself
    assert out["video_to_text"]["mrr"] == pytest.approx((1 + 0.5) / 2)  # b (not in qrels.json) has itself as its relevant doc
