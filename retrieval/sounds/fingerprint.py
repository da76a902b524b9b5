"""Audio fingerprints for the sound route: spectral-peak landmarks (the audfprint / Shazam scheme).

A sound is decoded to mono at :data:`SAMPLE_RATE` (PyAV: any container or codec FFmpeg reads,
the audio track of a video included), its log-magnitude spectrogram computed (:data:`N_FFT`,
:data:`HOP`: 23 ms frames), and its *peaks* picked: points that are the maximum of their
time-frequency neighbourhood and stand above the spectrogram's mean, at most
:attr:`FingerprintParams.peaks_per_second`.  Each peak is paired with up to :attr:`FingerprintParams.fanout` later peaks in a
target zone (1-:attr:`FingerprintParams.max_dt` frames later, within :attr:`FingerprintParams.max_df` bins); a pair is a
*landmark* hashed as ``(f1, f2 - f1, t2 - t1)`` at one bin and one frame (:func:`landmark_hash`,
:data:`HASH_SPACE` values), stored with ``t1``.

A query cut at an arbitrary sample sees the sound through another frame grid, and the peaks of
fast sweeps and noise bursts move with the grid (a quarter of a hop costs such a sound most of its
landmarks).  So an indexed sound is analysed on :attr:`FingerprintParams.grid_shifts` (four grids a quarter hop
apart) and keeps the union of their landmarks: a query's grid is then within 32 samples of one
of them.  Speech and music, whose peaks do not move, gain few landmarks from this; sparse tones,
sweeps and noise gain most.

Matching (:class:`LandmarkIndex`): the query's landmarks are looked up (a direct table of where each
hash value's run starts in the sorted index, no search); for each indexed sound
the number of hashes that agree on one time offset (±1 frame) is its *match count*.  A cut,
re-encoded or mixed clip keeps a share of its peaks, and the ones it keeps still agree on the
offset; an unrelated sound's chance hashes do not.  A sound played ±5 % faster moves every peak
in frequency and time, so the query's landmarks are also looked up moved back by each of
:attr:`FingerprintParams.speeds` (times × s, frequencies ÷ s: the pairs are made once) and the best count kept.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: the analysis (the fingerprint scheme: a change makes other hashes)
SAMPLE_RATE = 11025
N_FFT = 512
HOP = 256
FRAME_SECONDS = HOP / SAMPLE_RATE
#: hash values: f1 (bins 0-256) × (df + max_df) (0-254) × dt (1-63), at one bin and one frame
HASH_SPACE = (N_FFT // 2 + 1) << 14
#: the fingerprint scheme an index was built with (an index of another scheme is rebuilt)
SCHEME = 2
#: longest audio decoded for a fingerprint (seconds): a longer file is cut (entity clips are short)
MAX_SECONDS = 600.0
#: the bench run that chose the fingerprint's and the accept rule's values: its ``calibration`` split (the
#: ``held-out`` split is reported, never tuned on; docs/sounds.md)
CALIBRATION_RUN = "python bench/sounds.py --splits calibration"


@dataclass(frozen=True)
class FingerprintParams:
    """The landmark fingerprint's tuned values, each chosen on :data:`CALIBRATION_RUN` (top-1 of clips ≥ 3 s and
    1-3 s, false claims, match CPU; the alternatives tried are in docs/sounds.md)."""

    #: peaks kept per second of an indexed sound (the strongest after masking)
    peaks_per_second: int = 30
    #: peaks per second picked in a query clip: denser than an indexed sound's, so that the indexed peaks are among
    #: them when noise or speech takes some of the strongest (90: the same figures)
    query_peaks_per_second: int = 60
    #: landmarks per peak of an indexed sound (8: top-1 ≥ 3 s 0.835, no better), and of a query (wider, as its
    #: peaks are denser: 15, 20 and 30 compared; 30 kept)
    fanout: int = 5
    query_fanout: int = 30
    #: sounds (per speed) whose time offsets are counted: those with the most hits of any offset (40 and 80 compared)
    candidates: int = 80
    #: a peak is the largest value of its neighbourhood (bins, frames) (9 × 3: more peaks on tones, but speech in a
    #: mix takes them)
    peak_neighbourhood: tuple[int, int] = (15, 7)
    #: the target zone (frames later, bins apart): 63 frames (1.5 s) and 127 bins, so that a sparse sound (a few
    #: notes, sweeps or bursts a second, far apart in pitch) still pairs each peak with the next ones; part of the
    #: hash layout (:func:`landmark_hash`: dt < 64, |df| < 128)
    max_dt: int = 63
    max_df: int = 127
    #: the frame grids (first sample) an indexed sound is analysed on: a query cut anywhere is within HOP / 8
    #: samples of one of them (one grid: the sparse sounds lost most of their landmarks)
    grid_shifts: tuple[int, ...] = (0, HOP // 4, HOP // 2, 3 * HOP // 4)
    #: query resampling factors: a clip sped up or slowed down by up to ±5 % is looked up near its speed
    #: (17 factors instead of 9: no better)
    speeds: tuple[float, ...] = (1.0, 0.975, 1.025, 0.95, 1.05, 0.9625, 1.0375, 0.9875, 1.0125)


PARAMS = FingerprintParams()


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


def peaks(samples: np.ndarray, per_second: float = PARAMS.peaks_per_second, shift: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Spectral peaks (frame indices, frequency bins), time-ordered: at most ``per_second`` a second; the frame
    grid starts at sample ``shift``."""
    from scipy.ndimage import maximum_filter

    spec = _spectrogram(samples[shift:])
    if spec.shape[1] == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    spec = spec - spec.mean()
    local = maximum_filter(spec, size=PARAMS.peak_neighbourhood, mode="constant", cval=-np.inf)
    mask = (spec == local) & (spec > 0)
    mask[:3] = False  # DC and the lowest bins carry hum, not identity
    mask[-2:] = False  # nor does the Nyquist bin (aliasing of square waves)
    f, t = np.nonzero(mask)
    if f.size == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    strength = spec[f, t]
    # keep the strongest peaks of each one-second window: rank of a peak inside its window, by strength
    window = max(1, int(round(1.0 / FRAME_SECONDS)))
    win = t // window
    order = np.lexsort((-strength, win))
    wins = win[order]
    first = np.searchsorted(wins, wins, side="left")
    keep = np.zeros(f.size, bool)
    keep[order[np.arange(order.size) - first < max(1, int(per_second))]] = True
    t, f = t[keep], f[keep]
    o = np.lexsort((f, t))
    return t[o].astype(np.int32), f[o].astype(np.int32)


