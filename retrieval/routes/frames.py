"""The image route over a clip's sampled frames: every decodable frame is prepared, then all of them
are matched in **one** :meth:`retrieval.images.route.ImageRoute.match_many` call (each template counted
once, by its best frame: accepted before not accepted, then the larger evidence, then more inliers).
Cues in (frame JPEGs), the image route's matches out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


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
