"""TaskRunner: media prepared once per item and freed, resume, text_only sends no media, failures recorded."""

from __future__ import annotations

import asyncio
import json

from agents.pipeline import KARPipeline, PipelineDeps
from agents.pipeline.state import ExplainContext
from agents.tasks import TaskItem, TaskRunner
from culturebase.settings import Settings
from tests.fakes.vlm import ScriptedVLM
from tests.support.clips import make_clip


def _item(i, clip):
    return TaskItem(id=f"c{i}", benchmark="avmeme", task="MCQ", kind="mcq", instruction="Question: q?\nA. x\nB. y",
                    media_path=clip.name, video_file=clip, context=ExplainContext(context_note="Doge"))


def test_resume_text_only_and_media_freed(tmp_path, monkeypatch):
    clip = make_clip(tmp_path / "c.mp4", 1.0, tone_hz=None)
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"no video here" * 20)
    items = [_item(0, clip), _item(1, bad)]
    settings = Settings(media_frames=2, media_scene_frames=0)
    vlm = ScriptedVLM(default="Answer: B")
    pipeline = KARPipeline(PipelineDeps(vlm=vlm))
    prepared = []
    import agents.tasks as tasks

    real = tasks.prepare_video
    monkeypatch.setattr(tasks, "prepare_video", lambda *a, **k: prepared.append(a[0]) or real(*a, **k))
    first = TaskRunner(pipeline, tmp_path / "out", ["vanilla"], settings=settings)
    summary = asyncio.run(first.run(items))
    assert summary.ran == 2 and summary.failed == 1 and first._media == {}
    second = TaskRunner(pipeline, tmp_path / "out", ["vanilla", "text_only", "context_note"], settings=settings)
    summary = asyncio.run(second.run(items))
    assert summary.skipped == 2 and summary.ran == 4 and second._media == {}  # nothing left cached
    assert prepared.count(clip) == 2  # once per run, shared by that run's conditions
    calls = [c.messages[0] for c in vlm.calls]
    assert sum(1 for m in calls if not m.images) == 1  # text_only: no frames for c0 (c1 failed before any call)
    assert any(len(m.images) == 2 and "Cultural context note: Doge" in m.text for m in calls)
    traces = [json.loads(line) for line in (tmp_path / "out" / "traces" / "text_only.jsonl").read_text().splitlines()]
    by_id = {t["id"]: t for t in traces}
    assert by_id["c0"]["trace"]["media"] == {"kind": "none", "text_only": True}
    assert by_id["c1"]["error"]["stage"] == "media" and "not a readable video" in by_id["c1"]["error"]["message"]
