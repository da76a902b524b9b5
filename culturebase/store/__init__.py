"""CultureBase storage: one interface, an embedded (Qdrant Edge) and a server (Qdrant) backend."""

from culturebase.store.base import (
    Backend,
    Collection,
    CollectionSpec,
    EmbedderInfo,
    EmbedderMismatchError,
    PayloadFilter,
    PointRecord,
    ScoredRecord,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
)
from culturebase.store.culturebase import CultureBaseStore, open_backend, open_store

__all__ = [
    "Backend",
    "Collection",
    "CollectionSpec",
    "CultureBaseStore",
    "EmbedderInfo",
    "EmbedderMismatchError",
    "PayloadFilter",
    "PointRecord",
    "ScoredRecord",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "open_backend",
    "open_store",
]
