"""wordfreq's frequencies from the data directory's table: the same values as wordfreq's, without importing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

_CHILD = """
import json, sys
from retrieval.text.lexical import commonness, normalize
from retrieval.text.word_frequency import zipf_frequency
words = json.loads(sys.argv[1])
ours = {f"{lang}:{w}": zipf_frequency(w, lang) for w in words for lang in ("en", "zh")}
common = {w: commonness(w) for w in words}
print(json.dumps({"zipf": ours, "commonness": common, "imported": "wordfreq" in sys.modules}))
"""


def _words() -> list[str]:
    words = {"problem", "such wow", "such", "wow", "老板", "琪露诺", "yes", "stonks", "天天", "诸葛亮", "x", "东坡肉"}
    for line in (REPO / "examples" / "culturebase_sample.jsonl").read_text(encoding="utf-8").splitlines()[:60]:
        record = json.loads(line)
        words.update([record["name"], *record.get("aliases", [])])
    return sorted(words)


def _run(words: list[str], data_dir: Path) -> dict:
    env = {**os.environ, "KAR_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(words)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_frequencies_equal_wordfreq_and_a_second_process_does_not_import_it(tmp_path):
    from wordfreq import zipf_frequency

    words = _words()
    first = _run(words, tmp_path / "data")
    assert first["imported"]  # the first process asks wordfreq and writes the table
    expected = {f"{lang}:{w}": float(zipf_frequency(w, lang)) for w in words for lang in ("en", "zh")}
    assert first["zipf"] == expected
    assert any(v > 0 for v in expected.values()) and any(v == 0 for v in expected.values())
    tables = list((tmp_path / "data" / "cache" / "wordfreq").glob("zipf.*.sqlite"))
    assert len(tables) == 1
    second = _run(words, tmp_path / "data")
    assert not second["imported"], "every word was in the table: wordfreq should not be imported"
    assert second == {**first, "imported": False}


def test_an_unwritable_data_dir_asks_wordfreq_every_time(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    words = ["problem", "诸葛亮", "such wow"]
    first, second = _run(words, blocker), _run(words, blocker)
    assert first["imported"] and second["imported"] and first == second
    assert first["commonness"]["problem"] > 3.5 > first["commonness"]["such wow"]