def landmarks(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Landmark hashes (uint32, :data:`HASH_SPACE` values) and their anchor frames (int32) of an indexed sound:
    the union over :attr:`FingerprintParams.grid_shifts` (each distinct hash and frame once)."""
    keys = []
    for shift in PARAMS.grid_shifts:
        h, t = pair_peaks(*peaks(samples, shift=shift), fanout=PARAMS.fanout)
        keys.append(h.astype(np.int64) << 16 | t.astype(np.int64))
    key = np.unique(np.concatenate(keys))
    return (key >> 16).astype(np.uint32), (key & 0xFFFF).astype(np.int32)


def pair_peaks(t: np.ndarray, f: np.ndarray, fanout: int = PARAMS.fanout) -> tuple[np.ndarray, np.ndarray]:
    """Landmarks of time-ordered peaks: each peak paired with (at most ``fanout`` of) the following peaks
    in its target zone (1 to :attr:`FingerprintParams.max_dt` - 1 frames later, less than :attr:`FingerprintParams.max_df` bins apart)."""
    t1, f1, df, dt = _pairs(t, f, fanout)
    return landmark_hash(f1, df, dt), t1.astype(np.int32)


def _pairs(t: np.ndarray, f: np.ndarray, fanout: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pairs of :func:`pair_peaks` as (anchor frame, anchor bin, bin difference, frame difference)."""
    n = t.size
    empty = np.zeros(0, np.int64)
    if n < 2:
        return empty, empty, empty, empty
    parts: list[np.ndarray] = []
    used = np.zeros(n, np.int32)  # partners taken so far by each anchor
    for k in range(1, n):
        dt = t[k:] - t[:-k]
        if (dt >= PARAMS.max_dt).all():
            break
        df = f[k:] - f[:-k]
        ok = (dt >= 1) & (dt < PARAMS.max_dt) & (np.abs(df) < PARAMS.max_df) & (used[: n - k] < fanout)
        if not ok.any():
            continue
        used[: n - k] += ok
        parts.append(np.stack([t[:-k][ok], f[:-k][ok], df[ok], dt[ok]]))
    if not parts:
        return empty, empty, empty, empty
    t1, f1, df, dt = np.concatenate(parts, axis=1).astype(np.int64)
    return t1, f1, df, dt


def landmark_hash(f1: np.ndarray, df: np.ndarray, dt: np.ndarray) -> np.ndarray:
    """The hash of landmarks (uint32 below :data:`HASH_SPACE`): ``f1 << 14 | (df + max_df) << 6 | dt``.
    The caller keeps ``0 <= f1 <= N_FFT // 2``, ``|df| < max_df`` and ``1 <= dt < 64``."""
    return ((f1.astype(np.int64) << 14) | ((df + PARAMS.max_df).astype(np.int64) << 6) | dt.astype(np.int64)).astype(np.uint32)


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


class SchemeMismatch(ValueError):
    """Saved index arrays made by another fingerprint scheme (their hashes mean something else)."""


class LandmarkIndex:
    """An in-memory landmark index: sorted hashes with their sound number and anchor frame, and where each
    hash value's run starts (a table of :data:`HASH_SPACE` + 1 offsets, built when the index is first
    searched)."""

    def __init__(self) -> None:
        self._hashes = np.zeros(0, np.uint32)
        self._sounds = np.zeros(0, np.int32)
        self._times = np.zeros(0, np.int32)
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._n: int | None = None
        self._starts: np.ndarray | None = None

    def add(self, sound: int, hashes: np.ndarray, times: np.ndarray) -> None:
        """Index one sound's landmarks under its number."""
        self._pending.append((hashes.astype(np.uint32), np.full(hashes.size, sound, np.int32), times.astype(np.int32)))

    def remove(self, sounds: set[int]) -> None:
        """Drop every landmark of these sounds."""
        self._flush()
        keep = ~np.isin(self._sounds, np.fromiter(sounds, np.int32))
        self._hashes, self._sounds, self._times = self._hashes[keep], self._sounds[keep], self._times[keep]
        self._n = self._starts = None

    def _flush(self) -> None:
        if not self._pending:
            return
        h = np.concatenate([self._hashes, *(p[0] for p in self._pending)])
        s = np.concatenate([self._sounds, *(p[1] for p in self._pending)])
        t = np.concatenate([self._times, *(p[2] for p in self._pending)])
        o = np.argsort(h, kind="stable")
        self._hashes, self._sounds, self._times = h[o], s[o], t[o]
        self._pending = []
        self._n = self._starts = None

    def arrays(self) -> dict[str, np.ndarray]:
        """The index as arrays (for saving), with the scheme that made it."""
        self._flush()
        return {"hashes": self._hashes, "sounds": self._sounds, "times": self._times, "scheme": np.array([SCHEME], np.int32)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "LandmarkIndex":
        """An index from :meth:`arrays`; raises :class:`SchemeMismatch` for arrays of another scheme."""
        scheme = int(arrays["scheme"][0]) if "scheme" in arrays else 1
        if scheme != SCHEME:
            raise SchemeMismatch(f"the sound index was made by fingerprint scheme {scheme}; this version reads scheme {SCHEME}")
        idx = cls()
        idx._hashes, idx._sounds, idx._times = arrays["hashes"], arrays["sounds"], arrays["times"]
        return idx

    def __len__(self) -> int:
        self._flush()
        return int(self._hashes.size)

    def _table(self) -> np.ndarray:
        if self._starts is None:
            counts = np.bincount(self._hashes, minlength=HASH_SPACE)[:HASH_SPACE]
            starts = np.zeros(HASH_SPACE + 1, np.int64)
            np.cumsum(counts, out=starts[1:])
            self._starts = starts
        return self._starts

    def match(self, samples: np.ndarray, top: int = 5, speeds: tuple[float, ...] = PARAMS.speeds) -> list[SoundMatch]:
        """The best-aligned indexed sounds for query samples, best first (each sound once, its best speed).

        The query's peaks are picked denser (:attr:`FingerprintParams.query_peaks_per_second`) and paired wider
        (:attr:`FingerprintParams.query_fanout`) than an indexed sound's, so that the pairs the index holds are among the
        query's even when noise or speech takes some of the strongest peaks.  Every speed hypothesis's
        landmarks are looked up in one pass; the sounds with the most hits (per speed) are the candidates,
        and a candidate's count is the largest number of hits agreeing on one time offset (±1 frame)."""
        self._flush()
        if not self._hashes.size:
            return []
        starts = self._table()
        t1, f1, df, dt = _pairs(*peaks(samples, PARAMS.query_peaks_per_second), PARAMS.query_fanout)
        hs, ts, ss, sizes = [], [], [], []
        for i, speed in enumerate(speeds):
            # undo a speed change on the pairs themselves: a clip played s times faster has its peaks at
            # times ÷ s and frequencies × s (cheaper than resampling and re-analysing the audio per speed)
            if speed == 1.0:
                a, b, c, d = t1, f1, df, dt
            else:
                a, b = np.round(t1 * speed).astype(np.int64), np.round(f1 / speed).astype(np.int64)
                c, d = np.round(df / speed).astype(np.int64), np.round(dt * speed).astype(np.int64)
                ok = (b >= 0) & (b <= N_FFT // 2) & (np.abs(c) < PARAMS.max_df) & (d >= 1) & (d < 64)
                a, b, c, d = a[ok], b[ok], c[ok], d[ok]
            hs.append(landmark_hash(b, c, d))
            ts.append(a)
            ss.append(np.full(a.size, i, np.int64))
            sizes.append(int(a.size))
        h, qt, qs = np.concatenate(hs).astype(np.int64), np.concatenate(ts), np.concatenate(ss)
        if not h.size:
            return []
        lo = starts[h]
        n = starts[h + 1] - lo
        total = int(n.sum())
        if not total:
            return []
        rows = np.repeat(np.arange(h.size), n)
        pos = np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(total)
        n_sounds = self._n_sounds()
        # stage 1: hits per (speed, sound), whatever their offsets; the best few are the candidates
        key = qs[rows] * n_sounds + self._sounds[pos]
        hits = np.bincount(key, minlength=len(speeds) * n_sounds)
        n_cand = min(hits.size, max(4 * top, PARAMS.candidates))
        cand = np.argpartition(-hits, n_cand - 1)[:n_cand]
        cand = cand[hits[cand] > 0]
        chosen = np.zeros(hits.size, bool)
        chosen[cand] = True
        sel = chosen[key]
        key, offsets = key[sel], self._times[pos[sel]].astype(np.int64) - qt[rows[sel]]
        # stage 2: the candidates' hits by time offset; the neighbouring offsets (±1 frame) count too
        span = 1 << 21
        joint = key * span + np.clip(offsets + span // 2, 0, span - 1)
        uniq, counts = np.unique(joint, return_counts=True)
        merged = counts.copy()
        for d in (-1, 1):
            j = np.minimum(np.searchsorted(uniq, uniq + d), uniq.size - 1)
            hit = uniq[j] == uniq + d
            merged[hit] += counts[j[hit]]
        found: dict[int, SoundMatch] = {}
        for i in np.argsort(-merged, kind="stable"):
            k, off = divmod(int(uniq[i]), span)
            speed_i, sound = divmod(k, n_sounds)
            if sound in found:
                continue
            found[sound] = SoundMatch(sound, int(merged[i]), (off - span // 2) * FRAME_SECONDS, speeds[speed_i], sizes[speed_i])
            if len(found) >= top:
                break
        return sorted(found.values(), key=lambda m: (-m.count, m.sound))[:top]

    def _n_sounds(self) -> int:
        if self._n is None:
            self._n = int(self._sounds.max()) + 1 if self._sounds.size else 0
        return self._n
