"""Benchmark-family JSONL loading: one shape per benchmark, every bad line named, converters."""

from __future__ import annotations

import json

import pytest

from eval.tasks.base import ConversionUnavailableError
from eval.tasks import convert
from eval.tasks.base import BenchFormatError
from eval.tasks import is_bench_file, load_bench
from tests.eval.tasks.benchkit import avmeme, drivelhub, memecult, memereacon, png, write_jsonl


def test_each_benchmark_loads(tmp_path):
    for i in range(2):
        png(tmp_path / f"m{i}.png")
        (tmp_path / f"v{i}.mp4").write_bytes(b"x")
    cases = {
        "avmeme": [avmeme(0), avmeme(1, answer="a cat")],
        "memereacon": [memereacon(0), memereacon(0, "CSAC-S"), memereacon(0, "CSAC-A"), memereacon(1, "PI-G")],
        "drivelhub": [drivelhub(0), drivelhub(1, extra_relevant=["dh0"])],
        "memecult": [memecult(0), memecult(1)],
    }
    for name, records in cases.items():
        path = write_jsonl(tmp_path / f"{name}.jsonl", records)
        assert is_bench_file(path)
        bench = load_bench(path)
        assert bench.benchmark == name and len(bench.items) == len(records)
    av = load_bench(tmp_path / "avmeme.jsonl").items
    assert [i.answer for i in av] == ["B", "A"]  # the option text is normalised to its letter
    mr = load_bench(tmp_path / "memereacon.jsonl")
    assert mr.tasks == {"CMI-C": 1, "CSAC-S": 1, "CSAC-A": 1, "PI-G": 1}
    assert mr.items[3].references == ["the poster complains about mondays"]


def test_every_bad_line_is_listed_with_its_field(tmp_path):
    (tmp_path / "v0.mp4").write_bytes(b"x")
    records = [
        avmeme(0),
        avmeme(1, answer="E"),  # not among 4 options
        "{not json",
        avmeme(3, options=["only one"]),
        avmeme(4, question_type="trivia"),
        avmeme(0),  # duplicate id
        memecult(5),  # another benchmark in an avmeme file
    ]
    path = write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(BenchFormatError) as info:
        load_bench(path, check_media=False)
    message = str(info.value)
    assert "6 bad line(s)" in message
    assert "line 2 (id=av1): field 'answer': 'E' is not among the 4 options" in message
    assert "line 3: invalid JSON" in message
    assert "line 4 (id=av3): field 'options'" in message
    assert "line 5 (id=av4): field 'question_type': 'trivia'" in message
    assert "line 6 (id=av0): field 'id' duplicates line 1" in message
    assert "line 7 (id=mc5): field 'benchmark': 'memecult' in a avmeme file" in message
    # skipping is explicit and counted, never silent
    bench = load_bench(path, check_media=False, skip_invalid=True)
    assert [i.id for i in bench.items] == ["av0"] and len(bench.skipped) == 6


def test_error_list_is_capped_and_media_checked(tmp_path):
    path = write_jsonl(tmp_path / "many.jsonl", [avmeme(i, answer="Z") for i in range(30)])
    with pytest.raises(BenchFormatError, match=r"30 bad line\(s\)[\s\S]*and 10 more"):
        load_bench(path, check_media=False, max_errors=20)
    missing = write_jsonl(tmp_path / "missing.jsonl", [memecult(0)])
    with pytest.raises(BenchFormatError, match=r"line 1 \(id=mc0\): field 'image': file not found: m0.png"):
        load_bench(missing)
    with pytest.raises(BenchFormatError, match="expected JSONL"):
        load_bench(write_jsonl(tmp_path / "list.jsonl", ["[1, 2]"]))


def test_task_rules(tmp_path):
    path = write_jsonl(tmp_path / "mr.jsonl", [
        memereacon(0, "CSAC-S", comment=None), memereacon(1, "CMI-C", label="Neutral"), memereacon(2, "PC-G", references=[]),
    ])
    message = str(pytest.raises(BenchFormatError, load_bench, path, check_media=False).value)
    assert "field 'comment': required for CSAC-S" in message
    assert "field 'label': 'Neutral' is not one of CEM, MEC" in message
    assert "field 'references': PC-G needs at least one reference text" in message


def test_convert_avmeme_from_the_mteb_card_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [  # the field names of the mteb/AVMeme-Exam card
        {"video_id": "abc", "question": "Which emotion?", "candidates": ["joy", "anger", "fear", "calm"], "answer": "anger",
         "language": "ja", "category": "noisy speech", "summary": "s", "emotion": "angry/annoyed", "usage": "u"},
        {"video_id": "abc", "question": "Where from?", "candidates": ["anime", "film"], "answer": "A", "language": "N/A",
         "category": "sound effect"},
        {"video_id": "bad", "question": "?", "candidates": ["x", "y"], "answer": "z", "category": "music"},
        {"video_id": "bad2", "question": "?", "candidates": ["x", "y"], "answer": "x", "category": "noise"},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "avmeme.parquet")
    records, errors = convert("avmeme", tmp_path / "avmeme.parquet", media_dir="clips")
    assert [r["id"] for r in records] == ["abc", "abc#2"]
    first = records[0]
    assert first["options"][ord(first["answer"]) - 65] == "anger"  # options shuffled (seed 0), the letter follows the answer
    assert sorted(first["options"]) == sorted(["joy", "anger", "fear", "calm"]) and first["option_seed"] == 0
    assert [["joy", "anger", "fear", "calm"][i] for i in first["option_order"]] == first["options"]
    assert first["sound_category"] == "speech" and first["sound_category_raw"] == "noisy_speech"
    assert first["video"] == "clips/abc.mp4" and first["language"] == "ja" and "language" not in records[1]
    assert records[1]["options"][ord(records[1]["answer"]) - 65] == "anime"  # "A" was the release's first option
    assert records[1]["sound_category"] == "sound_effect" and records[0]["splits"] == ["meme-full", "meme-main"]
    assert len(errors) == 2 and "row 2 (video_id=bad): field 'answer': 'z' is not among" in errors[0]
    assert "unknown sound category 'noise'" in errors[1]
    again, _ = convert("avmeme", tmp_path / "avmeme.parquet", media_dir="clips")
    assert again == records  # the same seed, the same order
    (tmp_path / "out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert len(load_bench(tmp_path / "out.jsonl", check_media=False).items) == 2


def test_convert_refuses_where_nothing_is_released(tmp_path):
    csv_path = tmp_path / "memecult.csv"
    csv_path.write_text("Filename,Language,Context,Explanation_1,Explanation_2\na.png,zh,三国,骂人,\nb.png,en,,joke,pun\n", "utf-8")
    with pytest.raises(ConversionUnavailableError, match="MemeCULT-1K: nothing is released yet"):
        convert("memecult", csv_path)
    with pytest.raises(ConversionUnavailableError, match="MemeReaCon: no data or scoring script is released; the JSONL shape is ours"):
        convert("memereacon", csv_path)
