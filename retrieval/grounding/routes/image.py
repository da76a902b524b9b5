"""The image route, as the grounder runs it: the query image prepared and matched by
:class:`retrieval.images.route.ImageRoute` (perceptual hashes, then geometric verification of the
best candidates).  This module only calls that route and turns its matches into
:class:`~retrieval.grounding.candidates.Match` es; fusion folds the accepted ones in
(:func:`retrieval.grounding.fusion.fold_matches`).  A clip's frames are the frames route's
(:mod:`retrieval.grounding.routes.frames`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from retrieval.grounding.candidates import CandidatePool, Match, RouteQuery, RouteRun
from retrieval.grounding.params import PARAMS
from retrieval.grounding.registry import register_route

NAME = "image"


def has_image(cues: Any) -> bool:
    """Whether the cues carry an image (a clip's frames are the frames route's)."""
    return (cues.image is not None or bool(cues.image_bytes)) and not getattr(cues, "frames", None)


def prepare(image_route: Any, cues: Any) -> tuple[Any, str]:
    """The query image prepared by the image route (hashes, crops, features), or None and why."""
    if cues.image is not None:
        return cues.image, ""
    try:
        return image_route.prepare(cues.image_bytes), ""
    except Exception as exc:  # bytes the decoder refuses: the text routes still run
        return None, f"the image cannot be decoded ({type(exc).__name__}: {exc})"


def as_matches(image_matches: Iterable[Any], tau_image: int) -> list[Match]:
    """The image route's matches (``retrieval.images.route.ImageMatch``) as grounding matches: accepted when a
    signal passes ``tau_image``; each traces the matched image and its hash distance."""
    out = []
    for m in image_matches:
        evidence = m.evidence(tau_image) if m.signal(tau_image) is not None else None
        out.append(Match(m.entity_id, evidence, m.cue(tau_image), {"image_distance": m.distance, "image": m.trace(tau_image)}))
    return out


@register_route()
class ImageRoute:
    """The query image matched against the entity images; an accepted match may accept its entity alone."""

    name = NAME
    scores = (NAME,)
    reads = ("image", "image_bytes")
    role = "match"
    weight = PARAMS.route_weights[NAME]
    accepts_alone = True
    phases = ("match",)

    def wanted(self, query: RouteQuery) -> bool:
        """Whether the cues carry an image and the grounder has an image route."""
        return query.image_route is not None and has_image(query.cues)

    def run(self, phase: str, query: RouteQuery, pool: CandidatePool) -> RouteRun:
        """Match the cues' image against the entity images (nothing when the cues carry none)."""
        out = RouteRun()
        if not has_image(query.cues):
            return out
        if query.image_route is None:
            out.status[NAME] = "skipped: no image route (this CultureBase has no image index)"
            return out
        prepared, why = prepare(query.image_route, query.cues)
        if prepared is None:
            out.status[NAME] = f"skipped: {why}"
            return out
        out.matches = as_matches(query.image_route.match(prepared, language=query.language), query.image_route.tau)
        out.status[NAME] = "ran"
        return out
