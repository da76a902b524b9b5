"""Crawl jobs end to end against the local fixture site: each job is a real process writing a real store."""

from __future__ import annotations

import os
import signal
import time

from conftest import FAST

from culturebase.entity import normalize_text


def run(manager, spider, urls, timeout=90, **kw):
    kw.setdefault("scrapy_settings", {})
    kw["scrapy_settings"] = {**FAST, **kw["scrapy_settings"]}
    job = manager.start(spider, start_urls=urls, **kw)
    job = manager.wait(job.id, timeout=timeout)
    assert job.finished, f"job still {job.status}: {manager.logs(job.id, tail=40)}"
    return job


def test_kym_crawl_robots_dedupe_drop_then_incremental(server, manager, settings, open_kb):
    job = run(manager, "knowyourmeme", [f"{server.url}/memes"])
    assert job.status == "succeeded", manager.logs(job.id, tail=60)
    c = job.counters
    assert c["dropped"] == {"missing name": 1}  # the malformed entry, with its reason
    assert c["robots_forbidden"] == 1 and not server.requests("/memes/private-meme")  # robots.txt respected
    assert not server.requests("/memes/doge/photos")
    assert c["merged"] >= 1  # /memes/doge-old declares /memes/doge canonical
    assert c["items_stored"] >= 5 and c["pages_fetched"] >= 9 and c["errors"] == 0
    entity_requests = [p for p, _ in server.requests("/memes/") if "page/" not in p]
    server.clear_log()

    # incremental re-crawl: every stored entry answers 304, nothing is stored again
    again = run(manager, "knowyourmeme", [f"{server.url}/memes"])
    assert again.status == "succeeded"
    assert again.counters["skipped_unchanged"] == 6 and again.counters["items_stored"] == 0  # 6 entry pages, 5 entities
    assert {s for p, s in server.requests("/memes/") if p.rstrip("/") in {f"/memes/{x}" for x in ("doge", "rickroll", "distracted-boyfriend")}} == {304}
    assert len(entity_requests) >= 7

    kb = open_kb()
    store = kb.store
    assert store.count() == 5
    names = sorted(e.name for e in store.iter_entities())
    assert names == ["Cursed Sandwich Guy", "Distracted Boyfriend", "Doge", "Paimon Emergency Food", "Rickroll"]
    (doge,) = store.find_by_name(["Shibe"])  # alias from "also known as"
    assert doge.name == "Doge" and len(doge.sources) == 1 and doge.sources[0].url == f"{server.url}/memes/doge"
    assert "shibe" in [normalize_text(t) for t in doge.tags]  # tags united from the duplicate page
    (paimon,) = store.find_by_name(["Emergency Food"])
    assert paimon.source_work == "Genshin Impact"
    assert kb.store.stats()["corpus_chunks"] >= 5


def test_moegirl_crawl_redirects_continuation_maxlag_and_cross_site_merge(server, manager, open_kb):
    first = run(manager, "knowyourmeme", [f"{server.url}/memes/rickroll"])
    assert first.status == "succeeded"
    server.add_fault("action=parse&pageid=102", kind="maxlag")  # 胡桃's parse: maxlag once, Retry-After: 1
    job = run(manager, "moegirl", [f"{server.url}/Category:原神角色", f"{server.url}/分类:网络流行语"])
    assert job.status == "succeeded", manager.logs(job.id, tail=60)
    c = job.counters
    assert c["dropped"] == {"api error nosuchpageid": 1}
    assert c["retry_after_waits"] == 1 and c["items_stored"] == 4
    assert len(server.requests("action=parse&pageid=102")) == 2
    assert server.requests("cmcontinue=") and server.requests("rdcontinue=")

    kb = open_kb()
    store = kb.store
    assert store.count() == 4  # 派蒙, 胡桃, 凯瑟琳 (sub-category on the continued page) + Rickroll merged across sites
    (paimon,) = store.find_by_name(["Paimon"])  # a redirect from the second rdcontinue page
    assert paimon.name == "派蒙" and paimon.language == "zh" and paimon.source_work == "原神"
    assert {"应急食品", "白飞飞", "飞行矮堇瓜"} <= set(paimon.aliases)
    (img,) = paimon.images  # the infobox image, through Special:FilePath's redirect
    assert img.url == f"{server.url}/Special:FilePath/Paimon.png" and server.requests("/kym-cdn/moegirl/Paimon.png")
    assert len(rick.images if (rick := store.find_by_name(["瑞克摇"])[0]) else []) == 2  # KYM og:image + Moegirl infobox
    assert store.find_by_name(["凯瑟琳"])[0].source_work == "原神"
    (rick,) = store.find_by_name(["瑞克摇"])
    assert rick.name == "Rickroll" and sorted(rick.sites) == ["knowyourmeme", "moegirl"]
    assert len(rick.sources) == 2
    kb.close()

    # incremental: unchanged revisions are not parsed again; an edited page is
    server.clear_log()
    server.site["pages"]["胡桃"]["revid"] = 6002
    again = run(manager, "moegirl", [f"{server.url}/Category:原神角色"])
    assert again.status == "succeeded"
    assert [p for p, _ in server.requests("action=parse")] and all("pageid=102" in p for p, _ in server.requests("action=parse"))
    assert again.counters["skipped_unchanged"] == 2 and again.counters["items_stored"] == 1


