"""Entity sounds at crawl: a page's audio is downloaded (bounded), stored like an imported sound, fingerprinted,
and the sound route finds the entity from a cut of it; bad sounds leave the entity stored without them."""

from __future__ import annotations

import io
from fractions import Fraction

import numpy as np
import pytest
from conftest import FIXTURES, fixture_response
from test_jobs import run

from crawlers.spiders.knowyourmeme import KnowYourMemeSpider
from crawlers.spiders.moegirl import parse_wikitext
from tests.fakes.sounds import SR, melody, wav_bytes


def ogg_bytes(x: np.ndarray, rate: int = 48_000) -> bytes:
    """Opus in Ogg (as MediaWiki serves ``.ogg``/``.oga``), resampled to ``rate``, with PyAV."""
    import av

    y = np.interp(np.arange(int(x.size * rate / SR)) * SR / rate, np.arange(x.size), x).astype(np.float32)
    buf = io.BytesIO()
    with av.open(buf, "w", format="ogg") as out:
        stream = out.add_stream("libopus", rate=rate)
        stream.layout = "mono"
        fmt = stream.codec_context.codec.audio_formats[0].name
        chunk = stream.codec_context.frame_size or 960
        for start in range(0, y.size - chunk + 1, chunk):
            block = y[start : start + chunk]
            data = (block * 32767).astype(np.int16) if fmt.startswith("s16") else block
            frame = av.AudioFrame.from_ndarray(data.reshape(1, -1), format=fmt, layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = rate, start, Fraction(1, rate)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


AUDIO_BLOCK = """
<h2 id="audio">Audio</h2>
<center><audio controls preload="none"><source src="/files/never-gonna.wav" type="audio/wav"></audio></center>
<p>Listen: <a href="/files/broken.mp3">broken.mp3</a>, <a href="/files/huge.wav">huge.wav</a>,
<a href="/files/missing.ogg">missing.ogg</a>, <a href="/files/moved.mp3">moved.mp3</a>, <a href="/files/video-only.mp4?x=1">not linked as audio</a>.</p>
<audio src="/files/the-tune.wav"></audio>
"""


def rickroll_with_audio() -> str:
    page = (FIXTURES / "kym" / "memes" / "rickroll.html").read_text("utf-8")
    return page.replace('<h2 id="origin">Origin</h2>', AUDIO_BLOCK + '<h2 id="origin">Origin</h2>', 1)


def test_kym_entry_lists_the_sounds_of_its_body():
    spider = KnowYourMemeSpider()
    spider.crawler = type("C", (), {"stats": type("S", (), {"inc_value": lambda *a, **k: None})()})()
    url = "http://127.0.0.1:8999/memes/rickroll"
    path = FIXTURES / "kym" / "memes" / "rickroll.html"
    (plain,) = spider.parse_entry(fixture_response(url, path))
    assert plain["audio_urls"] == []
    from scrapy.http import HtmlResponse, Request

    response = HtmlResponse(url=url, body=rickroll_with_audio().encode(), encoding="utf-8", request=Request(url))
    (item,) = spider.parse_entry(response)
    base = "http://127.0.0.1:8999/files/"
    assert item["audio_urls"] == [base + n for n in ("never-gonna.wav", "the-tune.wav", "broken.mp3", "huge.wav", "missing.ogg", "moved.mp3")]
    assert "Listen" not in item["name"] and item["name"] == "Rickroll"


def test_moegirl_wikitext_names_its_sound_files():
    wikitext = (
        "{{网络流行语信息|image=Rickroll.gif|别名=瑞克摇}}\n'''Rickroll'''是一种网络恶作剧。\n"
        "[[File:Never_gonna.ogg|thumb|片段]] {{Audio|瑞克摇.mp3|试听}} {{音频|file=文件:b.wav}} [[文件:Rickroll.png]]"
    )
    fields = parse_wikitext("Rickroll", "Rickroll", wikitext, [], [])
    assert fields["audio_files"] == ["Never gonna.ogg", "瑞克摇.mp3", "b.wav"]


def _search_by_sound(kb, settings, clip: np.ndarray):
    """What ``kar kb search --audio`` runs: the grounder with the KB's sound store, a sound cue alone."""
    from retrieval.grounding import EntityGrounder, GroundingCues
    from retrieval.sounds.route import prepare

    grounder = EntityGrounder(kb.store, kb.embedder, tau=0.875, sound_route=kb.sound_store)
    cues = GroundingCues()
    cues.sound = prepare(wav_bytes(clip))
    return grounder.ground(cues)


@pytest.fixture
def sound_site(server):
    tune, other = melody(11, 8.0), melody(12, 6.0)
    server.files = {
        "never-gonna.wav": ("audio/wav", wav_bytes(tune)),
        "the-tune.wav": ("audio/wav", wav_bytes(tune)),  # the same bytes: one sound
        "broken.mp3": ("audio/mpeg", b"<!DOCTYPE html><html><body>Error 500</body></html>"),
        "huge.wav": ("audio/wav", wav_bytes(other)[:44] + bytes(31 * 1024 * 1024)),  # over the 30 MB sound limit
        "Never gonna.ogg": ("audio/ogg", ogg_bytes(other)),
        "moved.mp3": ("redirect", b"http://10.255.255.1/latest/meta-data/x.mp3"),  # a metadata address: refused
    }
    server.entry_override["rickroll"] = rickroll_with_audio()
    return server, tune, other


def test_kym_crawl_stores_fingerprints_and_finds_the_entity_by_a_cut_of_its_sound(sound_site, manager, settings, open_kb):
    server, tune, other = sound_site
    job = run(manager, "knowyourmeme", [f"{server.url}/memes/rickroll"], scrapy_settings={"RETRY_TIMES": 0})
    assert job.status == "succeeded", manager.logs(job.id, tail=60)
    c = job.counters
    assert c["items_stored"] == 1 and c["sounds_stored"] == 2, {k: v for k, v in c.items() if "sound" in k}  # two links to the same bytes: one sound, counted per link
    assert c["sounds_failed"] == {"not_audio": 1, "too_large": 1, "http_404": 1, "forbidden_address": 1}, c
    assert not server.requests("/files/video-only.mp4")  # a link that does not name an audio file is not fetched

    kb = open_kb()
    (rick,) = kb.store.find_by_name(["Rickroll"])
    (sound,) = rick.audio  # stored with its one good sound; the bad ones left out, the entity kept
    assert sound.url == f"{server.url}/files/never-gonna.wav" and abs(sound.seconds - 8.0) < 0.01
    stored = settings.data_dir / "sounds" / sound.path
    assert stored.read_bytes() == server.files["never-gonna.wav"][1]
    assert kb.sound_store.count() == 1  # fingerprinted into the sound route's index at the write

    res = _search_by_sound(kb, settings, tune[int(2.3 * SR) : int(6.1 * SR)])
    assert [h.entity.name for h in res.hits] == ["Rickroll"] and res.hits[0].route == "sound"
    assert _search_by_sound(kb, settings, other[SR : 5 * SR]).hits == []  # a sound it does not have claims nothing


def test_moegirl_crawl_takes_a_file_link_through_special_filepath(sound_site, manager, settings, open_kb):
    server, tune, other = sound_site
    wikitext = (FIXTURES / "moegirl" / "pages" / "Rickroll.wiki").read_text("utf-8")
    server.wikitext_override["Rickroll"] = wikitext + "\n== 音频 ==\n[[File:Never gonna.ogg|thumb|片段]]\n[[File:Missing.mp3]]\n"
    job = run(manager, "moegirl", [f"{server.url}/Rickroll"], scrapy_settings={"RETRY_TIMES": 0})
    assert job.status == "succeeded", manager.logs(job.id, tail=60)
    c = job.counters
    assert c["sounds_stored"] == 1 and c["sounds_failed"] == {"no_audio": 1}, c  # Missing.mp3: this wiki answers with an image: no audio track
    kb = open_kb()
    (rick,) = kb.store.find_by_name(["Rickroll"])
    (sound,) = rick.audio
    assert sound.url == f"{server.url}/Special:FilePath/Never_gonna.ogg" and sound.path.endswith(".ogg")
    res = _search_by_sound(kb, settings, other[int(1.7 * SR) : int(4.9 * SR)])
    assert [h.entity.name for h in res.hits] == ["Rickroll"] and res.hits[0].route == "sound"


@pytest.fixture
def kar_env(tmp_path, monkeypatch, settings):
    from culturebase.settings import get_settings

    monkeypatch.setenv("KAR_DATA_DIR", str(tmp_path / "cli-data"))
    monkeypatch.setenv("KAR_KB_PATH", str(tmp_path / "default-kb"))
    monkeypatch.setenv("KAR_CRAWL_DELAY_S", "0")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_kar_crawl_then_kar_kb_search_audio_finds_the_crawled_entity(sound_site, kar_env):
    """The user's journey: `kar crawl` (the bundled embedder) shows the sound counters, then
    `kar kb search --audio` with a 4-second cut of the page's sound names the entity."""
    import json

    from typer.testing import CliRunner

    from culturebase.settings import get_settings
    from services.cli import app as kar_app

    server, tune, _ = sound_site
    kb_dir = kar_env / "kb"
    runner = CliRunner()
    crawled = runner.invoke(kar_app, ["crawl", "knowyourmeme", "--start-url", f"{server.url}/memes/rickroll", "--kb", str(kb_dir)])
    assert crawled.exit_code == 0, crawled.output
    rows = {" ".join(line.strip(" │┃|").split()) for line in crawled.output.splitlines()}
    assert any(r.startswith("sounds stored") and r.split()[-1] == "2" for r in rows), crawled.output
    assert any("sound failed: too_large" in r for r in rows), crawled.output

    clip = kar_env / "heard.wav"
    clip.write_bytes(wav_bytes(tune[int(1.1 * SR) : int(5.1 * SR)]))
    get_settings.cache_clear()
    found = runner.invoke(kar_app, ["kb", "--kb", str(kb_dir), "search", "--audio", str(clip), "--json"])
    assert found.exit_code == 0, found.output
    top = json.loads(found.stdout)["hits"][0]
    assert top["name"] == "Rickroll" and top["route"] == "sound"


def test_a_crawl_feed_row_with_audio_urls_imports_its_sounds_with_fetch_images(sound_site, open_kb, tmp_path):
    """`scrapy crawl -o items.jsonl` keeps `audio_urls`; `kar kb import --format crawl --fetch-images` fetches them
    (a sound that is not one is named in the report and the entity stored), without fetching they are left out."""
    import json

    from culturebase.settings import Settings
    from retrieval.images.importing import http_fetcher

    server, tune, _ = sound_site
    row = {
        "site": "knowyourmeme", "url": f"{server.url}/memes/rickroll", "page_key": f"{server.url}/memes/rickroll",
        "name": "Rickroll", "description": "A bait-and-switch prank with Rick Astley's song.", "language": "en",
        "audio_urls": [f"{server.url}/files/never-gonna.wav", f"{server.url}/files/broken.mp3"],
    }
    feed = tmp_path / "items.jsonl"
    feed.write_text(json.dumps(row) + "\n", "utf-8")
    kb = open_kb(Settings(data_dir=tmp_path / "d1", kb_path=tmp_path / "kb1"))
    report = kb.import_dump(feed, fetch_images=True, fetcher=http_fetcher(30 * 1024 * 1024))
    assert report.format == "crawl" and report.stored == 1
    assert [(p.image, "readable" in p.reason) for p in report.image_problems] == [(f"audio: {server.url}/files/broken.mp3", True)]
    (rick,) = kb.store.find_by_name(["Rickroll"])
    assert [a.url for a in rick.audio] == [f"{server.url}/files/never-gonna.wav"]
    res = _search_by_sound(kb, kb.settings, tune[3 * SR : 7 * SR])
    assert [h.entity.name for h in res.hits] == ["Rickroll"]

    plain = open_kb(Settings(data_dir=tmp_path / "d2", kb_path=tmp_path / "kb2"))
    assert plain.import_dump(feed).stored == 1
    assert plain.store.find_by_name(["Rickroll"])[0].audio == []
