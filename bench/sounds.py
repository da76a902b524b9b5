"""Sound route bench: generated sounds, indexed; held-out query clips cut, re-encoded, mixed, sped up.

Sounds are made here, nothing is downloaded: speech (``espeak-ng``: random sentences from a
fixed word list, random voice, speed and pitch), tone melodies and sound effects (``sox``
``synth``: notes, sweeps, filtered noise bursts), and music made from those clips (a melody with
a speech clip and a noise rhythm mixed in).  Without espeak-ng or sox the bench says so and
stops (``apt-get install espeak-ng sox``; ``libchromaprint-tools`` for the Chromaprint side).

- ``--indexed`` sounds (default 200) are the entities' sounds; ``--distractors`` (default 1,000)
  more are indexed too, belonging to other entities, so that the index holds 1,200 sounds;
  ``--absent`` (default 200) are never indexed: their queries must claim nothing.
- Queries: clips of 1-3 s and 3-10 s cut at a random place, each given one treatment: as cut,
  re-encoded (MP3 48 kbit/s, Opus 24 kbit/s), mixed under speech or under music (SNR 0-10 dB),
  sped up or slowed down 3-5 %, or put into an MP4 video (H.264 frames, AAC sound).  Two query
  sets from two seeds: ``calibration`` (the thresholds of retrieval/sounds/route.py were chosen
  on it) and ``held-out`` (reported, never tuned on).
- Methods: ``landmarks`` (retrieval/sounds/fingerprint.py, the route's) and ``chromaprint``
  (``fpcalc -raw``: 32-bit sub-fingerprints, an inverted index of their values, offset voting,
  then the bit error rate at the best offset), on the same clips.

Printed (JSON): per method and split, top-1 of in-KB queries (≥ 3 s, 1-3 s, per treatment),
false claims of absent queries, ms per query (p50, p95) at the indexed size.

    python bench/sounds.py                      # 200 + 1,000 indexed, 200 absent
    python bench/sounds.py --cache /tmp/kar-sounds   # generate once, reuse on the next run
    python bench/sounds.py --indexed 50 --distractors 100 --absent 50 --queries-per-sound 1
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from retrieval.sounds import fingerprint as fp  # noqa: E402
from retrieval.sounds import route as sound_route  # noqa: E402

SR = fp.SAMPLE_RATE
WORDS = (
    "apple river stone cloud market yellow quickly seven window garden silver thunder morning paper "
    "coffee mountain orange dance whisper ticket engine forest bright little number hollow castle "
    "pocket summer winter candle rocket blanket mirror station velvet marble bridge lantern harbor "
    "meadow violet copper falcon jungle puzzle saddle tunnel wonder zebra anchor banjo cactus dragon"
).split()
VOICES = ("en", "en+m3", "en+f2", "en+f4", "en-us", "en-us+m7", "en+f5", "en+m1")
TREATMENTS = ("cut", "mp3", "opus", "speech_mix", "music_mix", "speed", "video")


def need_tools() -> None:
    missing = [t for t in ("espeak-ng", "sox") if shutil.which(t) is None]
    if missing:
        sys.exit(f"bench/sounds.py needs {', '.join(missing)} (Debian: apt-get install espeak-ng sox)")


def _wav_samples(data: bytes) -> np.ndarray:
    return fp.decode_audio(data)


SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def sentence(rng: np.random.Generator) -> str:
    """Words of the fixed list mixed with pseudo-words of 2-3 random syllables (so that two sentences rarely
    share a stretch of identical speech)."""
    words = []
    for _ in range(int(rng.integers(8, 18))):
        if rng.random() < 0.3:
            words.append(str(rng.choice(WORDS)))
        else:
            words.append("".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 4)))))
    return " ".join(words)


def speech(rng: np.random.Generator) -> np.ndarray:
    """A random sentence spoken by espeak-ng with a random voice, speed and pitch."""
    text = sentence(rng)
    cmd = ["espeak-ng", "--stdout", "-v", str(rng.choice(VOICES)), "-s", str(int(rng.integers(120, 200))), "-p", str(int(rng.integers(20, 80))), text]
    return _wav_samples(subprocess.run(cmd, capture_output=True, check=True).stdout)


def sox_synth(rng: np.random.Generator) -> np.ndarray:
    """A melody or a sound effect made by one sox command: a chain of ``synth`` segments (notes, sweeps,
    filtered noise bursts) joined by sox's ``:`` effect-chain separator."""
    kind = rng.choice(["melody", "sweeps", "noise"])
    seconds = float(rng.uniform(4, 10))
    chains: list[list[str]] = []
    total = 0.0
    while total < seconds:
        d = float(rng.uniform(0.12, 0.5))
        if kind == "melody":
            wave = str(rng.choice(["sine", "square", "triangle", "sawtooth", "pluck"]))
            f = 110 * 2 ** (int(rng.integers(0, 40)) / 12)
            chains.append(["synth", f"{d:.3f}", wave, f"{f:.1f}", "fade", "0.01", f"{d:.3f}", f"{d * 0.3:.3f}"])
        elif kind == "sweeps":
            f1, f2 = rng.uniform(200, 3000, 2)
            chains.append(["synth", f"{d:.3f}", str(rng.choice(["sine", "square"])), f"{f1:.0f}-{f2:.0f}"])
        else:
            lo = float(rng.uniform(200, 2500))
            noise = str(rng.choice(["pinknoise", "whitenoise", "brownnoise"]))
            chains.append(["synth", f"{d:.3f}", noise, "sinc", f"{lo:.0f}-{lo * 1.6:.0f}", "fade", "0.005", f"{d:.3f}", f"{d * 0.5:.3f}"])
        total += d
    args: list[str] = []
    for i, c in enumerate(chains):
        args += ([":"] if i else []) + c
    out = subprocess.run(["sox", "-n", "-r", str(SR), "-c", "1", "-t", "wav", "-", *args], check=True, capture_output=True)
    return _wav_samples(out.stdout)