def test_block_page_fails_the_job_with_reason(server, manager, open_kb):
    job = run(manager, "knowyourmeme", [f"{server.url}/memes/cf-protected"])
    assert job.status == "failed" and "cloudflare challenge" in job.error and "/memes/cf-protected" in job.error
    login = run(manager, "knowyourmeme", [f"{server.url}/memes/login-wall"])
    assert login.status == "failed" and "login wall" in login.error
    assert login.counters["items_stored"] == 0
    kb = open_kb()
    assert kb.store.count() == 0


def test_disk_guard_stops_the_job_with_the_count_stored_and_the_store_opens(server, settings, open_kb):
    """A crawl writes like a bulk import: when the KB's disk has less free space than
    KAR_MIN_FREE_DISK_MB the job fails with what it stored, instead of the engine dying on a full disk."""
    from crawlers.jobs import CrawlJobManager

    full = settings.model_copy(update={"min_free_disk_mb": 2**40})  # more than any disk has free
    mgr = CrawlJobManager(full)
    try:
        job = run(mgr, "knowyourmeme", [f"{server.url}/memes/rickroll"])
    finally:
        mgr.close()
    assert job.status == "failed", job
    assert "nearly full" in job.error and "stored 0 entities so far" in job.error and "KAR_MIN_FREE_DISK_MB" in job.error
    assert job.counters["items_stored"] == 0
    kb = open_kb()
    assert kb.store.count() == 0  # the store still opens


def test_retry_after_is_honoured(server, manager):
    server.add_fault("/memes/rickroll", status=429, headers={"Retry-After": "1"})
    t0 = time.monotonic()
    job = run(manager, "knowyourmeme", [f"{server.url}/memes/rickroll"])
    assert job.status == "succeeded" and job.counters["items_stored"] == 1
    assert [s for _, s in server.requests("/memes/rickroll")] == [429, 200]
    assert job.counters["retry_after_waits"] == 1 and time.monotonic() - t0 >= 1.0


def test_kill_then_resume_finishes_without_duplicates(server, manager, open_kb):
    server.delay_s, server.delay_match = 0.12, "/memes/synth-"
    job = manager.start(
        "knowyourmeme", start_urls=[f"{server.url}/synthetic/page/1"],
        scrapy_settings={**FAST, "KAR_FLUSH_EVERY": 3, "CONCURRENT_REQUESTS_PER_DOMAIN": 1},
    )
    deadline = time.monotonic() + 60
    while manager.get(job.id).counters.get("items_stored", 0) < 6:
        assert time.monotonic() < deadline and not manager.get(job.id).finished, manager.logs(job.id, tail=40)
        time.sleep(0.1)
    os.kill(manager.get(job.id).pid, signal.SIGKILL)
    time.sleep(0.3)
    killed = manager.get(job.id)
    assert killed.status == "failed" and killed.error.startswith("interrupted") and killed.resumable
    done_before = {p for p in manager.db.done_pages(job.id)}
    assert len(done_before) >= 6

    manager.resume(job.id)
    final = manager.wait(job.id, timeout=90)
    assert final.status == "succeeded", manager.logs(job.id, tail=60)
    assert final.attempts == 2 and final.counters["skipped_done"] >= len(done_before)
    for key in done_before:  # pages stored before the kill were not fetched again
        path = "/" + key.split("/", 3)[3]
        exact = [p for p, _ in server.requests(path) if p.split("?", 1)[0] == path]  # not /memes/synth-1x
        assert len(exact) == 1, path
    kb = open_kb()
    assert kb.store.count() == 30
    assert all(len(kb.store.find_by_name([f"Entry {i}"])) <= 1 for i in range(3))
    names = [e.name for e in kb.store.iter_entities()]
    assert len(names) == len(set(names)) == 30


def test_cancel_stops_a_running_job(server, manager):
    server.delay_s, server.delay_match = 0.2, "/memes/synth-"
    job = manager.start("knowyourmeme", start_urls=[f"{server.url}/synthetic/page/1"], scrapy_settings={**FAST, "KAR_FLUSH_EVERY": 2})
    deadline = time.monotonic() + 60
    while manager.get(job.id).status == "queued" or manager.get(job.id).counters.get("pages_fetched", 0) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    manager.cancel(job.id)
    final = manager.wait(job.id, timeout=60)
    assert final.status == "cancelled" and final.resumable
    assert 0 < final.counters["items_stored"] < 30  # what was parsed before the cancel is kept
    assert "cancel" in manager.logs(job.id).lower()
