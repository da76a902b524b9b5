"""jieba's dictionary from the data directory's tables: the same tables and the same segmentation as jieba's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

_CHILD = (
    "import json, sys\n"
    "import jieba, jieba.posseg\n"
    "from retrieval.text.jieba_dict import PrefixDict, word_tags, tokenizer\n"
    "table, theirs = word_tags(), jieba.posseg.dt.word_tag_tab\n"
    "assert all(table.get(w) == t for w, t in list(theirs.items())[::37]), 'tables differ'\n"
    "assert table.get('不是一个词') is None and '诸葛亮' in table\n"
    "assert table['诸葛亮'] == 'nr' and table['火车'] == 'n'\n"
    "ours = tokenizer()\n"
    "texts = json.loads(sys.argv[1])\n"
    "jieba.initialize()\n"
    "for hmm in (False, True):\n"
    "    for text in texts:\n"
    "        assert list(ours.cut(text, HMM=hmm)) == list(jieba.cut(text, HMM=hmm)), (text, hmm)\n"
    "assert ours.total == jieba.dt.total\n"
    "sample = list(jieba.dt.FREQ.items())[::101]\n"
    "assert all(ours.FREQ.get(w) == f for w, f in sample) and '不是一个词啊' not in ours.FREQ\n"
    "print(type(ours.FREQ).__name__)\n"
)


def _texts() -> list[str]:
    texts = ["我从未见过如此厚颜无耻之人", "今天天气真好", "诸葛亮骂死王朗 such culture 2024年", "东坡肉要炖很久才好吃",
             "ＦＵＬＬ　ＷＩＤＴＨ和中文混排abc123", ""]
    for line in (REPO / "examples" / "culturebase_sample.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        texts += [record.get("description", ""), record.get("cultural_usage", ""), record["name"], *record.get("aliases", [])]
    return texts


def test_tables_and_segmentation_equal_jiebas_and_are_cached_in_the_data_dir(tmp_path):
    env = {**os.environ, "KAR_DATA_DIR": str(tmp_path / "data")}
    kinds = []
    for _ in range(2):  # the first process builds the tables; the second reads them row by row
        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(_texts())], cwd=REPO, capture_output=True,
                              text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr
        kinds.append(proc.stdout.split()[-1])
    assert kinds == ["dict", "PrefixDict"]
    cached = sorted(p.name for p in (tmp_path / "data" / "cache" / "jieba").iterdir())
    assert any(n.startswith("word_tags.") for n in cached) and any(n.startswith("prefix_dict.") for n in cached)


def test_an_unwritable_data_dir_falls_back_to_jiebas_own_loading(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = ("import jieba\nfrom retrieval.text.jieba_dict import tokenizer\n"
            "print(tokenizer() is jieba.dt, list(tokenizer().cut('今天天气真好', HMM=False)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "KAR_DATA_DIR": str(blocker)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True ['今天天气', '真', '好']"
