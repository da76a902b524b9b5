"""Entity grounding: match an image's cues against CultureBase by several routes, fuse, accept.

==========================  =====================================================================
module                      what it holds
==========================  =====================================================================
:mod:`.cues`                :class:`GroundingCues`, :class:`EntityCue`: what grounding reads
:mod:`.candidates`          the query routes read, their hits and matches, the candidate pool
:mod:`.route`               the :class:`Route` protocol every route implements, :class:`RouteTable`
:mod:`.registry`            :func:`register_route`, :func:`get_route`: the routes the grounder runs
:mod:`.routes`              the built-in routes: dense (ocr, visual, name), lexical, caption, exact,
                            sparse, image, frames, sound
:mod:`.fusion`              the one fusion: route scores → one score and a winning route
:mod:`.accept`              the accept rule
:mod:`.entities`            :class:`GroundedEntity` (route scores in one mapping), :class:`GroundingResult`
:mod:`.ground`              :class:`EntityGrounder`: ``ground()`` loops over the registered routes
:mod:`.params`              the tuned values (:data:`PARAMS`), each with the bench that chose it
:mod:`.crosslingual`        the dense routes' cross-lingual pass
:mod:`.language_search`     one dense search split by entity language
==========================  =====================================================================

Adding a route: a class implementing :class:`Route`, decorated with :func:`register_route`; nothing
else changes (docs/grounding.md).
"""

from retrieval.calibration.resolve import Calibration, UncalibratedEmbedderError, resolve_calibration
from retrieval.grounding.accept import accepted_alone, accepts, evidence_sum
from retrieval.grounding.builtin import route_table
from retrieval.grounding.candidates import CandidatePool, DenseQuery, Match, RouteHit, RouteQuery, RouteRun
from retrieval.grounding.cues import EntityCue, GroundingCues
from retrieval.grounding.entities import GroundedEntity, GroundingResult, route_summary
from retrieval.grounding.fusion import FusedScore, fold_matches, fuse
from retrieval.grounding.ground import EntityGrounder
from retrieval.grounding.params import PARAMS, GroundingParams
from retrieval.grounding.registry import get_route, register_route, route_names, unregister_route
from retrieval.grounding.route import PHASES, Route, RouteTable
from retrieval.grounding.routes.dense import DENSE_ROUTES, ROUTE_VECTOR, dense_queries
from retrieval.grounding.routes.exact import distinctiveness

__all__ = [
    "Calibration", "UncalibratedEmbedderError", "resolve_calibration",
    "accepted_alone", "accepts", "evidence_sum", "route_table",
    "CandidatePool", "DenseQuery", "Match", "RouteHit", "RouteQuery", "RouteRun",
    "EntityCue", "GroundingCues", "GroundedEntity", "GroundingResult", "route_summary",
    "FusedScore", "fold_matches", "fuse", "EntityGrounder", "PARAMS", "GroundingParams",
    "get_route", "register_route", "route_names", "unregister_route", "PHASES", "Route", "RouteTable",
    "DENSE_ROUTES", "ROUTE_VECTOR", "dense_queries", "distinctiveness",
]
