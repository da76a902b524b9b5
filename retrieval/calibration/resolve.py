"""Which thresholds grounding and evidence use: the knowledge base's record, the bundled one, or conservative values.

:func:`resolve_calibration` reads, in order,

1. the record stored with the knowledge base (``kar calibrate`` wrote it), when it was fitted for the
   embedder now in use (a record for another embedder is ignored and said so: changing the embedder
   invalidates it);
2. the record shipped with the package for that embedder (the bundled multilingual-e5-small);
3. otherwise :data:`~retrieval.calibration.record.CONSERVATIVE`, with a warning that names
   ``kar calibrate``; with ``KAR_REQUIRE_CALIBRATION=true`` it refuses instead
   (:class:`UncalibratedEmbedderError`).

A record (the KB's or the bundled one) used on a knowledge base more than twice the size it was fitted at
comes with a note that says so and names ``kar calibrate``.

The record lives in the entities collection's metadata (key :data:`META_KEY`), so it goes wherever the
collection goes (a copied folder, a Qdrant server snapshot); ``kar kb export`` writes it beside the export.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from retrieval.calibration.record import CONSERVATIVE, CalibrationRecord, CalibrationRecordError, Thresholds, bundled_record, load_record

__all__ = [
    "META_KEY",
    "Calibration",
    "UncalibratedEmbedderError",
    "clear_kb_record",
    "read_kb_record",
    "resolve_calibration",
    "uncalibrated_warning",
    "write_kb_record",
]

#: the key of the record in the entities collection's metadata
META_KEY = "calibration"
Source = Literal["kb", "bundled", "conservative"]


class UncalibratedEmbedderError(ValueError):
    """No calibration record for the embedder and ``KAR_REQUIRE_CALIBRATION=true`` (the message names ``kar calibrate``)."""


def uncalibrated_warning(embedder_name: str) -> str:
    """The one warning of an embedder with no record."""
    return (
        f"grounding is not calibrated for embedder {embedder_name}: conservative thresholds are in use (few entities "
        "ground, few pages count as evidence); run `kar calibrate` to fit them for this knowledge base"
    )


@dataclass
class Calibration:
    """The thresholds in use, where they come from, and what a user should be told about them."""

    thresholds: Thresholds
    source: Source
    record: CalibrationRecord | None = None
    warning: str | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """What traces, run manifests, ``kar config`` and the stats show."""
        out: dict[str, Any] = {"source": self.source, "thresholds": self.thresholds.model_dump()}
        if self.record is not None:
            out["record"] = self.record.summary()
        if self.warning:
            out["warning"] = self.warning
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def _entities_meta(store: Any) -> dict[str, Any] | None:
    backend = getattr(store, "backend", None)
    return backend.collection_info("entities") if backend is not None else None


def read_kb_record(store: Any) -> CalibrationRecord | None:
    """The record stored with the knowledge base (None: none stored)."""
    meta = _entities_meta(store) or {}
    raw = meta.get(META_KEY)
    return load_record(raw, "the knowledge base's calibration record") if raw else None


def write_kb_record(store: Any, record: CalibrationRecord) -> None:
    """Store ``record`` with the knowledge base (replacing any)."""
    store.backend.set_collection_meta("entities", META_KEY, record.model_dump(mode="json"))


def clear_kb_record(store: Any) -> None:
    """Remove the knowledge base's record."""
    store.backend.set_collection_meta("entities", META_KEY, None)


def _growth(record: CalibrationRecord, store: Any) -> list[str]:
    """The note of a knowledge base grown past twice the size ``record`` was fitted at (none otherwise)."""
    entities = store.count() if store is not None else 0
    if not record.grown(entities):
        return []
    what = "it was calibrated at" if record.source != "bundled" else "the bundled record was fitted at"
    return [f"the knowledge base holds {entities:,} entities, more than twice the {record.kb_entities:,} {what}: run "
            "`kar calibrate` to check that the rule still holds"]


def resolve_calibration(store: Any, embedder_name: str, dim: int, require: bool = False) -> Calibration:
    """The calibration in use for ``store`` searched with embedder ``embedder_name`` (module docstring)."""
    notes: list[str] = []
    try:
        own = read_kb_record(store) if store is not None else None
    except CalibrationRecordError as exc:
        own, notes = None, [f"{exc}; it is ignored"]
    if own is not None:
        if own.matches(embedder_name, dim):
            return Calibration(own.thresholds, "kb", own, None, notes + _growth(own, store))
        notes.append(
            f"the knowledge base's calibration record was fitted for {own.embedder.name} ({own.embedder.dim}-d), not "
            f"{embedder_name} ({dim}-d): it is ignored"
        )
    bundled = bundled_record(embedder_name)
    if bundled is not None and bundled.matches(embedder_name, dim):
        return Calibration(bundled.thresholds, "bundled", bundled, None, notes + _growth(bundled, store))
    if require:
        raise UncalibratedEmbedderError(
            f"grounding is not calibrated for embedder {embedder_name} and KAR_REQUIRE_CALIBRATION=true: run "
            "`kar calibrate` for this knowledge base (or unset KAR_REQUIRE_CALIBRATION to run with conservative thresholds)"
        )
    return Calibration(CONSERVATIVE, "conservative", None, uncalibrated_warning(embedder_name), notes)
