"""The sound route's index: entity sound clips fingerprinted (landmarks) and matched.

Entity sounds are stored once by content hash under ``KAR_DATA_DIR/sounds`` (``ab/<sha256>.<ext>``,
:class:`SoundStore`); each is fingerprinted (:mod:`retrieval.sounds.fingerprint`) when it is
stored, at import and at crawl, and its landmarks kept in one index file beside them
(``sounds/index.npz`` and ``sounds/index.json``: which sound number is which file of which entity).

A query clip matches a sound when at least :attr:`SoundParams.min_count` of its landmarks agree on one time
offset and the best sound's count is at least :attr:`SoundParams.min_ratio` times the next entity's: both
chosen on the calibration queries of ``bench/sounds.py`` (docs/sounds.md).  A clip with no match
claims nothing.  The evidence of an accepted match, in (0, 1], grows with the count
(:meth:`SoundHit.evidence`); the grounder's sound route folds it into the fused score like an
image match.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from culturebase.entity import Entity, EntitySound
from retrieval.sounds import fingerprint as fp

log = logging.getLogger(__name__)

#: largest entity sound file stored (bytes)
MAX_SOUND_BYTES = 30 * 1024 * 1024
#: audio formats stored, by the container FFmpeg names (sniffed from the bytes, not the file name)
SOUND_EXTS = {"wav": "wav", "mp3": "mp3", "ogg": "ogg", "flac": "flac", "mov,mp4,m4a,3gp,3g2,mj2": "m4a", "matroska,webm": "webm"}


@dataclass(frozen=True)
class SoundParams:
    """The sound route's accept rule, chosen on :data:`~retrieval.sounds.fingerprint.CALIBRATION_RUN`: 8 / 3.0 is the
    best top-1 with false claims ≤ 1.5 % on the four-grid index (docs/sounds.md)."""

    #: a match needs this many landmarks agreeing on one offset ...
    min_count: int = 8
    #: ... and this many times the count of the best other entity's sound
    min_ratio: float = 3.0
    #: evidence reaches 1.0 at this count (the evidence's scale, not a threshold: set by hand, no bench run
    #: compared another)
    full_count: int = 40


PARAMS = SoundParams()


class SoundRejected(ValueError):
    """A sound file that cannot be stored (too large, no audio, unreadable)."""


@dataclass
class SoundHit:
    """An entity whose sound matched the query: its best sound, the landmark count and why it was accepted."""

    entity_id: str
    sound: dict[str, Any]
    count: int
    runner_up: int
    offset_s: float
    speed: float
    query_landmarks: int

    def accepted(self) -> bool:
        return self.count >= PARAMS.min_count and self.count >= PARAMS.min_ratio * max(self.runner_up, 1)

    def evidence(self) -> float:
        """(0, 1] for an accepted match: min(1, count / full_count)."""
        return min(1.0, self.count / PARAMS.full_count)

    def trace(self) -> dict[str, Any]:
        return {
            "sound": self.sound, "landmarks_matched": self.count, "runner_up": self.runner_up,
            "offset_s": round(self.offset_s, 2), "speed": self.speed, "query_landmarks": self.query_landmarks,
            "accepted": self.accepted(),
        }

    def cue(self) -> str:
        return f"sound clip ({self.count} landmarks at {self.offset_s:.1f} s of {self.sound.get('path', '?')})"


@dataclass
class _Entry:
    entity_id: str
    sha256: str
    path: str


def sniff_ext(data: bytes) -> str:
    """The stored extension of audio bytes (by the container FFmpeg reads), or raise :class:`SoundRejected`."""
    import io

    import av

    try:
        with av.open(io.BytesIO(data)) as c:
            if not c.streams.audio:
                raise SoundRejected("the file has no audio track")
            name = c.format.name
    except SoundRejected:
        raise
    except Exception as exc:
        raise SoundRejected(f"not a readable audio file ({type(exc).__name__})") from exc
    return SOUND_EXTS.get(name, "bin")


class SoundStore:
    """Entity sound files, one per content hash, and the landmark index over them."""

    def __init__(self, root: Path | str, max_bytes: int = MAX_SOUND_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._index: fp.LandmarkIndex | None = None
        self._entries: list[_Entry] = []
        self._rebuilt = False  # the index was made again from the sound files (an older scheme's)
        self._stamp: tuple[int, int] | None = None  # index.json as loaded or last written (mtime_ns, size)

    def path_of(self, sound: EntitySound | str) -> Path:
        return self.root / (sound.path if isinstance(sound, EntitySound) else sound)

    def put(self, data: bytes, url: str | None = None) -> EntitySound:
        """Check and store sound bytes; returns the record to attach to an entity (raises :class:`SoundRejected`)."""
        if len(data) > self.max_bytes:
            raise SoundRejected(f"the sound is {len(data)} bytes, over the limit of {self.max_bytes} bytes")
        ext = sniff_ext(data)
        try:
            seconds = fp.decode_audio(data).size / fp.SAMPLE_RATE
        except fp.AudioDecodeError as exc:
            raise SoundRejected(str(exc)) from exc
        sha = hashlib.sha256(data).hexdigest()
        rel = f"{sha[:2]}/{sha}.{ext}"
        target = self.root / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")  # two threads may store the same bytes at once
            tmp.write_bytes(data)
            tmp.replace(target)
        return EntitySound(url=url, path=rel, sha256=sha, seconds=round(seconds, 3))

    # -- the index --------------------------------------------------------------------------------
    def _disk_stamp(self) -> tuple[int, int] | None:
        try:
            st = (self.root / "index.json").stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def _load(self) -> fp.LandmarkIndex:
        stamp = self._disk_stamp()
        if self._index is not None and stamp is not None and stamp != self._stamp:
            # another process wrote the index (a crawl job beside `kar serve`): read its sounds, and write on top of them
            log.info("the sound index at %s changed on disk: reading it again", self.root)
            self._index = None
        if self._index is None:
            self._stamp = stamp
            npz, meta = self.root / "index.npz", self.root / "index.json"
            if npz.exists() and meta.exists():
                entries = [_Entry(**e) for e in json.loads(meta.read_text("utf-8"))]
                with np.load(npz) as arrays:
                    try:
                        self._index = fp.LandmarkIndex.from_arrays({k: arrays[k] for k in arrays.files})
                        self._entries = entries
                    except fp.SchemeMismatch as exc:
                        self._index = self._rebuild(entries, str(exc))
            else:
                self._index, self._entries = fp.LandmarkIndex(), []
        return self._index

    def _rebuild(self, entries: list[_Entry], why: str) -> fp.LandmarkIndex:
        """Fingerprint the stored sound files again (an index of an older scheme); saved by the next :meth:`save`."""
        log.warning("%s: fingerprinting its %d sound(s) again", why, sum(1 for e in entries if e.entity_id))
        index, self._entries = fp.LandmarkIndex(), []
        for e in entries:
            if not e.entity_id:
                continue
            try:
                h, t = fp.landmarks(fp.decode_audio(self.root / e.path))
            except (OSError, fp.AudioDecodeError) as exc:
                log.warning("sound %s of %s skipped: %s", e.path, e.entity_id, exc)
                continue
            index.add(len(self._entries), h, t)
            self._entries.append(e)
        self._write(index)
        self._rebuilt = True
        return index

    def save(self) -> None:
        """Write the index (atomically: the new files replace the old ones)."""
        with self._lock:
            self._write(self._load())

    def _write(self, index: fp.LandmarkIndex) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"index.tmp{os.getpid()}.npz"
        np.savez(tmp, **index.arrays())
        tmp.replace(self.root / "index.npz")
        meta = self.root / f"index.tmp{os.getpid()}.json"
        meta.write_text(json.dumps([e.__dict__ for e in self._entries]), "utf-8")
        meta.replace(self.root / "index.json")
        self._stamp = self._disk_stamp()

    def count(self) -> int:
        """Sounds in the index."""
        with self._lock:
            self._load()
            return sum(1 for e in self._entries if e.entity_id)

    def index_entities(self, entities: list[Entity], save: bool = True) -> dict[str, int]:
        """Fingerprint each entity's sounds (replacing what the index held for it); a file that is missing or
        unreadable is skipped and counted."""
        stats = {"indexed": 0, "skipped": 0}
        with self._lock:
            index = self._load()
            ids = {e.id for e in entities}
            dropped = {i for i, e in enumerate(self._entries) if e.entity_id in ids}
            if dropped:
                index.remove(dropped)
                for i in dropped:
                    self._entries[i] = _Entry("", "", "")
            for ent in entities:
                for snd in ent.audio:
                    try:
                        samples = fp.decode_audio(self.path_of(snd))
                    except (OSError, fp.AudioDecodeError) as exc:
                        log.warning("sound %s of %s skipped: %s", snd.path, ent.id, exc)
                        stats["skipped"] += 1
                        continue
                    h, t = fp.landmarks(samples)
                    index.add(len(self._entries), h, t)
                    self._entries.append(_Entry(ent.id, snd.sha256, snd.path))
                    stats["indexed"] += 1
        if save and (stats["indexed"] or dropped):
            self.save()
        return stats

    def add_landmarks(self, entity_id: str, sha256: str, path: str, hashes: np.ndarray, times: np.ndarray) -> int:
        """Index one sound's landmarks (:func:`~retrieval.sounds.fingerprint.landmarks`) for an entity without
        storing its file (a bench's generated sounds); returns its sound number.  Written by the next :meth:`save`."""
        with self._lock:
            index = self._load()
            number = len(self._entries)
            index.add(number, hashes, times)
            self._entries.append(_Entry(entity_id, sha256, path))
            return number

    def delete_entities(self, entity_ids: list[str]) -> int:
        """Drop the sounds of these entities from the index."""
        with self._lock:
            index = self._load()
            ids = set(entity_ids)
            dropped = {i for i, e in enumerate(self._entries) if e.entity_id in ids}
            if dropped:
                index.remove(dropped)
                for i in dropped:
                    self._entries[i] = _Entry("", "", "")
        if dropped:
            self.save()
        return len(dropped)

    def match(self, samples: np.ndarray, top: int = 5) -> list[SoundHit]:
        """The entities whose sounds align best with the query samples, best first (one per entity)."""
        with self._lock:
            index = self._load()
            entries = list(self._entries)
        found = index.match(samples, top=top * 3)
        hits: list[SoundHit] = []
        seen: set[str] = set()
        for m in found:
            e = entries[m.sound] if m.sound < len(entries) else None
            if e is None or not e.entity_id or e.entity_id in seen:
                continue
            seen.add(e.entity_id)
            hits.append(SoundHit(e.entity_id, {"sha256": e.sha256, "path": e.path}, m.count, 0, m.offset_s, m.speed, m.query_landmarks))
        for i, h in enumerate(hits):
            h.runner_up = max((o.count for j, o in enumerate(hits) if j != i), default=0)
        return hits[:top]


@dataclass
class SoundQuery:
    """A query clip decoded once: its samples and length."""

    samples: np.ndarray
    seconds: float = field(init=False)

    def __post_init__(self) -> None:
        self.seconds = self.samples.size / fp.SAMPLE_RATE


def prepare(data: bytes, max_seconds: float = 60.0) -> SoundQuery:
    """A query clip from the bytes of an audio or video file (raises :class:`AudioDecodeError`)."""
    return SoundQuery(fp.decode_audio(data, max_seconds=max_seconds))
