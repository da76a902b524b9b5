"""CultureBase opened for name lookups only: the store as its entities were embedded, no embedder loaded.

``gold_in_kb`` needs names and aliases, not vectors, so the report never loads an embedding model:
the store is opened with the embedder it records (:func:`open_kb_names`).  A missing, locked or
empty knowledge base is not an error of the report: the lookups are then unknown and the reason is
kept (``KBNames.unavailable``), shown wherever ``gold_in_kb`` would be.
"""

from __future__ import annotations

from contextlib import contextmanager
from collections.abc import Iterator
from typing import Any

from eval.diagnostics.gold import KBNames


@contextmanager
def open_kb_names(settings: Any) -> Iterator[KBNames]:
    """:class:`KBNames` over the configured CultureBase (closed on exit), or an unavailable one with its reason."""
    from culturebase.store.base import EmbedderInfo, StoreError
    from culturebase.store.culturebase import CultureBaseStore, open_backend

    if not settings.qdrant_url and not settings.kb_path.exists():
        yield KBNames(None, f"no CultureBase at {settings.kb_path}")
        return
    backend, names = None, None
    try:
        backend = open_backend(settings)
        meta = backend.collection_info("entities")
        if meta is None:
            names = KBNames(None, "CultureBase has no entities (kar kb import FILE)")
        else:
            info = EmbedderInfo(str(meta.get("embedder")), int(meta.get("dim") or 0), bool(meta.get("sparse")))
            names = KBNames(CultureBaseStore(backend, info, create=False))
    except (StoreError, OSError, ValueError) as exc:
        names = KBNames(None, f"CultureBase could not be opened: {exc}")
    try:
        yield names
    finally:
        if backend is not None:
            backend.close()
