"""Calibration: the thresholds that read the text embedder's score scale, as data per (embedder, knowledge base).

- :mod:`.record`: the record (thresholds, embedder, what it was fitted on, held-out figures), the bundled files;
- :mod:`.resolve`: which thresholds are in use (the KB's record, the bundled one, or conservative values);
- :mod:`.probes`, :mod:`.fit`, :mod:`.corpus`, :mod:`.job`: ``kar calibrate`` (probes from the KB and the
  packaged captions, a split fixed by hash, thresholds chosen under a Clopper-Pearson bound).

docs/calibration.md says what each value means and how the fit works.
"""

from retrieval.calibration.record import CONSERVATIVE, OUT_OF_SCOPE, CalibrationRecord, CalibrationRecordError, EmbedderId, Thresholds, bundled_record, load_record
from retrieval.calibration.resolve import (
    META_KEY,
    Calibration,
    UncalibratedEmbedderError,
    clear_kb_record,
    read_kb_record,
    resolve_calibration,
    uncalibrated_warning,
    write_kb_record,
)

__all__ = [
    "CONSERVATIVE",
    "META_KEY",
    "OUT_OF_SCOPE",
    "Calibration",
    "CalibrationRecord",
    "CalibrationRecordError",
    "EmbedderId",
    "Thresholds",
    "UncalibratedEmbedderError",
    "bundled_record",
    "clear_kb_record",
    "load_record",
    "read_kb_record",
    "resolve_calibration",
    "uncalibrated_warning",
    "write_kb_record",
]