def numpy_synth(rng: np.random.Generator) -> np.ndarray:
    """A melody, a chain of sweeps or a rhythm of noise bursts synthesised with numpy (as sox_synth
    does, without a process per sound)."""
    kind = rng.choice(["melody", "sweeps", "noise"])
    seconds = float(rng.uniform(4, 10))
    parts: list[np.ndarray] = []
    total = 0
    while total < seconds * SR:
        n = int(SR * rng.uniform(0.12, 0.5))
        t = np.arange(n) / SR
        env = np.minimum(1.0, t / 0.01) * np.exp(-t * rng.uniform(1.5, 8))
        if kind == "melody":
            f = 110 * 2 ** (int(rng.integers(0, 40)) / 12)
            harmonics = rng.uniform(0, 0.6, 3)
            x = np.sin(2 * np.pi * f * t) + sum(h * np.sin(2 * np.pi * f * (k + 2) * t) for k, h in enumerate(harmonics))
        elif kind == "sweeps":
            f1, f2 = rng.uniform(200, 3000, 2)
            x = np.sin(2 * np.pi * (f1 * t + (f2 - f1) * t**2 / (2 * t[-1] + 1e-9)))
        else:
            lo = float(rng.uniform(200, 2500))
            spec = np.fft.rfft(rng.standard_normal(n))
            freqs = np.fft.rfftfreq(n, 1 / SR)
            spec[(freqs < lo) | (freqs > lo * 1.6)] = 0
            x = np.fft.irfft(spec, n)
        parts.append((x * env).astype(np.float32))
        total += n
    return np.concatenate(parts)


def synth(rng: np.random.Generator) -> np.ndarray:
    """Tones, sweeps or noise: one in four by sox (:func:`sox_synth`), the rest by :func:`numpy_synth`."""
    return sox_synth(rng) if rng.random() < 0.25 else numpy_synth(rng)


