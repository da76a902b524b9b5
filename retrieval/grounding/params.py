"""Grounding's tuned values, in one frozen parameters object.

Each field names the bench command that chose it.  Values that read the text embedder's score scale
(τ, the evidence and height margins) are not here: they are the calibration record's
(:mod:`retrieval.calibration`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping


def _frozen(values: dict[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(values))


@dataclass(frozen=True)
class GroundingParams:
    """The grounder's hand-set values (routes, fusion)."""

    #: weight of each evidence route's score (in [0, 1]) in the fused score, and of an accepted image or
    #: sound match's evidence above τ.  Text weights chosen by
    #: ``python bench/grounding_precision.py --sizes 200,5000 --work data/bench/grounding_precision`` (calibration
    #: split); image by ``python bench/templates.py``; sound by ``python bench/sounds.py``
    route_weights: Mapping[str, float] = field(
        default_factory=lambda: _frozen(
            {"lexical": 0.05, "caption": 0.25, "exact": 0.10, "sparse": 0.10, "image": 0.15, "sound": 0.15}
        )
    )
    #: an evidence route "wins" (names the hit's route) when its weighted term is at least this large
    #: (``python bench/grounding_precision.py --sizes 200,5000``)
    win_term: float = 0.05
    #: the route a hit is named after when no route scored it at all (every entity carries the name route's vector)
    fallback_route: str = "name"
    #: a dense query's background in one entity language is its K-th neighbour's cosine there
    #: (``python bench/grounding_precision.py --sizes 200,5000``)
    k_background: int = 10
    #: entity languages searched apart (each with at least ``k_background`` entities); others are searched together
    background_languages: tuple[str, ...] = ("zh", "en", "ja", "ko")
    #: a guess's cosine is scaled by its confidence (``python bench/grounding_precision.py --sizes 200,5000``)
    confidence_factor: Mapping[str, float] = field(default_factory=lambda: _frozen({"high": 1.0, "medium": 0.99, "low": 0.97}))
    #: a cue is cut to this many characters before it is embedded
    max_cue_chars: int = 1000
    #: the lexical route brings this many times the candidate count
    #: (``python bench/grounding_precision.py --sizes 200,5000,40000``: at 40,000 names 1 in 3 catchphrase
    #: entities were out of reach otherwise)
    lexical_pool: int = 5
    #: the exact route: a name counts fully inside a sentence below this Zipf frequency, not at all from
    #: ``zipf_ordinary`` on (``python bench/grounding_precision.py --sizes 200,5000``)
    zipf_distinct: float = 2.5
    zipf_ordinary: float = 4.0
    #: the exact route's score of a name/alias quoted in the OCR text (``python bench/grounding_precision.py``)
    quoted: float = 0.6
    #: the caption route's score of a short OCR line that is as a whole one of the entity's catchphrases
    #: (``python bench/grounding_precision.py``: the whole-line catchphrases of bench/queries/catchphrase_lines.jsonl)
    whole_line: float = 0.5
    #: weight of the cross-lingual pass's hubness term (CSLS), chosen on the calibration split of
    #: ``python bench/grounding_precision.py --sizes 200,5000``
    hub_weight: float = 1.0
    #: how many of the best centered reference-query cosines make a candidate's hubness (same bench)
    k_hub: int = 10
    #: the sound route reads at most this many seconds of a clip (``python bench/sounds.py``)
    sound_max_seconds: float = 60.0


#: the parameters the grounder runs with
PARAMS = GroundingParams()
