"""The sound route, as the grounder runs it: the query clip (an audio file, or a video's sound track)
decoded and matched against the entity sounds' landmark index (:mod:`retrieval.sounds.route`).  Only
accepted matches come back as hits; :func:`retrieval.grounding.fuse_sound_matches` folds them in like
image matches.  A clip with no match claims nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NAME = "sound"


@dataclass
class SoundRun:
    """The sound route's hits (``retrieval.sounds.route.SoundHit``, accepted or not) and its trace status."""

    hits: list[Any] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)


def wanted(cues: Any) -> bool:
    """Whether the cues carry a sound clip."""
    return getattr(cues, "sound", None) is not None or bool(getattr(cues, "audio_bytes", None))


def run(sound_store: Any, cues: Any, max_seconds: float = 60.0) -> SoundRun:
    """Match the cues' clip against the entity sounds (nothing when the cues carry none)."""
    from retrieval.sounds import route as sound_route
    from retrieval.sounds.fingerprint import AudioDecodeError

    out = SoundRun()
    if not wanted(cues):
        return out
    if sound_store is None:
        out.status[NAME] = "skipped: no sound route (this CultureBase has no sound index)"
        return out
    if sound_store.count() == 0:  # checked before decoding: a KB without sounds costs a clip nothing here
        out.status[NAME] = "skipped: no entity has a sound (kar kb import-audio DIR)"
        return out
    query = cues.sound
    if query is None:
        try:
            query = sound_route.prepare(cues.audio_bytes, max_seconds=max_seconds)
        except AudioDecodeError as exc:
            out.status[NAME] = f"skipped: the clip has no decodable sound ({exc})"
            return out
    out.hits = sound_store.match(query.samples)
    accepted = sum(h.accepted() for h in out.hits)
    out.status[NAME] = f"ran on {query.seconds:.1f} s of sound: {accepted} match(es)"
    return out
