"""The built-in grounding routes, one module each (cues in, scored candidates with their reasons out).

Importing this package registers them (:mod:`retrieval.grounding.registry`), in this order, which is
the order they run in within a phase and the order of their terms in fusion:
:mod:`~retrieval.grounding.routes.dense` (``ocr``, ``visual``, ``name``), :mod:`~retrieval.grounding.routes.lexical`,
:mod:`~retrieval.grounding.routes.caption`, :mod:`~retrieval.grounding.routes.exact`,
:mod:`~retrieval.grounding.routes.sparse`, :mod:`~retrieval.grounding.routes.image`,
:mod:`~retrieval.grounding.routes.frames`, :mod:`~retrieval.grounding.routes.sound`.
"""

from retrieval.grounding.routes import dense, lexical, caption, exact, sparse, image, frames, sound

__all__ = ["dense", "lexical", "caption", "exact", "sparse", "image", "frames", "sound"]
