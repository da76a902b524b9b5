"""wordfreq's Zipf frequencies, remembered in the data directory so that a process need not import wordfreq.

The exact and caption routes ask how common an entity's name (or a word of its catchphrase) is
(:func:`retrieval.text.lexical.commonness`).  Answering the first such question used to cost a cold
process about 0.5 s of CPU before any lookup (several seconds of wall time on a loaded machine):
importing wordfreq imports regex, ftfy and langcodes and compiles their patterns, wordfreq finds
its data folder through ``inspect.stack()``, and each language's table is unpacked from msgpack.
The words asked about are mostly the KB's own names, so the answers repeat from one process to
the next.  :func:`zipf_frequency` keeps every answer wordfreq gives in a SQLite table under
``KAR_DATA_DIR/cache/wordfreq/`` (one row read per lookup) and imports wordfreq only for a word
it has not seen.  The table's name carries a fingerprint of the installed wordfreq (its code and
data files' sizes and times), so another wordfreq version starts a new table; the values are
wordfreq's own, stored as they are (a float survives SQLite's REAL exactly).  A data directory
that cannot be written is no error: wordfreq is then asked every time.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import logging
import sqlite3
import threading
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

#: wordfreq's files whose change means other frequencies (code, the two tables asked, its Chinese dictionary)
_FINGERPRINTED = ("__init__.py", "tokens.py", "chinese.py", "data/large_en.msgpack.gz", "data/large_zh.msgpack.gz",
                  "data/jieba_zh.txt", "data/_chinese_mapping.msgpack.gz")


def _fingerprint() -> str | None:
    """A short digest of the installed wordfreq's files (without importing it); None when it is not installed."""
    spec = importlib.util.find_spec("wordfreq")
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent
    parts = []
    for name in _FINGERPRINTED:
        try:
            stat = (root / name).stat()
            parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
        except OSError:
            parts.append(f"{name}:-")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class ZipfTable:
    """(word, language) → Zipf frequency in a SQLite file; every method is safe from any thread, and a
    SQLite error only turns the table off (wordfreq is then asked directly).  New rows are written in
    batches of :attr:`batch` (and the rest when the process exits): one transaction per word would cost
    a page of web evidence full of new words a write each."""

    batch = 256

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._local = threading.local()
        self._pending: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def _conn(self) -> sqlite3.Connection | None:
        if self.path is None:
            return None
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=2.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")  # writers append; readers in other processes are not blocked
            conn.execute("PRAGMA synchronous=OFF")  # a cache: a row lost to a crash is asked again
            conn.execute("CREATE TABLE IF NOT EXISTS zipf (lang TEXT NOT NULL, word TEXT NOT NULL, value REAL NOT NULL, "
                         "PRIMARY KEY (lang, word)) WITHOUT ROWID")
            self._local.conn = conn
        return conn

    def get(self, word: str, lang: str) -> float | None:
        """The stored frequency, or None when the word was never asked (or the table is unusable)."""
        pending = self._pending.get((lang, word))
        if pending is not None:
            return pending
        try:
            conn = self._conn()
            row = conn.execute("SELECT value FROM zipf WHERE lang = ? AND word = ?", (lang, word)).fetchone() if conn else None
        except sqlite3.Error as exc:
            self._off(exc)
            return None
        return float(row[0]) if row else None

    def put(self, word: str, lang: str, value: float) -> None:
        """Remember one of wordfreq's answers (written with the next batch)."""
        if self.path is None:
            return
        with self._lock:
            self._pending[(lang, word)] = value
            full = len(self._pending) >= self.batch
        if full:
            self.flush()

    def flush(self) -> None:
        """Write the pending rows in one transaction (another process may have stored the same rows meanwhile)."""
        with self._lock:
            rows, self._pending = [(lang, word, v) for (lang, word), v in self._pending.items()], {}
        if not rows or self.path is None:
            return
        try:
            conn = self._conn()
            if conn is not None:
                with conn:
                    conn.execute("BEGIN")
                    conn.executemany("INSERT OR REPLACE INTO zipf VALUES (?, ?, ?)", rows)
        except sqlite3.Error as exc:
            self._off(exc)

    def _off(self, exc: Exception) -> None:
        log.debug("wordfreq cache %s unusable (%s); asking wordfreq directly", self.path, exc)
        self.path = None


_TABLE_ONCE = threading.Lock()


def table() -> ZipfTable:
    """This process's table (:func:`_table`), opened once."""
    with _TABLE_ONCE:
        return _table()


@lru_cache(maxsize=1)
def _table() -> ZipfTable:
    """This process's table: ``KAR_DATA_DIR/cache/wordfreq/zipf.<fingerprint>.sqlite`` (no file when the data
    directory cannot be written or wordfreq is not installed)."""
    from retrieval.data_cache import folder

    digest = _fingerprint()
    where = folder("wordfreq") if digest else None
    found = ZipfTable(where / f"zipf.{digest}.sqlite" if where is not None else None)
    atexit.register(found.flush)
    return found


def zipf_frequency(word: str, lang: str) -> float:
    """``wordfreq.zipf_frequency(word, lang)``: from the data directory's table when it was asked before, else
    from wordfreq (imported then) and stored."""
    cached = table().get(word, lang)
    if cached is not None:
        return cached
    from wordfreq import zipf_frequency as ask

    value = float(ask(word, lang))
    table().put(word, lang, value)
    return value
