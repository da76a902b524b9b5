"""Loaders: strict validation with errors naming file, item and field."""

from __future__ import annotations

import json

import pytest

from eval.records import DatasetError, load_judged, load_predictions
from eval.tasks.memebench import load_benchmark
from eval.tasks.memecap import load_memecap
from eval.tasks.memecult import load_memecult
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


# -- the release's documented shape ------------------------------------------------------------


def release_item(item_id, **extra):
    """An item as the MemeBench release documents it: the VIKR layers are JSON objects."""
    return {
        "id": item_id,
        "image_path": f"meme_images/image_{item_id:04d}.png" if isinstance(item_id, int) else f"meme_images/{item_id}.png",
        "visual": {"ocr": "我从未见过有如此厚颜无耻之人", "entities": [{"eid": "E1", "appearance": "羽扇纶巾"}]},
        "identity": {"entities": [{"eid": "E1", "name": "诸葛亮", "source_work": "三国演义"}]},
        "knowledge": {"background": ["骂死王朗"]},
        "reasoning": {"mechanism": "irony"},
        "eval_checklist": {"visual": ["reads the caption"], "identity": ["names 诸葛亮"],
                           "knowledge": ["mentions 骂死王朗"], "reasoning": ["explains the irony"]},
        **extra,
    }


def write_release(tmp_path, items, images=True):
    path = tmp_path / "annotations.json"
    path.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    if images:
        for item in items:
            target = tmp_path / item["image_path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"\x89PNG")
    return path


def test_release_items_load_with_layers_verbatim(tmp_path):
    items = [
        release_item(1, lang="zh", category="anime", source_platform="weibo"),
        release_item(2, visual=["a list layer", {"x": 1}], identity="a plain string", knowledge=None, language="en", domain="film"),
        release_item("m-3"),
    ]
    items[2]["eval_checklist"]["visual"] = [{"text": "obj text"}, {"item": "obj item"}, {"requirement": "obj req"},
                                            {"description": "obj desc", "weight": 2}, "plain"]
    loaded = load_benchmark(write_release(tmp_path, items))
    first, second, third = loaded
    assert first.visual == items[0]["visual"] and first.identity == items[0]["identity"]  # never flattened
    assert first.layers() == {d: items[0][d] for d in ("visual", "identity", "knowledge", "reasoning")}
    assert second.visual == ["a list layer", {"x": 1}] and second.identity == "a plain string" and second.knowledge is None
    assert (first.id, first.source_id, third.id, third.source_id) == ("1", 1, "m-3", "m-3")
    assert (first.language, first.domain, second.language, second.domain) == ("zh", "anime", "en", "film")
    assert third.language is None and third.domain is None  # "unknown" in breakdowns
    assert first.model_extra["source_platform"] == "weibo" and first.model_extra["lang"] == "zh"
    assert third.checklist("visual") == ["obj text", "obj item", "obj req", "obj desc", "plain"]
    assert "source_file" not in first.model_dump()


def test_image_path_resolves_against_image_root_then_the_benchmark_folder(tmp_path):
    path = write_release(tmp_path, [release_item(1), release_item(2)], images=False)
    root = tmp_path / "root"
    (root / "meme_images").mkdir(parents=True)
    (root / "meme_images" / "image_0001.png").write_bytes(b"root")
    (tmp_path / "meme_images").mkdir()
    (tmp_path / "meme_images" / "image_0001.png").write_bytes(b"beside")
    (tmp_path / "meme_images" / "image_0002.png").write_bytes(b"beside")
    one, two = load_benchmark(path, image_root=root)
    assert one.resolve_image(root) == root / "meme_images" / "image_0001.png"
    assert two.resolve_image(root) == tmp_path / "meme_images" / "image_0002.png"
    assert one.resolve_image() == tmp_path / "meme_images" / "image_0001.png"


def test_every_bad_item_is_listed_before_failing(tmp_path):
    items = [release_item(i) for i in range(1, 7)]
    items[1]["knowledge"] = 42  # a layer of an unsupported kind
    items[2]["eval_checklist"]["identity"] = []  # an empty checklist layer
    items[3]["id"] = 1  # a duplicate id
    items[4]["image_path"] = "meme_images/missing.png"  # a missing image
    items[5]["eval_checklist"]["reasoning"] = [{"weight": 1}, ""]  # objects without text, empty strings
    path = write_release(tmp_path, items)
    (tmp_path / "meme_images" / "missing.png").unlink()
    with pytest.raises(DatasetError) as info:
        load_benchmark(path)
    message = str(info.value)
    assert message.startswith(f"{path}: 5 items are invalid (6 errors):")
    for line in (
        "item 1 (id=2): field 'knowledge' (VIKR dimension) must be an object, a list, a string or null, got int",
        "item 2 (id=3): field 'eval_checklist.identity' is an empty checklist",
        "item 3 (id=1): field 'id' duplicates item 0",
        "item 4 (id=5): field 'image_path': image file not found: meme_images/missing.png",
        "item 5 (id=6): field 'eval_checklist.reasoning[0]' must be a non-empty string or an object",
        "item 5 (id=6): field 'eval_checklist.reasoning[1]'",
    ):
        assert f"  {path}: {line}" in message, line
    assert len(info.value.errors) == 6 and info.value.bad_items == 5


def test_error_list_is_capped(tmp_path):
    items = [release_item(i, visual=1.5) for i in range(1, 31)]
    with pytest.raises(DatasetError) as info:
        load_benchmark(write_release(tmp_path, items), max_errors=5)
    message = str(info.value)
    assert "30 items are invalid (30 errors)" in message and "... and 25 more" in message
    assert message.count("field 'visual'") == 5


def test_bad_ids_and_metadata_are_named(tmp_path):
    items = [release_item(1, lang=["zh"]), release_item(2)]
    items[1]["id"] = {"n": 2}
    with pytest.raises(DatasetError) as info:
        load_benchmark(write_release(tmp_path, items), check_images=False)
    assert "item 0 (id=1): field 'lang' must be a string, got list" in str(info.value)
    assert "field 'id' must be an integer or a string, got dict" in str(info.value)


def test_a_folder_of_benchmark_files_loads_as_one(tmp_path):
    (tmp_path / "a").mkdir()
    write_release(tmp_path / "a", [release_item(1)])
    (tmp_path / "a" / "annotations.json").rename(tmp_path / "a" / "part1.json")
    write_release(tmp_path / "a", [release_item(2)])
    assert [i.id for i in load_benchmark(tmp_path / "a")] == ["2", "1"]  # annotations.json, then part1.json
    write_release(tmp_path / "a", [release_item(2), release_item(1)])
    with pytest.raises(DatasetError, match=r"part1.json: item 0 \(id=1\): field 'id' duplicates item 1 of .*annotations.json"):
        load_benchmark(tmp_path / "a")
