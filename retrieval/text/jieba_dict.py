"""jieba's dictionary, read from tables kept in the data directory instead of loaded whole at each start.

A cold ``kar explain`` used to spend most of its grounding time reading jieba's dictionary:
``jieba.initialize()`` rebuilt or re-read its 500,000-entry prefix dictionary (a marshal load of
0.2-0.4 s of CPU that holds the GIL, seconds on a loaded machine), and ``import jieba.posseg``
parsed the 350,000-line ``dict.txt`` again only to learn each word's tag.  Both now live in SQLite
tables under ``KAR_DATA_DIR/cache/jieba/`` (written once from jieba's own ``gen_pfdict`` and
``dict.txt``, rebuilt when jieba's dictionary file changes): segmenting a text reads only the
rows of its own prefixes (:class:`PrefixDict`), and a tag lookup one row.  The segmentation is
jieba's own code (``Tokenizer.cut``) over the same numbers, so it is the same
(``tests/retrieval/text/test_jieba_dict.py`` compares it with ``jieba.cut``).  An unwritable data
directory falls back to jieba's own temporary cache and a parse.  ``bench/cold_start.py``
prints cold and warm figures.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import tempfile
import threading
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
_LOCK = threading.Lock()
_TOKENIZER_ONCE = threading.Lock()  # a second thread asking while the first loads waits for that one
_TAGS_ONCE = threading.Lock()


def cache_dir() -> Path | None:
    """``KAR_DATA_DIR/cache/jieba`` (created), or None when it cannot be created."""
    from retrieval.data_cache import folder

    return folder("jieba")


def _read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to a table file (its path as a file URI: any character in a folder name is safe)."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)


class PrefixDict(Mapping[str, int]):
    """jieba's prefix dictionary (a word → its frequency; a prefix of a word that is no word itself → 0), read
    one row at a time from a SQLite table: what ``Tokenizer.FREQ`` holds, for the lookups ``get_DAG`` and
    ``calc`` make (``in``, ``[]``, ``get``).  Rows read are remembered (absent ones too)."""

    _MISSING = -1
    max_memo = 200_000

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._memo: dict[str, int] = {}

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _read_only(self.path)
        return conn

    def _freq(self, word: str) -> int:
        freq = self._memo.get(word)
        if freq is None:
            row = self._conn().execute("SELECT freq FROM prefix WHERE word = ?", (word,)).fetchone()
            freq = int(row[0]) if row else self._MISSING
            if len(self._memo) >= self.max_memo:
                self._memo.clear()
            self._memo[word] = freq
        return freq

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and self._freq(word) != self._MISSING

    def __getitem__(self, word: str) -> int:
        freq = self._freq(word)
        if freq == self._MISSING:
            raise KeyError(word)
        return freq

    def get(self, word: str, default: Any = None) -> Any:  # type: ignore[override]
        freq = self._freq(word)
        return default if freq == self._MISSING else freq

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT count(*) FROM prefix").fetchone()[0])

    def __iter__(self) -> Iterator[str]:
        return (row[0] for row in self._conn().execute("SELECT word FROM prefix"))


def _write_prefix_table(path: Path, freq: dict[str, int], total: int) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".sqlite")
    os.close(fd)
    try:
        with sqlite3.connect(tmp) as conn:
            conn.execute("CREATE TABLE prefix (word TEXT PRIMARY KEY, freq INTEGER NOT NULL) WITHOUT ROWID")
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            conn.executemany("INSERT INTO prefix VALUES (?, ?)", freq.items())
            conn.execute("INSERT INTO meta VALUES ('total', ?)", (total,))
        conn.close()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def tokenizer() -> Any:
    """A ``jieba.Tokenizer`` of jieba's default dictionary, loaded once per process (:func:`_tokenizer`)."""
    with _TOKENIZER_ONCE:
        return _tokenizer()


@lru_cache(maxsize=1)
def _tokenizer() -> Any:
    """A ``jieba.Tokenizer`` of jieba's default dictionary, its prefix dictionary read from the data directory's
    table (:class:`PrefixDict`; the first process builds the table with jieba's own ``gen_pfdict``).  Without a
    usable data directory: jieba's default tokenizer, initialised from its temporary cache."""
    import jieba

    with _LOCK:
        jieba.setLogLevel(logging.WARNING)
        folder = cache_dir()
        if folder is not None:
            stat = _dict_file().stat()
            path = folder / f"prefix_dict.{stat.st_size}-{int(stat.st_mtime)}.sqlite"
            try:
                tk = jieba.Tokenizer()
                if path.is_file():
                    with _read_only(path) as conn:
                        total = int(conn.execute("SELECT value FROM meta WHERE key = 'total'").fetchone()[0])
                    conn.close()
                    tk.FREQ = PrefixDict(path)
                else:  # the first process: jieba's own table, kept in memory here and written for the next ones
                    with open(_dict_file(), "rb") as fh:
                        tk.FREQ, total = tk.gen_pfdict(fh)
                    try:
                        _write_prefix_table(path, tk.FREQ, total)
                    except (OSError, sqlite3.Error) as exc:
                        log.debug("cannot write %s: %s", path, exc)
                tk.total = total
                tk.initialized = True
                return tk
            except (OSError, sqlite3.Error, TypeError) as exc:
                log.debug("jieba prefix table at %s unusable (%s); loading jieba's dictionary", path, exc)
            jieba.dt.tmp_dir = str(folder)
        jieba.initialize()
    return jieba.dt


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
                conn = self._local.conn = _read_only(self._path)
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


def word_tags() -> WordTags:
    """jieba's word tags, loaded once per process (:func:`_word_tags`)."""
    with _TAGS_ONCE:
        return _word_tags()


@lru_cache(maxsize=1)
def _word_tags() -> WordTags:
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
