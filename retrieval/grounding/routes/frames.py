"""The image route over a clip's sampled frames: every decodable frame is prepared, then all of them
are matched in **one** :meth:`retrieval.images.route.ImageRoute.match_many` call (each template counted
once, by its best frame: accepted before not accepted, then the larger evidence, then more inliers).
Cues in (frame JPEGs), the image route's matches out, scored and traced as ``image``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from retrieval.grounding.candidates import CandidatePool, RouteQuery, RouteRun
from retrieval.grounding.params import PARAMS
from retrieval.grounding.registry import register_route
from retrieval.grounding.routes.image import NAME as IMAGE, as_matches

NAME = "frames"


def best_of_frames(image_route: Any, frames: Sequence[bytes], language: str | None = None) -> tuple[list[Any], str]:
    """The image route's matches over ``frames``, one per entity (its best frame), and why nothing ran
    ("" when it ran).  A frame the decoder refuses is left out; when none decodes, nothing runs."""
    prepared, failures = [], []
    for index, data in enumerate(frames):
        try:
            prepared.append(image_route.prepare(data))
        except Exception as exc:  # noqa: BLE001 - an undecodable frame: the others still count
            failures.append(f"frame {index}: {type(exc).__name__}")
    if not prepared:
        return [], "no frame could be decoded (" + ", ".join(failures[:3]) + ")"
    matches = image_route.match_many(prepared, language=language)
    tau = image_route.tau
    # accepted evidence first, as the grounder reads them (match_many sorts by hash distance)
    return sorted(matches, key=lambda m: (-(m.evidence(tau) if m.signal(tau) is not None else 0.0),
                                          m.distance if m.distance is not None else 1_000, m.entity_id)), ""


@register_route()
class FramesRoute:
    """A clip's sampled frames matched against the entity images (traced and scored as ``image``)."""

    name = NAME
    scores = (IMAGE,)
    reads = ("frames",)
    role = "match"
    weight = PARAMS.route_weights[IMAGE]
    accepts_alone = True
    phases = ("match",)

    def wanted(self, query: RouteQuery) -> bool:
        """Whether the cues carry frames and the grounder has an image route."""
        return query.image_route is not None and bool(getattr(query.cues, "frames", None))

    def run(self, phase: str, query: RouteQuery, pool: CandidatePool) -> RouteRun:
        """Match every frame; an entity's best frame counts once (nothing when the cues carry no frames)."""
        out = RouteRun()
        if not getattr(query.cues, "frames", None):
            return out
        if query.image_route is None:
            out.status[IMAGE] = "skipped: no image route (this CultureBase has no image index)"
            return out
        matches, why = best_of_frames(query.image_route, query.cues.frames, query.language)
        if why:
            out.status[IMAGE] = f"skipped: {why}"
            return out
        out.matches = as_matches(matches, query.image_route.tau)
        out.status[IMAGE] = "ran"
        return out
