"""The sound route, as the grounder runs it: the query clip (an audio file, or a video's sound track)
decoded and matched against the entity sounds' landmark index (:mod:`retrieval.sounds.route`).  Every
hit is traced on its entity; only accepted ones score (fusion folds them in like image matches:
:func:`retrieval.grounding.fusion.fold_matches`).  A clip with no match claims nothing.
"""

from __future__ import annotations

from typing import Any

from retrieval.grounding.candidates import CandidatePool, Match, RouteQuery, RouteRun
from retrieval.grounding.params import PARAMS
from retrieval.grounding.registry import register_route

NAME = "sound"


def has_sound(cues: Any) -> bool:
    """Whether the cues carry a sound clip."""
    return getattr(cues, "sound", None) is not None or bool(getattr(cues, "audio_bytes", None))


def as_match(hit: Any) -> Match:
    """A sound route hit (``retrieval.sounds.route.SoundHit``) as a grounding match."""
    return Match(hit.entity_id, hit.evidence() if hit.accepted() else None, hit.cue(), {"sound": hit.trace()})


@register_route()
class SoundRoute:
    """The query clip matched against the entity sounds; an accepted match may accept its entity alone."""

    name = NAME
    scores = (NAME,)
    reads = ("sound", "audio_bytes")
    role = "match"
    weight = PARAMS.route_weights[NAME]
    accepts_alone = True
    phases = ("match",)

    def wanted(self, query: RouteQuery) -> bool:
        """Whether the cues carry a clip and the grounder has a sound index."""
        return query.sound_store is not None and has_sound(query.cues)

    def run(self, phase: str, query: RouteQuery, pool: CandidatePool) -> RouteRun:
        """Match the cues' clip against the entity sounds (nothing when the cues carry none)."""
        from retrieval.sounds import route as sound_route
        from retrieval.sounds.fingerprint import AudioDecodeError

        out = RouteRun()
        if not has_sound(query.cues):
            return out
        store = query.sound_store
        if store is None:
            out.status[NAME] = "skipped: no sound route (this CultureBase has no sound index)"
            return out
        if store.count() == 0:  # checked before decoding: a KB without sounds costs a clip nothing here
            out.status[NAME] = "skipped: no entity has a sound (kar kb import-audio DIR)"
            return out
        clip = query.cues.sound
        if clip is None:
            try:
                clip = sound_route.prepare(query.cues.audio_bytes, max_seconds=PARAMS.sound_max_seconds)
            except AudioDecodeError as exc:
                out.status[NAME] = f"skipped: the clip has no decodable sound ({exc})"
                return out
        hits = store.match(clip.samples)
        out.matches = [as_match(h) for h in hits]
        out.status[NAME] = f"ran on {clip.seconds:.1f} s of sound: {sum(h.accepted() for h in hits)} match(es)"
        return out
