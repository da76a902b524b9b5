"""Audio fingerprints for the sound route: spectral-peak landmarks (the audfprint / Shazam scheme).

A sound is decoded to mono at :data:`SAMPLE_RATE` (PyAV: any container or codec FFmpeg reads,
the audio track of a video included), its log-magnitude spectrogram computed (:data:`N_FFT`,
:data:`HOP`: 23 ms frames), and its *peaks* picked: points that are the maximum of their
time-frequency neighbourhood and stand above a decaying masking threshold, at most
:data:`PEAKS_PER_SECOND`.  Each peak is paired with up to :data:`FANOUT` later peaks in a
target zone (1-:data:`MAX_DT` frames later, within :data:`MAX_DF` bins); a pair is a
*landmark* hashed as ``(f1, f2 - f1, t2 - t1)`` into 20 bits, stored with ``t1``.

Matching (:class:`LandmarkIndex`): the query's landmarks are looked up; for each indexed sound
the number of hashes that agree on one time offset (±1 frame) is its *match count*.  A cut,
re-encoded or mixed clip keeps a share of its peaks, and the ones it keeps still agree on the
offset; an unrelated sound's chance hashes do not.  A sound played ±5 % faster moves every peak
in frequency and time, so the query's peaks are also looked up moved back by each of
:data:`SPEEDS` (times × s, frequencies ÷ s) and the best count kept.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 11025
N_FFT = 512
HOP = 256
#: peaks kept per second of audio (the strongest after masking)
PEAKS_PER_SECOND = 30
#: landmarks per peak and the target zone (frames later, bins apart)
FANOUT = 4
MAX_DT = 40
MAX_DF = 48
#: query resampling factors: a clip sped up or slowed down by up to ±5 % is looked up near its speed
SPEEDS = (1.0, 0.975, 1.025, 0.95, 1.05, 0.9625, 1.0375, 0.9875, 1.0125)
#: longest audio decoded for a fingerprint (seconds): a longer file is cut (entity clips are short)
MAX_SECONDS = 600.0
FRAME_SECONDS = HOP / SAMPLE_RATE


class AudioDecodeError(ValueError):
    """Bytes that hold no decodable audio track."""


def decode_audio(data: bytes | str | Path, max_seconds: float = MAX_SECONDS) -> np.ndarray:
    """Mono float32 samples at :data:`SAMPLE_RATE` of the first audio track (a video's sound included);
    decoding stops at ``max_seconds``.  Raises :class:`AudioDecodeError` when there is no audio."""
    import av

    source = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else str(data)
    try:
        container = av.open(source)
    except Exception as exc:  # av raises its own error types per failure
        raise AudioDecodeError(f"not a readable audio or video file ({type(exc).__name__}: {exc})") from exc
    with container:
        if not container.streams.audio:
            raise AudioDecodeError("the file has no audio track")
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        chunks: list[np.ndarray] = []
        total, limit = 0, int(max_seconds * SAMPLE_RATE)
        try:
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    arr = out.to_ndarray().reshape(-1)
                    chunks.append(arr)
                    total += arr.size
                if total >= limit:
                    break
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
        except av.error.FFmpegError as exc:
            if not chunks:
                raise AudioDecodeError(f"the audio track cannot be decoded ({exc})") from exc
    samples = np.concatenate(chunks)[:limit] if chunks else np.zeros(0, np.float32)
    return samples.astype(np.float32, copy=False)


def _spectrogram(samples: np.ndarray) -> np.ndarray:
    if samples.size < N_FFT:
        return np.zeros((N_FFT // 2 + 1, 0), np.float32)
    n = 1 + (samples.size - N_FFT) // HOP
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n)[:, None]
    frames = samples[idx] * np.hanning(N_FFT).astype(np.float32)
    mag = np.abs(np.fft.rfft(frames, axis=1)).T.astype(np.float32)
    return np.log(np.maximum(mag, 1e-6 * max(float(mag.max()), 1e-9)))


def peaks(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spectral peaks (frame indices, frequency bins), time-ordered."""
    from scipy.ndimage import maximum_filter

    spec = _spectrogram(samples)
    if spec.shape[1] == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    spec = spec - spec.mean()
    local = maximum_filter(spec, size=(15, 7), mode="constant", cval=-np.inf)
    mask = (spec == local) & (spec > 0)
    mask[:3] = False  # DC and the lowest bins carry hum, not identity
    f, t = np.nonzero(mask)
    if f.size == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    strength = spec[f, t]
    # keep the strongest peaks: at most PEAKS_PER_SECOND per second, spread by one-second windows
    per_window = max(1, int(PEAKS_PER_SECOND))
    window = max(1, int(round(1.0 / FRAME_SECONDS)))
    keep = np.zeros(f.size, bool)
    win = t // window
    order = np.lexsort((-strength, win))
    start = 0
    wins = win[order]
    while start < order.size:
        end = np.searchsorted(wins, wins[start], side="right")
        keep[order[start : min(end, start + per_window)]] = True
        start = end
    t, f = t[keep], f[keep]
    o = np.lexsort((f, t))
    return t[o].astype(np.int32), f[o].astype(np.int32)


def landmarks(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Landmark hashes (uint32, 22 bits used) and their anchor frames (int32) of mono samples."""
    return pair_peaks(*peaks(samples))


def pair_peaks(t: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Landmarks of time-ordered peaks: each peak paired with the following peaks in its target zone."""
    hashes: list[np.ndarray] = []
    times: list[np.ndarray] = []
    n = t.size
    if n < 2:
        return np.zeros(0, np.uint32), np.zeros(0, np.int32)
    # pair each peak with the next FANOUT peaks inside the target zone
    for k in range(1, 4 * FANOUT):
        t2, f2 = t[k:], f[k:]
        t1, f1 = t[:-k], f[:-k]
        dt, df = t2 - t1, f2 - f1
        ok = (dt >= 1) & (dt < MAX_DT) & (np.abs(df) < MAX_DF)
        if not ok.any():
            if (dt >= MAX_DT).all():
                break
            continue
        h = (f1[ok].astype(np.uint32) << 13) | (((df[ok] + MAX_DF) & 0x7F).astype(np.uint32) << 6) | (dt[ok] & 0x3F).astype(np.uint32)
        hashes.append(h)
        times.append(t1[ok])
    if not hashes:
        return np.zeros(0, np.uint32), np.zeros(0, np.int32)
    h, tt = np.concatenate(hashes), np.concatenate(times)
    # at most FANOUT landmarks per anchor: keep the first FANOUT per (anchor time, anchor bin) in pairing order
    return h, tt.astype(np.int32)


def resample(samples: np.ndarray, factor: float) -> np.ndarray:
    """The samples played ``factor`` times slower (length × factor; 1.05 undoes a 5 % speed-up)."""
    if factor == 1.0 or samples.size < 2:
        return samples
    n = int(round(samples.size * factor))
    return np.interp(np.linspace(0, samples.size - 1, n), np.arange(samples.size), samples).astype(np.float32)


@dataclass
class SoundMatch:
    """One indexed sound's best alignment with a query."""

    sound: int
    count: int
    offset_s: float
    speed: float
    query_landmarks: int


class LandmarkIndex:
    """An in-memory landmark index: sorted hashes with their sound number and anchor frame."""

    def __init__(self) -> None:
        self._hashes = np.zeros(0, np.uint32)
        self._sounds = np.zeros(0, np.int32)
        self._times = np.zeros(0, np.int32)
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, sound: int, hashes: np.ndarray, times: np.ndarray) -> None:
        """Index one sound's landmarks under its number."""
        self._pending.append((hashes.astype(np.uint32), np.full(hashes.size, sound, np.int32), times.astype(np.int32)))

    def remove(self, sounds: set[int]) -> None:
        """Drop every landmark of these sounds."""
        self._flush()
        keep = ~np.isin(self._sounds, np.fromiter(sounds, np.int32))
        self._hashes, self._sounds, self._times = self._hashes[keep], self._sounds[keep], self._times[keep]

    def _flush(self) -> None:
        if not self._pending:
            return
        h = np.concatenate([self._hashes, *(p[0] for p in self._pending)])
        s = np.concatenate([self._sounds, *(p[1] for p in self._pending)])
        t = np.concatenate([self._times, *(p[2] for p in self._pending)])
        o = np.argsort(h, kind="stable")
        self._hashes, self._sounds, self._times = h[o], s[o], t[o]
        self._pending = []

    def arrays(self) -> dict[str, np.ndarray]:
        """The index as three arrays (for saving)."""
        self._flush()
        return {"hashes": self._hashes, "sounds": self._sounds, "times": self._times}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "LandmarkIndex":
        idx = cls()
        idx._hashes, idx._sounds, idx._times = arrays["hashes"], arrays["sounds"], arrays["times"]
        return idx

    def __len__(self) -> int:
        self._flush()
        return int(self._hashes.size)

    def _votes(self, hashes: np.ndarray, times: np.ndarray, top: int) -> list[tuple[int, int, int]]:
        """(count, sound, offset) of the best-aligned sounds for one set of query landmarks."""
        lo = np.searchsorted(self._hashes, hashes, side="left")
        hi = np.searchsorted(self._hashes, hashes, side="right")
        n = hi - lo
        if not n.sum():
            return []
        total = int(n.sum())
        rows = np.repeat(np.arange(hashes.size), n)
        first = np.repeat(lo, n)
        within = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
        pos = first + within
        sounds = self._sounds[pos].astype(np.int64)
        offsets = (self._times[pos] - times[rows]).astype(np.int64)
        # count each (sound, offset) and let the neighbouring offset (±1 frame) count too
        key = sounds * 1_000_000 + (offsets + 500_000)
        uniq, counts = np.unique(key, return_counts=True)
        merged = counts.copy()
        for d in (-1, 1):
            j = np.searchsorted(uniq, uniq + d)
            hit = (j < uniq.size) & (uniq[np.minimum(j, uniq.size - 1)] == uniq + d)
            merged[hit] += counts[j[hit]]
        best: dict[int, tuple[int, int]] = {}
        order = np.argsort(-merged, kind="stable")
        out = []
        for i in order:
            s = int(uniq[i] // 1_000_000)
            if s in best:
                continue
            best[s] = (int(merged[i]), int(uniq[i] % 1_000_000) - 500_000)
            out.append((best[s][0], s, best[s][1]))
            if len(out) >= top:
                break
        return out

    def match(self, samples: np.ndarray, top: int = 5, speeds: tuple[float, ...] = SPEEDS) -> list[SoundMatch]:
        """The best-aligned indexed sounds for query samples, best first (each sound once, its best speed)."""
        self._flush()
        if not self._hashes.size:
            return []
        found: dict[int, SoundMatch] = {}
        t0, f0 = peaks(samples)
        for speed in speeds:
            # undo a speed change on the peaks themselves: a clip played s times faster has its peaks at
            # times ÷ s and frequencies × s (cheaper than resampling and re-analysing the audio per speed)
            if speed == 1.0:
                tt, ff = t0, f0
            else:
                tt, ff = np.round(t0 * speed).astype(np.int32), np.round(f0 / speed).astype(np.int32)
                o = np.lexsort((ff, tt))
                tt, ff = tt[o], ff[o]
            h, t = pair_peaks(tt, ff)
            if not h.size:
                continue
            for count, sound, offset in self._votes(h, t, top):
                m = found.get(sound)
                if m is None or count > m.count:
                    found[sound] = SoundMatch(sound, count, offset * FRAME_SECONDS, speed, int(h.size))
        return sorted(found.values(), key=lambda m: (-m.count, m.sound))[:top]
