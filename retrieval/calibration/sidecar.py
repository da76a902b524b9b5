"""The calibration record beside an export: ``kar kb export --out FILE`` writes ``FILE.calibration.json``, and
``kar kb import FILE`` stores it with the knowledge base when it was fitted for the embedder in use and the
knowledge base has no record of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retrieval.calibration.record import CalibrationRecord, load_record
from retrieval.calibration.resolve import read_kb_record, write_kb_record

__all__ = ["SUFFIX", "import_sidecar", "sidecar_path", "write_sidecar"]

SUFFIX = ".calibration.json"


def sidecar_path(dump: Path) -> Path:
    """Where the record of an export ``dump`` lives."""
    return dump.with_name(dump.name + SUFFIX)


def write_sidecar(store: Any, dump: Path) -> Path | None:
    """Write the knowledge base's record beside ``dump``; None when it has none."""
    record = read_kb_record(store)
    if record is None:
        return None
    path = sidecar_path(dump)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(record.to_json(), "utf-8")
    tmp.replace(path)
    return path


def import_sidecar(store: Any, embedder: Any, dump: Path) -> tuple[CalibrationRecord | None, str | None]:
    """Store the record beside ``dump`` with the knowledge base; returns it (None: not stored) and why not."""
    path = sidecar_path(dump)
    if not path.is_file():
        return None, None
    record = load_record(path.read_text("utf-8"), str(path))
    if not record.matches(embedder.name, embedder.dim):
        return None, f"{path.name} was fitted for {record.embedder.name} ({record.embedder.dim}-d), not {embedder.name}: not used"
    if read_kb_record(store) is not None:
        return None, f"{path.name} not used: the knowledge base has a calibration record of its own"
    record = record.model_copy(update={"source": f"imported with {dump.name}"})
    write_kb_record(store, record)
    return record, None
