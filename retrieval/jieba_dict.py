"""jieba's dictionary, loaded once per process from caches kept in the data directory.

A cold ``kar explain`` used to spend most of its grounding time reading jieba's dictionary:
``jieba.initialize()`` rebuilt or re-read its prefix dictionary from the system's temporary
folder, and ``import jieba.posseg`` parsed the 350,000-line ``dict.txt`` again only to learn each
word's tag.  The prefix dictionary now comes from jieba's marshal cache and the tags from a SQLite
table (one row read per lookup), both under ``KAR_DATA_DIR/cache/jieba/`` (written on first
use, rebuilt when jieba's dictionary file changes; an unwritable data directory falls back to
jieba's own temporary cache and a parse).  ``bench/cold_start.py`` prints cold and warm figures.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
_LOCK = threading.Lock()


def cache_dir() -> Path | None:
    """``KAR_DATA_DIR/cache/jieba`` (created), or None when it cannot be created."""
    from retrieval.data_cache import folder

    return folder("jieba")


@lru_cache(maxsize=1)
def tokenizer() -> Any:
    """The ``jieba`` module, initialised (its prefix dictionary cached in the data directory)."""
    import jieba

    with _LOCK:
        jieba.setLogLevel(logging.WARNING)
        folder = cache_dir()
        if folder is not None:
            jieba.dt.tmp_dir = str(folder)
        jieba.initialize()
    return jieba


def _dict_file() -> Path:
    import jieba

    return Path(jieba.__file__).with_name("dict.txt")


class WordTags:
    """Word → part-of-speech tag of jieba's dictionary (what ``jieba.posseg.dt.word_tag_tab`` holds), looked
    up in a SQLite table in the data directory (built once from ``dict.txt``, rebuilt when it changes):
    a lookup reads one row, where loading the whole 350,000-word table cost a cold start ~0.3 s."""

    def __init__(self, table: dict[str, str] | None = None, path: Path | None = None) -> None:
        self._table = table
        self._path = path
        self._local = threading.local()

    def get(self, word: str, default: str | None = None) -> str | None:
        if self._table is not None:
            return self._table.get(word, default)
        try:
            conn = getattr(self._local, "conn", None)
            if conn is None:
                conn = self._local.conn = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, check_same_thread=False)
            row = conn.execute("SELECT tag FROM tags WHERE word = ?", (word,)).fetchone()
        except sqlite3.Error as exc:  # the data directory's table went away: the dictionary itself, parsed once
            log.debug("jieba word tags at %s unreadable (%s); parsing dict.txt", self._path, exc)
            self._table = _parse_tags(_dict_file())
            return self._table.get(word, default)
        return row[0] if row else default

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and self.get(word) is not None

    def __getitem__(self, word: str) -> str:
        tag = self.get(word)
        if tag is None:
            raise KeyError(word)
        return tag


def _parse_tags(source: Path) -> dict[str, str]:
    table = {}
    with source.open("rb") as fh:
        for raw in fh:
            parts = raw.decode("utf-8").split()
            if len(parts) == 3:
                table[parts[0]] = parts[2]
    return table


@lru_cache(maxsize=1)
def word_tags() -> WordTags:
    """jieba's word tags: from the data directory's SQLite table when it is as new as ``dict.txt``,
    else parsed (and the table written for the next process)."""
    source = _dict_file()
    stat = source.stat()
    folder = cache_dir()
    if folder is None:
        return WordTags(_parse_tags(source))
    path = folder / f"word_tags.{stat.st_size}-{int(stat.st_mtime)}.sqlite"
    if not path.is_file():
        table = _parse_tags(source)
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".sqlite")
            os.close(fd)
            with sqlite3.connect(tmp) as conn:
                conn.execute("CREATE TABLE tags (word TEXT PRIMARY KEY, tag TEXT NOT NULL) WITHOUT ROWID")
                conn.executemany("INSERT OR REPLACE INTO tags VALUES (?, ?)", table.items())
            conn.close()
            os.replace(tmp, path)
        except (OSError, sqlite3.Error) as exc:
            log.debug("cannot write %s: %s", path, exc)
            return WordTags(table)
    return WordTags(path=path)