def _fit(x: np.ndarray, n: int) -> np.ndarray:
    return np.resize(x, n) if x.size < n else x[:n]


def music(rng: np.random.Generator) -> np.ndarray:
    """Music made from clips generated for it (never one of the bench's other sounds): a melody with a
    speech clip and a second synth layer mixed in."""
    base = synth(rng)
    return (0.7 * base + 0.4 * _fit(speech(rng), base.size) + 0.3 * _fit(numpy_synth(rng), base.size)).astype(np.float32)


def normalise(x: np.ndarray) -> np.ndarray:
    peak = float(np.abs(x).max()) if x.size else 0.0
    return (x / peak * 0.8).astype(np.float32) if peak > 0 else x


def make_sounds(n: int, rng: np.random.Generator) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for i in range(n):
        r = i % 4
        x = speech(rng) if r == 0 else synth(rng) if r in (1, 2) else music(rng)
        out.append(normalise(x))
    return out


# -- treatments -------------------------------------------------------------------------------------
def encode(samples: np.ndarray, codec: str, container: str, bitrate: int, video: bool = False) -> bytes:
    """The samples encoded with PyAV (and in a video with moving frames when ``video``)."""
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        rate = 48000 if codec in ("libopus", "aac") else SR if codec != "libmp3lame" else 22050
        a = out.add_stream(codec, rate=rate)
        a.bit_rate = bitrate
        a.layout = "mono"
        v = None
        if video:
            v = out.add_stream("libx264", rate=10)
            v.width, v.height, v.pix_fmt = 160, 120, "yuv420p"
        x = samples
        if rate != SR:
            x = np.interp(np.arange(int(x.size * rate / SR)) * SR / rate, np.arange(x.size), x).astype(np.float32)
        frame_size = 960 if codec == "libopus" else 1024 if codec == "aac" else 1152
        pts = 0
        for start in range(0, x.size, frame_size):
            chunk = np.zeros(frame_size, np.float32)
            part = x[start : start + frame_size]
            chunk[: part.size] = part
            fmt = "fltp" if codec in ("aac", "libmp3lame") else "flt"
            frame = av.AudioFrame.from_ndarray(chunk[None, :], format=fmt, layout="mono")
            frame.sample_rate, frame.pts = rate, pts
            pts += frame_size
            for p in a.encode(frame):
                out.mux(p)
        for p in a.encode(None):
            out.mux(p)
        if v is not None:
            for k in range(max(1, int(samples.size / SR * 10))):
                img = np.full((120, 160, 3), (k * 7) % 255, np.uint8)
                vf = av.VideoFrame.from_ndarray(img, format="rgb24")
                for p in v.encode(vf):
                    out.mux(p)
            for p in v.encode(None):
                out.mux(p)
    return buf.getvalue()


def treat(clip: np.ndarray, treatment: str, rng: np.random.Generator, speech_pool: list[np.ndarray], music_pool: list[np.ndarray]) -> bytes | np.ndarray:
    """One treatment of a cut clip: samples, or the bytes of an encoded file."""
    if treatment == "mp3":
        return encode(clip, "libmp3lame", "mp3", 48000)
    if treatment == "opus":
        return encode(clip, "libopus", "ogg", 24000)
    if treatment == "video":
        return encode(clip, "aac", "mp4", 64000, video=True)
    if treatment in ("speech_mix", "music_mix"):
        pool = speech_pool if treatment == "speech_mix" else music_pool
        noise = _fit(pool[int(rng.integers(0, len(pool)))], clip.size)
        snr_db = float(rng.uniform(0, 10))
        p_s, p_n = float(np.mean(clip**2)) + 1e-9, float(np.mean(noise**2)) + 1e-9
        return normalise(clip + noise * np.sqrt(p_s / (p_n * 10 ** (snr_db / 10))))
    if treatment == "speed":
        s = float(rng.choice([-1, 1]) * rng.uniform(0.03, 0.05))
        return fp.resample(clip, 1.0 / (1.0 + s))  # played (1+s) times faster
    return clip


