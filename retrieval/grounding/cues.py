"""What grounding reads: the cues an extractor read off an image (OCR text, a visual handle, entity
guesses) and the media themselves (an image, a clip's frames, a sound clip)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class EntityCue:
    """An entity the VLM thinks it sees."""

    name: str
    source: str = ""
    confidence: Literal["high", "medium", "low"] = "medium"


@dataclass
class GroundingCues:
    """What the extractor read off an image."""

    ocr_text: str = ""
    visual_handle: str = ""
    entities: list[EntityCue] = field(default_factory=list)
    #: the image itself: the grounder's image route hashes and matches it (undecodable bytes: the route is skipped)
    image_bytes: bytes | None = None
    image: Any = None  # retrieval.images.route.QueryImage: an image already prepared by the route (wins over image_bytes)
    #: a clip's sampled frames (JPEG bytes): the frames route reads each, an entity's best frame counts once (wins over image_bytes)
    frames: list[bytes] = field(default_factory=list)
    #: a sound clip (audio or video file bytes): the grounder's sound route fingerprints and matches it
    audio_bytes: bytes | None = None
    sound: Any = None  # retrieval.sounds.route.SoundQuery: a clip already decoded (wins over audio_bytes)

    @classmethod
    def from_text(cls, text: str) -> "GroundingCues":
        """A free-text search: the text serves as every cue route (what `kar kb search` runs)."""
        return cls(ocr_text=text, visual_handle=text, entities=[EntityCue(name=text, confidence="high")])

    def is_empty(self) -> bool:
        """Whether the cues carry nothing to ground (no text with letters in it, no medium)."""
        return not (
            self.ocr_text.strip() or self.visual_handle.strip() or any(e.name.strip() for e in self.entities) or self.image is not None
            or bool(self.image_bytes) or bool(self.frames) or self.sound is not None or bool(self.audio_bytes)
        )
