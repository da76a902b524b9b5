"""Loaders: strict validation with errors naming file, item and field."""

from __future__ import annotations

import json

import pytest

from eval.datasets import (
    DatasetError,
    load_benchmark,
    load_judged,
    load_memecap,
    load_memecult,
    load_predictions,
)
from tests.eval.evalkit import make_item, official_eval, write_bench


def test_loads_valid_benchmark_in_order(bench_factory):
    path, raw = bench_factory(3)
    items = load_benchmark(path)
    assert [i.id for i in items] == ["m0", "m1", "m2"]
    assert items[1].checklist("knowledge") == ["knowledge check 0 of item 1"]
    assert items[0].language == "en" and items[0].domain == "anime"


def test_loads_jsonl_and_int_ids(tmp_path):
    items = [make_item(0), make_item(1)]
    items[0]["id"] = 17
    write_bench(tmp_path, items)
    path = tmp_path / "bench.jsonl"
    path.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    assert [i.id for i in load_benchmark(path)] == ["17", "m1"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("knowledge"), "item 1 (id=m1): field 'knowledge' (VIKR dimension) is missing"),
        (lambda r: r["eval_checklist"].update(identity=[]), "field 'eval_checklist.identity' is an empty checklist"),
        (lambda r: r["eval_checklist"].pop("reasoning"), "field 'eval_checklist.reasoning' is missing"),
        (lambda r: r["eval_checklist"].update(visual=["ok", "  "]), "field 'eval_checklist.visual[1]'"),
        (lambda r: r.pop("eval_checklist"), "field 'eval_checklist' is missing"),
        (lambda r: r.update(id="m0"), "field 'id' duplicates item 0"),
        (lambda r: r.update(image_path="images/nope.png"), "field 'image_path': image file not found: images/nope.png"),
        (lambda r: r.pop("image_path"), "field 'image_path' is missing"),
    ],
)
def test_invalid_benchmark_errors_name_item_and_field(tmp_path, mutate, message):
    items = [make_item(0), make_item(1)]
    write_bench(tmp_path, items)
    mutate(items[1])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(items))
    with pytest.raises(DatasetError) as info:
        load_benchmark(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_image_allowed_when_not_checked(tmp_path):
    items = [make_item(0)]
    items[0]["image_path"] = "elsewhere/x.png"
    path = tmp_path / "b.json"
    path.write_text(json.dumps(items))
    assert load_benchmark(path, check_images=False)[0].image_path == "elsewhere/x.png"
    image_root = tmp_path / "root"
    (image_root / "elsewhere").mkdir(parents=True)
    (image_root / "elsewhere" / "x.png").write_bytes(b"png")
    assert len(load_benchmark(path, image_root=image_root)) == 1


def test_bad_json_and_missing_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[{\"id\": 1,}]")
    with pytest.raises(DatasetError, match="bad.json: invalid JSON"):
        load_benchmark(bad)
    with pytest.raises(DatasetError, match="file not found"):
        load_benchmark(tmp_path / "none.json")
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text('{"id": "a", "response": "x"}\nnot json\n')
    with pytest.raises(DatasetError, match="line 2: invalid JSON"):
        load_predictions(jsonl)


def test_predictions(tmp_path):
    path = tmp_path / "pred.json"
    path.write_text(json.dumps([
        {"id": "m0", "image_path": "images/m0.png", "response": "text"},
        {"id": "m1", "image_path": "images/m1.png", "response": None, "trace": {"x": 1}},
    ]))
    preds = load_predictions(path)
    assert preds[0].response == "text" and preds[1].response is None and preds[1].extra == {"trace": {"x": 1}}
    path.write_text(json.dumps([{"id": "m0", "response": 3}]))
    with pytest.raises(DatasetError, match="item 0 \\(id=m0\\): field 'response' must be a string or null"):
        load_predictions(path)
    path.write_text(json.dumps([{"id": "m0", "response": "a"}, {"id": "m0", "response": "b"}]))
    with pytest.raises(DatasetError, match="duplicate prediction for id:m0"):
        load_predictions(path)


def test_official_judge_file_loads_unchanged(tmp_path):
    records = [
        {"id": "m0", "image_path": "images/m0.png", "response": "r", "evaluation": official_eval([1, 1, 0, 1])},
        {"id": "m1", "image_path": "images/m1.png", "response": None, "evaluation": None},
    ]
    path = tmp_path / "judge.json"
    path.write_text(json.dumps(records))
    assert load_judged(path) == records
    path.write_text(json.dumps([{"id": "m0", "evaluation": [1, 0]}]))
    with pytest.raises(DatasetError, match="field 'evaluation' must be an object or null"):
        load_judged(path)


def test_memecult_csv(tmp_path):
    path = tmp_path / "memecult.csv"
    path.write_text(
        "Filename,Language,Context,Explanation_1,Explanation_2,Explanation_3\n"
        "a.jpg,Hindi,ctx,exp one,exp two,\n"
        "b.jpg,Bengali,,only one,,\n",
        encoding="utf-8",
    )
    items = load_memecult(path, image_dir=tmp_path / "imgs")
    assert [i.id for i in items] == ["a.jpg", "b.jpg"]
    assert items[0].references == ("exp one", "exp two") and items[0].language == "Hindi"
    assert items[1].context is None and items[1].image_path == str(tmp_path / "imgs" / "b.jpg")
    path.write_text("Filename,Language,Explanation_1\nc.jpg,Tamil,\n")
    with pytest.raises(DatasetError, match="row 2 \\(c.jpg\\): no reference explanation"):
        load_memecult(path)
    path.write_text("Name,Language,Explanation_1\n")
    with pytest.raises(DatasetError, match="column 'Filename' is missing"):
        load_memecult(path)


def test_memecap_json(tmp_path):
    path = tmp_path / "memes-test.json"
    path.write_text(json.dumps([
        {"category": "memes", "img_captions": ["a dog"], "meme_captions": ["Meme poster is tired."],
         "title": "Mondays", "url": "u", "img_fname": "memes_1.png", "metaphors": [], "post_id": "p1"},
    ]))
    (item,) = load_memecap(path)
    assert item.id == "p1" and item.references == ("Meme poster is tired.",) and item.context == "Mondays"
    path.write_text(json.dumps([{"post_id": "p2", "img_fname": "x.png", "meme_captions": []}]))
    with pytest.raises(DatasetError, match="post_id=p2\\): field 'meme_captions'"):
        load_memecap(path)