def make_queries(sounds: list[np.ndarray], owners: list[int | None], rng: np.random.Generator, per_sound: int,
                 speech_pool: list[np.ndarray], music_pool: list[np.ndarray]) -> list[dict[str, Any]]:
    queries = []
    for idx, (x, owner) in enumerate(zip(sounds, owners)):
        for k in range(per_sound):
            long = k % 2 == 0
            want = float(rng.uniform(3, 10) if long else rng.uniform(1, 3))
            dur = min(want, x.size / SR)
            start = int(rng.integers(0, max(1, x.size - int(dur * SR))))
            clip = x[start : start + int(dur * SR)]
            treatment = str(rng.choice(TREATMENTS))
            queries.append({"sound": idx, "owner": owner, "seconds": round(dur, 2), "treatment": treatment,
                            "data": treat(clip, treatment, rng, speech_pool, music_pool)})
    return queries


# -- methods ----------------------------------------------------------------------------------------
class LandmarkMethod:
    name = "landmarks"

    def __init__(self, root: Path) -> None:
        self.store = sound_route.SoundStore(root)
        self.owner: dict[int, int] = {}

    def index(self, sounds: list[np.ndarray], owners: list[int]) -> None:
        for i, (x, owner) in enumerate(zip(sounds, owners)):
            h, t = fp.landmarks(x)
            self.store.add_landmarks(f"e{owner}", str(i), str(i), h, t)

    def query(self, samples: np.ndarray) -> tuple[int | None, bool, dict[str, Any]]:
        hits = self.store.match(samples)
        if not hits:
            return None, False, {}
        h = hits[0]
        return int(h.entity_id[1:]), h.accepted(), {"count": h.count, "runner_up": h.runner_up}


class ChromaprintMethod:
    name = "chromaprint"
    #: a match needs this share of agreeing bits at the best offset (chosen on the calibration split)
    MIN_SIMILARITY = 0.75
    MIN_VOTES = 3

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.prints: list[np.ndarray] = []
        self.owners: list[int] = []
        self.index_vals = np.zeros(0, np.uint32)
        self.index_ref = np.zeros(0, np.int64)

    def fingerprint(self, samples: np.ndarray) -> np.ndarray:
        path = self.root / "q.wav"
        pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
        import wave

        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SR)
            w.writeframes(pcm)
        # fpcalc 1.5 exits 3 after a complete fingerprint of a short file ("Error decoding audio frame (End of
        # file)"): its JSON output is what counts
        out = subprocess.run(["fpcalc", "-raw", "-json", "-length", "600", str(path)], capture_output=True, text=True)
        try:
            return np.array(json.loads(out.stdout)["fingerprint"], dtype=np.int64).astype(np.uint32)
        except (ValueError, KeyError):
            return np.zeros(0, np.uint32)

    def index(self, sounds: list[np.ndarray], owners: list[int]) -> None:
        vals, refs = [], []
        for i, (x, owner) in enumerate(zip(sounds, owners)):
            f = self.fingerprint(x)
            self.prints.append(f)
            self.owners.append(owner)
            vals.append(f)
            refs.append(np.int64(i) << 20 | np.arange(f.size, dtype=np.int64))
        v, r = np.concatenate(vals), np.concatenate(refs)
        o = np.argsort(v, kind="stable")
        self.index_vals, self.index_ref = v[o], r[o]

    def query(self, samples: np.ndarray) -> tuple[int | None, bool, dict[str, Any]]:
        q = self.fingerprint(samples)
        if q.size == 0:
            return None, False, {}
        lo = np.searchsorted(self.index_vals, q, "left")
        hi = np.searchsorted(self.index_vals, q, "right")
        votes: dict[tuple[int, int], int] = {}
        for qi, (a, b) in enumerate(zip(lo, hi)):
            for ref in self.index_ref[a:b]:
                key = (int(ref >> 20), int(ref & 0xFFFFF) - qi)
                votes[key] = votes.get(key, 0) + 1
        if not votes:
            return None, False, {}
        (sound, offset), n = max(votes.items(), key=lambda kv: kv[1])
        ref = self.prints[sound]
        lo_q, lo_r = max(0, -offset), max(0, offset)
        m = min(q.size - lo_q, ref.size - lo_r)
        if m <= 0:
            return self.owners[sound], False, {}
        x = np.bitwise_xor(q[lo_q : lo_q + m], ref[lo_r : lo_r + m])
        bits = np.unpackbits(x.view(np.uint8)).sum()
        sim = 1.0 - bits / (32.0 * m)
        return self.owners[sound], bool(n >= self.MIN_VOTES and sim >= self.MIN_SIMILARITY), {"votes": n, "similarity": round(float(sim), 3)}


