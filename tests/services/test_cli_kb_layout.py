"""`kar kb` on a KB folder from the older layout: stats say read-only and how to migrate, an import
is refused with that message and loses nothing, `kar kb reindex` migrates reusing stored vectors."""

from __future__ import annotations

import json
import re

from tests.conftest import SAMPLE
from tests.services.test_cli_kb import kar


def _make_old(kb_path):
    meta_path = kb_path / "entities" / "culturekar.json"
    meta = json.loads(meta_path.read_text("utf-8"))
    meta.pop("layout")
    meta["schema_version"] = 1
    meta_path.write_text(json.dumps(meta), "utf-8")


def test_older_layout_is_read_only_until_reindex(sample_kb_copy, tmp_path):
    _make_old(sample_kb_copy)
    kb = ["kb", "--kb", str(sample_kb_copy)]
    total = sum(1 for line in SAMPLE.read_text("utf-8").splitlines() if line.strip())

    stats = kar(*kb, "stats")
    assert stats.exit_code == 0 and re.search(rf"^entities\s+{total}\s*$", stats.stdout, re.M), stats.output
    assert "read-only" in stats.stdout and "kar kb reindex" in stats.stdout, stats.stdout
    hits = json.loads(kar(*kb, "search", "诸葛亮", "--json").stdout)["hits"]
    assert hits[0]["name"] == "诸葛亮"  # reads work

    refused = kar(*kb, "import", str(SAMPLE))
    assert refused.exit_code == 1, refused.output
    assert "read-only" in refused.output and "kar kb reindex" in refused.output, refused.output

    migrated = kar(*kb, "reindex")
    assert migrated.exit_code == 0, migrated.output
    assert f"reindexed {total} entities" in migrated.stdout and "stored vectors reused" in migrated.stdout

    stats = json.loads(kar(*kb, "stats", "--json").stdout)
    assert stats["entities"] == total and stats["storage"]["read_only"] is None
    two = tmp_path / "two.jsonl"
    two.write_text("".join(SAMPLE.read_text("utf-8").splitlines(keepends=True)[:2]), "utf-8")
    again = kar(*kb, "import", str(two), "--json")  # writable again (the same two entities: upserted, not added)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["total_entities"] == total
    hits = json.loads(kar(*kb, "search", "Zhuge Liang", "--json").stdout)["hits"]
    assert hits[0]["name"] == "诸葛亮"
