"""Grounding routes, one module each (cues in, scored candidates with their reasons out).

:mod:`~retrieval.routes.dense` (``ocr``, ``visual``, ``name``), :mod:`~retrieval.routes.lexical`,
:mod:`~retrieval.routes.sparse`, :mod:`~retrieval.routes.caption`, :mod:`~retrieval.routes.exact`,
:mod:`~retrieval.routes.image`; :mod:`~retrieval.routes.base` holds what they share.  Fusion and the
accept rule live in :mod:`retrieval.grounding`.
"""
