"""AVMeme Exam as released: the official row shape, seeded shuffling, sound groups, cheat marks, both splits."""

from __future__ import annotations

import json

import pytest

from eval.metrics.tasks import choice_metrics, choice_outcomes
from eval.tasks import load_bench, to_task_items
from eval.tasks.avmeme import AVMemeItem, convert_avmeme, shuffled

OFFICIAL = [  # the official naplab/AVMeme-Exam columns: the answer is the option's text
    {"video_path": "videos/m1.mp4", "question": "Which film?", "choices": ["Up", "Jaws", "Heat", "Rocky"], "solution": "Jaws",
     "language": "en", "summary": "s", "usage": "u", "emotion": ["fearful/anxious"], "sensitivity": [], "category": "music",
     "question_type": "world_knowledge"},
    {"video_path": "videos/m2.mp4", "question": "What is said?", "choices": ["hi", "bye", "no"], "solution": "bye",
     "language": "zh", "emotion": [], "sensitivity": ["text cheat"], "category": "clean speech", "question_type": "language_analysis"},
    {"video_path": "videos/m3.mp4", "question": "Who sings?", "choices": ["a", "b"], "solution": "b", "language": "ja",
     "emotion": [], "sensitivity": ["Visual-Cheat"], "category": "song", "question_type": "audio_analysis"},
    {"video_path": "videos/m4.mp4", "question": "Sound?", "choices": ["x", "y"], "solution": "y", "category": "noisy speech"},
]


def _write(tmp_path, rows):
    path = tmp_path / "avmeme.json"
    path.write_text(json.dumps(rows), "utf-8")
    return path


def test_official_rows_shuffled_grouped_and_split(tmp_path):
    records, errors = convert_avmeme(_write(tmp_path, OFFICIAL), media_dir="clips", seed=7)
    assert not errors and [r["id"] for r in records] == ["m1", "m2", "m3", "m4"]
    for row, record in zip(OFFICIAL, records):
        assert record["options"][ord(record["answer"]) - 65] == row["solution"]  # the letter is recorded per item
        assert [row["choices"][i] for i in record["option_order"]] == record["options"] and record["option_seed"] == 7
        assert record["option_order"] == shuffled(row["choices"], 7, record["id"])
    assert records[0]["video"] == "clips/m1.mp4" and records[0]["question_type"] == "world_knowledge"
    assert [r["sound_category_raw"] for r in records] == ["music", "clean_speech", "song", "noisy_speech"]
    assert [r["sound_category"] for r in records] == ["music", "speech", "song", "speech"]  # five raw values, four groups
    assert records[1]["text_cheat"] and records[1]["splits"] == ["meme-full"]  # meme-main leaves text-cheat items out
    assert all(r["splits"] == ["meme-full", "meme-main"] for r in (records[0], records[2], records[3]))
    assert records[2]["visual_cheat"] and not records[0]["visual_cheat"]
    kept, _ = convert_avmeme(_write(tmp_path, OFFICIAL), seed=None)
    assert kept[0]["options"] == OFFICIAL[0]["choices"] and kept[0]["answer"] == "B"
    other, _ = convert_avmeme(_write(tmp_path, OFFICIAL), seed=8)
    assert [r["option_order"] for r in other] != [r["option_order"] for r in records]


def test_bad_official_rows_are_named(tmp_path):
    rows = [OFFICIAL[0] | {"solution": "Alien"}, OFFICIAL[0] | {"category": "noise"}, {"question": "?", "choices": ["a", "b"], "solution": "a"}]
    records, errors = convert_avmeme(_write(tmp_path, rows))
    assert records == [] and len(errors) == 3
    assert "row 0 (video_path=videos/m1.mp4): field 'answer': 'Alien' is not among the 4 options" in errors[0]
    assert "row 1 (video_path=videos/m1.mp4): field 'category': unknown sound category 'noise'" in errors[1]
    assert "row 2 (video_path=?): field 'video_path' is missing" in errors[2]
    with pytest.raises(ValueError, match="a text-cheat item is not in meme-main"):
        AVMemeItem.model_validate({"benchmark": "avmeme", "id": "x", "video": "v.mp4", "question": "q", "options": ["a", "b"],
                                   "answer": "A", "text_cheat": True, "splits": ["meme-full", "meme-main"]})


def test_breakdowns_by_split_and_both_sound_keys_and_visual_cheat_is_audio_only(tmp_path):
    records, _ = convert_avmeme(_write(tmp_path, OFFICIAL), media_dir="", seed=1)
    bench_path = tmp_path / "av.jsonl"
    bench_path.write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    bench = load_bench(bench_path, check_media=False)
    replies = {r["id"]: r["answer"] for r in records[:3]}  # m4 unanswered
    m = choice_metrics(bench.items, choice_outcomes(bench.items, replies))
    assert m["breakdowns"]["split"] == {"meme-full": {"n": 4, "accuracy": 0.75}, "meme-main": {"n": 3, "accuracy": 2 / 3}}
    assert m["breakdowns"]["sound_category"]["speech"] == {"n": 2, "accuracy": 0.5}
    assert m["breakdowns"]["sound_category_raw"]["noisy_speech"] == {"n": 1, "accuracy": 0.0}
    for name in ("m1.mp4", "m2.mp4", "m3.mp4", "m4.mp4"):
        (tmp_path / "videos").mkdir(exist_ok=True)
        (tmp_path / "videos" / name).write_bytes(b"x")
    items = {t.id: t for t in to_task_items(bench, tmp_path)}
    assert items["m3"].audio_only and not items["m1"].audio_only
