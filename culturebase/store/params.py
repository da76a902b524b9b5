"""The store's tuned values, in one frozen parameters object.

Values a user sets (HNSW breadth, batch size, layout, disk guard) are settings
(:class:`culturebase.settings.Settings`), not parameters; these are the values the code chose, each
with what chose it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StoreParams:
    """Tuned values of the CultureBase store (both backends)."""

    #: KB of vectors (in a segment, or matching a search's filter there) below which a search scores every
    #: point exactly instead of walking the graph (Qdrant's ``full_scan_threshold``): 5,000 384-d vectors.
    #: Chosen by ``python bench/recall.py`` (its ``--set`` layout variants) on the 5,000-name bench KB: an
    #: exact search of its 4,800 Chinese names costs what an HNSW search at ef 256 does (1.5 ms against
    #: 1.3-1.55 ms under load) and finds all of the 10 nearest, where HNSW finds 0.998 of them (ef 128: 0.990)
    exact_search_kb: int = 7_500
    #: KB of vectors per embedded segment from which it gets its HNSW graphs (Qdrant's default, 10 MB, left a
    #: 5k-entity KB without any).  Chosen by ``python bench/grounding.py --sizes 5000``: at 5k entities a
    #: search takes 0.197 ms against 0.25+ ms exhaustive, recall 1.0
    small_index_kb: int = 100
    #: payloads one embedded collection keeps in its cache (the least recently returned dropped first), about
    #: 1 KB each for an entity of the bench KBs.  Set by hand as a memory bound; what the cache saves (35-60 µs
    #: a hit) was measured by ``python bench/grounding_precision.py``
    payload_cache_points: int = 65_536
    #: KB of vectors in a server segment before it gets an HNSW graph: Qdrant's own default, restored after a
    #: bulk import sets it to 0 (not tuned)
    server_indexing_threshold_kb: int = 10_000


PARAMS = StoreParams()
