"""The calibration part of ``kar kb stats`` and ``GET /v1/kb/stats``."""

from __future__ import annotations

from typing import Any

from retrieval.calibration.resolve import resolve_calibration

__all__ = ["calibration_stats"]


def calibration_stats(store: Any, embedder: Any) -> dict[str, Any]:
    """The calibration in use for ``store`` with ``embedder``: source, thresholds, the record's summary, warnings
    (no record; a record for another embedder; the KB grown past twice the size it was fitted at)."""
    return resolve_calibration(store, embedder.name, embedder.dim).summary()
