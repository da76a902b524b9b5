"""jieba's dictionary from the data directory's caches: the same tables as jieba's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_word_tags_equal_posseg_and_are_cached_in_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KAR_DATA_DIR", str(tmp_path / "data"))
    code = (
        "import jieba.posseg\n"
        "from retrieval.jieba_dict import word_tags, tokenizer\n"
        "table, theirs = word_tags(), jieba.posseg.dt.word_tag_tab\n"
        "assert all(table.get(w) == t for w, t in list(theirs.items())[::37]), 'tables differ'\n"
        "assert table.get('不是一个词') is None and '诸葛亮' in table\n"
        "assert table['诸葛亮'] == 'nr' and table['火车'] == 'n'\n"
        "assert list(tokenizer().cut('我从未见过如此厚颜无耻之人', HMM=False))\n"
    )
    for _ in range(2):  # the second process reads the caches the first wrote
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600,
                              env={**__import__("os").environ, "KAR_DATA_DIR": str(tmp_path / "data")})
        assert proc.returncode == 0, proc.stderr
    cached = sorted(p.name for p in (tmp_path / "data" / "cache" / "jieba").iterdir())
    assert any(n.startswith("word_tags.") for n in cached) and "jieba.cache" in cached
