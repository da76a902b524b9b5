"""Folders under ``KAR_DATA_DIR/cache`` for what a process would otherwise rebuild at each start
(jieba's dictionary: :mod:`retrieval.text.jieba_dict`; wordfreq's frequencies: :mod:`retrieval.text.word_frequency`)."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def folder(name: str) -> Path | None:
    """``KAR_DATA_DIR/cache/<name>`` (created), or None when it cannot be created (a read-only data directory:
    callers then work without a cache)."""
    from culturebase.settings import get_settings

    try:
        path = Path(get_settings().data_dir) / "cache" / name
        path.mkdir(parents=True, exist_ok=True)
        return path
    except Exception as exc:  # noqa: BLE001 - an unreadable setting or a read-only folder: no cache
        log.debug("cache folder %s unavailable (%s)", name, exc)
        return None
