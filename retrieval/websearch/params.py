"""The local corpus search's tuned values (:mod:`retrieval.websearch.hybrid`), in one frozen object.

Each field names the bench command that chose it (or says that none did).  ``python bench/evidence.py``
searches the KnowYourMeme bench pages (``--filler 50000``: also at about 50,000 chunks) and chooses on its
calibration split; ``docs/evidence.md`` gives the figures.  The two floors read the embedder's score
scale, so they are not here: they are the calibration record's ``corpus_floor`` and
``corpus_ordinary_floor`` (:mod:`retrieval.calibration`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: how the two routes' pages are ranked: ``sum`` (the calibrated sum of heights) or ``rrf`` (reciprocal
#: rank fusion of the routes' page ranks); the floor is read on the sum's relevance either way
PageFusion = Literal["sum", "rrf"]


@dataclass(frozen=True)
class HybridParams:
    """Tuned values of the hybrid corpus search (fusion, backgrounds, floor rules, results)."""

    #: ``sum`` or ``rrf`` (``KAR_CORPUS_FUSION``): ``python bench/evidence.py`` prints both (``hybrid_sum``,
    #: ``hybrid_rrf``); the sum ranks written descriptions better at real size
    fusion: PageFusion = "sum"
    #: weight of the lexical height in the sum: chosen by ``python bench/evidence.py`` (calibration split: the
    #: best MRR of entity and description queries among 0.25, 0.5, 1, 2, 4 at the floor chosen for each)
    w_lexical: float = 0.5
    #: a page is above the floor only at this share of the query's best page's relevance or more: chosen by
    #: ``python bench/evidence.py`` (``choose_relative``: the best F1 among 0, 0.3 … 0.9 of the pages above the
    #: floor in the top 5 of calibration entity and description queries)
    relative_floor: float = 0.9
    #: a page whose title covers at least this share of the query's words (KAR's template words left out) ranks
    #: first (the title rule): chosen by ``python bench/evidence.py`` (``rules_on_calibration``; every share from
    #: 0.34 to 1.0 gave the same calibration figures)
    title_min_coverage: float = 0.5
    #: titles shorter than this (letters and digits) name nothing: ``python bench/evidence.py --filler 50000``
    #: (a 3-character minimum missed "57" and "69", two calibration pages, at 50,000 chunks)
    min_title_chars: int = 2
    #: the name rule (a page titled as one of the grounded entity's names ranks first): ``python
    #: bench/evidence.py`` prints entity-with-source-work queries with it and without (``hybrid_sum_no_name_rule``)
    name_rule: bool = True
    #: a page found on the lexical route alone is above the floor only when it holds every distinctive word of
    #: the query: chosen by ``python bench/evidence.py`` (``rules_on_calibration``, on and off)
    lexical_alone_needs_words: bool = True
    #: a page the query does not name and that holds no distinctive word of it needs the record's
    #: ``corpus_ordinary_floor``: chosen by ``python bench/evidence.py`` (``rules_on_calibration``, on and off)
    ordinary_words_rule: bool = True
    #: ... unless it holds at least this many of the query's content words (0: off): chosen by ``python
    #: bench/evidence.py`` (``choose_shared_words``: the fewest of 2 … 6 that let no more tuning captions through)
    ordinary_shared_words: int = 4
    #: the background of a query on a route without a corpus sample is its k-th best page not naming the query,
    #: and a sample's quantile is never read nearer the top than this rank: set by hand (the 10th-best page was
    #: the background before the sample); ``python bench/evidence.py`` measures the search with it
    k_background: int = 10
    #: the dense and lexical backgrounds are the score the best ``q_background`` of the corpus sample reach:
    #: set by hand, measured by ``python bench/evidence.py --filler 50000`` (same floor at both sizes)
    q_background: float = 0.02
    #: chunks in the corpus sample (the first by point id): set by hand, measured by ``python bench/evidence.py
    #: --filler 50000``
    sample_size: int = 1024
    #: a script group (CJK, Latin) has a dense background of its own when the sample holds this many of its
    #: chunks: set by hand
    min_group_sample: int = 100
    #: chunks fetched per route: set by hand; ``python bench/evidence.py --rows-out DIR`` keeps 200 per route so
    #: that other pools can be tried on the same searches
    pool: int = 20
    #: RRF's k in 1/(k + rank): the usual constant of reciprocal rank fusion, not tuned
    rrf_k: int = 60
    #: at most this many chunks of one page in a result (its best, and its second when above the floor): set
    #: by hand
    max_chunks_per_page: int = 2
    #: characters of one chunk in a result's text: set by hand
    max_snippet_chars: int = 1200


#: the shipped values
PARAMS = HybridParams()