def run(method: Any, queries: list[dict[str, Any]]) -> dict[str, Any]:
    """Each query decoded (when it is a file) and matched; wall and CPU (this thread's) time of each step.
    CPU time is what a query costs when it has the cores to itself: the bench machine may be shared."""
    rows = []
    for q in queries:
        w0, c0 = time.perf_counter(), time.thread_time()
        samples = q["data"] if isinstance(q["data"], np.ndarray) else fp.decode_audio(q["data"])
        w1, c1 = time.perf_counter(), time.thread_time()
        top, accepted, why = method.query(samples)
        w2, c2 = time.perf_counter(), time.thread_time()
        rows.append({"owner": q["owner"], "seconds": q["seconds"], "treatment": q["treatment"], "top": top, "accepted": accepted,
                     "ms": (w2 - w0) * 1000, "decode_ms": (w1 - w0) * 1000, "match_ms": (w2 - w1) * 1000,
                     "cpu_ms": (c2 - c0) * 1000, "decode_cpu_ms": (c1 - c0) * 1000, "match_cpu_ms": (c2 - c1) * 1000, **why})
    return summarise(rows) | {"rows": rows}


def _share(xs: list[bool]) -> float | None:
    return round(sum(xs) / len(xs), 3) if xs else None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    pos = [r for r in rows if r["owner"] is not None]
    neg = [r for r in rows if r["owner"] is None]
    right = lambda r: r["accepted"] and r["top"] == r["owner"]  # noqa: E731
    def pct(key: str) -> dict[str, float]:
        ms = np.array([r[key] for r in rows]) if rows else np.zeros(1)
        return {"p50": round(float(np.percentile(ms, 50)), 1), "p95": round(float(np.percentile(ms, 95)), 1)}

    return {
        "in_kb_queries": len(pos),
        "top1_ge_3s": _share([right(r) for r in pos if r["seconds"] >= 3]),
        "top1_1_to_3s": _share([right(r) for r in pos if r["seconds"] < 3]),
        "top1_by_treatment": {t: _share([right(r) for r in pos if r["treatment"] == t]) for t in TREATMENTS},
        "wrong_claims_in_kb": _share([r["accepted"] and r["top"] != r["owner"] for r in pos]),
        "absent_queries": len(neg),
        "false_claims": _share([r["accepted"] for r in neg]),
        "ms_per_query": pct("ms"),
        "ms_per_query_decode": pct("decode_ms"),
        "ms_per_query_match": pct("match_ms"),
        "cpu_ms_per_query": pct("cpu_ms"),
        "cpu_ms_per_query_decode": pct("decode_cpu_ms"),
        "cpu_ms_per_query_match": pct("match_cpu_ms"),
    }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--indexed", type=int, default=200)
    ap.add_argument("--distractors", type=int, default=1000)
    ap.add_argument("--absent", type=int, default=200)
    ap.add_argument("--queries-per-sound", type=int, default=2)
    ap.add_argument("--methods", default="landmarks,chromaprint")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rows", type=Path, help="write every query's row here (JSONL per method and split)")
    ap.add_argument("--splits", default="calibration,held-out", help="query splits to run (calibration, held-out)")
    ap.add_argument("--cache", type=Path, help="keep the generated sounds here (a pickle per size and seed) and reuse them")
    return ap.parse_args()


