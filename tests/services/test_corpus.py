"""`kar corpus` and `/v1/corpus/*` end to end: import (exit 3 on a partial import), stats, search, delete."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from services.cli import app
from tests.fakes.pages import PAGES, write_pages
from tests.services.conftest import finished_job, ro, rw

runner = CliRunner()


def kar(*args: str):
    from culturebase.settings import get_settings

    get_settings.cache_clear()
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_cli_import_stats_search_delete(tmp_path):
    kb = str(tmp_path / "kb")
    dump = write_pages(tmp_path / "pages.jsonl")
    dry = kar("corpus", "--kb", kb, "import", str(dump), "--dry-run")
    assert dry.exit_code == 0 and "would store 14 pages" in dry.stdout and "(dry run: nothing stored)" in dry.stdout
    res = kar("corpus", "--kb", kb, "import", str(dump), "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["pages"] == 14 and report["complete"] and report["corpus"]["pages"] == 14
    stats = kar("corpus", "--kb", kb, "stats")
    assert "14 pages, 14 chunks" in stats.stdout and "hybrid search (dense + BM25)" in stats.stdout
    found = json.loads(kar("corpus", "--kb", kb, "search", "Potion Seller meme origin meaning", "--json").stdout)
    top = found["results"][0]
    assert top["url"] == "https://knowyourmeme.com/memes/potion-seller" and top["above_floor"] and "strongest potions" in top["text"]
    human = kar("corpus", "--kb", kb, "search", "[Potion] Seller")  # brackets: data, not rich markup
    assert human.exit_code == 0 and "1. Potion Seller  score" in human.stdout
    gone = kar("corpus", "--kb", kb, "delete", "https://knowyourmeme.com/memes/potion-seller/")
    assert gone.exit_code == 0 and "(1 chunks)" in gone.stdout
    again = kar("corpus", "--kb", kb, "delete", "https://knowyourmeme.com/memes/potion-seller")
    assert again.exit_code == 2 and "no page" in again.stderr


def test_cli_partial_import_exits_3_and_names_the_lines(tmp_path):
    dump = tmp_path / "pages.jsonl"
    dump.write_text(json.dumps(PAGES[0]) + "\n{broken\n" + json.dumps({"url": "https://x.org/e", "text": ""}) + "\n", "utf-8")
    res = kar("corpus", "--kb", str(tmp_path / "kb"), "import", str(dump))
    assert res.exit_code == 3
    assert "stored 1 pages" in res.stdout and "pages.jsonl line 2: invalid JSON" in res.stdout
    assert "pages.jsonl line 3: empty page" in res.stdout


def test_cli_missing_file_is_a_usage_error(tmp_path):
    res = kar("corpus", "--kb", str(tmp_path / "kb"), "import", str(tmp_path / "nope.jsonl"))
    assert res.exit_code == 2 and "no such file" in res.stderr


def test_cli_search_on_an_empty_corpus_says_so(tmp_path):
    res = kar("corpus", "--kb", str(tmp_path / "kb"), "search", "doge")
    assert res.exit_code == 0 and "no results: the corpus is empty" in res.stdout


async def test_api_import_needs_a_write_key_and_search_a_read_key(make_client, tmp_path):
    body = write_pages(tmp_path / "p.jsonl").read_bytes() + b"{broken\n"
    async with make_client() as (client, services):
        ndjson = {"Content-Type": "application/x-ndjson"}
        assert (await client.post("/v1/corpus/import", content=body, headers=ndjson)).status_code == 401
        assert (await client.post("/v1/corpus/import", content=body, headers={**ndjson, **ro()})).status_code == 403
        r = await client.post("/v1/corpus/import", content=body, headers={**ndjson, **rw()})
        assert r.status_code == 202, r.text
        job = await finished_job(client, r.json()["url"], ro())
        assert job["status"] == "succeeded", job
        data = job["report"]
        assert data["pages"] == 14 and not data["complete"] and data["skipped"][0]["where"] == "line 15"
        assert data["corpus"]["pages"] == 14
        assert (await client.get("/v1/corpus/search", params={"q": "doge"})).status_code == 401
        r = await client.get("/v1/corpus/search", params={"q": "王司徒 梗 文化背景 出处"}, headers=ro())
        assert r.status_code == 200
        top = r.json()["results"][0]
        assert top["url"] == "https://zh.moegirl.org.cn/王司徒" and top["score"] > 0 and "厚颜无耻" in top["text"]
        assert (await client.get("/v1/corpus/stats", headers=ro())).json()["pages"] == 14
        r = await client.post("/v1/corpus/import", content=b"x", headers={"Content-Type": "image/png", **rw()})
        assert r.status_code == 415
        r = await client.post("/v1/corpus/import", content=b"", headers={**ndjson, **rw()})
        assert r.status_code == 400
