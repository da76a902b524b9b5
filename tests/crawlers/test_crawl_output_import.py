"""A real `scrapy crawl knowyourmeme -o items.jsonl` against the local fixture site, then that output
imported into another KB with `--format crawl` (detected): the same entities the crawl stored itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from culturebase.entity import normalize_text
from culturebase.settings import Settings

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def test_scrapy_output_reimports_into_another_kb(server, settings, open_kb, tmp_path):
    items = tmp_path / "items.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)]),
        "KAR_KB_PATH": str(settings.kb_path), "KAR_DATA_DIR": str(settings.data_dir),
        "KAR_CRAWL_DELAY_S": "0", "HF_HUB_OFFLINE": "1",
    }
    res = subprocess.run(
        [sys.executable, "-m", "scrapy", "crawl", "knowyourmeme", "-a", f"start_urls={server.url}/memes", "-o", str(items),
         "-s", "LOG_LEVEL=WARNING", "-s", "KAR_EMBEDDER_FACTORY=hash_embedder:build"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(items.read_text("utf-8").splitlines()) == 6  # 6 entry pages (one declares another canonical)

    crawled = open_kb()
    by_id = {e.id: e for e in crawled.store.iter_entities()}
    crawled.close()

    other = Settings(data_dir=tmp_path / "other-data", kb_path=tmp_path / "other-kb")
    kb = open_kb(other)
    report = kb.import_dump(items)
    assert (report.format, report.unit, report.read, report.stored, report.merged_duplicates) == ("crawl", "line", 6, 5, 1)
    assert report.rejected == [] and report.images_not_fetched == 6  # template images only with --fetch-images
    imported = {e.id: e for e in kb.store.iter_entities()}
    assert set(imported) == set(by_id)  # the crawl pipeline's ids: same mapping, same canonical URLs
    for eid, e in imported.items():
        assert (e.name, e.source_work) == (by_id[eid].name, by_id[eid].source_work)
        if e.name != "Doge":  # Doge's two pages merge: the import keeps the first row's text (docs/import.md)
            assert e.description == by_id[eid].description and e.aliases == by_id[eid].aliases
    (doge,) = kb.store.find_by_name(["Shibe"])
    assert doge.name == "Doge" and "shibe" in [normalize_text(t) for t in doge.tags]  # the duplicate page merged in
