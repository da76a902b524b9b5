"""CultureBase: entity records, import/export, and the vector store (embedded Qdrant Edge or a Qdrant server)."""

from culturebase.entity import Entity, Source, canonical_url, make_entity_id, normalize_text
from culturebase.settings import Settings, get_settings

__all__ = ["Entity", "Settings", "Source", "canonical_url", "get_settings", "make_entity_id", "normalize_text"]