def load_sounds(args: argparse.Namespace) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Every sound (indexed, distractors, absent) and the speech and music pools mixed under queries: from the
    cache when it holds them, else generated (and cached)."""
    total = args.indexed + args.distractors + args.absent
    cached = args.cache / f"sounds-{total}-{args.seed}.pkl" if args.cache else None
    if cached is not None and cached.exists():
        with cached.open("rb") as f:
            return pickle.load(f)
    need_tools()
    rng = np.random.default_rng(args.seed)
    sounds = make_sounds(total, rng)
    speech_pool = [speech(rng) for _ in range(20)]
    music_pool = [music(rng) for _ in range(20)]
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with cached.open("wb") as f:
            pickle.dump((sounds, speech_pool, music_pool), f)
    return sounds, speech_pool, music_pool


def query_splits(args: argparse.Namespace, kb: list[np.ndarray], owners: list[int], absent: list[np.ndarray],
                 speech_pool: list[np.ndarray], music_pool: list[np.ndarray]) -> dict[str, list[dict[str, Any]]]:
    """The queries of each split asked for (both are always drawn, so a split's queries do not depend on the other)."""
    splits = {}
    for split, seed in (("calibration", args.seed + 1), ("held-out", args.seed + 2)):
        qrng = np.random.default_rng(seed)
        q = make_queries(kb[: args.indexed], owners[: args.indexed], qrng, args.queries_per_sound, speech_pool, music_pool)
        q += make_queries(absent, [None] * len(absent), qrng, 1, speech_pool, music_pool)
        if split in args.splits.split(","):
            splits[split] = q
    return splits


def run_method(name: str, root: Path, kb: list[np.ndarray], owners: list[int], splits: dict[str, list[dict[str, Any]]],
               rows_dir: Path | None) -> dict[str, Any] | str:
    """One method indexed and run over every split (its rows written to ``rows_dir`` when given)."""
    if name == "chromaprint" and shutil.which("fpcalc") is None:
        return "skipped: fpcalc not found (Debian: libchromaprint-tools)"
    method = (LandmarkMethod if name == "landmarks" else ChromaprintMethod)(root / name)
    t = time.perf_counter()
    method.index(kb, owners)
    entry: dict[str, Any] = {"index_s": round(time.perf_counter() - t, 1)}
    for split, q in splits.items():
        out = run(method, q)
        rows = out.pop("rows")
        entry[split] = out
        if rows_dir:
            rows_dir.mkdir(parents=True, exist_ok=True)
            with (rows_dir / f"{name}-{split}.jsonl").open("w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
    return entry


def main() -> None:
    args = parse_args()
    t0 = time.perf_counter()
    sounds, speech_pool, music_pool = load_sounds(args)
    made_s = time.perf_counter() - t0
    kb = sounds[: args.indexed + args.distractors]
    owners = list(range(len(kb)))
    absent = sounds[args.indexed + args.distractors :]
    splits = query_splits(args, kb, owners, absent, speech_pool, music_pool)
    result: dict[str, Any] = {
        "sounds": {"indexed_entities_sounds": args.indexed, "distractors_indexed": args.distractors, "absent": args.absent,
                   "generation_s": round(made_s, 1)},
        "queries": {s: len(q) for s, q in splits.items()},
        "methods": {},
    }
    with tempfile.TemporaryDirectory(prefix="kar-sounds-") as tmp:
        for name in [m for m in args.methods.split(",") if m]:
            result["methods"][name] = run_method(name, Path(tmp), kb, owners, splits, args.rows)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
