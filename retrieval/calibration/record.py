"""The calibration record: every threshold that reads the text embedder's score scale, as data.

One record per (embedder, knowledge base).  It holds the grounding accept rule's τ and margins and the
local corpus search's floors (:class:`Thresholds`), the embedder it was fitted for (name, dimension), what
the fit was made on (probe counts by kind and language), when, by which method with which guarantee, and
the figures the fitted rule reached on the held-out part of its probes.  ``kar calibrate`` writes it into
the knowledge base (:mod:`retrieval.calibration.storage`); the bundled embedder's record ships as a data
file beside this module (``files/<embedder>.json``).

What it does not hold: the image and sound routes' thresholds (Hamming distances, inlier counts,
fingerprint landmarks) do not read the text embedder's scale (:data:`OUT_OF_SCOPE`).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "CONSERVATIVE",
    "OUT_OF_SCOPE",
    "RECORD_VERSION",
    "CalibrationRecord",
    "CalibrationRecordError",
    "EmbedderId",
    "Thresholds",
    "bundled_record",
    "load_record",
]

RECORD_VERSION = 1
OUT_OF_SCOPE = (
    "the image and sound routes' thresholds (hash distances, geometric inliers, fingerprint landmarks) do not "
    "depend on the text embedder and are not part of this record"
)


class CalibrationRecordError(ValueError):
    """A calibration record that cannot be read (the message names the file and the field)."""


class Thresholds(BaseModel):
    """The embedder-dependent thresholds of grounding and evidence."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tau: float = Field(description="grounding: the fused score a hit must reach (dense cosine + weighted evidence routes)")
    min_height: float = Field(description="grounding: a hit without evidence-route support must stand this far above its background cosine")
    min_evidence: float = Field(description="grounding: weighted evidence-route terms (Σ W[r]·s_r) that count as support")
    corpus_floor: float = Field(description="local corpus search: relevance (heights over the query's background) a page needs")
    corpus_ordinary_floor: float = Field(description="local corpus search: the floor of a page found on ordinary words alone")

    def changes(self, other: "Thresholds") -> dict[str, dict[str, float]]:
        """``{field: {before, after}}`` for every field (``self`` before, ``other`` after)."""
        return {k: {"before": v, "after": getattr(other, k)} for k, v in self.model_dump().items()}


#: the values used for an embedder with no record: no cosine alone grounds (τ above any cosine and a height
#: margin no background leaves room for), an entity grounds only with evidence-route support (its name, a
#: catchphrase, an exact alias) on top of a near-identical cosine, and a corpus page counts only when it
#: clears twice the relevance the bundled embedder needs and, found on ordinary words alone, never.  Chosen to
#: be safe, not good: `kar calibrate` replaces them (docs/calibration.md).
CONSERVATIVE = Thresholds(tau=1.0, min_height=1.0, min_evidence=0.1, corpus_floor=0.05, corpus_ordinary_floor=1.0)


class EmbedderId(BaseModel):
    """The embedder a record was fitted for."""

    model_config = ConfigDict(extra="forbid")

    name: str
    dim: int = Field(ge=1)


class CalibrationRecord(BaseModel):
    """One fitted rule set for one (embedder, knowledge base), with its provenance and held-out figures."""

    model_config = ConfigDict(extra="forbid")

    version: int = RECORD_VERSION
    embedder: EmbedderId
    thresholds: Thresholds
    created_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    method: str = Field(description="how the thresholds were chosen and what the guarantee is")
    target_false_rate: float = Field(gt=0, lt=1)
    kb_entities: int = Field(ge=0, description="entities in the knowledge base when it was fitted")
    kb_languages: dict[str, int] = Field(default_factory=dict)
    corpus_chunks: int = 0
    fitted_on: dict[str, Any] = Field(default_factory=dict, description="probe counts by split, kind and language")
    held_out: dict[str, Any] = Field(default_factory=dict, description="figures of the fitted rule on the held-out probes")
    tolerance: dict[str, float] = Field(default_factory=dict, description="how far a refit may land from these figures")
    out_of_scope: str = OUT_OF_SCOPE
    source: str = Field("", description="where the record came from: kar calibrate, a bundled file, an import")

    def matches(self, name: str, dim: int) -> bool:
        """Whether the record was fitted for this embedder."""
        return self.embedder.name == name and self.embedder.dim == dim

    def grown(self, entities: int) -> bool:
        """The knowledge base has grown past twice the size the record was fitted at."""
        return entities > 2 * max(self.kb_entities, 1)

    def summary(self) -> dict[str, Any]:
        """What a trace, a manifest or ``kar config`` shows: the embedder, the values, when and how, its held-out figures."""
        return {
            "embedder": self.embedder.name,
            "dim": self.embedder.dim,
            "thresholds": self.thresholds.model_dump(),
            "created_at": self.created_at.isoformat(),
            "method": self.method.split(":", 1)[0],
            "target_false_rate": self.target_false_rate,
            "kb_entities": self.kb_entities,
            "held_out": {k: v for k, v in self.held_out.items() if not isinstance(v, dict)},
            "source": self.source,
        }

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


def load_record(data: str | bytes | dict[str, Any], where: str = "calibration record") -> CalibrationRecord:
    """Parse a record; a clear error naming ``where`` and the field otherwise."""
    try:
        raw = json.loads(data) if isinstance(data, (str, bytes)) else data
        return CalibrationRecord.model_validate(raw)
    except json.JSONDecodeError as exc:
        raise CalibrationRecordError(f"{where}: not JSON ({exc.msg}, line {exc.lineno})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(record)"
        raise CalibrationRecordError(f"{where}: field {field}: {first['msg']}") from None


def _data_file(name: str) -> Path:
    return Path(str(resources.files("retrieval.calibration") / "files" / name))


@lru_cache(maxsize=8)
def bundled_record(embedder_name: str) -> CalibrationRecord | None:
    """The record shipped with the package for an embedder (``files/<name>.json``), or None."""
    path = _data_file(f"{embedder_name.replace('/', '_')}.json")
    if not path.is_file():
        return None
    record = load_record(path.read_text("utf-8"), str(path))
    return record.model_copy(update={"source": record.source or "bundled"})
