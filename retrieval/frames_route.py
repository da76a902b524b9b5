"""The image route over a clip's sampled frames: each frame is matched as a picture would be, and an
entity's best frame is its one match (a template seen in five frames counts once, as strongly as
its clearest frame shows it).  Cues in (frame JPEGs), the image route's matches out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def best_of_frames(image_route: Any, frames: Sequence[bytes], language: str | None = None) -> tuple[list[Any], str]:
    """The image route's matches over ``frames``, one per entity (its best frame: the largest accepted
    evidence, else the smallest hash distance), and why nothing ran ("" when it ran)."""
    best: dict[str, tuple[tuple[float, float], Any]] = {}
    failures = []
    for index, data in enumerate(frames):
        try:
            query = image_route.prepare(data)
        except Exception as exc:  # noqa: BLE001 - an undecodable frame: the others still count
            failures.append(f"frame {index}: {type(exc).__name__}")
            continue
        for match in image_route.match(query, language=language):
            evidence = match.evidence(image_route.tau) if match.signal(image_route.tau) is not None else 0.0
            rank = (evidence, -(match.distance if match.distance is not None else 1_000))
            if match.entity_id not in best or rank > best[match.entity_id][0]:
                best[match.entity_id] = (rank, match)
    if failures and len(failures) == len(frames):
        return [], "no frame could be decoded (" + ", ".join(failures[:3]) + ")"
    return [m for _, m in sorted(best.values(), key=lambda pair: pair[0], reverse=True)], ""
