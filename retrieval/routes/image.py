"""The image route, as the grounder runs it: the query image prepared and matched by
:class:`retrieval.images.route.ImageRoute` (perceptual hashes, then geometric verification of the
best candidates).  This module only calls that route; its matches are fused by
:func:`retrieval.grounding.fuse_media_matches`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NAME = "image"


@dataclass
class ImageRun:
    """The image route's matches (``retrieval.images.route.ImageMatch``) and its trace status."""

    matches: list[Any] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)


def wanted(cues: Any) -> bool:
    """Whether the cues carry an image or a clip's sampled frames."""
    return cues.image is not None or bool(cues.image_bytes) or bool(getattr(cues, "frames", None))


def prepare(image_route: Any, cues: Any) -> tuple[Any, str]:
    """The query image prepared by the image route (hashes, crops, features), or None and why."""
    if cues.image is not None:
        return cues.image, ""
    try:
        return image_route.prepare(cues.image_bytes), ""
    except Exception as exc:  # bytes the decoder refuses: the text routes still run
        return None, f"the image cannot be decoded ({type(exc).__name__}: {exc})"


def run(image_route: Any, cues: Any, language: str | None = None) -> ImageRun:
    """Match the cues' image against the entity images (nothing when the cues carry none)."""
    out = ImageRun()
    if not wanted(cues):
        return out
    if image_route is None:
        out.status[NAME] = "skipped: no image route (this CultureBase has no image index)"
        return out
    if getattr(cues, "frames", None):  # a clip: every sampled frame read as a picture, an entity's best frame counts once
        from retrieval.routes.frames import best_of_frames

        matches, why = best_of_frames(image_route, cues.frames, language)
        if why:
            out.status[NAME] = f"skipped: {why}"
            return out
        out.matches = list(matches)
        out.status[NAME] = "ran"
        return out
    query, why = prepare(image_route, cues)
    if query is None:
        out.status[NAME] = f"skipped: {why}"
        return out
    out.matches = list(image_route.match(query, language=language))
    out.status[NAME] = "ran"
    return out
