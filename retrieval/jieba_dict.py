"""jieba's dictionary, loaded once per process from caches kept in the data directory.

A cold ``kar explain`` used to spend most of its grounding time reading jieba's dictionary:
``jieba.initialize()`` rebuilt or re-read its prefix dictionary from the system's temporary
folder, and ``import jieba.posseg`` parsed the 350,000-line ``dict.txt`` again only to learn each
word's tag.  Both now come from marshal files under ``KAR_DATA_DIR/cache/jieba/`` (written on first
use, rebuilt when jieba's dictionary file changes; an unwritable data directory falls back to
jieba's own temporary cache and a parse).  ``bench/cold_start.py`` prints cold and warm figures.
"""

from __future__ import annotations

import logging
import marshal
import os
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
_LOCK = threading.Lock()


def cache_dir() -> Path | None:
    """``KAR_DATA_DIR/cache/jieba`` (created), or None when it cannot be created."""
    from culturebase.settings import get_settings

    try:
        folder = Path(get_settings().data_dir) / "cache" / "jieba"
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    except Exception as exc:  # noqa: BLE001 - an unreadable setting or a read-only folder: jieba's defaults
        log.debug("jieba cache folder unavailable (%s); using jieba's temporary cache", exc)
        return None


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


@lru_cache(maxsize=1)
def word_tags() -> dict[str, str]:
    """Word → part-of-speech tag of jieba's dictionary (what ``jieba.posseg.dt.word_tag_tab`` holds),
    read from the data directory's cache when it is as new as ``dict.txt``."""
    source = _dict_file()
    stat = source.stat()
    key = f"{stat.st_size}-{int(stat.st_mtime)}"
    folder = cache_dir()
    cache = folder / f"word_tags.{key}.marshal" if folder is not None else None
    if cache is not None and cache.is_file():
        try:
            with cache.open("rb") as fh:
                table = marshal.load(fh)
            if isinstance(table, dict):
                return table
        except (OSError, EOFError, ValueError, TypeError):
            pass  # a broken cache is rebuilt
    table = {}
    with source.open("rb") as fh:
        for raw in fh:
            parts = raw.decode("utf-8").split()
            if len(parts) == 3:
                table[parts[0]] = parts[2]
    if cache is not None:
        try:
            fd, tmp = tempfile.mkstemp(dir=cache.parent)
            with os.fdopen(fd, "wb") as fh:
                marshal.dump(table, fh)
            os.replace(tmp, cache)
        except OSError as exc:
            log.debug("cannot write %s: %s", cache, exc)
    return table
